"""Pure manifests of the simulated Ascend nodes and their MindCluster deviceinfo ConfigMaps (design §5).

Every address here is loopback: node N has InternalIP 127.15.x.y (x.y = N as 16 bits) and chip c of node N has
device IP 127.64.0.0 + 16·N + c, so nothing the simulation invents can route off the machine.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import math
from dataclasses import dataclass

RESOURCE = "huawei.com/Ascend910"
SIM_PREFIX = "sim.hybrid.ascend.dev"
SIMULATED_LABEL = f"{SIM_PREFIX}/simulated"
NOT_READY_LABEL = f"{SIM_PREFIX}/not-ready"
NODE_INDEX_ANNOTATION = f"{SIM_PREFIX}/node-index"
SERVER_INDEX_ANNOTATION = f"{SIM_PREFIX}/server-index"
# Chips whose IP the simulated device plugin "cannot read" ("3,5"): it annotates them `"device_ip": "-1"`, as the
# real plugin does when it fails to read a chip's IP (`dev-cluster fault NODE --chip-ip-unreadable ID`).
UNREADABLE_IPS_ANNOTATION = f"{SIM_PREFIX}/unreadable-device-ips"
# The kubelet's chip choice on this node takes chips from both 910A HCCS rings whenever the free chips allow it
# (`dev-cluster fault NODE --straddle-rings`): a test's way to force what the kubelet may do by chance.
STRADDLE_RINGS_LABEL = f"{SIM_PREFIX}/straddle-rings"
CHIP_LABEL = "node.kubernetes.io/npu.chip.name"
ACCELERATOR_TYPE_LABEL = "accelerator-type"
RACK_LABEL = "huawei.com/topotree.rackid"
SUPERPOD_LABEL = "huawei.com/topotree.superpodid"
DEVICEINFO_NAMESPACE = "kube-system"
DEVICEINFO_PREFIX = "mindx-dl-deviceinfo-"
DEVICEINFO_KEY = "DeviceInfoCfg"
SEPARATED_KEY = "ManuallySeparateNPU"
HEALTH_LISTS = ("Unhealthy", "NetworkUnhealthy", "Recovering")
# Node annotations MindCluster's device plugin writes (ascend-device-plugin pkg/server/manager.go:258-285) and
# Volcano's Ascend plugin reads: each chip's IP and super-device id, the super-pod and the server index.
BASE_DEVICE_INFOS_ANNOTATION = "baseDeviceInfos"
SUPER_POD_ID_ANNOTATION = "superPodID"
SERVER_INDEX_ANNOTATION_MINDCLUSTER = "serverIndex"

NODE_IP_BASE = ipaddress.IPv4Address("127.15.0.0")
DEVICE_IP_BASE = ipaddress.IPv4Address("127.64.0.0")
MAX_NODE_INDEX = 65535
MAX_CHIPS_PER_NODE = 16


@dataclass(frozen=True)
class ChipProfile:
    """What a server of one Ascend generation looks like to Kubernetes."""

    chip: str
    chips_per_node: int
    accelerator_type: str
    chip_name: str
    ring_size: int | None  # 910A: HCCS rings of 4 chips; a pod of ≤ 4 chips must stay inside one
    super_pod: bool


PROFILES = {
    "910A": ChipProfile("910A", 8, "module", "910A", 4, False),
    "910B": ChipProfile("910B", 8, "module-910b-8", "910B3", None, False),
    "A3": ChipProfile("A3", 16, "module-a3-16", "910_9391", None, True),
}


def profile(chip: str) -> ChipProfile:
    try:
        return PROFILES[chip]
    except KeyError:
        raise ValueError(f"unknown chip {chip!r}: expected one of {', '.join(PROFILES)}") from None


def profile_of_node(node: dict) -> ChipProfile | None:
    """The profile of a node this simulation created (by its accelerator-type label), else None."""
    accelerator_type = ((node.get("metadata") or {}).get("labels") or {}).get(ACCELERATOR_TYPE_LABEL)
    return next((p for p in PROFILES.values() if p.accelerator_type == accelerator_type), None)


@dataclass(frozen=True)
class SimNode:
    index: int  # 1-based, unique in the cluster; fixes the name and every address
    chip: str
    rack: int
    server_index: int  # position inside the rack (MindCluster's ServerIndex)
    unreadable_ips: frozenset[int] = frozenset()  # chips the device plugin annotates with device_ip "-1"
    straddle_rings: bool = False  # STRADDLE_RINGS_LABEL

    @property
    def name(self) -> str:
        return node_name(self.index)

    @property
    def ip(self) -> str:
        return node_ip(self.index)


def node_name(index: int) -> str:
    return f"node-{index:03d}"


def _check_index(index: int) -> None:
    if not 1 <= index <= MAX_NODE_INDEX:
        raise ValueError(f"node index {index} is outside 1..{MAX_NODE_INDEX}")


def node_ip(index: int) -> str:
    _check_index(index)
    return str(NODE_IP_BASE + index)


def device_ip(node_index: int, chip_id: int) -> str:
    _check_index(node_index)
    if not 0 <= chip_id < MAX_CHIPS_PER_NODE:
        raise ValueError(f"chip id {chip_id} is outside 0..{MAX_CHIPS_PER_NODE - 1}")
    return str(DEVICE_IP_BASE + node_index * MAX_CHIPS_PER_NODE + chip_id)


def nodes_per_rack(node_count: int, racks: int) -> int:
    if node_count < 1 or racks < 1:
        raise ValueError("need at least one node and one rack")
    return math.ceil(node_count / racks)


def plan_nodes(first_index: int, count: int, chip: str, per_rack: int) -> list[SimNode]:
    """Nodes first_index … first_index+count-1, filling racks of per_rack servers in index order."""
    profile(chip)
    if count < 0 or per_rack < 1:
        raise ValueError("count must be ≥ 0 and racks hold at least one node")
    nodes = []
    for index in range(first_index, first_index + count):
        _check_index(index)
        rack, server_index = divmod(index - 1, per_rack)
        nodes.append(SimNode(index=index, chip=chip, rack=rack, server_index=server_index))
    return nodes


def chip_name(chip_id: int) -> str:
    return f"Ascend910-{chip_id}"


def node_manifest(node: SimNode) -> dict:
    """A Node that kwok manages (annotation kwok.x-k8s.io/node=fake), created with its status already set."""
    chip = profile(node.chip)
    labels = {
        "kubernetes.io/hostname": node.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "arm64",
        "type": "kwok",
        "accelerator": "huawei-Ascend910",
        # what MindCluster's device-plugin DaemonSets select (build/ascendplugin*.yaml nodeSelector)
        "workerselector": "dls-worker-node",
        ACCELERATOR_TYPE_LABEL: chip.accelerator_type,
        CHIP_LABEL: chip.chip_name,
        RACK_LABEL: str(node.rack),
        SIMULATED_LABEL: "true",
    }
    if chip.super_pod:
        labels[SUPERPOD_LABEL] = str(node.rack)
    resources = {"cpu": "192", "memory": "1536Gi", "pods": "110", "ephemeral-storage": "3Ti",
                 RESOURCE: str(chip.chips_per_node)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node.name,
            "labels": labels,
            "annotations": {
                "kwok.x-k8s.io/node": "fake",
                "node.alpha.kubernetes.io/ttl": "0",
                NODE_INDEX_ANNOTATION: str(node.index),
                SERVER_INDEX_ANNOTATION: str(node.server_index),
                **device_plugin_node_annotations(node),
            },
        },
        "spec": {},
        "status": {
            "addresses": [{"type": "InternalIP", "address": node.ip}, {"type": "Hostname", "address": node.name}],
            "capacity": dict(resources),
            "allocatable": dict(resources),
        },
    }


def super_device_id(node: SimNode, chip_id: int) -> int:
    """A chip's id inside its super-pod (A3): the server's position in it times its chip count, plus the chip;
    0 where there are no super-pods (the driver reports none)."""
    chip = profile(node.chip)
    return node.server_index * chip.chips_per_node + chip_id if chip.super_pod else 0


def device_plugin_node_annotations(node: SimNode) -> dict[str, str]:
    """`baseDeviceInfos` (chip name → {"IP", "SuperDeviceID"}, as Go marshals the plugin's map: sorted keys),
    `superPodID` and `serverIndex` (-1 off super-pods, the simulation's "not part of one")."""
    chip = profile(node.chip)
    infos = {chip_name(i): {"IP": device_ip(node.index, i), "SuperDeviceID": super_device_id(node, i)}
             for i in range(chip.chips_per_node)}
    return {
        BASE_DEVICE_INFOS_ANNOTATION: json.dumps(dict(sorted(infos.items())), separators=(",", ":")),
        SUPER_POD_ID_ANNOTATION: str(node.rack if chip.super_pod else -1),
        SERVER_INDEX_ANNOTATION_MINDCLUSTER: str(node.server_index if chip.super_pod else -1),
    }


def deviceinfo_name(node_name_: str) -> str:
    return f"{DEVICEINFO_PREFIX}{node_name_}"


def _names(ids) -> str:
    return ",".join(chip_name(i) for i in sorted(ids))


def deviceinfo_data(node: SimNode, unhealthy: frozenset[int] = frozenset(), now: int = 0,
                    separated: frozenset[int] = frozenset()) -> dict[str, str]:
    """The ConfigMap data MindCluster's device plugin publishes: healthy chips, unhealthy ones, a check code."""
    chip = profile(node.chip)
    all_ids = range(chip.chips_per_node)
    faults = [{"fault_type": "CardUnhealthy", "npu_name": chip_name(i), "fault_level": "SeparateNPU",
               "fault_code": "80E01801"} for i in sorted(unhealthy)]
    device_list = {
        RESOURCE: _names(i for i in all_ids if i not in unhealthy),
        f"{RESOURCE}-Unhealthy": _names(unhealthy),
        f"{RESOURCE}-NetworkUnhealthy": "",
        f"{RESOURCE}-Recovering": "",
        f"{RESOURCE}-Fault": json.dumps(faults, separators=(",", ":")),
    }
    device_info = {"DeviceList": dict(sorted(device_list.items())), "UpdateTime": now}
    # MindCluster's CheckCode is the sha256 of the Go-marshalled DeviceInfo: sorted keys, no spaces.
    check_code = hashlib.sha256(json.dumps(device_info, separators=(",", ":")).encode()).hexdigest()
    payload = {"DeviceInfo": device_info, "SuperPodID": node.rack if chip.super_pod else -1,
               "ServerIndex": node.server_index, "RackID": node.rack, "CheckCode": check_code}
    return {DEVICEINFO_KEY: json.dumps(payload, separators=(",", ":")), SEPARATED_KEY: _names(separated)}


def deviceinfo_configmap(node: SimNode, unhealthy: frozenset[int] = frozenset(), now: int = 0) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": deviceinfo_name(node.name), "namespace": DEVICEINFO_NAMESPACE,
                     "labels": {"mx-consumer-cim": "true", SIMULATED_LABEL: "true"}},
        "data": deviceinfo_data(node, unhealthy, now),
    }


def _ids(names: str) -> set[int]:
    ids = set()
    for name in (names or "").split(","):
        name = name.strip()
        if name.startswith("Ascend910-") and name[len("Ascend910-"):].isdigit():
            ids.add(int(name[len("Ascend910-"):]))
    return ids


def unusable_chips(configmap_data: dict | None, lists: tuple[str, ...] = HEALTH_LISTS,
                   separated: bool = True) -> frozenset[int]:
    """Chips a deviceinfo ConfigMap marks unhealthy, network-unhealthy, recovering or separated by hand (`lists`
    and `separated` narrow it). Missing or unparsable data means no extra health information."""
    data = configmap_data or {}
    ids = _ids(data.get(SEPARATED_KEY, "")) if separated else set()
    try:
        device_list = json.loads(data.get(DEVICEINFO_KEY) or "{}")["DeviceInfo"]["DeviceList"]
    except (ValueError, KeyError, TypeError):
        return frozenset(ids)
    for suffix in lists:
        value = device_list.get(f"{RESOURCE}-{suffix}", "") if isinstance(device_list, dict) else ""
        ids |= _ids(value if isinstance(value, str) else "")
    return frozenset(ids)


def deviceinfo_domains(configmap_data: dict | None) -> tuple[int, int]:
    """(SuperPodID, RackID) of a deviceinfo ConfigMap; 0 for what is missing (Go's zero values)."""
    try:
        payload = json.loads((configmap_data or {}).get(DEVICEINFO_KEY) or "{}")
        return int(payload.get("SuperPodID") or 0), int(payload.get("RackID") or 0)
    except (ValueError, TypeError, AttributeError):
        return 0, 0


def reported_unhealthy(configmap_data: dict | None) -> frozenset[int]:
    """Only the Unhealthy list: what `dev-cluster fault --chip-unhealthy` maintains."""
    try:
        device_list = json.loads((configmap_data or {}).get(DEVICEINFO_KEY) or "{}")["DeviceInfo"]["DeviceList"]
        return frozenset(_ids(device_list.get(f"{RESOURCE}-Unhealthy", "")))
    except (ValueError, KeyError, TypeError, AttributeError):
        return frozenset()


def sim_node_from_manifest(node: dict) -> SimNode | None:
    """Recovers the SimNode of a Node this simulation created; None for any other Node."""
    metadata = node.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    labels = metadata.get("labels") or {}
    chip = profile_of_node(node)
    try:
        index = int(annotations[NODE_INDEX_ANNOTATION])
        server_index = int(annotations.get(SERVER_INDEX_ANNOTATION, "0"))
        rack = int(labels.get(RACK_LABEL, "0"))
    except (KeyError, ValueError):
        return None
    if chip is None:
        return None
    unreadable = frozenset(int(part) for part in str(annotations.get(UNREADABLE_IPS_ANNOTATION, "")).split(",")
                           if part.strip().isdigit())
    return SimNode(index=index, chip=chip.chip, rack=rack, server_index=server_index, unreadable_ips=unreadable,
                   straddle_rings=labels.get(STRADDLE_RINGS_LABEL) == "true")
