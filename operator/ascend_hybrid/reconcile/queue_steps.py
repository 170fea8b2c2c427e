"""The reconcile steps of a job with `spec.scheduling.queue` (pure): Kueue admits, then the operator places.

Each attempt's pods are created first, gated, unpinned, as one Kueue pod group (kueue.py). While Kueue holds the
group the job is Pending with condition Admitted=False, reason WaitingForQuota and Kueue's own message. Once
Kueue has admitted it (its gates are gone), the gang is placed on the nodes the admitted flavor allows (the
nodeSelector and tolerations Kueue merged into the pods) and released exactly as an unqueued one, pinned in
the same patch. Kueue evicting the group (preemption, a stopped queue) ends the attempt without counting a
restart: the job is Pending with reason Preempted and queues again as a new attempt, a new pod group.

reconcile._Pass mixes QueueSteps in: the steps use its helpers (cond, phase, requeue, delete, …).
"""

from __future__ import annotations

from dataclasses import replace

from ascend_hybrid.contracts import kueue, names
from ascend_hybrid.contracts.conditions import condition
from ascend_hybrid.contracts.podview import is_deleting, pod_counts
from ascend_hybrid.gang import render
from ascend_hybrid.gang.inventory import pinned_node
from ascend_hybrid.gang.placement import GangRequest
from ascend_hybrid.reconcile.actions import (
    CreatePods,
    DeleteWorkloads,
    EnsureChildren,
    PinAndRelease,
    Place,
    PodToCreate,
    RemoveGates,
)

ADMISSION_POLL_SECONDS = 5.0  # the Workload is read on each pass, not watched: refresh Kueue's message this often
RECHECK_SECONDS = 2.0
PREEMPTED = "Preempted"
WAITING_FOR_QUOTA = "WaitingForQuota"


class QueueSteps:
    """Steps for queued jobs; the attributes and helpers come from reconcile._Pass."""

    @property
    def queue(self) -> str | None:
        effective = self.o.effective
        return effective.spec.scheduling.queue if effective is not None else None

    def group(self) -> str:
        return kueue.group_name(self.meta["name"], int(self.status["attempt"]))

    def kueue_verdict(self, current: dict) -> kueue.Verdict:
        return kueue.assess(list(current.values()), self.o.effective.pod_count, self.o.workload, self.group())

    def workloads_of(self, pods) -> DeleteWorkloads | None:
        """Tearing down pods of a queued attempt deletes its Workload too: Kueue then drops its finalizers and the
        quota at once (pods that never bound would otherwise hold both until the pod GC, ~20 s)."""
        groups = sorted({group for pod in pods if not is_deleting(pod) and (group := kueue.group_of(pod))})
        return DeleteWorkloads(tuple(groups)) if groups else None

    # -- before placement --------------------------------------------------------------------------------------
    def enqueued(self, current: dict, stale: list, verdict: kueue.Verdict, template_hash: str):
        o, e, status = self.o, self.o.effective, self.status
        attempt, job, group = int(status["attempt"]), self.meta["name"], self.group()
        status["podTemplateHash"] = template_hash  # a spec change while queued restarts the attempt too
        if not o.children_ready or not o.sched_ip:
            self.d.act(EnsureChildren(e))
            return self.d
        status["pods"] = pod_counts(list(current.values()), e.pod_count)
        missing = [index for index in range(e.pod_count)
                   if index not in current and names.pod_name(job, attempt, index) not in o.in_flight]
        if missing:
            requirements = kueue.chip_affinity(e.chip, o.nodes.values())
            manifests = render.gang_pods(e, self.meta["namespace"], self.meta["uid"], attempt,
                                         [(index, None) for index in missing], o.sched_ip, requirements)
            self.d.act(CreatePods(tuple(PodToCreate(manifest, None, e.per_pod) for manifest in manifests)))
            self.waiting_for_quota(f"pod group {group} ({e.pod_count} pods) created in LocalQueue {self.queue}; "
                                   "waiting for Kueue to admit it")
            self.requeue(RECHECK_SECONDS)
            return self.d
        if verdict.state == kueue.ABSENT:  # created, not all seen by the watch yet
            self.waiting_for_quota(verdict.message)
            self.requeue(RECHECK_SECONDS)
        elif verdict.state == kueue.UNMANAGED:
            message = (f"{verdict.message}. Label the namespace (kubectl label namespace {self.meta['namespace']} "
                       f"{kueue.MANAGED_LABEL}=true), then delete these pods: they are made again under Kueue")
            previous = condition(status, "Admitted")
            if previous is None or previous["reason"] != "NotManagedByKueue":
                self.d.emit("Warning", "NotManagedByKueue", message)
            self.cond("Admitted", False, "NotManagedByKueue", message)
            self.phase("Pending", message)
            self.requeue(ADMISSION_POLL_SECONDS)
        elif verdict.state == kueue.WAITING:
            self.waiting_for_quota(verdict.message)
            self.requeue(ADMISSION_POLL_SECONDS)
        else:
            return self.admitted(verdict, stale)
        return self.d

    def waiting_for_quota(self, message: str) -> None:
        """Pending while Kueue holds the group; a preempted job keeps reason Preempted until it is admitted again."""
        previous = condition(self.status, "Admitted")
        if previous is not None and previous["status"] == "False" and previous["reason"] == PREEMPTED:
            message = f"preempted by Kueue; attempt {self.status['attempt']} waits for quota again: {message}"
            self.cond("Admitted", False, PREEMPTED, message)
        else:
            self.cond("Admitted", False, WAITING_FOR_QUOTA, message)
        self.phase("Pending", message)

    def admitted(self, verdict: kueue.Verdict, stale: list):
        previous = condition(self.status, "Admitted")
        if previous is None or previous["status"] != "True":
            self.d.emit("Normal", "Admitted", verdict.message)
        self.cond("Admitted", True, "Admitted", verdict.message)
        if stale:
            self.phase("Pending", f"{verdict.message}; waiting for the previous attempt's pods to go")
            self.requeue(RECHECK_SECONDS)
            return self.d
        request = GangRequest.for_job(self.o.effective, self.status.get("avoidedNodes") or ())
        tolerations = (*request.tolerations, *(t for t in verdict.tolerations if t not in request.tolerations))
        self.d.act(Place(replace(request, node_selector={**request.node_selector, **verdict.node_selector},
                                 tolerations=tolerations), self.o.effective))
        return self.d

    # -- after placement ---------------------------------------------------------------------------------------
    def unreleased(self, pod: dict) -> bool:
        """Not released by this process a moment ago (the watch may not show that yet). A queued pod is in flight
        from its creation on, long before its release: it was released only once it carries its pin."""
        if pod["metadata"]["name"] not in self.o.in_flight:
            return True
        return bool(self.queue) and pinned_node(pod, {}) is None

    def release(self, releasable: list[tuple[str, tuple[str, ...]]], current: dict, nodes: list[str]):
        """RemoveGates for a pinned gang; for a queued one, pin and release each pod in one patch."""
        if not self.queue:
            return RemoveGates(tuple(releasable))
        by_name = {pod["metadata"]["name"]: (index, pod) for index, pod in current.items()}
        return PinAndRelease(tuple(
            (name, tuple(kueue.release_patch(by_name[name][1], gates, names.GANG_GATE, nodes[by_name[name][0]])))
            for name, gates in releasable))

    def preempted(self, verdict: kueue.Verdict, current: dict):
        """Kueue evicted the group: the attempt ends, not as a failure. Kueue deletes its pods; whatever is left
        goes with its Workload, and a new attempt queues again (restarts and backoffLimit untouched)."""
        self.delete(list(current.values()))
        self.reset_rank_table()
        self.new_attempt()
        message = (f"preempted by Kueue ({verdict.reason}): {verdict.message}; "
                   f"queued again as attempt {self.status['attempt']}")
        self.cond("Admitted", False, PREEMPTED, message)
        self.cond("Running", False, PREEMPTED, message)
        self.phase("Pending", message)
        self.d.emit("Warning", PREEMPTED, message)
        self.requeue(RECHECK_SECONDS)
        return self.d
