"""The reconcile steps that find what broke (pure): the first failure of an attempt, a <job>-sched Service that
came back with another ClusterIP, and the apiserver's refusals of the job's writes (refusals.py).

reconcile._Pass mixes FailureSteps in: the steps use its helpers (fail, requeue, d.emit) and its observation `o`.
"""

from __future__ import annotations

from ascend_hybrid.contracts import names
from ascend_hybrid.contracts.podview import container_env
from ascend_hybrid.diagnosis import refusals
from ascend_hybrid.diagnosis.failures import Failure, Wait, find_failure
from ascend_hybrid.diagnosis.refusals import Refusal
from ascend_hybrid.gang import render


class FailureSteps:
    """What ends or holds an attempt; the attributes and helpers come from reconcile._Pass."""

    def failure(self, current: dict, placement: dict) -> Failure | Wait | None:
        """The first failure of this attempt (failures.find_failure); a Wait that holds the attempt while its
        cause is not in yet; None while it is healthy (or a node is within its grace)."""
        e, attempt = self.o.effective, int(self.status["attempt"])
        lost = []
        if self.status.get("phase") in ("Starting", "Running") or self.queue:
            lost = [(index, names.pod_name(self.meta["name"], attempt, index)) for index in range(e.pod_count)
                    if index not in current]
            lost = [(index, name) for index, name in lost if name not in self.o.in_flight]
        found = find_failure(current, placement["nodes"], self.o.nodes, self.o.device_infos, self.o.now,
                             self.o.node_grace_seconds, lost)
        if isinstance(found, Wait):
            self.requeue(found.seconds)
            return found if found.hold else None
        return found or self.sched_service_changed(current)

    def sched_service_changed(self, current: dict) -> Failure | None:
        """<job>-sched deleted and back with another ClusterIP: the MS_SCHED_HOST the pods were given leads nowhere."""
        given = {container_env(pod, render.SCHED_HOST_ENV) for pod in current.values()} - {None}
        if not self.o.sched_ip or not given or given == {self.o.sched_ip}:
            return None
        return Failure("SchedServiceChanged", f"{names.sched_service(self.meta['name'])} has ClusterIP "
                       f"{self.o.sched_ip}, the pods were given {', '.join(sorted(given))}", time=self.o.now)

    def refused(self, refusal: Refusal) -> bool:
        """A refusal no retry can fix fails the job now; a 403 is named in a condition and retried later.
        True when this pass stops here."""
        if refusal.permanent:
            self.fail(refusals.INVALID_POD_TEMPLATE, refusal.describe())
            return True
        if refusal.waited(self.o.now) >= refusals.RETRY_SECONDS:
            return False
        if refusals.forbid(self.status, refusal, self.o.now, self.generation):
            self.d.emit("Warning", refusals.FORBIDDEN, refusal.describe())
        self.requeue(refusals.RETRY_SECONDS - refusal.waited(self.o.now))
        return True
