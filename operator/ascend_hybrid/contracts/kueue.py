"""Kueue's pod-group contract, the operator's side (pure): the wire names, what the pods of a queued attempt
carry, and what the pods and the Workload say about its admission.

A job with `spec.scheduling.queue: Q` runs each attempt as one Kueue pod group named `<job>-a<attempt>`: every
pod carries the LocalQueue and the group name (labels), the group's size and `retriable-in-group: "false"`
(annotations; a retriable group keeps its quota after its pods failed, and the operator restarts a gang as a
new attempt, never by replacing pods inside one). Kueue's webhook gates each pod; once the group fits the
quota, Kueue removes its gates and merges the admitted flavor's nodeSelector and tolerations into the pods.
Only then does the operator place the gang, on nodes that flavor admits, pin each pod to its node and remove
the gang gate. Pods are created without the hostname pin: Kueue groups pods by the shape of their spec, the
affinity included, and refuses a group of more than 8 distinct shapes without a word (kueue 0.17, "pod group
can't include more than 8 roles"), so per-pod pins before admission would hold back any gang of 9 pods or more.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ascend_hybrid.contracts.ascend import ACCELERATOR_TYPE_LABEL, chip_type_of
from ascend_hybrid.contracts.names import HOSTNAME_LABEL

GROUP = "kueue.x-k8s.io"
WORKLOAD_VERSION = "v1beta2"
WORKLOADS = "workloads"
QUEUE_NAME_LABEL = f"{GROUP}/queue-name"
POD_GROUP_LABEL = f"{GROUP}/pod-group-name"
MANAGED_LABEL = f"{GROUP}/managed"            # set by Kueue's webhook on every pod it manages
GROUP_TOTAL_COUNT_ANNOTATION = f"{GROUP}/pod-group-total-count"
RETRIABLE_IN_GROUP_ANNOTATION = f"{GROUP}/retriable-in-group"
GATE_PREFIX = f"{GROUP}/"                     # its gates: kueue.x-k8s.io/admission, kueue.x-k8s.io/topology
TERMINATION_TARGET = "TerminationTarget"      # the pod condition Kueue sets before it deletes a pod
EVICTED_PREFIX = "WorkloadEvictedDueTo"       # … its reason when the workload was evicted (Preempted, …)

# what assess() finds
ABSENT, UNMANAGED, WAITING, ADMITTED, EVICTED = "absent", "unmanaged", "waiting", "admitted", "evicted"


def group_name(job: str, attempt: int) -> str:
    """The pod group of one attempt, which is also its Workload's name (a DNS subdomain, ≤ 63 characters)."""
    return f"{job}-a{attempt}"


def pod_metadata(job: str, attempt: int, pod_count: int, queue: str) -> tuple[dict[str, str], dict[str, str]]:
    """(labels, annotations) that put one pod of the attempt into its Kueue pod group."""
    labels = {QUEUE_NAME_LABEL: queue, POD_GROUP_LABEL: group_name(job, attempt)}
    annotations = {GROUP_TOTAL_COUNT_ANNOTATION: str(pod_count), RETRIABLE_IN_GROUP_ANNOTATION: "false"}
    return labels, annotations


def chip_affinity(chip: str, nodes: Iterable[Mapping]) -> list[dict]:
    """A node-affinity requirement naming the accelerator-type values of the observed nodes of the job's chip
    type, so that Kueue only assigns a flavor of that chip type (it matches a flavor's nodeLabels against the
    pod's selectors, key by key). Empty when a node of that type lacks the label (it is typed by its chip name):
    then the flavors must tell the chip types apart by what the template's nodeSelector names."""
    values, unlabelled = set(), False
    for node in nodes:
        if chip_type_of(node) != chip:
            continue
        value = ((node.get("metadata") or {}).get("labels") or {}).get(ACCELERATOR_TYPE_LABEL)
        if value:
            values.add(value)
        else:
            unlabelled = True
    if not values or unlabelled:
        return []
    return [{"key": ACCELERATOR_TYPE_LABEL, "operator": "In", "values": sorted(values)}]


def group_of(pod: Mapping) -> str | None:
    return ((pod.get("metadata") or {}).get("labels") or {}).get(POD_GROUP_LABEL)


def kueue_gates(pod: Mapping) -> list[str]:
    return [gate["name"] for gate in (pod.get("spec") or {}).get("schedulingGates") or []
            if str(gate.get("name", "")).startswith(GATE_PREFIX)]


def _condition(obj: Mapping | None, kind: str) -> Mapping | None:
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions") or () if c.get("type") == kind), None)


def _true(obj: Mapping | None, kind: str) -> Mapping | None:
    found = _condition(obj, kind)
    return found if found is not None and found.get("status") == "True" else None


@dataclass(frozen=True)
class Admission:
    """What Kueue has decided about one attempt's pod group."""

    state: str                          # ABSENT | UNMANAGED | WAITING | ADMITTED | EVICTED
    reason: str = ""                    # EVICTED: Kueue's reason (Preempted, …)
    message: str = ""                   # Kueue's own words where it has any
    node_selector: Mapping[str, str] = field(default_factory=dict)   # ADMITTED: what the flavor merged into the pods
    tolerations: tuple[Mapping, ...] = ()


def eviction(pods: Sequence[Mapping], workload: Mapping | None) -> tuple[str, str] | None:
    """(reason, message) when Kueue evicted the group: its Workload says Evicted, or a pod carries the
    TerminationTarget condition Kueue sets before deleting it (that one outlives the Workload, which goes with
    its pods). Kueue deleting pods for other causes (the Workload deleted by us) is no eviction."""
    evicted = _true(workload, "Evicted")
    if evicted is not None:
        return str(evicted.get("reason") or "Evicted"), str(evicted.get("message") or "")
    for pod in pods:
        for condition in (pod.get("status") or {}).get("conditions") or ():
            reason = str(condition.get("reason") or "")
            if (condition.get("type") == TERMINATION_TARGET and condition.get("status") == "True"
                    and reason.startswith(EVICTED_PREFIX)):
                return reason[len(EVICTED_PREFIX):] or "Evicted", str(condition.get("message") or "")
    return None


def pending_message(workload: Mapping | None, group: str) -> str:
    """Why Kueue holds the group, in its own words (the QuotaReserved or Admitted condition's message)."""
    if workload is None:
        return f"waiting for Kueue to create the Workload {group}"
    for kind in ("QuotaReserved", "Admitted"):
        found = _condition(workload, kind)
        if found is not None and found.get("status") == "False" and found.get("message"):
            return str(found["message"])
    if _true(workload, "QuotaReserved"):
        return f"quota reserved for {group}; waiting for its admission checks"
    return f"Workload {group} is queued in LocalQueue {(workload.get('spec') or {}).get('queueName', '?')}"


def admitted_message(workload: Mapping | None, group: str) -> str:
    admission = ((workload or {}).get("status") or {}).get("admission") or {}
    flavors = sorted({flavor for assignment in admission.get("podSetAssignments") or ()
                      for flavor in (assignment.get("flavors") or {}).values()})
    where = f"ClusterQueue {admission['clusterQueue']}" if admission.get("clusterQueue") else "Kueue"
    return f"pod group {group} admitted by {where}" + (f" (flavor {', '.join(flavors)})" if flavors else "")


def assess(pods: Sequence[Mapping], pod_count: int, workload: Mapping | None, group: str,
           evicted_gone: Sequence[Mapping] = ()) -> Admission:
    """Kueue's verdict on one attempt from its pods (as observed), its Workload (None: none yet, or gone) and
    its pods Kueue evicted that are gone (the Workload goes with the last of them)."""
    evicted = eviction([*pods, *evicted_gone], workload)
    if evicted is not None:
        return Admission(EVICTED, reason=evicted[0], message=evicted[1])
    if len(pods) < pod_count:
        return Admission(ABSENT, message=f"{len(pods)} of the {pod_count} pods of {group} exist")
    if not all(((pod.get("metadata") or {}).get("labels") or {}).get(MANAGED_LABEL) == "true" for pod in pods):
        return Admission(UNMANAGED, message=(
            f"Kueue does not manage the pods of {group}: their namespace lacks the label {MANAGED_LABEL}=true "
            "(or Kueue is not installed), so the queue would not be enforced; they stay gated"))
    if any(kueue_gates(pod) for pod in pods):
        return Admission(WAITING, message=pending_message(workload, group))
    selector: dict[str, str] = {}
    tolerations: list[Mapping] = []
    for pod in pods:
        spec = pod.get("spec") or {}
        selector.update(spec.get("nodeSelector") or {})
        tolerations += [t for t in spec.get("tolerations") or () if t not in tolerations]
    return Admission(ADMITTED, message=admitted_message(workload, group), node_selector=selector,
                   tolerations=tuple(tolerations))


def release_patch(pod: Mapping, gates: Sequence[str], gang_gate: str, node: str) -> list[dict]:
    """The JSON patch that pins an admitted pod to its placed node and removes the gang gate, in one call.

    The apiserver allows adding to a gated pod's node affinity (additions only), so the hostname requirement
    joins the pod's first required term, or starts one. The first operation tests that the gates are still
    the ones observed: a concurrent change makes the patch fail (422) instead of dropping a gate."""
    requirement = {"key": HOSTNAME_LABEL, "operator": "In", "values": [node]}
    affinity = (pod.get("spec") or {}).get("affinity")
    terms = ((((affinity or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
              or {}).get("nodeSelectorTerms") or [])
    patch: list[dict[str, Any]] = [
        {"op": "test", "path": "/spec/schedulingGates", "value": [{"name": gate} for gate in gates]},
        {"op": "replace", "path": "/spec/schedulingGates",
         "value": [{"name": gate} for gate in gates if gate != gang_gate]},
    ]
    required = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [requirement]}]}}
    if terms:  # the chip-type requirement the pod was created with (chip_affinity)
        patch.append({"op": "add", "value": requirement, "path": "/spec/affinity/nodeAffinity/"
                      "requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms/0/matchExpressions/-"})
    elif affinity is not None and (affinity.get("nodeAffinity") is not None):
        patch.append({"op": "add", "path": "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution",
                      "value": required["requiredDuringSchedulingIgnoredDuringExecution"]})
    elif affinity is not None:
        patch.append({"op": "add", "path": "/spec/affinity/nodeAffinity", "value": required})
    else:
        patch.append({"op": "add", "path": "/spec/affinity", "value": {"nodeAffinity": required}})
    return patch
