"""Volcano's contract, the operator's side (pure): the wire names of a PodGroup and of the pods Volcano schedules
for it, what MindCluster's ascend-operator puts there for Huawei's Ascend plugin for Volcano to read, and what a
PodGroup's status says about its gang (docs/install.md, "On a MindCluster cluster with Volcano").

A job in Volcano mode (`uses_volcano`) runs each attempt as one PodGroup `<job>-a<attempt>` (names.pod_group) of
minMember = every pod. Its pods carry `schedulerName: volcano`, the group and task annotations, and the kubeflow
labels MindCluster's ascend-operator gives its pods (kubeflow/common GenLabels): MindCluster's device plugin and
clusterd find the job by job-name. The PodGroup carries what the plugin reads to choose its handler and affinities
(ascend-operator pkg/controllers/v1/job.go:265-311; ascend-for-volcano internal/npu/factory.go:220-252):
`ring-controller.atlas`, `framework`, `huawei.com/schedule_policy`, `sp-block` on A3 super-pods and `tor-affinity`
when asked.

One kubeflow label is left out on purpose: `training.kubeflow.org/operator-name`. With it the Ascend plugin writes
the chips it chose as the pod's configuration annotation at bind (ascend-for-volcano internal/npu/base/task.go:88-138),
and the device plugin never writes it again (ascend-device-plugin pkg/server/manager.go:675-691). But the device
plugin mounts, at Allocate, the chips of the node's oldest annotated pod, whichever pod is being admitted
(pkg/server/plugin.go:879-932): two pods of one node admitted in another order than Volcano bound them swap chips,
and the annotation would name chips the pod does not hold. Without the label the device plugin writes the
annotation from the kubelet's allocation, after Allocate (within its listWatchPeriod): the rank table always names
the mounted chips. A pod that takes a whole node (no swap is possible) is annotated at bind either way.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal

from ascend_hybrid.contracts import names
from ascend_hybrid.contracts.ascend import ACCELERATOR_TYPE_LABEL, chip_type_of, node_labels

GROUP = "scheduling.volcano.sh"
VERSION = "v1beta1"
PODGROUPS = "podgroups"
KIND = "PodGroup"
SCHEDULER_NAME = "volcano"
DEFAULT_QUEUE = "default"  # the Queue Volcano's scheduler creates at its start
GROUP_NAME_ANNOTATION = "scheduling.k8s.io/group-name"
TASK_SPEC_ANNOTATION = "volcano.sh/task-spec"
TASK = "worker"  # one replica type: every pod of the gang is a worker of one task (minTaskMember)

# kubeflow/common GenLabels, as MindCluster's ascend-operator sets them (pkg/controllers/v1/pod.go:789-812), but
# operator-name (see above)
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"

# what the Ascend plugin reads on the PodGroup (ascend-for-volcano common/util/type.go:209-218, constants.go:87)
RING_CONTROLLER_LABEL = "ring-controller.atlas"
FRAMEWORK_LABEL = "framework"
FRAMEWORK = "mindspore"
TOR_AFFINITY_LABEL = "tor-affinity"
TOR_AFFINITIES = ("normal-schema", "large-model-schema")
SCHEDULE_POLICY_ANNOTATION = "huawei.com/schedule_policy"
SP_BLOCK_ANNOTATION = "sp-block"
SUPER_POD_CHIPS_PER_POD = 16  # a logical super-pod job's pods take whole A3 nodes (MindCluster's docs)

# the chip generation → ring-controller.atlas (docs/en/scheduling/api/volcano.md: ascend-910, ascend-{xxx}b)
_RING_CONTROLLERS = {"910A": "ascend-910", "910B": "ascend-910b", "A3": "ascend-910b"}
# the chip generation → huawei.com/schedule_policy (volcano.md Table 3); 910A has none: the plugin's default
# handler is 910A's `module`
_SCHEDULE_POLICIES = {"910B": "chip8-node8", "A3": "chip2-node16"}
A3_SUPER_POD_POLICY = "chip2-node16-sp"


def uses_volcano(scheduler_name: str | None, options_set: bool, kueue_queue: str | None,
                 default_scheduler: str | None) -> bool:
    """Whether a job runs through Volcano: its spec.scheduling.schedulerName says volcano, or it sets Volcano's
    options, or it names no scheduler and no Kueue queue under an operator whose --scheduler is volcano."""
    if scheduler_name:
        return scheduler_name == SCHEDULER_NAME
    if options_set:
        return True
    return not kueue_queue and default_scheduler == SCHEDULER_NAME


def ring_controller(chip: str) -> str:
    return _RING_CONTROLLERS[chip]


def sp_block(chip: str, per_pod: int, world_size: int, asked: int | None) -> int | None:
    """The chips per logical super-pod an A3 job of whole-node pods asks for (the job's own chips when it names
    none: one logical super-pod, as the plugin takes it then); None for any other job."""
    if chip != "A3" or per_pod != SUPER_POD_CHIPS_PER_POD:
        return None
    return asked or world_size


def schedule_policy(chip: str, super_pod_block: int | None) -> str | None:
    if super_pod_block is not None:
        return A3_SUPER_POD_POLICY
    return _SCHEDULE_POLICIES.get(chip)


def podgroup_metadata(chip: str, super_pod_block: int | None,
                      tor_affinity: str | None) -> tuple[dict[str, str], dict[str, str]]:
    """(labels, annotations) the Ascend plugin reads on the job's PodGroup."""
    labels = {RING_CONTROLLER_LABEL: ring_controller(chip), FRAMEWORK_LABEL: FRAMEWORK}
    if tor_affinity:
        labels[TOR_AFFINITY_LABEL] = tor_affinity
    annotations = {}
    policy = schedule_policy(chip, super_pod_block)
    if policy is not None:
        annotations[SCHEDULE_POLICY_ANNOTATION] = policy
    if super_pod_block is not None:
        annotations[SP_BLOCK_ANNOTATION] = str(super_pod_block)
    return labels, annotations


def pod_metadata(job: str, attempt: int, index: int, chip: str) -> tuple[dict[str, str], dict[str, str]]:
    """(labels, annotations) that put one pod into its attempt's PodGroup as MindCluster's ascend-operator's pods
    are, less the operator-name label (module docstring); hccl/rankIndex, the pod's index, is render's for every
    pod."""
    labels = {JOB_NAME_LABEL: job, REPLICA_TYPE_LABEL: TASK, REPLICA_INDEX_LABEL: str(index),
              RING_CONTROLLER_LABEL: ring_controller(chip)}
    annotations = {GROUP_NAME_ANNOTATION: names.pod_group(job, attempt), TASK_SPEC_ANNOTATION: TASK}
    return labels, annotations


def chip_selection(chip: str, nodes: Iterable[Mapping],
                   template_selector: Mapping[str, str]) -> tuple[dict[str, str], list[dict]]:
    """What keeps Volcano's pods on nodes of the job's chip type (the Ascend device plugin's resource is the same
    on every generation): (nodeSelector entries, required node-selector requirements). `accelerator-type` as a
    nodeSelector when the observed nodes of that type agree on one value, as MindCluster's jobs carry it (the
    plugin also picks its handler by it); a requirement naming every value when they do not; nothing when the
    template selects it already or no observed node of that type has the label."""
    if ACCELERATOR_TYPE_LABEL in template_selector:
        return {}, []
    values = sorted({value for node in nodes if chip_type_of(node) == chip
                     and (value := node_labels(node).get(ACCELERATOR_TYPE_LABEL))})
    if len(values) == 1:
        return {ACCELERATOR_TYPE_LABEL: values[0]}, []
    if values:
        return {}, [{"key": ACCELERATOR_TYPE_LABEL, "operator": "In", "values": values}]
    return {}, []


def min_resources(resource: str, chips: int, requests: Mapping[str, str], pods: int) -> dict[str, str]:
    """minResources of a PodGroup asking Volcano for `pods` pods: what enqueue checks against the Queue's room.
    Only the pods the apply makes are counted: running pods of the group hold their share already, and counting
    them again would keep a ReplacePod or a growth out of a Queue with little room."""
    total = {resource: str(chips * pods)}
    for name, quantity in requests.items():
        if name != resource:
            total[name] = _times(str(quantity), pods)
    return total


_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)([A-Za-z]*)$")


def _times(quantity: str, count: int) -> str:
    """A Kubernetes quantity × count in its own suffix (100m × 3 = 300m, 1.5Gi × 2 = 3Gi). One it cannot read (an
    exponent) stays the quantity of one pod: minResources only has to be no larger than what the pods ask."""
    matched = _QUANTITY.match(quantity)
    if matched is None:
        return quantity
    total = Decimal(matched[1]) * count
    return f"{total.normalize():f}{matched[2]}"


# -- what the PodGroup says ---------------------------------------------------------------------------------------
ABSENT, PENDING, INQUEUE, UNSCHEDULABLE, RUNNING = "absent", "pending", "inqueue", "unschedulable", "running"


@dataclass(frozen=True)
class Verdict:
    """Volcano's word on one attempt's PodGroup."""

    state: str          # ABSENT | PENDING (not admitted by its Queue) | INQUEUE | UNSCHEDULABLE | RUNNING
    message: str = ""   # Volcano's own words where it has any


def _unschedulable(podgroup: Mapping) -> str | None:
    for condition in (podgroup.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "Unschedulable" and condition.get("status") == "True":
            return str(condition.get("message") or condition.get("reason") or "Unschedulable")
    return None


def assess(podgroup: Mapping | None, queue: str) -> Verdict:
    """What Volcano has decided about one attempt's PodGroup (None: none yet)."""
    if podgroup is None:
        return Verdict(ABSENT, "no PodGroup yet")
    name = (podgroup.get("metadata") or {}).get("name", "?")
    phase = (podgroup.get("status") or {}).get("phase") or "Pending"
    why = _unschedulable(podgroup)
    if phase in ("Running", "Completed"):
        return Verdict(RUNNING, f"PodGroup {name} is {phase}")
    if phase == "Pending":
        asked = ", ".join(f"{quantity} {resource}" for resource, quantity in
                          sorted(((podgroup.get("spec") or {}).get("minResources") or {}).items()))
        message = (f"PodGroup {name} waits in Volcano Queue {queue}: not admitted"
                   + (f", its minResources ({asked})" if asked else ", its pods") + " exceed the room the Queue has "
                   "now (its capability, or the cluster's, less what admitted jobs hold), or the Queue is closed")
        return Verdict(PENDING, f"{message}; {why}" if why else message)
    if why:
        return Verdict(UNSCHEDULABLE, f"PodGroup {name}: {why}")
    return Verdict(INQUEUE, f"PodGroup {name} admitted by Volcano Queue {queue}; Volcano is binding its pods")

