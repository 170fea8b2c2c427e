"""The stand-in for Huawei's Ascend plugin for Volcano: a helper process `dev-cluster up --volcano` starts (and
`down` stops by pid).

Volcano's own scheduler (built from its module, without Huawei's plugin, which no registry serves) picks the node
and binds the pod. This process watches every pod; the moment a pod of schedulerName `volcano` that asks for
huawei.com/Ascend910 is bound to a simulated node, it chooses the pod's chips inside that node by the plugin's
rules (ascend_plugin.py) and patches the annotations the plugin writes at bind, so that the device plugin in
volcano mode finds them at Allocate. A bound pod whose node has no fitting chip set (the real plugin would not
have chosen that node; the stand-in cannot steer Volcano's choice) gets a Warning event and no annotations.

Free chips are counted as the plugin counts them: every active pod's `huawei.com/AscendReal` or
`huawei.com/Ascend910`, whoever wrote it, plus the choices whose patch is still on its way. The pods'
annotations are the ledger, so the process can be restarted at any time.

    python -m ascend_hybrid.devcluster.volcano.stand_in --kubeconfig FILE [--ready-file FILE] [--cluster-dir DIR]
"""

from __future__ import annotations

import argparse
import functools
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import cast

from kubernetes import client
from kubernetes.client.rest import ApiException

from ascend_hybrid.devcluster.deviceplugin.allocation import is_finished, requested_chips
from ascend_hybrid.devcluster.kube.client import api_client, with_retries
from ascend_hybrid.devcluster.kube.informer import Source, start_informers, wait_synced
from ascend_hybrid.devcluster.kube.processes import helper_main, log, run_until_signalled
from ascend_hybrid.devcluster.nodes.manifests import (
    DEVICEINFO_NAMESPACE,
    DEVICEINFO_PREFIX,
    SIMULATED_LABEL,
    deviceinfo_domains,
    unusable_chips,
)
from ascend_hybrid.devcluster.volcano import ascend_plugin as rules
from ascend_hybrid.devcluster.volcano.manifests import GROUP, PODGROUPS, VERSION

COMPONENT = "ascend-plugin-stand-in"
REASON = "AscendChipsNotChosen"
RETRY_SECONDS = 1.0
PATCH_WORKERS = 4


@dataclass
class PodRecord:
    """What the stand-in keeps of a pod: enough to count chips and to decide, not the whole object."""

    namespace: str
    name: str
    uid: str
    node: str
    scheduler: str
    group: str | None
    count: int  # chips it asks for
    used: frozenset[int]  # chips its annotations name
    annotated: bool  # carries huawei.com/Ascend910 (or AscendReal) already
    skip: bool  # huawei.com/skip-ascend-plugin: enabled
    labels: dict[str, str]
    annotations: dict[str, str]
    selector: dict[str, str]


def pod_record(pod: dict) -> PodRecord:
    metadata, spec = pod["metadata"], pod.get("spec") or {}
    annotations = metadata.get("annotations") or {}
    used = rules.used_chips(annotations)
    return PodRecord(
        namespace=metadata["namespace"], name=metadata["name"], uid=metadata["uid"], node=spec.get("nodeName") or "",
        scheduler=spec.get("schedulerName") or "", group=annotations.get(rules.GROUP_NAME_ANNOTATION),
        count=requested_chips(pod), used=used,
        annotated=bool(annotations.get(rules.CHIPS_ANNOTATION) or annotations.get(rules.REAL_CHIPS_ANNOTATION)),
        skip=annotations.get(rules.SKIP_PLUGIN_ANNOTATION) == "enabled", labels=dict(metadata.get("labels") or {}),
        annotations=dict(annotations), selector=dict(spec.get("nodeSelector") or {}))


@dataclass
class Health:
    unhealthy: frozenset[int] = frozenset()
    network_unhealthy: frozenset[int] = frozenset()
    super_pod_id: int = 0
    rack_id: int = 0


@dataclass
class State:
    """The stand-in's view of the cluster, changed only under its lock."""

    nodes: dict[str, dict] = field(default_factory=dict)  # simulated Node objects by name
    health: dict[str, Health] = field(default_factory=dict)
    groups: dict[tuple[str, str], dict] = field(default_factory=dict)  # (namespace, name) → PodGroup metadata
    pods: dict[str, PodRecord] = field(default_factory=dict)  # uid → record (active pods only)
    chosen: dict[str, tuple[str, tuple[int, ...]]] = field(default_factory=dict)  # uid → (node, chips) in flight
    settled: set[str] = field(default_factory=set)  # uids decided without a patch (warned), or patched
    on_node: dict[str, set[str]] = field(default_factory=dict)  # node → uids of its active pods
    in_group: dict[tuple[str, str | None], set[str]] = field(default_factory=dict)  # (namespace, group) → uids

    def put(self, record: PodRecord) -> None:
        self.drop(record.uid)
        self.pods[record.uid] = record
        self.on_node.setdefault(record.node, set()).add(record.uid)
        self.in_group.setdefault((record.namespace, record.group), set()).add(record.uid)

    def drop(self, uid: str) -> None:
        record = self.pods.pop(uid, None)
        if record is not None:
            self.on_node[record.node].discard(uid)
            self.in_group[(record.namespace, record.group)].discard(uid)

    def clear_pods(self) -> None:
        self.pods, self.on_node, self.in_group = {}, {}, {}


def node_facts(node: dict, health: Health) -> rules.NodeFacts:
    metadata, status = node["metadata"], node.get("status") or {}
    annotations = metadata.get("annotations") or {}
    address = next((a.get("address", "") for a in status.get("addresses") or [] if a.get("type") == "InternalIP"), "")
    try:
        allocatable = int(str((status.get("allocatable") or {}).get(rules.RESOURCE, "0")))
    except ValueError:
        allocatable = 0
    return rules.NodeFacts(address=address, allocatable=allocatable,
                           base_device_infos=annotations.get(rules.BASE_DEVICE_INFOS_ANNOTATION),
                           super_pod_id=health.super_pod_id, rack_id=health.rack_id,
                           server_index=annotations.get(rules.SERVER_INDEX_ANNOTATION, ""))


@dataclass(frozen=True)
class Choice:
    chips: tuple[int, ...] | None
    problem: str | None  # why no chips, for the Warning event


def decide(state: State, pod: PodRecord) -> Choice | None:
    """The plugin's choice for a bound pod; None while its node is not known yet (it is retried)."""
    node = state.nodes.get(pod.node)
    if node is None:
        return None
    group = state.groups.get((pod.namespace, pod.group or ""), {})
    annotations = rules.job_annotations(group.get("annotations") or {}, pod.annotations)
    handler = rules.handler_for(annotations, pod.selector)
    if isinstance(handler, str):
        return Choice(None, f"the stand-in does not restate the Ascend plugin's handler {handler}")
    npu_tasks = sum(1 for uid in state.in_group.get((pod.namespace, pod.group), ()) if state.pods[uid].count > 0)
    problem = rules.count_problem(handler, pod.count, npu_tasks)
    if problem:
        return Choice(None, f"the Ascend plugin would refuse this job: {problem}")
    health = state.health.get(pod.node, Health())
    infos = rules.base_device_infos((node["metadata"].get("annotations") or {}).get(
        rules.BASE_DEVICE_INFOS_ANNOTATION))
    if infos is None:
        return Choice(None, f"node {pod.node} has no {rules.BASE_DEVICE_INFOS_ANNOTATION} annotation: the Ascend "
                            "plugin maintains no chips there")
    free = rules.free_chips(infos, used_on(state, pod.node, pod.uid), health.unhealthy, health.network_unhealthy,
                            rules.is_distributed(handler, npu_tasks, annotations))
    chips = rules.choose_chips(handler, free, pod.count)
    if chips is None:
        return Choice(None, f"no {pod.count} chips on {pod.node} fit {handler.name}'s rules (free: "
                            f"{','.join(map(str, sorted(free))) or 'none'}); the Ascend plugin would not have "
                            "chosen this node")
    return Choice(chips, None)


def used_on(state: State, node: str, except_uid: str = "") -> set[int]:
    used: set[int] = set()
    for uid in state.on_node.get(node, ()):
        if uid != except_uid:
            used |= state.pods[uid].used
    for uid, (chosen_node, chips) in state.chosen.items():
        if chosen_node == node and uid != except_uid:
            used |= set(chips)
    return used


def wants_chips(pod: PodRecord) -> bool:
    return (pod.scheduler == rules.SCHEDULER_NAME and bool(pod.node) and pod.count > 0 and not pod.annotated
            and not pod.skip)


class StandIn:
    def __init__(self, api: client.ApiClient, log=log, clock=time.time_ns, patch_workers: int = PATCH_WORKERS):
        self.core = client.CoreV1Api(api)
        self.log, self.clock = log, clock
        self.state = State()
        self.lock = threading.RLock()
        self.pool = ThreadPoolExecutor(patch_workers, thread_name_prefix="annotate")

    # Nodes, their health and the PodGroups ----------------------------------------------------------------
    def sync_nodes(self, items: list[dict]) -> None:
        with self.lock:
            self.state.nodes = {node["metadata"]["name"]: node for node in items}
            self.retry()

    def node_event(self, kind: str, node: dict) -> None:
        with self.lock:
            if kind == "DELETED":
                self.state.nodes.pop(node["metadata"]["name"], None)
            else:
                self.state.nodes[node["metadata"]["name"]] = node
            self.retry()

    def sync_health(self, items: list[dict]) -> None:
        with self.lock:
            self.state.health = {}
            for configmap in items:
                self.health_event("ADDED", configmap)

    def health_event(self, kind: str, configmap: dict) -> None:
        name = configmap["metadata"]["name"]
        if not name.startswith(DEVICEINFO_PREFIX):
            return
        node = name[len(DEVICEINFO_PREFIX):]
        with self.lock:
            if kind == "DELETED":
                self.state.health.pop(node, None)
                return
            data = configmap.get("data")
            super_pod_id, rack_id = deviceinfo_domains(data)
            # Unhealthy and Recovering leave the node's chips (cmmgr.go:400-404), as do chips separated by hand;
            # NetworkUnhealthy ones only a distributed job's (base/node.go:53-61).
            self.state.health[node] = Health(
                unhealthy=unusable_chips(data, ("Unhealthy", "Recovering")),
                network_unhealthy=unusable_chips(data, ("NetworkUnhealthy",), separated=False),
                super_pod_id=super_pod_id, rack_id=rack_id)

    def sync_groups(self, items: list[dict]) -> None:
        with self.lock:
            self.state.groups = {}
            for group in items:
                self.group_event("ADDED", group)

    def group_event(self, kind: str, group: dict) -> None:
        metadata = group["metadata"]
        key = (metadata.get("namespace", ""), metadata["name"])
        with self.lock:
            if kind == "DELETED":
                self.state.groups.pop(key, None)
            else:
                self.state.groups[key] = {"annotations": dict(metadata.get("annotations") or {}),
                                          "labels": dict(metadata.get("labels") or {})}

    # Pods -------------------------------------------------------------------------------------------------
    def sync_pods(self, items: list[dict]) -> None:
        with self.lock:
            self.state.clear_pods()
            for pod in items:
                if not is_finished(pod):
                    self.state.put(pod_record(pod))
            for uid in list(self.state.settled):
                if uid not in self.state.pods:
                    self.state.settled.discard(uid)
            for uid in list(self.state.chosen):  # a patch that landed, or a pod deleted while the watch was down
                record = self.state.pods.get(uid)
                if record is None or record.annotated:
                    self.state.chosen.pop(uid)
            self.retry()

    def pod_event(self, kind: str, pod: dict) -> None:
        uid = pod["metadata"]["uid"]
        with self.lock:
            if kind == "DELETED" or is_finished(pod):
                self.state.drop(uid)
                self.state.settled.discard(uid)
                self.state.chosen.pop(uid, None)
                return
            record = pod_record(pod)
            self.state.put(record)
            if record.annotated:
                self.state.chosen.pop(uid, None)  # the patch landed: the annotations count now
            self.consider(record)

    def retry(self) -> None:
        """Decides every bound pod still waiting (its node was not known, or a patch failed)."""
        with self.lock:
            for record in list(self.state.pods.values()):
                self.consider(record)

    def consider(self, pod: PodRecord) -> None:
        if not wants_chips(pod) or pod.uid in self.state.chosen or pod.uid in self.state.settled:
            return
        choice = decide(self.state, pod)
        if choice is None:
            return
        self.state.settled.add(pod.uid)
        if choice.chips is None:
            self.pool.submit(self._warn, pod, cast(str, choice.problem))
            return
        self.state.chosen[pod.uid] = (pod.node, choice.chips)
        node = self.state.nodes[pod.node]
        facts = node_facts(node, self.state.health.get(pod.node, Health()))
        annotations = rules.bind_annotations(pod.name, pod.uid, pod.labels, facts, choice.chips, self.clock())
        self.pool.submit(self._annotate, pod, annotations)

    def _annotate(self, pod: PodRecord, annotations: dict[str, str]) -> None:
        # The uid in a merge patch is a precondition: a re-created pod of the same name is left alone.
        body = {"metadata": {"uid": pod.uid, "annotations": annotations}}
        try:
            with_retries(lambda: self.core.patch_namespaced_pod(
                pod.name, pod.namespace, body, _content_type="application/merge-patch+json", _preload_content=False),
                f"annotate pod {pod.namespace}/{pod.name}", timeout=30)
            self.log(f"chose {pod.namespace}/{pod.name} on {pod.node}: {annotations[rules.CHIPS_ANNOTATION]}"
                     + (" (with the configuration)" if rules.CONFIG_ANNOTATION in annotations else ""))
        except Exception as error:  # noqa: BLE001 - a worker must never die silently
            cause = error.__cause__
            gone = isinstance(cause, ApiException) and cause.status in (404, 409)
            if not gone:
                self.log(f"error: annotate pod {pod.namespace}/{pod.name}: {error}")
            with self.lock:
                self.state.chosen.pop(pod.uid, None)
                if not gone:
                    self.state.settled.discard(pod.uid)  # the periodic retry chooses again

    def _warn(self, pod: PodRecord, message: str) -> None:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {"apiVersion": "v1", "kind": "Event",
                 "metadata": {"generateName": f"{pod.name}.", "namespace": pod.namespace},
                 "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": pod.name, "namespace": pod.namespace,
                                    "uid": pod.uid},
                 "reason": REASON, "message": message, "type": "Warning", "count": 1,
                 "firstTimestamp": now, "lastTimestamp": now, "source": {"component": COMPONENT}}
        try:
            # validate_call builds the CoreV1Event from the dict
            with_retries(lambda: self.core.create_namespaced_event(pod.namespace, cast(client.CoreV1Event, event),
                                                                   _preload_content=False),
                         f"event for pod {pod.namespace}/{pod.name}", timeout=30)
            self.log(f"left {pod.namespace}/{pod.name} on {pod.node} unannotated: {message}")
        except Exception as error:  # noqa: BLE001 - a worker must never die silently
            self.log(f"error: event for pod {pod.namespace}/{pod.name}: {error}")


def run(kubeconfig: str, ready_file: Path | None, stop: threading.Event) -> None:
    api = api_client(kubeconfig)
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    stand_in = StandIn(api)
    # Pods are decided only once the nodes, their health and the PodGroups are known.
    wait_synced(start_informers((
        Source("nodes", core.list_node, stand_in.sync_nodes, stand_in.node_event,
               {"label_selector": f"{SIMULATED_LABEL}=true"}),
        Source("health", core.list_namespaced_config_map, stand_in.sync_health, stand_in.health_event,
               {"namespace": DEVICEINFO_NAMESPACE, "label_selector": "mx-consumer-cim=true"}),
        Source("podgroups", functools.partial(custom.list_cluster_custom_object, GROUP, VERSION, PODGROUPS),
               stand_in.sync_groups, stand_in.group_event)), stop, log), stop)
    synced = wait_synced(start_informers((
        Source("pods", core.list_pod_for_all_namespaces, stand_in.sync_pods, stand_in.pod_event),), stop, log), stop)
    if ready_file and synced:
        ready_file.write_text(f"{os.getpid()}\n")
    log(f"Ascend plugin stand-in ready: {len(stand_in.state.nodes)} nodes, {len(stand_in.state.pods)} active pods")
    while not stop.wait(RETRY_SECONDS):
        stand_in.retry()
    stand_in.pool.shutdown(wait=False, cancel_futures=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ascend-hybrid-sim-volcano-ascend-plugin",
                                     description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--ready-file", type=Path, help="written (with the pid) once the first lists are in")
    parser.add_argument("--cluster-dir", help="marks the process as this cluster's (down checks it by pid)")
    args = parser.parse_args(argv)
    run_until_signalled(lambda stop: run(args.kubeconfig, args.ready_file, stop), args.ready_file)
    log("Ascend plugin stand-in stopped")
    return 0


if __name__ == "__main__":
    helper_main(main)  # patch workers may sit in a retry loop against an apiserver that is gone
