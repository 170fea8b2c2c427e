"""The reconcile steps of a job with `spec.scheduling.queue` (pure): Kueue admits, then the operator places.

Each attempt's pods are created first, gated, unpinned, as one Kueue pod group (kueue.py). While Kueue holds the
group the job is Pending with condition Admitted=False, reason WaitingForQuota and Kueue's own message. Once
Kueue has admitted it (its gates are gone), the gang is placed on the nodes the admitted flavor allows (the
nodeSelector and tolerations Kueue merged into the pods) and released exactly as an unqueued one, pinned in
the same patch. Kueue evicting the group (preemption, a stopped queue) ends the attempt without counting a
restart: the job is Pending with reason Preempted and queues again as a new attempt, a new pod group.
An elastic job that shrinks at its placement (the admitted gang no longer fits, a smaller one does) ends the
admitted group and queues the smaller gang as a new attempt (`resized`): Kueue then holds quota for the chips the
job runs on, and a growth is the whole gang's group admitted again.

Each step is a function of the pass (state.Pass): it reads `p.o`, writes `p.s` (the status) and `p.d`.
"""

from __future__ import annotations

from dataclasses import replace

from ascend_hybrid.contracts import kueue, names
from ascend_hybrid.contracts.conditions import parse_time
from ascend_hybrid.contracts.podview import attempt_of
from ascend_hybrid.gang import render
from ascend_hybrid.gang.inventory import pinned_node
from ascend_hybrid.gang.placement import GangRequest
from ascend_hybrid.reconcile import elastic_steps
from ascend_hybrid.reconcile.actions import (
    CreatePods,
    EnsureChildren,
    PinAndRelease,
    Place,
    PodToCreate,
    RemoveGates,
)
from ascend_hybrid.reconcile.state import Decision, Pass

ADMISSION_POLL_SECONDS = 5.0  # the Workload is read on each pass, not watched: refresh Kueue's message this often
RECHECK_SECONDS = 2.0
PREEMPTED = "Preempted"
WAITING_FOR_QUOTA = "WaitingForQuota"


def group_name(p: Pass) -> str:
    return kueue.group_name(p.meta["name"], p.attempt)


def kueue_admission(p: Pass, current: dict) -> kueue.Admission:
    attempt = p.attempt
    evicted = [pod for pod in p.o.evicted_pods if attempt_of(pod) == attempt and of_this_job(p, pod)]
    return kueue.assess(list(current.values()), p.resolved.pod_count, p.o.workload, group_name(p), evicted)


def of_this_job(p: Pass, pod: dict) -> bool:
    """Not a pod of an earlier job of the same name (deleted and made again): pods are created after their job."""
    created, job_created = (parse_time((obj.get("metadata") or {}).get("creationTimestamp")) for obj in (pod, p.job))
    return created is None or job_created is None or created >= job_created


# -- before placement --------------------------------------------------------------------------------------
def enqueued(p: Pass, current: dict, stale: list, admission: kueue.Admission, template_hash: str) -> Decision:
    o, e = p.o, p.resolved
    attempt, job, group = p.attempt, p.meta["name"], group_name(p)
    p.s.pod_template_hash = template_hash  # a spec change while queued restarts the attempt too
    if not o.children_ready or not o.sched_known(e):
        p.d.act(EnsureChildren(e))
        return p.d
    p.pod_counts(list(current.values()), e.pod_count)
    missing = [index for index in range(e.pod_count)
               if index not in current and names.pod_name(job, attempt, index) not in o.in_flight]
    if missing:
        requirements = kueue.chip_affinity(e.chip, o.nodes.values())
        manifests = render.gang_pods(e, p.meta["namespace"], p.meta["uid"], attempt,
                                     [(index, None) for index in missing], o.sched_ip, requirements,
                                     o.expander_image)
        p.d.act(CreatePods(tuple(PodToCreate(manifest, None, e.per_pod) for manifest in manifests)))
        waiting_for_quota(p, f"pod group {group} ({e.pod_count} pods) created in LocalQueue {p.queue}; "
                               "waiting for Kueue to admit it")
        p.requeue(RECHECK_SECONDS)
        return p.d
    if admission.state == kueue.ABSENT:  # created, not all seen by the watch yet
        waiting_for_quota(p, admission.message)
        p.requeue(RECHECK_SECONDS)
    elif admission.state == kueue.UNMANAGED:
        message = (f"{admission.message}. Label the namespace (kubectl label namespace {p.meta['namespace']} "
                   f"{kueue.MANAGED_LABEL}=true), then delete these pods: they are made again under Kueue")
        previous = p.condition("Admitted")
        if previous is None or previous.reason != "NotManagedByKueue":
            p.d.emit("Warning", "NotManagedByKueue", message)
        p.cond("Admitted", False, "NotManagedByKueue", message)
        p.phase("Pending", message)
        p.requeue(ADMISSION_POLL_SECONDS)
    elif admission.state == kueue.WAITING:
        waiting_for_quota(p, admission.message)
        p.requeue(ADMISSION_POLL_SECONDS)
    else:
        return admitted(p, admission, stale)
    return p.d


def resized(p: Pass, current: dict) -> Decision | None:
    """spec.elastic: the attempt's pod group was made for another gang size than the job runs at now (its
    placement shrank it): the group ends (its pods go, and with them its Workload and quota) and the new size
    queues as the next attempt, a pod group of its own; not a restart (the incident's Shrink rung says why)."""
    sizes = {size for pod in current.values()
             if (size := ((pod.get("metadata") or {}).get("annotations") or {}).get(kueue.GROUP_TOTAL_COUNT_ANNOTATION))}
    if not sizes or sizes == {str(p.resolved.pod_count)}:
        return None
    made = p.attempt
    p.end_attempt(list(current.values()))
    message = (f"pod group {kueue.group_name(p.meta['name'], made)} was made for {', '.join(sorted(sizes))} "
               f"pods; the job runs {p.resolved.pod_count} now (data {p.resolved.data}): queued again as pod group "
               f"{group_name(p)}")
    return p.pending_again("Admitted", "Resized", message, event_type="Normal", requeue_seconds=RECHECK_SECONDS)


def waiting_for_quota(p: Pass, message: str) -> None:
    """Pending while Kueue holds the group; a preempted job keeps reason Preempted until it is admitted again."""
    previous = p.condition("Admitted")
    if previous is not None and previous.status == "False" and previous.reason == PREEMPTED:
        message = f"preempted by Kueue; attempt {p.attempt} waits for quota again: {message}"
        p.cond("Admitted", False, PREEMPTED, message)
    else:
        p.cond("Admitted", False, WAITING_FOR_QUOTA, message)
    p.phase("Pending", message)


def admitted(p: Pass, admission: kueue.Admission, stale: list) -> Decision:
    if not p.holds("Admitted"):
        p.d.emit("Normal", "Admitted", admission.message)
    p.cond("Admitted", True, "Admitted", admission.message)
    if stale:
        p.phase("Pending", f"{admission.message}; waiting for the previous attempt's pods to go")
        p.requeue(RECHECK_SECONDS)
        return p.d
    p.d.act(Place(admitted_request(GangRequest.for_job(p.resolved, p.s.avoided_nodes), admission),
                  p.resolved, *admitted_alternatives(p, admission)))
    return p.d


def admitted_request(request: GangRequest, admission: kueue.Admission) -> GangRequest:
    """The gang's request on the nodes the admitted flavor allows (Kueue's nodeSelector and tolerations)."""
    tolerations = (*request.tolerations, *(t for t in admission.tolerations if t not in request.tolerations))
    return replace(request, node_selector={**request.node_selector, **admission.node_selector},
                   tolerations=tolerations)


def admitted_alternatives(p: Pass, admission: kueue.Admission) -> tuple[tuple, float | None]:
    """spec.elastic: the smaller gangs the placement may take instead, on the admitted flavor's nodes too (a
    smaller gang placed ends this group: `resized`)."""
    options, retry_within = elastic_steps.shrink_options(p)
    return tuple((admitted_request(request, admission), job) for request, job in options), retry_within


# -- after placement ---------------------------------------------------------------------------------------
def unreleased(p: Pass, pod: dict) -> bool:
    """Not released by this process a moment ago (the watch may not show that yet). A queued pod is in flight
    from its creation on, long before its release: it was released only once it carries its pin."""
    if pod["metadata"]["name"] not in p.o.in_flight:
        return True
    return bool(p.queue) and pinned_node(pod, {}) is None


def release(p: Pass, releasable: list[tuple[str, tuple[str, ...]]], current: dict,
            nodes: list[str]) -> RemoveGates | PinAndRelease:
    """RemoveGates for a pinned gang; for a queued one, pin and release each pod in one patch."""
    if not p.queue:
        return RemoveGates(tuple(releasable))
    by_name = {pod["metadata"]["name"]: (index, pod) for index, pod in current.items()}
    return PinAndRelease(tuple(
        (name, tuple(kueue.release_patch(by_name[name][1], gates, names.GANG_GATE, nodes[by_name[name][0]])))
        for name, gates in releasable))


def preempted(p: Pass, admission: kueue.Admission, current: dict) -> Decision:
    """Kueue evicted the group: the attempt ends, not as a failure. Kueue deletes its pods; whatever is left
    goes with its Workload, and a new attempt queues again (restarts and backoffLimit untouched)."""
    attempt = p.end_attempt(list(current.values()))
    message = (f"preempted by Kueue ({admission.reason}): {admission.message}; "
               f"queued again as attempt {attempt}")
    return p.pending_again("Admitted", PREEMPTED, message, event_type="Warning", requeue_seconds=RECHECK_SECONDS,
                           stops_running=True)
