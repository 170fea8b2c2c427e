"""The simulated Ascend device plugin: a helper process `dev-cluster up` starts (and `down` stops by pid).

For every pod bound to a simulated node that requests huawei.com/Ascend910 it picks distinct free chips on that
node and writes the device annotations; kwok turns such a pod Running only after that (devcluster/controlplane/stages.yaml).
Chips come back when the pod ends. Chips that the node's deviceinfo ConfigMap marks unusable are never handed out.
A pod bound to a known node without enough free chips is refused as the kubelet's admission refuses it (phase
Failed, reason `OutOf<resource>`, "Pod was rejected: …"): two pods bound to one node's last chips, e.g. by two
schedulers that raced, end as on a real node — the first admitted, the second failed before it ever ran.
The pods' annotations are the ledger's source of truth, so the process can be killed and restarted at any time.

    python -m ascend_hybrid.devcluster.deviceplugin.plugin --kubeconfig FILE [--ready-file FILE]
"""

from __future__ import annotations

import argparse
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kubernetes import client
from kubernetes.client.rest import ApiException

from ascend_hybrid.devcluster.deviceplugin.allocation import (
    ChipLedger,
    device_annotations,
    held_chips,
    is_finished,
    kubelet_rejection,
    requested_chips,
)
from ascend_hybrid.devcluster.kube.client import api_client, with_retries
from ascend_hybrid.devcluster.kube.informer import Source, start_informers, wait_synced
from ascend_hybrid.devcluster.kube.processes import helper_main, log, run_until_signalled
from ascend_hybrid.devcluster.nodes.manifests import (
    DEVICEINFO_NAMESPACE,
    DEVICEINFO_PREFIX,
    SIMULATED_LABEL,
    sim_node_from_manifest,
    unusable_chips,
)

RETRY_WAITING_SECONDS = 2.0
VOLCANO_SCHEDULER = "volcano"


class SimulatedDevicePlugin:
    def __init__(self, api: client.ApiClient, patch_workers: int = 8, log=log):
        self.core = client.CoreV1Api(api)
        self.log = log
        self.ledger = ChipLedger()
        self.lock = threading.RLock()
        self.waiting: dict[str, dict] = {}  # uid → pod bound to a node not known (yet)
        self.reported_waiting: set[str] = set()
        self.in_flight: set[str] = set()  # uids whose annotation patch has not landed yet
        self.refused: set[str] = set()  # uids refused as a kubelet's admission refuses them, the patch sent
        self.pool = ThreadPoolExecutor(patch_workers, thread_name_prefix="annotate")

    # Nodes and their health -------------------------------------------------------------------------------
    def sync_nodes(self, items: list[dict]) -> None:
        with self.lock:
            self.ledger.nodes = {}
            for node in items:
                self.node_event("ADDED", node)

    def node_event(self, kind: str, node: dict) -> None:
        name = node["metadata"]["name"]
        with self.lock:
            sim_node = sim_node_from_manifest(node)
            if kind == "DELETED" or sim_node is None:
                self.ledger.nodes.pop(name, None)
            else:
                self.ledger.nodes[name] = sim_node
            self.retry_waiting()

    def sync_health(self, items: list[dict]) -> None:
        with self.lock:
            self.ledger.unusable = {}
            for configmap in items:
                self.health_event("ADDED", configmap)

    def health_event(self, kind: str, configmap: dict) -> None:
        name = configmap["metadata"]["name"]
        if not name.startswith(DEVICEINFO_PREFIX):
            return
        node_name = name[len(DEVICEINFO_PREFIX):]
        with self.lock:
            if kind == "DELETED":
                self.ledger.unusable.pop(node_name, None)
            else:
                self.ledger.unusable[node_name] = unusable_chips(configmap.get("data"))
            self.retry_waiting()

    # Pods -------------------------------------------------------------------------------------------------
    def sync_pods(self, items: list[dict]) -> None:
        live = {p["metadata"]["uid"]: p for p in items if not is_finished(p)}
        with self.lock:
            for uid in list(self.ledger.holders):
                if uid not in live and uid not in self.in_flight:
                    self.ledger.release(uid)
            self.waiting.clear()
            # the chips pods already hold first: a pod that still needs some is judged against them, oldest first
            # (the kubelet admits the pods it finds by creation time, HandlePodAdditions)
            for pod in sorted(live.values(), key=admission_order):
                self._observe(pod)

    def pod_event(self, kind: str, pod: dict) -> None:
        uid = pod["metadata"]["uid"]
        with self.lock:
            if kind == "DELETED" or is_finished(pod):
                self.waiting.pop(uid, None)
                if kind == "DELETED":
                    self.refused.discard(uid)
                self.reported_waiting.discard(uid)
                if uid not in self.in_flight and self.ledger.release(uid) is not None:
                    self.retry_waiting()
                return
            self._observe(pod)

    def retry_waiting(self) -> None:
        with self.lock:
            for pod in list(self.waiting.values()):
                self._observe(pod)

    def _observe(self, pod: dict) -> None:
        metadata, spec = pod["metadata"], pod.get("spec") or {}
        uid, node_name = metadata["uid"], spec.get("nodeName")
        count = requested_chips(pod)
        if not node_name or count == 0:
            return
        chips = held_chips(pod)
        if chips is not None:
            if uid not in self.in_flight:
                self.ledger.hold(uid, node_name, chips)  # restart or someone else's allocation: trust it
            self.waiting.pop(uid, None)
            return
        if uid in self.ledger.holders or uid in self.refused:
            return  # our patch (its chips, or its refusal) is on its way
        if spec.get("schedulerName") == VOLCANO_SCHEDULER:
            return  # Volcano's Ascend plugin chooses its chips (devcluster/volcano/); they count once annotated
        chips = self.ledger.allocate(uid, node_name, count)
        if chips is None and node_name in self.ledger.nodes:
            self._refuse(pod, node_name, count)
            return
        if chips is None:  # its node is not known yet: allocated once it is
            self.waiting[uid] = pod
            if uid not in self.reported_waiting:
                self.reported_waiting.add(uid)
                self.log(f"waiting: {metadata.get('namespace')}/{metadata['name']} needs {count} chips on "
                         f"{node_name}, not a simulated node (yet)")
            return
        self.waiting.pop(uid, None)
        self.reported_waiting.discard(uid)
        self.in_flight.add(uid)
        self.pool.submit(self._annotate, pod, self.ledger.nodes[node_name], chips)

    def _refuse(self, pod: dict, node_name: str, count: int) -> None:
        uid = pod["metadata"]["uid"]
        self.waiting.pop(uid, None)
        if uid in self.refused:
            return
        self.refused.add(uid)
        usable = self.ledger.usable(node_name)
        used = len(self.ledger.taken(node_name) & usable)
        self.pool.submit(self._reject, pod, kubelet_rejection(count, used, len(usable)))

    def _reject(self, pod: dict, status: dict) -> None:
        metadata = pod["metadata"]
        name, namespace = metadata["name"], metadata["namespace"]
        try:
            with_retries(lambda: self.core.patch_namespaced_pod_status(
                name, namespace, {"metadata": {"uid": metadata["uid"]}, "status": status},
                _content_type="application/merge-patch+json", _preload_content=False),
                f"reject pod {namespace}/{name}", timeout=30)
            self.log(f"rejected {namespace}/{name} on {pod['spec']['nodeName']}: {status['message']}")
        except Exception as error:  # noqa: BLE001 - a worker must never die silently; a pod gone is no loss
            cause = error.__cause__
            if not (isinstance(cause, ApiException) and cause.status in (404, 409, 422)):
                self.log(f"error: reject pod {namespace}/{name}: {error!r}")
            with self.lock:
                self.refused.discard(metadata["uid"])

    def _annotate(self, pod: dict, node, chips: tuple[int, ...]) -> None:
        metadata = pod["metadata"]
        uid, name, namespace = metadata["uid"], metadata["name"], metadata["namespace"]
        # The uid in a merge patch is a precondition: a re-created pod of the same name is left alone.
        body = {"metadata": {"uid": uid, "annotations": device_annotations(name, uid, node, chips)}}
        keep = True
        try:
            # _preload_content=False: the reply is not needed, and turning it into a model costs more CPU than
            # the request itself at a thousand pods.
            with_retries(lambda: self.core.patch_namespaced_pod(
                name, namespace, body, _content_type="application/merge-patch+json", _preload_content=False),
                f"annotate pod {namespace}/{name}", timeout=30)
            self.log(f"allocated {namespace}/{name} on {node.name}: chips {','.join(map(str, chips))}")
        except RuntimeError as error:
            cause = error.__cause__
            gone = isinstance(cause, ApiException) and cause.status in (404, 409)
            keep = False
            if not gone:
                self.log(f"error: {error}")
            with self.lock:
                self.ledger.release(uid)
                if not gone:
                    self.waiting[uid] = pod  # the periodic retry tries again
        except Exception as error:  # noqa: BLE001 - a worker must never die silently
            keep = False
            self.log(f"error: annotate pod {namespace}/{name}: {error!r}")
            with self.lock:
                self.ledger.release(uid)
                self.waiting[uid] = pod
        finally:
            with self.lock:
                self.in_flight.discard(uid)
                if not keep:
                    self.retry_waiting()


def admission_order(pod: dict) -> tuple[bool, str, str]:
    metadata = pod["metadata"]
    return held_chips(pod) is None, str(metadata.get("creationTimestamp") or ""), metadata["name"]


def run(kubeconfig: str, ready_file: Path | None, stop: threading.Event) -> None:
    api = api_client(kubeconfig)
    core = client.CoreV1Api(api)
    plugin = SimulatedDevicePlugin(api)
    # Pods are allocated only once the nodes and their health are known.
    wait_synced(start_informers((
        Source("nodes", core.list_node, plugin.sync_nodes, plugin.node_event,
               {"label_selector": f"{SIMULATED_LABEL}=true"}),
        Source("health", core.list_namespaced_config_map, plugin.sync_health, plugin.health_event,
               {"namespace": DEVICEINFO_NAMESPACE, "label_selector": "mx-consumer-cim=true"})), stop, log), stop)
    synced = wait_synced(start_informers((
        Source("pods", core.list_pod_for_all_namespaces, plugin.sync_pods, plugin.pod_event,
               {"field_selector": "spec.nodeName!="}),), stop, log), stop)
    if ready_file and synced:
        ready_file.write_text(f"{os.getpid()}\n")
    log(f"device plugin ready: {len(plugin.ledger.nodes)} nodes, {len(plugin.ledger.holders)} pods hold chips")
    while not stop.wait(RETRY_WAITING_SECONDS):
        plugin.retry_waiting()
    plugin.pool.shutdown(wait=False, cancel_futures=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ascend-hybrid-sim-device-plugin", description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--ready-file", type=Path, help="written (with the pid) once the first lists are in")
    parser.add_argument("--cluster-dir", help="marks the process as this cluster's (down checks it by pid)")
    args = parser.parse_args(argv)
    run_until_signalled(lambda stop: run(args.kubeconfig, args.ready_file, stop), args.ready_file)
    log("device plugin stopped")
    return 0


if __name__ == "__main__":
    helper_main(main)  # patch workers may sit in a retry loop against an apiserver that is gone
