"""One set of builders for the tests and benchmarks. Pods, nodes and jobs are built fluently, as Kueue's testing
wrappers do, one method a fact, into plain dicts as the API returns them:

    PodBuilder("demo", 0).attempt(2).gated().exited(137, reason="OOMKilled").build()
    NodeBuilder("n0").chip("910A").rack("r1").not_ready().build()
    JobBuilder("demo").parallelism(data=2, tensor=4).per_pod(8).build()

A test that needs the same object often names a preset (a function returning a builder) and adds what differs.
Beside them: MindCluster deviceinfo ConfigMaps, a rack-labelled cluster of nodes, the simulated telemetry's pods,
job_body (a whole job, valid by default) and the CRD's structural defaulting. Every address is loopback, as in
the simulated cluster; the device plugin's annotation is written in one place, PodBuilder.devices."""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from ascend_hybrid.contracts.ascend import (
    ACCELERATOR_TYPE_LABEL,
    DEVICE_ANNOTATION,
    RACK_LABEL,
    RESOURCE,
    SUPERPOD_LABEL,
)
from ascend_hybrid.contracts.chips import CHIPS
from ascend_hybrid.contracts.names import (
    ATTEMPT_LABEL,
    GANG_GATE,
    HOSTNAME_LABEL,
    JOB_LABEL,
    POD_INDEX_LABEL,
)
from ascend_hybrid.contracts.names import pod_name as gang_pod_name
from ascend_hybrid.devcluster.deviceplugin.allocation import device_annotations
from ascend_hybrid.devcluster.nodes.manifests import SimNode
from ascend_hybrid.devcluster.telemetry import figures

API_VERSION = "hybrid.ascend.dev/v1alpha1"


def job_body(spec: dict | None = None, name: str = "job", **metadata: Any) -> dict:
    """A whole AscendHybridJob object; the default spec is valid (DP 2 × TP 4 on one 8-NPU 910B pod)."""
    if spec is None:
        return JobBuilder(name).parallelism(data=2, tensor=4).per_pod(8).metadata(**metadata).build()
    return JobBuilder(name).spec(spec).metadata(**metadata).build()


def pod_uid(job: str, attempt: int, index: int) -> str:
    """A fixed UID per pod, shaped as the apiserver's (a UUID)."""
    import uuid
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"pod/{job}/{attempt}/{index}"))


def apply_defaults(schema: dict, value: Any) -> Any:
    """Structural defaulting as the apiserver does it: absent properties take their default, recursively."""
    if not isinstance(value, dict) or schema.get("type") != "object":
        if isinstance(value, list) and "items" in schema:
            return [apply_defaults(schema["items"], item) for item in value]
        return value
    result = dict(value)
    for name, child in schema.get("properties", {}).items():
        if name not in result and "default" in child:
            result[name] = copy.deepcopy(child["default"])
        if name in result:
            result[name] = apply_defaults(child, result[name])
    return result


ACCELERATOR = {"910A": "module", "910B": "module-910b-8", "A3": "module-a3-16"}


def deviceinfo(
    node_name: str,
    *,
    chips: int = 8,
    unhealthy: Sequence[int] = (),
    network_unhealthy: Sequence[int] = (),
    separated: Sequence[int] = (),
    super_pod: int = -1,
    rack: int = -1,
) -> dict:
    def names(ids) -> str:
        return ",".join(f"Ascend910-{i}" for i in ids)
    cfg = {
        "DeviceInfo": {
            "DeviceList": {
                RESOURCE: names(i for i in range(chips) if i not in unhealthy),
                f"{RESOURCE}-Unhealthy": names(unhealthy),
                f"{RESOURCE}-NetworkUnhealthy": names(network_unhealthy),
                f"{RESOURCE}-Recovering": "",
                f"{RESOURCE}-Fault": "[]",
            },
            "UpdateTime": 1760000000,
        },
        "SuperPodID": super_pod,
        "ServerIndex": 0,
        "RackID": rack,
        "CheckCode": "0" * 64,
    }
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": f"mindx-dl-deviceinfo-{node_name}", "namespace": "kube-system",
                         "labels": {"mx-consumer-cim": "true"}},
            "data": {"DeviceInfoCfg": json.dumps(cfg), "ManuallySeparateNPU": names(separated)}}


def cluster(count: int, *, per_rack: int, chip: str = "910B", prefix: str = "node") -> list[dict]:
    """`count` Ready nodes named <prefix>-0000…, racks of `per_rack` named rack-00…"""
    return [NodeBuilder(f"{prefix}-{i:04d}").chip(chip).rack(f"rack-{i // per_rack:02d}").build() for i in range(count)]


SIM_STARTED = "2026-11-29T17:00:00Z"


def telemetry_pod(name="job-a1-0", chips=(0, 1), phase="Running", ip="127.16.0.7", annotations=None, job="job",
                  started=SIM_STARTED, node="node-002") -> dict:
    """A pod as the simulated telemetry sees it: chips given by the simulated device plugin on node 2."""
    held = device_annotations(name, f"uid-{name}", SimNode(2, "910B", 0, 1), tuple(chips)) if chips else {}
    labels = {figures.JOB_LABEL: job, figures.ATTEMPT_LABEL: "1"} if job else {}
    return (PodBuilder.named(name, namespace="ns").uid(f"uid-{name}").labels(labels)
            .annotations({**held, **(annotations or {})}).node(node).phase(phase).status(podIP=ip, startTime=started)
            .build())


# -- fluent builders: pods, nodes and jobs as the API returns them ----------------------------------------------
# Each starts from the smallest object its kind needs and says what a test adds, one method a fact, as Kueue's
# testing wrappers do: `PodBuilder("demo", 0).attempt(2).gated().exited(137, reason="OOMKilled").build()`.
# Every method returns the builder; `build()` returns a fresh plain dict, so one builder can make several objects.

Moment = datetime | str


def stamp(moment: Moment) -> str:
    """An RFC 3339 time as the API writes it (whole seconds, Z)."""
    return moment if isinstance(moment, str) else moment.strftime("%Y-%m-%dT%H:%M:%SZ")


class PodBuilder:
    """A pod. `PodBuilder(job, index)` is pod `index` of a gang (named and labelled as the operator does);
    `PodBuilder.named(name)` is any other pod. Both start Pending, unbound, one container `ascend`, no chips.

    Addresses follow the simulated cluster, all loopback: pod `i` runs on host 127.15.0.{i+1} with pod IP
    127.16.0.{i+1}, and its chip `c` has device IP 127.100.{i}.{c}."""

    def __init__(self, job: str, index: int, *, namespace: str = "default") -> None:
        self._job: str | None = job
        self._index = index
        self._pod: dict[str, Any] = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": gang_pod_name(job, 1, index), "namespace": namespace,
                         "labels": {JOB_LABEL: job, ATTEMPT_LABEL: "1", POD_INDEX_LABEL: str(index)},
                         "annotations": {}},
            "spec": {"containers": [{"name": "ascend", "image": "x"}]},
            "status": {"phase": "Pending"}}

    @classmethod
    def named(cls, name: str, *, namespace: str = "default", index: int = 0) -> PodBuilder:
        """A pod that belongs to no gang; `index` only picks its default addresses."""
        builder = cls("", index, namespace=namespace)
        builder._job = None
        builder._pod["metadata"].update(name=name, labels={})
        return builder

    @classmethod
    def of(cls, pod: dict, *, index: int = 0) -> PodBuilder:
        """Starts from a copy of an existing pod (one the operator rendered, say); `index` picks its default
        addresses."""
        builder = cls.named(pod["metadata"]["name"], index=index)
        builder._pod = copy.deepcopy(pod)
        metadata = builder._pod["metadata"]
        metadata.setdefault("labels", {})
        metadata.setdefault("annotations", {})
        builder._pod.setdefault("status", {})
        return builder

    # metadata
    def attempt(self, attempt: int) -> PodBuilder:
        metadata = self._pod["metadata"]
        if self._job is not None:
            metadata["name"] = gang_pod_name(self._job, attempt, self._index)
        metadata["labels"][ATTEMPT_LABEL] = str(attempt)
        return self

    def namespace(self, namespace: str) -> PodBuilder:
        self._pod["metadata"]["namespace"] = namespace
        return self

    def uid(self, uid: str) -> PodBuilder:
        self._pod["metadata"]["uid"] = uid
        return self

    def label(self, key: str, value: str | None) -> PodBuilder:
        """Sets a label; None removes it."""
        labels = self._pod["metadata"]["labels"]
        if value is None:
            labels.pop(key, None)
        else:
            labels[key] = value
        return self

    def labels(self, labels: dict[str, str]) -> PodBuilder:
        self._pod["metadata"]["labels"].update(labels)
        return self

    def annotation(self, key: str, value: str) -> PodBuilder:
        self._pod["metadata"]["annotations"][key] = value
        return self

    def annotations(self, annotations: dict[str, str]) -> PodBuilder:
        self._pod["metadata"]["annotations"].update(annotations)
        return self

    def created(self, moment: Moment) -> PodBuilder:
        self._pod["metadata"]["creationTimestamp"] = stamp(moment)
        return self

    def deleting(self, moment: Moment, grace: int = 30) -> PodBuilder:
        self._pod["metadata"].update(deletionTimestamp=stamp(moment), deletionGracePeriodSeconds=grace)
        return self

    def finalizers(self, *finalizers: str) -> PodBuilder:
        self._pod["metadata"]["finalizers"] = list(finalizers)
        return self

    def metadata(self, **fields: Any) -> PodBuilder:
        """Any other metadata field as the API spells it (resourceVersion, managedFields, …)."""
        self._pod["metadata"].update(copy.deepcopy(fields))
        return self

    # the device plugin's annotation: the one place that writes it
    def devices(self, ids: Iterable[int] | None = None, *, count: int | None = None,
                super_ids: Sequence[int] | None = None, server_id: str | None = None,
                pod_name: str | None = None, device_ips: Sequence[str] | None = None,
                legacy: bool = False) -> PodBuilder:
        """The chips the device plugin gave the pod, in its annotation, in the current plugin's shape and field
        order (ascend-device-plugin): pod_name, server_id (the pod's UID), host_ip, super_pod_id, devices,
        rack_id, server_index, server_ip. `legacy`: an older plugin's shape (pod_name, server_id = the node's
        IP, devices). `count` instead of `ids` takes the highest `count` chips of a 16-chip node, so chip ids
        differ from local ranks; a device IP defaults to 127.100.{index}.{chip}."""
        chips = list(ids) if ids is not None else list(range(16 - (count or 0), 16))
        devices = []
        for position, chip in enumerate(chips):
            ip = device_ips[position] if device_ips is not None else f"127.100.{self._index}.{chip}"
            device = {"device_id": str(chip), "device_ip": ip}
            if super_ids is not None:
                device["super_device_id"] = str(super_ids[position])
            devices.append(device)
        name = self._pod["metadata"]["name"] if pod_name is None else pod_name
        host, uid = self._host_ip(), self._uid()  # a pod the plugin annotated exists: it has a UID
        if legacy:
            configuration: dict[str, Any] = {"pod_name": name, "server_id": server_id or host, "devices": devices}
        else:
            configuration = {"pod_name": name, "server_id": server_id or uid, "host_ip": host,
                             "super_pod_id": -1, "devices": devices, "rack_id": -1, "server_index": "-1",
                             "server_ip": host}
        return self.device_annotation(json.dumps(configuration))

    def chip_names(self, ids: Iterable[int], *, annotation: str = "huawei.com/AscendReal") -> PodBuilder:
        """The chips named as the device plugin also writes them (Ascend910-<id>, comma-separated), under
        `annotation` (huawei.com/AscendReal, or the resource name as older plugins do)."""
        return self.annotation(annotation, ",".join(f"Ascend910-{chip}" for chip in ids))

    def device_annotation(self, text: str | None) -> PodBuilder:
        """The device plugin's annotation as given (malformed ones included); None removes it."""
        annotations = self._pod["metadata"]["annotations"]
        if text is None:
            annotations.pop(DEVICE_ANNOTATION, None)
        else:
            annotations[DEVICE_ANNOTATION] = text
        return self

    # spec
    def node(self, node: str | None) -> PodBuilder:
        """Bound to `node` (None: unbound)."""
        if node is None:
            self._pod["spec"].pop("nodeName", None)
        else:
            self._pod["spec"]["nodeName"] = node
        return self

    def gates(self, *gates: str) -> PodBuilder:
        """Exactly these scheduling gates (none: an empty list, as left once every gate is removed)."""
        self._pod["spec"]["schedulingGates"] = [{"name": gate} for gate in gates]
        return self

    def gated(self, *gates: str) -> PodBuilder:
        """Held by scheduling gates (the operator's gang gate unless others are named): Pending, unbound, and
        so without addresses."""
        self.gates(*(gates or (GANG_GATE,)))
        self._pod["spec"].pop("nodeName", None)
        for address in ("hostIP", "podIP"):
            self._pod["status"].pop(address, None)
        return self.phase("Pending")

    def chips(self, count: int, *, requests: bool = True, limits: bool = True) -> PodBuilder:
        """The container asks for `count` NPUs (in its limits and requests unless told otherwise)."""
        resources = self._container().setdefault("resources", {})
        for kind, wanted in (("limits", limits), ("requests", requests)):
            if wanted:
                resources.setdefault(kind, {})[RESOURCE] = str(count)
        return self

    def container(self, **fields: Any) -> PodBuilder:
        """Fields of the one container (env, ports, image, resources, …)."""
        self._container().update(copy.deepcopy(fields))
        return self

    def pinned(self, node: str, *, by: str = "hostname", also: Sequence[dict] = ()) -> PodBuilder:
        """Required node affinity to `node`, by its hostname label or (by="field") its name, after `also`."""
        if by == "hostname":
            term = {"matchExpressions": [*also, {"key": HOSTNAME_LABEL, "operator": "In", "values": [node]}]}
        else:
            term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        return self.spec(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [term]}}})

    def spec(self, **fields: Any) -> PodBuilder:
        """Any other spec field as the API spells it (tolerations, nodeSelector, affinity, …)."""
        self._pod["spec"].update(copy.deepcopy(fields))
        return self

    # status
    def phase(self, phase: str) -> PodBuilder:
        self._pod["status"]["phase"] = phase
        return self

    def running(self, *, node: str | None = None, pod_ip: str | None = "auto",
                host_ip: str | None = "auto") -> PodBuilder:
        """Running, bound (to node-{index} unless told) and with its host and pod IPs (None leaves one out)."""
        self.node(node or self._pod["spec"].get("nodeName") or f"node-{self._index}")
        status = self._pod["status"]
        status["phase"] = "Running"
        for key, value, default in (("hostIP", host_ip, self._host_ip()),
                                    ("podIP", pod_ip, f"127.16.0.{self._index + 1}")):
            if value is None:
                status.pop(key, None)
            else:
                status[key] = default if value == "auto" else value
        return self

    def exited(self, code: int, *, reason: str | None = None, message: str | None = None,
               finished: Moment | None = None) -> PodBuilder:
        """The container terminated with `code`, and so the pod (restartPolicy Never) Failed, or Succeeded on 0."""
        self.phase("Succeeded" if code == 0 else "Failed")
        terminated = {"exitCode": code, "reason": reason, "message": message,
                      "finishedAt": stamp(finished) if finished is not None else None}
        self._pod["status"]["containerStatuses"] = [{"name": self._container()["name"], "state": {
            "terminated": {key: value for key, value in terminated.items() if value is not None}}}]
        return self

    def condition(self, kind: str, status: str = "True", **fields: Any) -> PodBuilder:
        self._pod["status"].setdefault("conditions", []).append({"type": kind, "status": status, **fields})
        return self

    def status(self, **fields: Any) -> PodBuilder:
        """Any other status field as the API spells it; None removes one."""
        status = self._pod["status"]
        for key, value in fields.items():
            if value is None:
                status.pop(key, None)
            else:
                status[key] = copy.deepcopy(value)
        return self

    def build(self) -> dict:
        return copy.deepcopy(self._pod)

    def _container(self) -> dict:
        return self._pod["spec"]["containers"][0]

    def _host_ip(self) -> str:
        return self._pod["status"].get("hostIP") or f"127.15.0.{self._index + 1}"

    def _uid(self) -> str:
        """The pod's UID, fixed per name when the test gave none (UUID-shaped, as the apiserver's)."""
        metadata = self._pod["metadata"]
        if "uid" not in metadata:
            metadata["uid"] = str(uuid.uuid5(uuid.NAMESPACE_URL, f"pod/{metadata['namespace']}/{metadata['name']}"))
        return metadata["uid"]


class NodeBuilder:
    """A Ready node with its hostname label and no chips; `.chip(...)` makes it an NPU node of that chip."""

    def __init__(self, name: str) -> None:
        self._node: dict[str, Any] = {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {HOSTNAME_LABEL: name}},
            "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}

    def chip(self, chip: str, *, chips: int | None = None, capacity: int | None = None) -> NodeBuilder:
        """An Ascend node of `chip` (910A | 910B | A3) by its accelerator-type label, with `chips` allocatable
        NPUs (all the chip's by default) of `capacity`."""
        self.label(ACCELERATOR_TYPE_LABEL, ACCELERATOR[chip])
        return self.npus(CHIPS[chip].chips_per_node if chips is None else chips, capacity=capacity)

    def npus(self, count: int, *, capacity: int | None = None) -> NodeBuilder:
        """`count` allocatable NPUs of `capacity` (the same unless told), beside a large node's CPU and memory;
        no chip label (`.chip(...)` adds it)."""
        status = self._node["status"]
        status["allocatable"] = {"cpu": "192", "memory": "1536Gi", RESOURCE: str(count)}
        status["capacity"] = {"cpu": "192", "memory": "1536Gi", RESOURCE: str(count if capacity is None else capacity)}
        return self

    def label(self, key: str, value: str | None) -> NodeBuilder:
        """Sets a label; None removes it."""
        labels = self._node["metadata"]["labels"]
        if value is None:
            labels.pop(key, None)
        else:
            labels[key] = value
        return self

    def rack(self, rack: str) -> NodeBuilder:
        return self.label(RACK_LABEL, rack)

    def super_pod(self, super_pod: str) -> NodeBuilder:
        return self.label(SUPERPOD_LABEL, super_pod)

    def not_ready(self, *, since: Moment | None = None, **fields: Any) -> NodeBuilder:
        return self.ready(False, since=since, **fields)

    def ready(self, ready: bool = True, *, since: Moment | None = None, **fields: Any) -> NodeBuilder:
        """The Ready condition, with its lastTransitionTime and any other fields (reason, message)."""
        condition = {"type": "Ready", "status": "True" if ready else "False", **fields}
        if since is not None:
            condition["lastTransitionTime"] = stamp(since)
        conditions = self._node["status"]["conditions"]
        conditions[:] = [c for c in conditions if c["type"] != "Ready"] + [condition]
        return self

    def condition(self, kind: str, status: str) -> NodeBuilder:
        self._node["status"]["conditions"].insert(0, {"type": kind, "status": status})
        return self

    def cordoned(self) -> NodeBuilder:
        self._node["spec"]["unschedulable"] = True
        return self

    def taint(self, key: str, effect: str = "NoSchedule", value: str | None = None, **fields: Any) -> NodeBuilder:
        taint = {"key": key, "effect": effect, **({"value": value} if value is not None else {}), **fields}
        self._node["spec"].setdefault("taints", []).append(taint)
        return self

    def metadata(self, **fields: Any) -> NodeBuilder:
        """Any other metadata field as the API spells it (managedFields, resourceVersion, …)."""
        self._node["metadata"].update(copy.deepcopy(fields))
        return self

    def status(self, **fields: Any) -> NodeBuilder:
        self._node["status"].update(copy.deepcopy(fields))
        return self

    def build(self) -> dict:
        return copy.deepcopy(self._node)


class JobBuilder:
    """An AscendHybridJob with an empty spec: each test says the spec it is about."""

    def __init__(self, name: str = "job", *, namespace: str = "default") -> None:
        self._job: dict[str, Any] = {"apiVersion": API_VERSION, "kind": "AscendHybridJob",
                                     "metadata": {"name": name, "namespace": namespace}, "spec": {}}

    def namespace(self, namespace: str | None) -> JobBuilder:
        """The namespace (None: none, as a manifest before it is applied)."""
        if namespace is None:
            self._job["metadata"].pop("namespace", None)
        else:
            self._job["metadata"]["namespace"] = namespace
        return self

    def uid(self, uid: str, generation: int = 1) -> JobBuilder:
        """Stored by the apiserver: its uid and generation."""
        self._job["metadata"].update(uid=uid, generation=generation)
        return self

    def created(self, moment: Moment) -> JobBuilder:
        self._job["metadata"]["creationTimestamp"] = stamp(moment)
        return self

    def metadata(self, **fields: Any) -> JobBuilder:
        self._job["metadata"].update(copy.deepcopy(fields))
        return self

    def spec(self, spec: Any) -> JobBuilder:
        """The whole spec as given (a copy), however wrong: the tests of the rules need that."""
        self._job["spec"] = copy.deepcopy(spec)
        return self

    def section(self, name: str, **fields: Any) -> JobBuilder:
        """Fields of one spec section, merged over what is there: `.section("runPolicy", backoffLimit=2)`."""
        self._job["spec"].setdefault(name, {}).update(copy.deepcopy(fields))
        return self

    def parallelism(self, **degrees: int) -> JobBuilder:
        return self.section("parallelism", **degrees)

    def per_pod(self, npus: int) -> JobBuilder:
        return self.section("npu", perPod=npus)

    def backoff_limit(self, limit: int) -> JobBuilder:
        return self.section("runPolicy", backoffLimit=limit)

    def queue(self, queue: str) -> JobBuilder:
        return self.section("scheduling", queue=queue)

    def status(self, status: dict | None) -> JobBuilder:
        self._job["status"] = copy.deepcopy(status or {})
        return self

    def build(self) -> dict:
        return copy.deepcopy(self._job)
