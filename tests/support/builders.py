"""One set of builders for the tests and benchmarks: AscendHybridJob bodies, gang pods as the API returns them
(with the device plugin's annotation), NPU-holding pods, Nodes and MindCluster deviceinfo ConfigMaps, and the
CRD's structural defaulting. Every address is loopback, as in the simulated cluster."""

from __future__ import annotations

import copy
import json
from typing import Any

from ascend_hybrid.contracts.ascend import DEVICE_ANNOTATION, RACK_LABEL, RESOURCE, SUPERPOD_LABEL
from ascend_hybrid.contracts.chips import CHIPS
from ascend_hybrid.contracts.names import ATTEMPT_LABEL, JOB_LABEL, POD_INDEX_LABEL
from ascend_hybrid.devcluster.deviceplugin.allocation import device_annotations
from ascend_hybrid.devcluster.nodes.manifests import SimNode
from ascend_hybrid.devcluster.telemetry import figures

API_VERSION = "hybrid.ascend.dev/v1alpha1"


def job_body(spec: dict | None = None, name: str = "job", **metadata: Any) -> dict:
    """A whole AscendHybridJob object; the default spec is valid (DP 2 × TP 4 on one 8-NPU 910B pod)."""
    if spec is None:
        spec = {"parallelism": {"data": 2, "tensor": 4}, "npu": {"perPod": 8}}
    return {"apiVersion": API_VERSION, "kind": "AscendHybridJob",
            "metadata": {"name": name, "namespace": "default", **metadata}, "spec": copy.deepcopy(spec)}


def pod_object(job: str, index: int, per_pod: int, *, attempt: int = 1, phase: str = "Running",
               pod_ip: str | None = "auto", host_ip: str | None = "auto", device_ids: list[int] | None = None,
               annotate: bool = True, node: str | None = None, super_device_ids: list[int] | None = None,
               annotation: str | None = None, index_label: Any = "auto") -> dict:
    """A pod of a job as `kubectl get pod -o yaml` shows it, with the device plugin's annotation.

    Addresses are loopback (the simulated cluster never uses private ranges). Device ids default to the
    highest `per_pod` chips of a 16-chip node, so they differ from local ranks.
    """
    ids = list(device_ids) if device_ids is not None else list(range(16 - per_pod, 16))
    host = f"127.0.{index // 2}.{index % 2 + 1}" if host_ip == "auto" else host_ip
    labels = {JOB_LABEL: job, ATTEMPT_LABEL: str(attempt)}
    if index_label == "auto":
        labels[POD_INDEX_LABEL] = str(index)
    elif index_label is not None:
        labels[POD_INDEX_LABEL] = index_label
    annotations = {}
    if annotate:
        devices = []
        for position, device_id in enumerate(ids):
            device = {"device_id": str(device_id), "device_ip": f"127.100.{index}.{device_id}"}
            if super_device_ids is not None:
                device["super_device_id"] = str(super_device_ids[position])
            devices.append(device)
        annotations[DEVICE_ANNOTATION] = annotation if annotation is not None else json.dumps(
            {"pod_name": str(index), "server_id": host, "devices": devices})
    status: dict[str, Any] = {"phase": phase}
    if phase == "Running":
        if host is not None:
            status["hostIP"] = host
        if pod_ip is not None:
            status["podIP"] = f"127.1.0.{index + 1}" if pod_ip == "auto" else pod_ip
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{job}-a{attempt}-{index}", "namespace": "default", "labels": labels,
                         "annotations": annotations},
            "spec": {"nodeName": node or f"node-{index}", "containers": [{"name": "ascend", "image": "x"}]},
            "status": status}


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


def node(
    name: str,
    *,
    chip: str | None = "910B",
    chips: int | None = None,
    rack: str | None = None,
    super_pod: str | None = None,
    ready: bool = True,
    cordoned: bool = False,
    taints: list[dict] | None = None,
    labels: dict | None = None,
    capacity: int | None = None,
) -> dict:
    all_labels = {"kubernetes.io/hostname": name}
    if chip is not None:
        all_labels["accelerator-type"] = ACCELERATOR[chip]
    if rack is not None:
        all_labels[RACK_LABEL] = rack
    if super_pod is not None:
        all_labels[SUPERPOD_LABEL] = super_pod
    all_labels.update(labels or {})
    count = chips if chips is not None else (CHIPS[chip].chips_per_node if chip else 0)
    status = {
        "allocatable": {"cpu": "192", "memory": "1536Gi", RESOURCE: str(count)},
        "capacity": {"cpu": "192", "memory": "1536Gi", RESOURCE: str(capacity if capacity is not None else count)},
        "conditions": [
            {"type": "MemoryPressure", "status": "False"},
            {"type": "Ready", "status": "True" if ready else "False"},
        ],
    }
    spec: dict = {}
    if cordoned:
        spec["unschedulable"] = True
    if taints:
        spec["taints"] = taints
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": all_labels}, "spec": spec,
            "status": status}


def npu_pod(
    name: str,
    *,
    node_name: str | None = None,
    chips: int = 8,
    phase: str = "Running",
    device_ids: list[int] | None = None,
    annotation: str = "config",  # "config" | "real" | "plain": which annotation names the chips
    pinned_to: str | None = None,
    pin_by: str = "hostname",  # "hostname" | "field"
    limits_only: bool = False,
) -> dict:
    annotations = {}
    if device_ids is not None:
        if annotation == "config":
            annotations[DEVICE_ANNOTATION] = json.dumps(
                {"pod_name": name, "server_id": "127.15.0.1",
                 "devices": [{"device_id": str(d), "device_ip": f"127.64.0.{d}"} for d in device_ids]})
        else:
            key = "huawei.com/AscendReal" if annotation == "real" else RESOURCE
            annotations[key] = ",".join(f"Ascend910-{d}" for d in device_ids)
    resources = {"limits": {RESOURCE: str(chips)}}
    if not limits_only:
        resources["requests"] = {RESOURCE: str(chips)}
    spec: dict = {"containers": [{"name": "ascend", "image": "x", "resources": resources}]}
    if node_name:
        spec["nodeName"] = node_name
    if pinned_to:
        if pin_by == "hostname":
            term = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [pinned_to]}]}
        else:
            term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [pinned_to]}]}
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [term]}}}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "annotations": annotations},
            "spec": spec, "status": {"phase": phase}}


def deviceinfo(
    node_name: str,
    *,
    chips: int = 8,
    unhealthy: list[int] = (),
    network_unhealthy: list[int] = (),
    separated: list[int] = (),
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
    return [node(f"{prefix}-{i:04d}", chip=chip, rack=f"rack-{i // per_rack:02d}") for i in range(count)]


SIM_STARTED = "2026-11-29T17:00:00Z"


def telemetry_pod(name="job-a1-0", chips=(0, 1), phase="Running", ip="127.16.0.7", annotations=None, job="job",
                  started=SIM_STARTED, node="node-002") -> dict:
    """A pod as the simulated telemetry sees it: chips given by the simulated device plugin on node 2."""
    held = device_annotations(name, SimNode(2, "910B", 0, 1), tuple(chips)) if chips else {}
    labels = {figures.JOB_LABEL: job, figures.ATTEMPT_LABEL: "1"} if job else {}
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "labels": labels,
                         "annotations": {**held, **(annotations or {})}},
            "spec": {"nodeName": node, "containers": [{"name": "ascend"}]},
            "status": {"phase": phase, "podIP": ip, "startTime": started}}
