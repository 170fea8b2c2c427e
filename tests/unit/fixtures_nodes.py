"""Builders of Node / Pod / deviceinfo ConfigMap dicts shaped exactly as the API server returns them."""

from __future__ import annotations

import json

from ascend_hybrid.topology import RACK_LABEL, RESOURCE, SUPERPOD_LABEL

ACCELERATOR = {"910A": "module", "910B": "module-910b-8", "A3": "module-a3-16"}
CHIPS = {"910A": 8, "910B": 8, "A3": 16}


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
    count = chips if chips is not None else (CHIPS[chip] if chip else 0)
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


def pod(
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
            annotations["ascend.kubectl.kubernetes.io/ascend-910-configuration"] = json.dumps(
                {"pod_name": name, "server_id": "10.0.0.1",
                 "devices": [{"device_id": str(d), "device_ip": f"192.168.100.{d}"} for d in device_ids]})
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
    names = lambda ids: ",".join(f"Ascend910-{i}" for i in ids)  # noqa: E731
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
