"""Pure side of the simulated device plugin: which chips a pod asks for and holds, which chips the kubelet (kubelet
mode) or the scheduler's annotation (Volcano mode) gives it, and the annotations MindCluster's Ascend device plugin
writes. Each rule cites the line of MindCluster's code (Ascend/mind-cluster @ 22bb3d98) it restates; the same list is
in docs/architecture.md, "The simulated device plugin".

The kubelet keeps the devices it allocated to a pod in its own checkpoint, which the pod-resources API serves and no
pod field shows. The simulation keeps that record on the pod as `sim.hybrid.ascend.dev/kubelet-devices`: kwok's
stages start a pod's containers once it is there (as a kubelet does right after Allocate), and a restarted plugin
rebuilds its ledger from it. The operator never reads it.
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ascend_hybrid.devcluster.nodes.manifests import (
    RESOURCE,
    SIM_PREFIX,
    ChipProfile,
    SimNode,
    chip_name,
    device_ip,
    profile,
    super_device_id,
)

CONFIG_ANNOTATION = "ascend.kubectl.kubernetes.io/ascend-910-configuration"
CHIPS_ANNOTATION = RESOURCE  # "Ascend910-2,Ascend910-3": Volcano's Ascend plugin writes it at bind
REAL_ANNOTATION = "huawei.com/AscendReal"  # the chips mounted, written with the configuration
KLT_ANNOTATION = "huawei.com/kltDev"  # the kubelet's device ids, written with the configuration
PREDICATE_TIME_ANNOTATION = "predicate-time"  # Volcano's bind time (UnixNano); MaxUint64 once a pod took its chips
MOUNTED = str(2**64 - 1)
KUBELET_DEVICES_ANNOTATION = f"{SIM_PREFIX}/kubelet-devices"  # the simulated kubelet's checkpoint: "0,3,5,6"
FINISHED_PHASES = ("Succeeded", "Failed")
UNEXPECTED_ADMISSION = "UnexpectedAdmissionError"
KUBELET, VOLCANO = "kubelet", "volcano"
MODES = (KUBELET, VOLCANO)
# -listWatchPeriod: default 5 s, accepted range [3, 1800] (ascend-device-plugin main.go:44-49, 161)
LIST_WATCH_PERIOD = 5
LIST_WATCH_PERIOD_RANGE = (3, 1800)


def list_watch_period(text: str) -> float:
    """An argparse type: the plugin's -listWatchPeriod, refused outside its range as the plugin refuses it."""
    value = float(text)
    low, high = LIST_WATCH_PERIOD_RANGE
    if not low <= value <= high:
        raise argparse.ArgumentTypeError(f"{text} is outside [{low}, {high}] (the plugin's -listWatchPeriod range)")
    return value


# doWithVolcanoSchedule looks for the pod 3 times, 1 s apart (plugin.go:887-906, common.GetPodFromInformerTime)
VOLCANO_TRIES, VOLCANO_TRY_SECONDS = 3, 1.0


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


def _annotations(pod: Mapping) -> Mapping[str, str]:
    return (pod.get("metadata") or {}).get("annotations") or {}


def _ids(text: str | None) -> tuple[int, ...] | None:
    """'0,3' or 'Ascend910-0,Ascend910-3' → (0, 3); None when empty or unparsable."""
    try:
        ids = tuple(sorted(int(part.strip().rsplit("-", 1)[-1]) for part in str(text or "").split(",")
                           if part.strip()))
    except ValueError:
        return None
    return ids or None


def kubelet_devices(pod: Mapping) -> tuple[int, ...] | None:
    """The chips the simulated kubelet allocated to the pod, or None before its admission."""
    return _ids(_annotations(pod).get(KUBELET_DEVICES_ANNOTATION))


def held_chips(pod: Mapping) -> tuple[int, ...] | None:
    """The chips a pod holds: the kubelet's record, else the device plugin's annotations (a pod admitted before the
    record existed); None when it holds none that anything says."""
    recorded = kubelet_devices(pod)
    if recorded is not None:
        return recorded
    annotations = _annotations(pod)
    raw = annotations.get(CONFIG_ANNOTATION)
    if raw:
        try:
            return tuple(sorted(int(d["device_id"]) for d in json.loads(raw)["devices"]))
        except (ValueError, KeyError, TypeError):
            pass
    return _ids(annotations.get(REAL_ANNOTATION))


def scheduler_chips(pod: Mapping) -> tuple[int, ...] | None:
    """The chips Volcano's Ascend plugin chose for the pod (`huawei.com/Ascend910`), or None."""
    return _ids(_annotations(pod).get(CHIPS_ANNOTATION))


# --- kubelet mode -------------------------------------------------------------------------------------------------

def kubelet_choice(chip: ChipProfile, free: Iterable[int], count: int, rng: random.Random,
                   straddle: bool = False) -> tuple[int, ...] | None:
    """The chips the kubelet allocates: the Ascend plugin answers GetPreferredAllocation with "not support"
    (plugin.go:1394-1397) and its DevicePluginOptions leave GetPreferredAllocationAvailable false (plugin.go:1400-1403),
    so the kubelet's devicemanager takes `count` devices of the free set in a Go map's order: any of them. `rng` stands
    for that order, seeded so a run can be repeated. `straddle` (a test's fault) takes chips from both 910A HCCS rings
    whenever the free chips allow it. None when fewer than `count` are free."""
    pool = sorted(free)
    if count < 1 or count > len(pool):
        return None
    if straddle and chip.ring_size and count >= 2:
        rings = [[i for i in pool if i // chip.ring_size == ring] for ring in range(chip.chips_per_node // chip.ring_size)]
        spread = _spread(rings, count)
        if spread is not None:
            return spread
    return tuple(sorted(rng.sample(pool, count)))


def _spread(rings: list[list[int]], count: int) -> tuple[int, ...] | None:
    """`count` chips with at least one in each of two rings, lowest ids first; None when one ring alone holds them."""
    filled = [ring for ring in rings if ring]
    if len(filled) < 2:
        return None
    first, second = filled[0], filled[1]
    take_first = min(len(first), count - 1)
    take_second = count - take_first
    if take_second > len(second):
        return None
    return tuple(sorted(first[:take_first] + second[:take_second]))


def straddles_rings(chip: ChipProfile, chips: Iterable[int]) -> bool:
    """Whether a pod's chips sit in more than one 910A HCCS ring although they would fit in one."""
    ids = list(chips)
    if not chip.ring_size or len(ids) > chip.ring_size:
        return False
    return len({i // chip.ring_size for i in ids}) > 1


# --- Volcano mode -------------------------------------------------------------------------------------------------

def whole_node_request(chip: ChipProfile, count: int) -> bool:
    """Allocate skips the annotation path when a pod asks for every chip of the node (presetVirtualDevice, the
    default): `len(allocateDevices) != len(allNPUInfo.AllDevs)` is false (plugin.go:1337-1340)."""
    return count == chip.chips_per_node


def _predicate_time(pod: Mapping) -> int:
    """getPredicateTimeFromPodAnnotation (plugin.go:425-441): absent or unparsable counts as MaxUint64."""
    try:
        value = int(str(_annotations(pod).get(PREDICATE_TIME_ANNOTATION)))
    except ValueError:
        return 2**64 - 1
    return value if 0 <= value < 2**64 else 2**64 - 1


def _may_mount(pod: Mapping, count: int) -> bool:
    """FilterPods (common.go:382-397) and checkAnnotationAllocateValid (plugin.go:765-790): a pod asking for NPUs,
    carrying the scheduler's chip annotation with as many chips as the kubelet asks for, not terminating, not refused
    (UnexpectedAdmissionError), not already mounted (predicate-time MaxUint64)."""
    metadata = pod.get("metadata") or {}
    status = pod.get("status") or {}
    if requested_chips(dict(pod)) == 0 or metadata.get("deletionTimestamp") or is_finished(dict(pod)):
        return False
    if status.get("reason") == UNEXPECTED_ADMISSION or _annotations(pod).get(PREDICATE_TIME_ANNOTATION) == MOUNTED:
        return False
    chips = scheduler_chips(pod)
    return chips is not None and len(chips) == count


def volcano_candidate(pods_on_node: Iterable[Mapping], count: int) -> Mapping | None:
    """The pod whose annotation Allocate mounts, whichever pod the kubelet is admitting (the request carries no pod
    identity): of the pods that may be mounted, the smallest predicate-time, the first listed on a tie
    (getOldestPod, plugin.go:443-462). None: "not get valid pod" (plugin.go:911-913)."""
    oldest = None
    for pod in pods_on_node:
        if _may_mount(pod, count) and (oldest is None or _predicate_time(pod) < _predicate_time(oldest)):
            oldest = pod
    return oldest


def unexpected_admission(why: str) -> dict:
    """The status the kubelet gives a pod whose Allocate failed: terminal, never retried on that node (kubelet
    devicemanager/topologymanager: "Allocate failed due to %v, which is unexpected")."""
    return {"phase": "Failed", "reason": UNEXPECTED_ADMISSION,
            "message": f"Allocate failed due to {why}, which is unexpected"}


NOT_GET_VALID_POD = "not get valid pod"


# --- the annotations ---------------------------------------------------------------------------------------------

NO_DOMAIN = -1  # the plugin's DefaultSuperPodID / DefaultRackID / DefaultServerIndex: "not part of one"


def configuration(pod_name: str, pod_uid: str, node: SimNode, chips: tuple[int, ...]) -> str:
    """The configuration annotation in the device plugin's shape (pkg/common/proto.go:134-152, filled by
    pkg/device/ascendcommon.go getConfigAnno): server_id is the pod's UID, host_ip and server_ip the node's IP, then
    super_pod_id, rack_id and server_index, in the field order of Go's json.Marshal; a chip whose IP cannot be read
    gets "-1" (ascend-common api.DeviceIPErrorCodeStr)."""
    chip = profile(node.chip)
    devices = []
    for chip_id in chips:
        ip = "-1" if chip_id in node.unreadable_ips else device_ip(node.index, chip_id)
        device = {"device_id": str(chip_id), "device_ip": ip}
        if chip.super_pod:
            device["super_device_id"] = str(super_device_id(node, chip_id))
        devices.append(device)
    config = {"pod_name": pod_name, "server_id": pod_uid, "host_ip": node.ip,
              "super_pod_id": node.rack if chip.super_pod else NO_DOMAIN, "devices": devices,
              "rack_id": node.rack, "server_index": str(node.server_index if chip.super_pod else NO_DOMAIN),
              "server_ip": node.ip}
    return json.dumps(config, separators=(",", ":"))


def device_annotations(pod_name: str, pod_uid: str, node: SimNode, chips: tuple[int, ...]) -> dict[str, str]:
    """What the device plugin's periodic loop writes on an allocated pod (AddPodAnnotation, ascendcommon.go:988-1040):
    `huawei.com/kltDev` (the kubelet's ids), `huawei.com/AscendReal` (the chips mounted) and the configuration. In
    both modes the plugin reports the physical chips to the kubelet here, so the two lists agree."""
    names = ",".join(chip_name(i) for i in sorted(chips))
    return {KLT_ANNOTATION: names, REAL_ANNOTATION: names,
            CONFIG_ANNOTATION: configuration(pod_name, pod_uid, node, chips)}


def needs_annotation(pod: Mapping, mode: str, chip: ChipProfile) -> bool:
    """Whether the periodic loop writes the pod's annotations now: allocated, and no `huawei.com/AscendReal` yet
    ("The field AscendReal exists; device plugin skips writing the annotation", manager.go:1293-1297). In Volcano
    mode a pod mounted without the annotation path (a whole node) has no real-device mapping and is skipped
    (GetKltAndRealAllocateDev, plugin.go:690-694): it is never annotated."""
    devices = kubelet_devices(pod)
    if devices is None or REAL_ANNOTATION in _annotations(pod):
        return False
    return not (mode == VOLCANO and whole_node_request(chip, len(devices)))


def kubelet_rejection(requested: int, used: int, capacity: int) -> dict:
    """The status a kubelet gives a pod its admission refuses for want of chips (pkg/kubelet rejectPod with the
    resource fit's reason and message): Failed before any container, never retried on that node."""
    message = (f"Node didn't have enough resource: {RESOURCE}, requested: {requested}, used: {used}, "
               f"capacity: {capacity}")
    return {"phase": "Failed", "reason": f"OutOf{RESOURCE}", "message": f"Pod was rejected: {message}"}


@dataclass
class ChipLedger:
    """Who holds which chips on which node, and which chips are out of service (the kubelet's view)."""

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

    def used_count(self, node_name: str) -> int:
        """Chips the kubelet counts allocated: it knows counts, not which physical chip a Volcano pod mounted."""
        return sum(len(chips) for name, chips in self.holders.values() if name == node_name)

    def hold(self, uid: str, node_name: str, chips: tuple[int, ...]) -> None:
        self.holders[uid] = (node_name, tuple(chips))

    def release(self, uid: str) -> tuple[str, tuple[int, ...]] | None:
        return self.holders.pop(uid, None)

    def fits(self, node_name: str, count: int) -> bool:
        """The kubelet's admission by count: the node's usable chips less those allocated cover the request."""
        return len(self.usable(node_name)) - self.used_count(node_name) >= count


def pod_rng(seed: int, uid: str) -> random.Random:
    """The kubelet's map order for one pod: the same seed and pod give the same chips, whatever came before."""
    return random.Random(f"{seed}/{uid}")
