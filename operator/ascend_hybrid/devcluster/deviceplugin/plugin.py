"""The simulated Ascend device plugin and the kubelet's device manager beside it: a helper process `dev-cluster up`
starts (and `down` stops by pid), in the mode the cluster was brought up with, as MindCluster's plugin runs with
`-volcanoType=false` (kubelet mode, its default) or `-volcanoType=true` (Volcano mode).

For every pod bound to a simulated node that requests huawei.com/Ascend910, the kubelet admits it by count (a pod
that does not fit is Failed, `OutOf<resource>`, as the kubelet's admission refuses it), then Allocate gives it chips:
- kubelet mode: any free chips, the kubelet's choice (allocation.kubelet_choice);
- Volcano mode: the chips named by the `huawei.com/Ascend910` annotation of the oldest pod on the node that asks for as
  many, which is then marked taken (`predicate-time` = MaxUint64) — whichever pod is being admitted; no such pod in
  3 tries 1 s apart fails the pod (`UnexpectedAdmissionError`, "not get valid pod"); a pod asking for every chip of its
  node skips that and gets the kubelet's choice.
The kubelet's record of the chips (`sim.hybrid.ascend.dev/kubelet-devices`) lets kwok start the containers. Every
`--list-watch-period` seconds the plugin writes `huawei.com/kltDev`, `huawei.com/AscendReal` and the configuration
annotation on each allocated pod that has no `huawei.com/AscendReal` yet, and never rewrites them (in Volcano mode a
whole-node pod is never annotated). Chips come back when the pod ends. The pods' records are the ledger's source of
truth, so the process can be killed and restarted at any time.

    python -m ascend_hybrid.devcluster.deviceplugin.plugin --kubeconfig FILE [--mode kubelet|volcano]
        [--list-watch-period 5] [--seed 0] [--ready-file FILE]
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kubernetes import client
from kubernetes.client.rest import ApiException

from ascend_hybrid.devcluster.deviceplugin.allocation import (
    KUBELET,
    KUBELET_DEVICES_ANNOTATION,
    LIST_WATCH_PERIOD,
    MODES,
    MOUNTED,
    NOT_GET_VALID_POD,
    PREDICATE_TIME_ANNOTATION,
    VOLCANO,
    VOLCANO_TRIES,
    VOLCANO_TRY_SECONDS,
    ChipLedger,
    device_annotations,
    is_finished,
    kubelet_choice,
    kubelet_devices,
    kubelet_rejection,
    list_watch_period,
    needs_annotation,
    pod_rng,
    requested_chips,
    scheduler_chips,
    unexpected_admission,
    volcano_candidate,
    whole_node_request,
)
from ascend_hybrid.devcluster.kube.client import api_client, with_retries
from ascend_hybrid.devcluster.kube.informer import Source, start_informers, wait_synced
from ascend_hybrid.devcluster.kube.processes import helper_main, log, run_until_signalled
from ascend_hybrid.devcluster.nodes.manifests import (
    DEVICEINFO_NAMESPACE,
    DEVICEINFO_PREFIX,
    SIMULATED_LABEL,
    profile,
    sim_node_from_manifest,
    unusable_chips,
)

RETRY_WAITING_SECONDS = 2.0
GONE = (404, 409)  # the pod went, or was re-created under its name: the uid precondition failed
PATCHED, GONE_POD, FAILED = "patched", "gone", "failed"  # what a patch of a pod came to


class SimulatedDevicePlugin:
    def __init__(self, api: client.ApiClient, mode: str = KUBELET, seed: int = 0, patch_workers: int = 8,
                 log=log, sleep=time.sleep):
        if mode not in MODES:
            raise ValueError(f"mode {mode!r}: expected one of {', '.join(MODES)}")
        self.core = client.CoreV1Api(api)
        self.mode, self.seed, self.log, self.sleep = mode, seed, log, sleep
        self.ledger = ChipLedger()
        self.lock = threading.RLock()
        self.pods: dict[str, dict] = {}  # uid → every live pod bound to a node and asking for chips
        self.waiting: dict[str, dict] = {}  # uid → pod bound to a node not known (yet)
        self.reported_waiting: set[str] = set()
        self.admitting: set[str] = set()  # uids whose admission (or its record's patch) has not landed yet
        self.refused: set[str] = set()  # uids refused as a kubelet's admission refuses them, the patch sent
        self.annotated: set[str] = set()  # uids whose device annotations were written: never again
        self.pool = ThreadPoolExecutor(patch_workers, thread_name_prefix="device-plugin")

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
        live = {p["metadata"]["uid"]: p for p in items if not is_finished(p) and _asks_for_chips(p)}
        with self.lock:
            for uid in list(self.ledger.holders):
                if uid not in live and uid not in self.admitting:
                    self.ledger.release(uid)
            self.pods = dict(live)
            self.waiting.clear()
            # the chips pods already hold first: a pod that still needs some is judged against them, oldest first
            # (the kubelet admits the pods it finds by creation time, HandlePodAdditions)
            for pod in sorted(live.values(), key=admission_order):
                self._observe(pod)

    def pod_event(self, kind: str, pod: dict) -> None:
        uid = pod["metadata"]["uid"]
        with self.lock:
            if kind == "DELETED" or is_finished(pod) or not _asks_for_chips(pod):
                self.pods.pop(uid, None)
                self.waiting.pop(uid, None)
                if kind == "DELETED":
                    self.refused.discard(uid)
                    self.annotated.discard(uid)
                self.reported_waiting.discard(uid)
                if uid not in self.admitting and self.ledger.release(uid) is not None:
                    self.retry_waiting()
                return
            self.pods[uid] = pod
            self._observe(pod)

    def retry_waiting(self) -> None:
        with self.lock:
            for pod in list(self.waiting.values()):
                self._observe(pod)

    def _observe(self, pod: dict) -> None:
        metadata = pod["metadata"]
        uid, node_name = metadata["uid"], str((pod.get("spec") or {}).get("nodeName"))  # _asks_for_chips: bound
        chips = kubelet_devices(pod)
        if chips is not None:
            if uid not in self.admitting:
                self.ledger.hold(uid, node_name, chips)  # a restart, or an earlier admission: trust it
            self.waiting.pop(uid, None)
            return
        if uid in self.ledger.holders or uid in self.admitting or uid in self.refused:
            return  # admitted (its record is on its way), being admitted, or refused
        if node_name not in self.ledger.nodes:  # its node is not known yet: admitted once it is
            self.waiting[uid] = pod
            if uid not in self.reported_waiting:
                self.reported_waiting.add(uid)
                self.log(f"waiting: {metadata.get('namespace')}/{metadata['name']} needs {requested_chips(pod)} "
                         f"chips on {node_name}, not a simulated node (yet)")
            return
        self.waiting.pop(uid, None)
        self.reported_waiting.discard(uid)
        self._admit(pod, node_name)

    def _admit(self, pod: dict, node_name: str) -> None:
        """The kubelet's admission by count, then Allocate in this plugin's mode."""
        uid, count = pod["metadata"]["uid"], requested_chips(pod)
        if not self.ledger.fits(node_name, count):
            self._refuse(pod, kubelet_rejection(count, self.ledger.used_count(node_name),
                                                len(self.ledger.usable(node_name))))
            return
        node = self.ledger.nodes[node_name]
        chip = profile(node.chip)
        if self.mode == VOLCANO and not whole_node_request(chip, count):
            self.admitting.add(uid)
            self.pool.submit(self._volcano_allocate, pod, node_name, count)
            return
        chips = kubelet_choice(chip, self.ledger.free(node_name), count, pod_rng(self.seed, uid),
                               straddle=node.straddle_rings)
        if chips is None:  # the count fits, the free ids do not (a Volcano pod mounted chips the kubelet counts)
            self._refuse(pod, unexpected_admission(
                f"requested number of devices unavailable for huawei.com/Ascend910. Requested: {count}, "
                f"Available: {len(self.ledger.free(node_name))}"))
            return
        self.ledger.hold(uid, node_name, chips)
        self.admitting.add(uid)
        self.pool.submit(self._record, pod, node_name, chips)

    def _volcano_allocate(self, pod: dict, node_name: str, count: int) -> None:
        """doWithVolcanoSchedule (plugin.go:879-932): the oldest pod on the node whose annotation names as many chips,
        looked for 3 times 1 s apart; it is marked mounted, and its chips go to the pod being admitted."""
        uid = pod["metadata"]["uid"]
        candidate: dict | None = None
        chips: tuple[int, ...] = ()
        for attempt in range(VOLCANO_TRIES):
            with self.lock:
                found = volcano_candidate(self._pods_on(node_name), count)
                candidate = None if found is None else dict(found)
                if candidate is not None:
                    chips = scheduler_chips(candidate) or ()
                    self._mark_mounted(candidate)
                    self.ledger.hold(uid, node_name, chips)
                    break
            if attempt < VOLCANO_TRIES - 1:
                self.sleep(VOLCANO_TRY_SECONDS)
        if candidate is None:
            with self.lock:
                self.admitting.discard(uid)
            self._refuse(pod, unexpected_admission(NOT_GET_VALID_POD))
            return
        self._patch_annotations(candidate, {PREDICATE_TIME_ANNOTATION: MOUNTED}, "mark mounted")
        self._record(pod, node_name, chips)

    def _pods_on(self, node_name: str) -> list[dict]:
        return [p for p in self.pods.values() if (p.get("spec") or {}).get("nodeName") == node_name]

    def _mark_mounted(self, pod: dict) -> None:
        """TryUpdatePodCacheAnnotation (client_server.go:82-103): the cache first, so the next Allocate skips it."""
        metadata = pod["metadata"]
        annotations = {**(metadata.get("annotations") or {}), PREDICATE_TIME_ANNOTATION: MOUNTED}
        self.pods[metadata["uid"]] = {**pod, "metadata": {**metadata, "annotations": annotations}}

    def _refuse(self, pod: dict, status: dict) -> None:
        uid = pod["metadata"]["uid"]
        with self.lock:
            self.waiting.pop(uid, None)
            if uid in self.refused:
                return
            self.refused.add(uid)
        self.pool.submit(self._reject, pod, status)

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
            if not (isinstance(cause, ApiException) and cause.status in (*GONE, 422)):
                self.log(f"error: reject pod {namespace}/{name}: {error!r}")
            with self.lock:
                self.refused.discard(metadata["uid"])

    def _record(self, pod: dict, node_name: str, chips: tuple[int, ...]) -> None:
        """The kubelet's checkpoint of the pod's devices, on the pod: kwok starts its containers once it is there."""
        uid = pod["metadata"]["uid"]
        record = ",".join(map(str, chips))
        outcome = self._patch_annotations(pod, {KUBELET_DEVICES_ANNOTATION: record}, "record devices")
        with self.lock:
            self.admitting.discard(uid)
            if outcome == PATCHED:
                self.log(f"allocated {pod['metadata']['namespace']}/{pod['metadata']['name']} on {node_name}: "
                         f"chips {record}")
                return
            self.ledger.release(uid)
            if outcome == FAILED and uid in self.pods:
                self.waiting[uid] = self.pods[uid]  # the periodic retry tries again
            self.retry_waiting()

    def annotate_allocated(self) -> int:
        """One tick of the plugin's listWatchPeriod loop (manager.go:675-691 → updatePodAnnotation): the annotations
        of every allocated pod that has none yet. Returns how many it wrote."""
        todo = []
        with self.lock:
            for uid, (node_name, chips) in self.ledger.holders.items():
                pod, node = self.pods.get(uid), self.ledger.nodes.get(node_name)
                if pod is None or node is None or uid in self.annotated or uid in self.admitting:
                    continue
                if needs_annotation(pod, self.mode, profile(node.chip)):
                    self.annotated.add(uid)
                    todo.append((pod, node, chips))
        for pod, node, chips in todo:
            metadata = pod["metadata"]
            if self._patch_annotations(pod, device_annotations(metadata["name"], metadata["uid"], node, chips),
                                       "annotate") == FAILED:
                with self.lock:
                    self.annotated.discard(metadata["uid"])
        return len(todo)

    def _patch_annotations(self, pod: dict, annotations: dict[str, str], what: str) -> str:
        """A merge patch with the pod's uid as precondition (a re-created pod of the same name is left alone):
        PATCHED, GONE (the pod is not there any more) or FAILED (retries spent)."""
        metadata = pod["metadata"]
        name, namespace = metadata["name"], metadata["namespace"]
        body = {"metadata": {"uid": metadata["uid"], "annotations": annotations}}
        try:
            # _preload_content=False: the reply is not needed, and turning it into a model costs more CPU than
            # the request itself at a thousand pods.
            with_retries(lambda: self.core.patch_namespaced_pod(
                name, namespace, body, _content_type="application/merge-patch+json", _preload_content=False),
                f"{what} {namespace}/{name}", timeout=30)
            return PATCHED
        except RuntimeError as error:
            cause = error.__cause__
            if isinstance(cause, ApiException) and cause.status in GONE:
                return GONE_POD
            self.log(f"error: {error}")
        except Exception as error:  # noqa: BLE001 - a worker must never die silently
            self.log(f"error: {what} {namespace}/{name}: {error!r}")
        return FAILED


def _asks_for_chips(pod: dict) -> bool:
    return bool((pod.get("spec") or {}).get("nodeName")) and requested_chips(pod) > 0


def admission_order(pod: dict) -> tuple[bool, str, str]:
    metadata = pod["metadata"]
    return kubelet_devices(pod) is None, str(metadata.get("creationTimestamp") or ""), metadata["name"]


def run(kubeconfig: str, ready_file: Path | None, stop: threading.Event, mode: str = KUBELET,
        period: float = LIST_WATCH_PERIOD, seed: int = 0) -> None:
    api = api_client(kubeconfig)
    core = client.CoreV1Api(api)
    plugin = SimulatedDevicePlugin(api, mode=mode, seed=seed)
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
    log(f"device plugin ready ({mode} mode, listWatchPeriod {period:g}s): {len(plugin.ledger.nodes)} nodes, "
        f"{len(plugin.ledger.holders)} pods hold chips")
    next_tick = time.monotonic() + period
    while not stop.wait(min(RETRY_WAITING_SECONDS, max(0.0, next_tick - time.monotonic()))):
        plugin.retry_waiting()
        if time.monotonic() >= next_tick:
            next_tick += period
            plugin.annotate_allocated()
    plugin.pool.shutdown(wait=False, cancel_futures=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ascend-hybrid-sim-device-plugin", description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--mode", choices=MODES, default=KUBELET, help="kubelet (-volcanoType=false) or volcano")
    parser.add_argument("--list-watch-period", type=list_watch_period, default=LIST_WATCH_PERIOD,
                        help="seconds between the annotation loop's ticks (default %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="the kubelet's chip order (default %(default)s)")
    parser.add_argument("--ready-file", type=Path, help="written (with the pid) once the first lists are in")
    parser.add_argument("--cluster-dir", help="marks the process as this cluster's (down checks it by pid)")
    args = parser.parse_args(argv)
    run_until_signalled(lambda stop: run(args.kubeconfig, args.ready_file, stop, args.mode, args.list_watch_period,
                                         args.seed), args.ready_file)
    log("device plugin stopped")
    return 0


if __name__ == "__main__":
    helper_main(main)  # patch workers may sit in a retry loop against an apiserver that is gone
