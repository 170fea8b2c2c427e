"""Pure side of the simulated device plugin: which chips a pod asks for and holds, which free chips it gets,
and the annotations the Ascend device plugin writes (design §5 and §7).

The annotations on the pods are the source of truth, so a restarted plugin rebuilds its ledger from them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ascend_hybrid.devcluster.nodes.manifests import (
    RESOURCE,
    ChipProfile,
    SimNode,
    chip_name,
    device_ip,
    profile,
    super_device_id,
)

CONFIG_ANNOTATION = "ascend.kubectl.kubernetes.io/ascend-910-configuration"
CHIPS_ANNOTATION = RESOURCE  # "Ascend910-2,Ascend910-3"
FINISHED_PHASES = ("Succeeded", "Failed")


def _quantity(value) -> int:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return 0


def _container_chips(container: dict) -> int:
    resources = container.get("resources") or {}
    limits = resources.get("limits") or {}
    requests = resources.get("requests") or {}
    return _quantity(limits.get(RESOURCE, requests.get(RESOURCE, 0)))


def requested_chips(pod: dict) -> int:
    """NPUs a pod needs at once: the app containers together, or the largest init container if bigger."""
    spec = pod.get("spec") or {}
    running = sum(_container_chips(c) for c in spec.get("containers") or [])
    init = max((_container_chips(c) for c in spec.get("initContainers") or []), default=0)
    return max(running, init)


def is_finished(pod: dict) -> bool:
    return (pod.get("status") or {}).get("phase") in FINISHED_PHASES


def held_chips(pod: dict) -> tuple[int, ...] | None:
    """The chip ids a pod's device annotations name, or None when it carries none (or they do not parse)."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    raw = annotations.get(CONFIG_ANNOTATION)
    if raw:
        try:
            return tuple(sorted(int(d["device_id"]) for d in json.loads(raw)["devices"]))
        except (ValueError, KeyError, TypeError):
            pass
    names = annotations.get(CHIPS_ANNOTATION)
    if names:
        try:
            return tuple(sorted(int(n.strip().rsplit("-", 1)[1]) for n in names.split(",") if n.strip()))
        except (ValueError, IndexError):
            return None
    return None


def choose_chips(chip: ChipProfile, free: set[int] | frozenset[int], count: int) -> tuple[int, ...] | None:
    """Distinct free chip ids for a pod of `count` chips, or None when they do not fit.

    910A: a pod of ≤ ring-size chips stays inside one HCCS ring, taking the ring with the fewest free chips that
    still fits (best fit keeps whole rings for bigger pods). Otherwise the lowest free ids, deterministically.
    """
    if count < 1 or count > len(free):
        return None
    if chip.ring_size and count <= chip.ring_size:
        rings = []
        for start in range(0, chip.chips_per_node, chip.ring_size):
            ring_free = sorted(i for i in free if start <= i < start + chip.ring_size)
            if len(ring_free) >= count:
                rings.append((len(ring_free), start, ring_free))
        if not rings:
            return None
        return tuple(min(rings)[2][:count])
    return tuple(sorted(free)[:count])


NO_DOMAIN = -1  # the plugin's DefaultSuperPodID / DefaultRackID / DefaultServerIndex: "not part of one"


def device_annotations(pod_name: str, pod_uid: str, node: SimNode, chips: tuple[int, ...]) -> dict[str, str]:
    """What the Ascend device plugin writes on a pod once it has allocated its chips, in its current shape
    (ascend-device-plugin pkg/common/proto.go Instance, filled by pkg/device/ascendcommon.go getConfigAnno):
    server_id is the pod's UID, host_ip and server_ip the node's IP, then super_pod_id, rack_id and server_index,
    in the field order of Go's json.Marshal."""
    chip = profile(node.chip)
    devices = []
    for chip_id in chips:
        # "-1": what the plugin writes for a chip whose IP it could not read (ascend-common DeviceIPErrorCodeStr)
        ip = "-1" if chip_id in node.unreadable_ips else device_ip(node.index, chip_id)
        device = {"device_id": str(chip_id), "device_ip": ip}
        if chip.super_pod:
            device["super_device_id"] = str(super_device_id(node, chip_id))
        devices.append(device)
    configuration = {"pod_name": pod_name, "server_id": pod_uid, "host_ip": node.ip,
                     "super_pod_id": node.rack if chip.super_pod else NO_DOMAIN, "devices": devices,
                     "rack_id": node.rack, "server_index": str(node.server_index if chip.super_pod else NO_DOMAIN),
                     "server_ip": node.ip}
    return {
        CONFIG_ANNOTATION: json.dumps(configuration, separators=(",", ":")),
        CHIPS_ANNOTATION: ",".join(chip_name(i) for i in chips),
    }


def kubelet_rejection(requested: int, used: int, capacity: int) -> dict:
    """The status a kubelet gives a pod its admission refuses for want of chips (pkg/kubelet rejectPod with the
    resource fit's reason and message): Failed before any container, never retried on that node."""
    message = (f"Node didn't have enough resource: {RESOURCE}, requested: {requested}, used: {used}, "
               f"capacity: {capacity}")
    return {"phase": "Failed", "reason": f"OutOf{RESOURCE}", "message": f"Pod was rejected: {message}"}


@dataclass
class ChipLedger:
    """Who holds which chips on which node, and which chips are out of service."""

    nodes: dict[str, SimNode] = field(default_factory=dict)
    unusable: dict[str, frozenset[int]] = field(default_factory=dict)
    holders: dict[str, tuple[str, tuple[int, ...]]] = field(default_factory=dict)  # pod uid → (node, chips)

    def taken(self, node_name: str) -> set[int]:
        return {i for name, chips in self.holders.values() if name == node_name for i in chips}

    def usable(self, node_name: str) -> set[int]:
        """The node's chips in service: what a real device plugin reports healthy, the node's allocatable."""
        node = self.nodes.get(node_name)
        if node is None:
            return set()
        return set(range(profile(node.chip).chips_per_node)) - set(self.unusable.get(node_name, frozenset()))

    def free(self, node_name: str) -> set[int]:
        return self.usable(node_name) - self.taken(node_name)

    def hold(self, uid: str, node_name: str, chips: tuple[int, ...]) -> None:
        self.holders[uid] = (node_name, tuple(chips))

    def release(self, uid: str) -> tuple[str, tuple[int, ...]] | None:
        return self.holders.pop(uid, None)

    def allocate(self, uid: str, node_name: str, count: int) -> tuple[int, ...] | None:
        """Picks and holds chips for a pod, or None when the node is unknown or has too few free chips."""
        if uid in self.holders:
            return self.holders[uid][1]
        node = self.nodes.get(node_name)
        if node is None:
            return None
        chips = choose_chips(profile(node.chip), self.free(node_name), count)
        if chips is not None:
            self.hold(uid, node_name, chips)
        return chips
