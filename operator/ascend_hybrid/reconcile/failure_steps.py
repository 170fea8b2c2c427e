"""The reconcile steps that find what broke (pure): the first failure of an attempt, a <job>-sched Service that
came back with another ClusterIP, and the apiserver's refusals of the job's writes (refusals.py).

Each step is a function of the pass (state.Pass): it reads `p.o`, writes `p.s` (the status) and `p.d`.
"""

from __future__ import annotations

from typing import cast

from ascend_hybrid.contracts import names
from ascend_hybrid.contracts.podview import container_env
from ascend_hybrid.diagnosis import refusals
from ascend_hybrid.diagnosis.failures import Failure, Wait, find_failure
from ascend_hybrid.diagnosis.refusals import Refusal
from ascend_hybrid.gang import render
from ascend_hybrid.reconcile import membership, recovery_steps, volcano_steps
from ascend_hybrid.reconcile.state import Pass
from ascend_hybrid.spec.api import PlacementStatus


def failure(p: Pass, current: dict, placement: PlacementStatus) -> Failure | Wait | None:
    """The first failure of this attempt (failures.find_failure); a Wait that holds the attempt while its
    cause is not in yet; None while it is healthy (or a node is within its grace)."""
    e = p.resolved
    lost = []
    if p.s.phase in ("Starting", "Running") or recovery_steps.in_place_running(p) or p.queue:
        lost = [(index, membership.member_name(p, index)) for index in range(e.pod_count) if index not in current]
        # ReplacePod's pod, and under Volcano a pod a node refused, are meant to be away a while
        away = volcano_steps.remaking(p) | {recovery_steps.replacing(p)}
        lost = [(index, name) for index, name in lost if name not in p.o.in_flight and index not in away]
    found = find_failure(current, placement.nodes, p.o.nodes, p.o.device_infos, p.o.now,
                         p.o.node_grace_seconds, lost)
    if isinstance(found, Wait):
        p.requeue(found.seconds)
        return found if found.hold else launcher_wait(p, current)
    return found or sched_service_changed(p, current) or launcher_wait(p, current)


def launcher_wait(p: Pass, current: dict) -> Failure | Wait | None:
    """A launcher's ranks failed while its pod runs (recovery_steps.launcher_failure); a Wait holds the attempt
    while only echoes are in."""
    found = recovery_steps.launcher_failure(p, current)
    if isinstance(found, Wait):
        p.requeue(found.seconds)
    return found


def sched_service_changed(p: Pass, current: dict) -> Failure | None:
    """<job>-sched deleted and back with another ClusterIP: the MS_SCHED_HOST the pods were given leads nowhere."""
    # the set difference takes out the None of a pod without the variable
    given = cast("set[str]", {container_env(pod, render.SCHED_HOST_ENV) for pod in current.values()} - {None})
    if not p.o.sched_ip or not given or given == {p.o.sched_ip}:
        return None
    return Failure("SchedServiceChanged", f"{names.sched_service(p.meta['name'])} has ClusterIP "
                   f"{p.o.sched_ip}, the pods were given {', '.join(sorted(given))}", time=p.o.now)


def refused(p: Pass, refusal: Refusal) -> bool:
    """A refusal no retry can fix fails the job now; a 403 is named in a condition and retried later.
    True when this pass stops here."""
    if refusal.permanent:
        p.fail(refusals.INVALID_POD_TEMPLATE, refusal.describe())
        return True
    if refusal.waited(p.o.now) >= refusals.RETRY_SECONDS:
        return False
    if refusals.forbid(p.s, refusal, p.o.now, p.generation):
        p.d.emit("Warning", refusals.FORBIDDEN, refusal.describe())
    p.requeue(refusals.RETRY_SECONDS - refusal.waited(p.o.now))
    return True
