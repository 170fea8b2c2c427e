"""The MindCluster / Ascend device-plugin wire contract, in one place (design §5, §7).

Names the plugin and MindCluster publish — the extended resource, the node labels, the pod annotation listing a
pod's chips, the `mindx-dl-deviceinfo-<node>` health ConfigMaps — and the one parser of each. The inventory, the
rank table, the reconcile pass and the CLI import these instead of spelling the strings again. (The simulated
cluster keeps its own copy on purpose: it is the test oracle of this module.)
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ascend_hybrid.contracts import untrusted

RESOURCE = "huawei.com/Ascend910"

# node labels
RACK_LABEL = "huawei.com/topotree.rackid"
SUPERPOD_LABEL = "huawei.com/topotree.superpodid"
ACCELERATOR_TYPE_LABEL = "accelerator-type"
CHIP_NAME_LABEL = "node.kubernetes.io/npu.chip.name"

# pod annotations the device plugin writes once it has allocated chips
DEVICE_ANNOTATION = "ascend.kubectl.kubernetes.io/ascend-910-configuration"
DEVICE_NAME_ANNOTATIONS = ("huawei.com/AscendReal", RESOURCE)

# What the device plugin and Volcano (MindCluster's scheduler) write on a pod: the device plugin's configuration
# and chip annotations (the prefixes of the two above), Volcano's pod group and its own keys, and the allocation time
# the device plugin and Volcano's Ascend plugin stamp. A pod's template may set none of them (spec/field_rules.py).
DEVICE_PLUGIN_PREFIXES = (DEVICE_ANNOTATION.split("/")[0] + "/", RESOURCE.split("/")[0] + "/")
VOLCANO_PREFIX = "volcano.sh/"
VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
PREDICATE_TIME_ANNOTATION = "predicate-time"

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


MAX_CHIP_ID_DIGITS = 5  # a chip's id on its node (0-15 today); a longer run of digits is junk


def chip_ids(names: str) -> frozenset[int]:
    """'Ascend910-3,Ascend910-4' -> {3, 4}; bare numbers are accepted too, junk is skipped."""
    ids = set()
    for item in str(names).split(","):
        tail = item.strip().rsplit("-", 1)[-1]
        if tail.isascii() and tail.isdigit() and len(tail) <= MAX_CHIP_ID_DIGITS:  # not '²', which int() refuses
            ids.add(int(tail))
    return frozenset(ids)


@functools.lru_cache(maxsize=8192)  # ~4 KB each for 8 chips: a bounded ~32 MB at most
def _parsed_devices(raw: str) -> tuple[Mapping[str, Any], ...] | None:
    """Every reconcile pass of a starting gang reads every pod's annotation; each distinct one is parsed once, and
    shared read-only (copying them was a tenth of the operator's CPU in a 2 048-pod gang's start)."""
    try:
        devices = untrusted.json_value(raw, untrusted.ANNOTATIONS_LIMIT, DEVICE_ANNOTATION).get("devices") or []
        ordered = sorted(devices, key=lambda device: _device_id(device["device_id"]))
        return tuple(MappingProxyType(dict(device)) for device in ordered)
    except (ValueError, KeyError, TypeError, AttributeError):  # untrusted.Rejected is a ValueError
        return None


def _device_id(value: object) -> int:
    """A chip's id on its node; ValueError for anything else (a negative id, or one of thousands of digits)."""
    text = str(value)
    if not (text.isascii() and text.isdigit() and len(text) <= MAX_CHIP_ID_DIGITS):
        raise ValueError(f"device_id {text[:16]!r} is not a chip id")
    return int(text)


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
        config = untrusted.json_value(raw, untrusted.ANNOTATIONS_LIMIT, DEVICE_ANNOTATION)
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
        cfg = untrusted.json_value(data.get(DEVICEINFO_KEY) or "{}", untrusted.CONFIGMAP_LIMIT, DEVICEINFO_KEY)
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


# --- the device plugin's mode -----------------------------------------------------------------------------------
# MindCluster's device plugin runs with -volcanoType=false (its default: the kubelet chooses the chips, the plugin
# annotates the pod on its next period) or -volcanoType=true (the chips a pod gets are those Volcano's Ascend
# plugin annotated; a pod bound without that annotation is refused, UnexpectedAdmissionError). Its DaemonSets
# (build/ascendplugin.yaml, ascendplugin-volcano.yaml) run `device-plugin <flags>` in kube-system.
KUBELET_MODE, VOLCANO_MODE = "kubelet", "volcano"
PLUGIN_MODES = (KUBELET_MODE, VOLCANO_MODE)
DEVICE_PLUGIN_NAMESPACE = "kube-system"
_VOLCANO_FLAG = re.compile(r"^--?volcanoType(?:=(.*))?$")
_GO_TRUE, _GO_FALSE = ("1", "t", "T", "TRUE", "true", "True"), ("0", "f", "F", "FALSE", "false", "False")


@dataclass(frozen=True)
class NodeSelection:
    """Which nodes a pod template may run on: its nodeSelector and required node-affinity terms, hashable."""

    labels: tuple[tuple[str, str], ...] = ()
    terms: tuple[tuple[tuple[str, str, tuple[str, ...]], ...], ...] = ()  # ORed terms of ANDed (key, op, values)

    def matches(self, node_labels: Mapping[str, str]) -> bool:
        if any(node_labels.get(key) != value for key, value in self.labels):
            return False
        return not self.terms or any(all(_expression_holds(node_labels, *expr) for expr in term)
                                     for term in self.terms)


def _expression_holds(labels: Mapping[str, str], key: str, operator: str, values: tuple[str, ...]) -> bool:
    """A NodeSelectorRequirement as the scheduler reads it (k8s.io/component-helpers nodeaffinity)."""
    value = labels.get(key)
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt") and value is not None and len(values) == 1:
        try:
            left, right = int(value), int(values[0])
        except ValueError:
            return False
        return left > right if operator == "Gt" else left < right
    return False


@dataclass(frozen=True)
class PluginDaemonSet:
    """One device-plugin DaemonSet: its name, mode and the nodes its pods run on."""

    name: str
    mode: str
    nodes: NodeSelection = field(default_factory=NodeSelection)


@dataclass(frozen=True)
class DevicePlugins:
    """What the operator knows of each node's device-plugin mode: `forced` (a setting) for every node, else the
    mode of the DaemonSet whose pods run there, else kubelet mode (the plugin's default)."""

    forced: str | None = None
    daemonsets: tuple[PluginDaemonSet, ...] = ()

    def mode_of(self, node_labels: Mapping[str, str]) -> str:
        if self.forced is not None:
            return self.forced
        modes = {ds.mode for ds in self.daemonsets if ds.nodes.matches(node_labels)}
        # two plugins on one node (a migration): Volcano's refuses a bound pod, so it is the one that counts
        return VOLCANO_MODE if VOLCANO_MODE in modes else KUBELET_MODE

    def source(self) -> str:
        """For people: where the modes come from."""
        if self.forced is not None:
            return f"the operator's setting ({self.forced})"
        listed = ", ".join(f"{ds.name} ({ds.mode})" for ds in self.daemonsets)
        return f"the device plugin's DaemonSets: {listed}" if listed else "no device-plugin DaemonSet seen (kubelet)"


def _plugin_flags(container: Mapping) -> list[str] | None:
    """The flags of a container that runs MindCluster's `device-plugin` binary, else None. The manifests run it
    through a shell (`command: [/bin/bash, -c, --]`, `args: ["device-plugin -volcanoType=true …"]`) or directly."""
    words = [word for part in [*(container.get("command") or ()), *(container.get("args") or ())]
             for word in str(part).split()]
    for position, word in enumerate(words):
        if word == "device-plugin" or word.endswith("/device-plugin"):
            return words[position + 1:]
    return None


def _volcano_type(flags: list[str]) -> bool:
    """Go's flag package: `-volcanoType`, `-volcanoType=true` and `--volcanoType=1` all set it; the last wins."""
    volcano = False
    for flag in flags:
        matched = _VOLCANO_FLAG.match(flag)
        if matched is None:
            continue
        value = matched.group(1)
        volcano = value is None or value in _GO_TRUE or (value not in _GO_FALSE and volcano)
    return volcano


def _node_selection(pod_spec: Mapping) -> NodeSelection:
    required = ((((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
                 .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or ())
    terms = tuple(tuple((str(expr.get("key")), str(expr.get("operator")), tuple(map(str, expr.get("values") or ())))
                        for expr in term.get("matchExpressions") or ())
                  for term in required)
    labels = tuple(sorted((str(k), str(v)) for k, v in (pod_spec.get("nodeSelector") or {}).items()))
    return NodeSelection(labels, terms)


def plugin_daemonset(daemonset: Mapping) -> PluginDaemonSet | None:
    """The device plugin a DaemonSet runs, or None when it runs none."""
    pod_spec = ((daemonset.get("spec") or {}).get("template") or {}).get("spec") or {}
    for container in pod_spec.get("containers") or ():
        flags = _plugin_flags(container)
        if flags is not None:
            mode = VOLCANO_MODE if _volcano_type(flags) else KUBELET_MODE
            return PluginDaemonSet(str((daemonset.get("metadata") or {}).get("name")), mode, _node_selection(pod_spec))
    return None


def device_plugins(daemonsets: Iterable[Mapping], forced: str | None = None) -> DevicePlugins:
    found = (plugin_daemonset(ds) for ds in daemonsets)
    return DevicePlugins(forced, tuple(sorted((ds for ds in found if ds is not None), key=lambda ds: ds.name)))
