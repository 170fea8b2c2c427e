"""The MindCluster / Ascend device-plugin wire contract, in one place (design §5, §7).

Names the plugin and MindCluster publish — the extended resource, the node labels, the pod annotation listing a
pod's chips, the `mindx-dl-deviceinfo-<node>` health ConfigMaps — and the one parser of each. The inventory, the
rank table, the reconcile pass and the CLI import these instead of spelling the strings again. (The simulated
cluster keeps its own copy on purpose: it is the test oracle of this module.)
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

RESOURCE = "huawei.com/Ascend910"

# node labels
RACK_LABEL = "huawei.com/topotree.rackid"
SUPERPOD_LABEL = "huawei.com/topotree.superpodid"
ACCELERATOR_TYPE_LABEL = "accelerator-type"
CHIP_NAME_LABEL = "node.kubernetes.io/npu.chip.name"

# pod annotations the device plugin writes once it has allocated chips
DEVICE_ANNOTATION = "ascend.kubectl.kubernetes.io/ascend-910-configuration"
DEVICE_NAME_ANNOTATIONS = ("huawei.com/AscendReal", RESOURCE)

# node health ConfigMaps
DEVICEINFO_PREFIX = "mindx-dl-deviceinfo-"
DEVICEINFO_NAMESPACE = "kube-system"
DEVICEINFO_LABEL = "mx-consumer-cim"
DEVICEINFO_KEY = "DeviceInfoCfg"
MANUALLY_SEPARATED_KEY = "ManuallySeparateNPU"
# Chips in these lists are not usable. Recovering chips are mid-reset: the device plugin does not hand them
# out, so counting them free would place pods that then wait for chips that never come.
UNUSABLE_SUFFIXES = ("-Unhealthy", "-NetworkUnhealthy", "-Recovering")


def chip_type_of(node: Mapping) -> str | None:
    """910A | 910B | A3 from the node's labels (accelerator-type first, then the chip name), or None."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    accelerator = str(labels.get(ACCELERATOR_TYPE_LABEL, "")).lower()
    if accelerator in ("module", "half"):
        return "910A"
    if accelerator.startswith(("module-910b-", "card-910b-")):
        return "910B"
    if accelerator.startswith("module-a3-"):
        return "A3"
    chip_name = str(labels.get(CHIP_NAME_LABEL, ""))
    if chip_name in ("910A", "910ProA", "910ProB", "910PremiumA"):
        return "910A"
    if chip_name.startswith(("910_93", "Ascend910_93")):  # before 910B*: A3 names are not 910B names
        return "A3"
    if chip_name.startswith("910B"):
        return "910B"
    return None


def chip_ids(names: str) -> frozenset[int]:
    """'Ascend910-3,Ascend910-4' -> {3, 4}; bare numbers are accepted too, junk is skipped."""
    ids = set()
    for item in str(names).split(","):
        tail = item.strip().rsplit("-", 1)[-1]
        if tail.isdigit():
            ids.add(int(tail))
    return frozenset(ids)


@functools.lru_cache(maxsize=8192)  # ~4 KB each for 8 chips: a bounded ~32 MB at most
def _parsed_devices(raw: str) -> tuple[Mapping[str, Any], ...] | None:
    """Every reconcile pass of a starting gang reads every pod's annotation; each distinct one is parsed once, and
    shared read-only (copying them was a tenth of the operator's CPU in a 2 048-pod gang's start)."""
    try:
        devices = json.loads(raw).get("devices") or []
        ordered = sorted(devices, key=lambda device: int(device["device_id"]))
        return tuple(MappingProxyType(dict(device)) for device in ordered)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def pod_devices(pod: Mapping) -> tuple[Mapping[str, Any], ...] | None:
    """The devices the device plugin gave a pod, lowest chip first (local rank i gets the i-th), read-only, or
    None."""
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(DEVICE_ANNOTATION)
    if not raw:
        return None
    return _parsed_devices(raw)


@functools.lru_cache(maxsize=8192)
def _parsed_config(raw: str) -> tuple[tuple[str, str], ...] | None:
    """The annotation's fields other than its devices (server_id, host_ip, super_pod_id, rack_id, ...)."""
    try:
        config = json.loads(raw)
        return tuple((str(key), str(value)) for key, value in config.items() if key != "devices")
    except (ValueError, TypeError, AttributeError):
        return None


def pod_device_config(pod: Mapping) -> dict[str, str] | None:
    """The device plugin's annotation without its devices, values as strings: the current plugin writes pod_name,
    server_id (the pod's UID), host_ip, super_pod_id, rack_id, server_index and server_ip
    (ascend-device-plugin pkg/common/proto.go, Instance); an older one pod_name and server_id (the node's IP)."""
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(DEVICE_ANNOTATION)
    if not raw:
        return None
    config = _parsed_config(raw)
    return None if config is None else dict(config)


def pod_chip_ids(pod: Mapping) -> frozenset[int] | None:
    """The chips a pod holds, from the device annotation or else the chip-name annotations; None when none says."""
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(DEVICE_ANNOTATION)
    devices = _parsed_devices(raw) if raw else None
    if devices:
        return frozenset(int(device["device_id"]) for device in devices)
    # a broken annotation is as good as none: fall through to the name annotations
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    for key in DEVICE_NAME_ANNOTATIONS:
        ids = chip_ids(annotations.get(key) or "")
        if ids:
            return ids
    return None


@dataclass(frozen=True)
class DeviceInfo:
    """One node's health as MindCluster publishes it; absent figures are None or empty."""

    node: str
    unusable: frozenset[int] = frozenset()  # Unhealthy ∪ NetworkUnhealthy ∪ Recovering ∪ ManuallySeparateNPU
    listed: frozenset[int] = frozenset()    # every chip the plugin lists for the node
    super_pod: str | None = None
    rack: str | None = None


def parse_deviceinfo(configmap: Mapping) -> DeviceInfo | None:
    """The DeviceInfo of a `mindx-dl-deviceinfo-<node>` ConfigMap; None for any other ConfigMap. An unparsable
    one means "no extra health information", never a crash."""
    meta = configmap.get("metadata") or {}
    name = str(meta.get("name") or "")
    if not name.startswith(DEVICEINFO_PREFIX) or meta.get("namespace", DEVICEINFO_NAMESPACE) != DEVICEINFO_NAMESPACE:
        return None
    data = configmap.get("data") or {}
    return _parse_deviceinfo(name, str(data.get(DEVICEINFO_KEY) or ""), str(data.get(MANUALLY_SEPARATED_KEY) or ""))


# Every pass reads every node's health (4 096 ConfigMaps on a big cluster); a node's parse is redone only when its
# text changes (the device plugin rewrites UpdateTime, so a rewritten ConfigMap is one more entry).
@functools.lru_cache(maxsize=16384)
def _parse_deviceinfo(name: str, device_info: str, separated: str) -> DeviceInfo:
    data = {DEVICEINFO_KEY: device_info, MANUALLY_SEPARATED_KEY: separated}
    try:
        cfg = json.loads(data.get(DEVICEINFO_KEY) or "{}")
        device_list = (cfg.get("DeviceInfo") or {}).get("DeviceList") or {}
    except (ValueError, TypeError, AttributeError):
        cfg, device_list = {}, {}
    if not isinstance(cfg, dict) or not isinstance(device_list, dict):
        cfg, device_list = {}, {}
    unusable = set(chip_ids(data.get(MANUALLY_SEPARATED_KEY) or ""))
    unusable |= chip_ids(cfg.get(MANUALLY_SEPARATED_KEY) or "")
    for suffix in UNUSABLE_SUFFIXES:
        unusable |= chip_ids(device_list.get(RESOURCE + suffix) or "")

    def domain(key: str) -> str | None:
        value = cfg.get(key)
        # MindCluster writes negative ids for "not part of one"
        return str(value) if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None

    return DeviceInfo(node=name[len(DEVICEINFO_PREFIX):], unusable=frozenset(unusable),
                      listed=chip_ids(device_list.get(RESOURCE) or ""), super_pod=domain("SuperPodID"),
                      rack=domain("RackID"))


def device_infos_by_node(configmaps: Iterable[Mapping]) -> dict[str, DeviceInfo]:
    return {info.node: info for info in map(parse_deviceinfo, configmaps) if info is not None}


def node_labels(node: Mapping | None) -> Mapping[str, str]:
    return ((node or {}).get("metadata") or {}).get("labels") or {}


def super_pod_id(node: Mapping | None, info: DeviceInfo | None) -> str | None:
    """The node's super-pod: its label, else deviceinfo's SuperPodID (design §7); None when neither says."""
    labelled = node_labels(node).get(SUPERPOD_LABEL)
    if labelled is not None:
        return str(labelled)
    return info.super_pod if info is not None else None


def rack_id(node: Mapping | None, info: DeviceInfo | None) -> str | None:
    labelled = node_labels(node).get(RACK_LABEL)
    if labelled is not None:
        return str(labelled)
    return info.rack if info is not None else None
