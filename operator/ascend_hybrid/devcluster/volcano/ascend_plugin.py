"""Pure rules of the simulated cluster's stand-in for Huawei's Ascend plugin for Volcano (MindCluster
component/ascend-for-volcano, "the plugin" below; it cannot be built from Go modules): which chips a pod gets
inside the node Volcano bound it to, and the annotations the plugin writes on the pod at bind.

Each rule restates the plugin's code; the file:line after it is in Ascend/mind-cluster @ 22bb3d98, under
component/ascend-for-volcano/ (docs/architecture.md, "The simulated Volcano", lists them all). Where the plugin
leaves a choice to Go's map order (A3 dies with equal free counts), the stand-in takes the lowest ids.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum

RESOURCE = "huawei.com/Ascend910"
CHIP_PREFIX = "Ascend910-"  # util.NPU910CardNamePre, common/util/constants.go:34
CHIPS_ANNOTATION = RESOURCE  # what SetNPUTopologyToPodFn writes, internal/npu/base/task.go:77
REAL_CHIPS_ANNOTATION = "huawei.com/AscendReal"  # util.AscendNPUPodRealUse, written at internal/npu/base/task.go:131
PREDICATE_TIME_ANNOTATION = "predicate-time"  # util.PodPredicateTime, common/util/type.go:197
CONFIG_ANNOTATION = "ascend.kubectl.kubernetes.io/ascend-910-configuration"  # util.Pod910DeviceKey
OPERATOR_NAME_LABEL = "training.kubeflow.org/operator-name"  # common/util/type.go:226
SCHEDULE_POLICY_ANNOTATION = "huawei.com/schedule_policy"  # common/util/constants.go:87
SP_BLOCK_ANNOTATION = "sp-block"  # common/util/type.go:218
SKIP_PLUGIN_ANNOTATION = "huawei.com/skip-ascend-plugin"  # internal/npu/ascend910/ascend910a3/type.go:53
ACCELERATOR_TYPE_SELECTOR = "accelerator-type"  # common/util/type.go:108
GROUP_NAME_ANNOTATION = "scheduling.k8s.io/group-name"
# Node annotations the Ascend device plugin writes (ascend-device-plugin pkg/server/manager.go:258-285) and the
# plugin reads (plugin/node.go:228,237).
BASE_DEVICE_INFOS_ANNOTATION = "baseDeviceInfos"
SUPER_POD_ID_ANNOTATION = "superPodID"
SERVER_INDEX_ANNOTATION = "serverIndex"
SCHEDULER_NAME = "volcano"
RING_SIZE = 4  # module910x8 npuNumPerHccs, internal/npu/ascend910/ascend910old/module910x8/type.go:38
DIE_SIZE = 2  # ascend910a3.DieNPUNumber, internal/npu/ascend910/ascend910a3/type.go:39


class Rule(Enum):
    """How a handler picks chips inside a node."""

    HCCS_RINGS = "hccs-rings"  # 910A: inside one 4-chip ring, by the README's priority table
    LOWEST_FREE = "lowest-free"  # 910B module-910b-8: the lowest free ids
    WHOLE_DIES = "whole-dies"  # A3: whole 2-chip dies, fullest die first; one chip from the fullest die


@dataclass(frozen=True)
class Handler:
    """One of the plugin's chip handlers (internal/npu/factory.go:112-172)."""

    name: str  # the plugin's handler name
    chips_per_node: int  # MaxNodeNPUNum
    invalid_counts: frozenset[int]  # NpuNumInvalidMap
    rule: Rule


MODULE_910 = Handler("huawei.com/Ascend910module", 8, frozenset({3, 5, 6, 7}), Rule.HCCS_RINGS)  # module910x8/frame.go:37-56
MODULE_910B_8 = Handler("huawei.com/Ascend910module-910b-8", 8, frozenset(), Rule.LOWEST_FREE)  # factory.go:138-142
MODULE_A3_16 = Handler("huawei.com/Ascend910module-a3-16", 16, frozenset(), Rule.WHOLE_DIES)  # module910a3x16/frame.go:36-46
SUPER_POD_A3_16 = Handler("huawei.com/Ascend910module-a3-16-super-pod", 16, frozenset(), Rule.WHOLE_DIES)  # factory.go:118-120
HANDLERS = (MODULE_910, MODULE_910B_8, MODULE_A3_16, SUPER_POD_A3_16)
# huawei.com/schedule_policy → handler, the policies whose handler the stand-in restates (factory.go:49-66)
POLICY_HANDLERS = {"chip8-node8": MODULE_910B_8, "chip2-node16": MODULE_A3_16, "chip2-node16-sp": SUPER_POD_A3_16,
                   "module-a3-16": MODULE_A3_16}
BY_NAME = {handler.name: handler for handler in HANDLERS}


def job_annotations(podgroup: Mapping[str, str], pod: Mapping[str, str]) -> dict[str, str]:
    """The job's annotations as the plugin reads them (getJobAnnotationFromJobInfo, plugin/job.go:211-232): the
    PodGroup's, and a pod's `sp-block` and `huawei.com/schedule_policy` where the PodGroup has none (the plugin
    takes a few more keys, plugin/type.go:100-108, that no rule here reads)."""
    merged = dict(podgroup)
    for key in (SP_BLOCK_ANNOTATION, SCHEDULE_POLICY_ANNOTATION):
        if key not in merged and key in pod:
            merged[key] = pod[key]
    return merged


def handler_for(annotations: Mapping[str, str], node_selector: Mapping[str, str]) -> Handler | str:
    """The handler the plugin picks for a job (get910CardHandlerName, internal/npu/factory.go:220-245): its
    `huawei.com/schedule_policy`, else `sp-block` → the A3 super-pod handler, else its pods' nodeSelector
    `accelerator-type` (none: the 910A `module` handler). `annotations`: job_annotations(). Returns the handler,
    or the name of one the stand-in does not restate."""
    policy = annotations.get(SCHEDULE_POLICY_ANNOTATION)
    if policy in POLICY_HANDLERS:
        return POLICY_HANDLERS[policy]
    if SP_BLOCK_ANNOTATION in annotations:
        wanted = node_selector.get(ACCELERATOR_TYPE_SELECTOR)
        return SUPER_POD_A3_16 if wanted != "module-a3-8-super-pod" else "huawei.com/Ascend910module-a3-8-super-pod"
    accelerator = node_selector.get(ACCELERATOR_TYPE_SELECTOR)
    if accelerator is None:
        return MODULE_910
    name = RESOURCE + ("card" if "card" in accelerator else accelerator)
    return BY_NAME.get(name, name)


def count_problem(handler: Handler, count: int, npu_tasks: int) -> str | None:
    """Why the plugin refuses a job whose pods ask for `count` chips each (None: it does not). The handlers'
    ValidNPUJob: internal/npu/base/frame.go:108-129 (1..MaxNodeNPUNum, not in NpuNumInvalidMap) and, on A3,
    internal/npu/ascend910/ascend910a3/module910a3x16/frame.go:62-108 (one chip only for a job of one NPU pod,
    else an even count)."""
    if count < 1 or count > handler.chips_per_node or count in handler.invalid_counts:
        allowed = [n for n in range(1, handler.chips_per_node + 1) if n not in handler.invalid_counts]
        return f"{handler.name} takes {','.join(map(str, allowed))} chips per pod, not {count}"
    if handler.rule is Rule.WHOLE_DIES and count == 1 and npu_tasks != 1:
        return f"{handler.name}: only a job of one NPU pod may ask for a single chip"
    if handler.rule is Rule.WHOLE_DIES and count > 1 and count % DIE_SIZE:
        return f"{handler.name}: a pod asks for an even number of chips, not {count}"
    return None


def is_distributed(handler: Handler, npu_tasks: int, annotations: Mapping[str, str]) -> bool:
    """Whether the plugin treats the job as distributed, which keeps its pods off NetworkUnhealthy chips: more
    than one NPU pod (`tp.NPUTaskNum > 1`, e.g. internal/npu/base/frame.go:295); on the A3 super-pod handler, more
    than one logical super-pod's worth of them (NPUTaskNum / spBlock, superpod/frame.go:126-145, 1162)."""
    if handler is not SUPER_POD_A3_16:
        return npu_tasks > 1
    try:
        sp_block = int(annotations.get(SP_BLOCK_ANNOTATION, "0"))
    except ValueError:
        sp_block = 0
    nodes_per_block = max(1, sp_block // handler.chips_per_node)
    return npu_tasks // nodes_per_block > 1


# Ring free counts in the order a ≤ 4-chip 910A pod prefers them (getNPUAllocPriorityArray,
# internal/npu/ascend910/ascend910old/module910x8/task.go:54-81; the README's affinity table, README.md:36).
RING_PRIORITIES = {1: (1, 3, 2, 4), 2: (2, 4, 3), 4: (4,)}


def choose_in_rings(free: Iterable[int], count: int, chips_per_node: int = 8) -> tuple[int, ...] | None:
    """910A (module910x8 selectNPUFromNode, internal/npu/ascend910/ascend910old/module910x8/frame.go:159-198):
    a whole-node pod takes all 8 chips, and only when all 8 are free; a pod of 1, 2 or 4 takes the lowest free
    ids of the first ring whose free count is the first of its priorities (ring 0-3 before ring 4-7 at each)."""
    ordered = sorted(free)
    if count == chips_per_node:
        return tuple(ordered) if len(ordered) == chips_per_node else None
    rings = ([c for c in ordered if c < RING_SIZE], [c for c in ordered if RING_SIZE <= c < 2 * RING_SIZE])
    for wanted in RING_PRIORITIES.get(count, ()):
        for ring in rings:
            if len(ring) == wanted:
                return tuple(ring[:count])
    return None


def choose_lowest(free: Iterable[int], count: int) -> tuple[int, ...] | None:
    """910B module-910b-8 (the base handler's SelectNPUFromNode, internal/npu/base/frame.go:284-304): the first
    `count` of the free chips in ascending order (GetUsableTopFromNode sorts them, internal/npu/base/node.go:49-51)."""
    ordered = sorted(free)
    return tuple(ordered[:count]) if count >= 1 and len(ordered) >= count else None


def choose_whole_dies(free: Iterable[int], count: int) -> tuple[int, ...] | None:
    """A3 (Base910A3, internal/npu/ascend910/ascend910a3/base.go:47-123): a pod of more than one chip needs as
    many chips on whole free dies (JudgeNodeAndTaskNPU); it takes every free chip when that is exactly its count,
    else whole dies in order of their free count; a one-chip pod takes the first chip of the die with the fewest
    free chips (a half-used die first). Ties between dies: lowest die first (the plugin: Go's map order)."""
    ordered = sorted(free)
    if count < 1 or len(ordered) < count:
        return None
    dies: dict[int, list[int]] = {}
    for chip in ordered:
        dies.setdefault(chip // DIE_SIZE, []).append(chip)
    whole = [chips for chips in dies.values() if len(chips) == DIE_SIZE]
    if count > 1 and len(whole) * DIE_SIZE < count:
        return None
    if len(ordered) == count:
        return tuple(ordered)
    by_fullness = sorted(dies.items(), key=lambda item: (len(item[1]), item[0]))
    if count == 1:
        return (by_fullness[0][1][0],)
    selected: list[int] = []
    for _, chips in by_fullness:
        if len(selected) >= count:
            break
        if len(chips) == DIE_SIZE:
            selected.extend(chips)
    return tuple(sorted(selected))


def choose_chips(handler: Handler, free: Iterable[int], count: int) -> tuple[int, ...] | None:
    """The chips the handler gives a pod of `count` chips out of the node's `free` ones, or None when none fit."""
    if handler.rule is Rule.HCCS_RINGS:
        return choose_in_rings(free, count, handler.chips_per_node)
    if handler.rule is Rule.WHOLE_DIES:
        return choose_whole_dies(free, count)
    return choose_lowest(free, count)


def chip_ids(names: str | None) -> frozenset[int]:
    """The ids in a chip list such as "Ascend910-0,Ascend910-3" (other names, e.g. virtual chips, are skipped)."""
    ids = set()
    for name in (names or "").split(","):
        suffix = name.strip()[len(CHIP_PREFIX):] if name.strip().startswith(CHIP_PREFIX) else ""
        if suffix.isdigit():
            ids.add(int(suffix))
    return frozenset(ids)


def chip_list(chips: Iterable[int]) -> str:
    """The annotation's form of a chip list, in the order given (util.ChangeIntArrToStr)."""
    return ",".join(f"{CHIP_PREFIX}{chip}" for chip in chips)


def used_chips(annotations: Mapping[str, str]) -> frozenset[int]:
    """The chips an active pod holds as the plugin counts them (getActivePodUsedDev, common/util/util.go:345-360):
    `huawei.com/AscendReal`, else `huawei.com/Ascend910`."""
    return chip_ids(annotations.get(REAL_CHIPS_ANNOTATION) or annotations.get(CHIPS_ANNOTATION))


def base_device_infos(raw: str | None) -> dict[str, dict] | None:
    """The node's `baseDeviceInfos` annotation (chip name → {"IP", "SuperDeviceID", …}), None when absent or
    unparsable (the plugin then treats the node as having no chips it maintains, common/k8s/cmmgr.go:391-395)."""
    try:
        parsed = json.loads(raw) if raw else None
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def node_chips(infos: Mapping[str, dict]) -> frozenset[int]:
    """The whole chips a node's baseDeviceInfos names (GetNodeDevListFromAnno skips virtual ones,
    common/util/util.go:299-322)."""
    return chip_ids(",".join(name for name in infos if name.count("-") == 1))


def free_chips(infos: Mapping[str, dict], used: Iterable[int], unhealthy: Iterable[int],
               network_unhealthy: Iterable[int], distributed: bool) -> frozenset[int]:
    """With self-maintain-available-card (the shipped default): the node's chips less those active pods hold and
    those its deviceinfo lists Unhealthy or Recovering (initNodeDeviceInfoByCmMgr, common/k8s/cmmgr.go:396-406);
    for a job of more than one NPU pod, less the NetworkUnhealthy ones too (GetUsableTopFromNode,
    internal/npu/base/node.go:49-61)."""
    excluded = set(used) | set(unhealthy) | (set(network_unhealthy) if distributed else set())
    return frozenset(node_chips(infos) - excluded)


@dataclass(frozen=True)
class NodeFacts:
    """What the plugin knows of a node when it writes the configuration (plugin/node.go:219-237, 395-403)."""

    address: str  # the InternalIP
    allocatable: int  # the node's allocatable huawei.com/Ascend910
    base_device_infos: str | None  # the raw annotation
    super_pod_id: int  # the deviceinfo's SuperPodID
    rack_id: int  # the deviceinfo's RackID
    server_index: str  # the node's serverIndex annotation ("" when absent)


def bind_annotations(pod_name: str, pod_uid: str, pod_labels: Mapping[str, str], node: NodeFacts,
                     chips: Iterable[int], now_ns: int) -> dict[str, str]:
    """The annotations the plugin writes on a pod it placed (SetNPUTopologyToPodFn, internal/npu/base/task.go:61-86):
    the chips and `predicate-time`; and, when the pod takes all of the node's chips or carries the label
    training.kubeflow.org/operator-name, and the node has baseDeviceInfos, `huawei.com/AscendReal` and the
    configuration (setRealUsedNpuToPod, task.go:88-138) in the plugin's key order (common/util/type.go:397-415)."""
    chosen = list(chips)
    annotations = {CHIPS_ANNOTATION: chip_list(chosen), PREDICATE_TIME_ANNOTATION: str(now_ns)}
    configuration = _configuration(pod_name, pod_uid, pod_labels, node, chosen)
    if configuration is not None:
        annotations[REAL_CHIPS_ANNOTATION] = chip_list(chosen)
        annotations[CONFIG_ANNOTATION] = configuration
    return annotations


def _configuration(pod_name: str, pod_uid: str, pod_labels: Mapping[str, str], node: NodeFacts,
                   chips: list[int]) -> str | None:
    labelled = OPERATOR_NAME_LABEL in pod_labels
    if not labelled and (len(chips) != node.allocatable or not node.base_device_infos):
        return None
    infos = base_device_infos(node.base_device_infos)
    if infos is None or (not labelled and len(infos) != len(chips)):
        return None
    devices = []
    for chip in sorted(chips):
        info = infos.get(f"{CHIP_PREFIX}{chip}")
        if not isinstance(info, dict):
            return None  # the plugin would dereference a missing entry; nothing sensible to write
        device = {"device_id": str(chip), "device_ip": str(info.get("IP", "")),
                  "super_device_id": str(int(info.get("SuperDeviceID") or 0))}
        if info.get("levelList"):
            device["levelList"] = info["levelList"]
        devices.append(device)
    instance = {"pod_name": pod_name, "server_id": pod_uid, "server_ip": node.address, "host_ip": node.address,
                "super_pod_id": node.super_pod_id, "rack_id": node.rack_id, "devices": devices,
                "server_index": node.server_index}
    return json.dumps(instance, separators=(",", ":"))
