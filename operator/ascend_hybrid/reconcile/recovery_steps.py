"""The reconcile steps of the recovery ladder (pure): a failure's rung, RestartRanks carried out through the
launchers' channel, a rung that gives way, and every incident's milestones in status.recoveries.

Each step is a function of the pass (state.Pass): it reads `p.o`, writes `p.s` (the status) and `p.d`.
"""

from __future__ import annotations

from dataclasses import replace

from ascend_hybrid.contracts import names
from ascend_hybrid.contracts.conditions import parse_time
from ascend_hybrid.contracts.podview import is_deleting, node_of, phase_of, pod_index
from ascend_hybrid.diagnosis import recovery
from ascend_hybrid.diagnosis.failures import (
    Failure,
    Wait,
    first_failed,
    last_failure,
    summary,
    true_conditions,
)
from ascend_hybrid.diagnosis.hints import hint, prediction
from ascend_hybrid.diagnosis.policy import counted_text, counters_after, judge, restart_text
from ascend_hybrid.diagnosis.recovery import (
    FAILED,
    GROW,
    IN_PLACE_RUNGS,
    REPLACE_POD,
    RESTART_GANG,
    RESTART_RANKS,
    SHRINK,
    STARTED,
    STEPPING,
    WHOLE_GANG_RUNGS,
    Bounds,
    LauncherReport,
)
from ascend_hybrid.gang import layout as layouts
from ascend_hybrid.gang.placement import GangRequest
from ascend_hybrid.reconcile import elastic_steps, membership
from ascend_hybrid.reconcile.actions import DeletePods, PlaceReplacement
from ascend_hybrid.reconcile.state import Decision, Pass
from ascend_hybrid.spec.api import RecoveryRecord

# Whether the ladder carries ReplacePod out (else it skips that rung and says so).
REPLACE_POD_AVAILABLE = True
NOT_REPLACING = "ReplacePod is not carried out by this operator version: the whole gang restarts instead"
NOT_REPLACING_QUEUED = ("ReplacePod is not taken under Kueue: a queued attempt's pod group is not retriable, so a "
                        "lost pod ends its Workload; the whole gang restarts as a new pod group")


# The rungs followed through the launchers' reports: the pods stay (a shrink that kept the running pods too).
FOLLOWED_IN_PLACE = IN_PLACE_RUNGS | {SHRINK, GROW}


def in_place_running(p: Pass) -> bool:
    """An in-place rung runs: the pods of the attempt are all meant to be there."""
    return p.rung in FOLLOWED_IN_PLACE


def failed(p: Pass, failure: Failure, current: list[dict]) -> Decision:
    """The failure policy's verdict: fail, or recover (counted against backoffLimit, or as a disruption, or
    ignored) at the rung of the recovery ladder it starts at; a failure while an in-place rung runs moves that
    incident to the next rung instead (not counted again)."""
    e = p.resolved
    verdict = judge(e.spec.run_policy.failure_policy.rules, failure)
    fix = hint(failure, e, prediction(e) if failure.cause == "DeviceOutOfMemory" else None)
    p.s.last_failure = last_failure(failure, verdict.action, p.attempt, fix, p.o.now)
    what = summary(failure)
    open_incident = recovery.current_incident(p.s.recoveries)
    if verdict.fails:
        if open_incident is not None:
            recovery.gave_up(open_incident, f"FailJob by {verdict.why}")
        return p.fail(failure.cause, f"{what}; FailJob by {verdict.why}", fix)
    by_index = {pod_index(pod): pod for pod in current}
    if open_incident is not None and open_incident.rungs[-1] in IN_PLACE_RUNGS:
        # the second failure's suspects are avoided too by the rung that moves pods
        open_incident.avoid = sorted(set(open_incident.avoid) | set(verdict.avoid))
        return escalate_for(p, open_incident, failure, what, fix, by_index)
    if open_incident is not None:  # the gang restarted and failed again before it stepped: a new incident
        recovery.gave_up(open_incident, f"failed again before training stepped: {what}")
        open_incident.outcome = "NotRecovered"
    limit = e.spec.run_policy.backoff_limit
    counters, counted = counters_after(
        {"restarts": p.s.restarts, "disruptions": p.s.disruptions, "ignoredFailures": p.s.ignored_failures}, verdict)
    if verdict.counts and counted > limit:
        return p.fail("BackoffLimitExceeded", f"{what}; backoffLimit={limit} restarts exhausted", fix)
    p.s.restarts, p.s.disruptions, p.s.ignored_failures = (
        counters["restarts"], counters["disruptions"], counters["ignoredFailures"])
    start = start_rung(p, verdict.rung or RESTART_GANG, verdict.why, by_index, failure.index)
    record = start_incident(p, failure, start, verdict.counts)
    if verdict.avoid and start.rung == RESTART_RANKS:
        record.avoid = list(verdict.avoid)  # the pods stay; a rung that moves them avoids these
    else:
        p.avoid(verdict.avoid)
    if start.rung == RESTART_RANKS:
        text = (f"{what}; {verdict.action} by {start.why}: restarting every rank in place from the newest "
                f"checkpoint, rank generation {rank_generation(p) + 1} ({counted_text(verdict, counted, limit)})")
        return restart_ranks(p, record, failure, text, fix)
    if start.rung == REPLACE_POD:
        text = (f"{what}; {verdict.action} by {start.why}: replacing pod index {failure.index}, the others "
                f"restart their ranks in place, rank generation {rank_generation(p) + 1} "
                f"({counted_text(verdict, counted, limit)})")
        return replace_pod(p, record, failure, text, fix, by_index)
    text = restart_text(what, verdict, p.attempt + 1, counted, limit)
    if start.why != verdict.why:
        text = f"{text}; {start.why.removeprefix(verdict.why).lstrip('; ')}"
    p.end_attempt(current)
    return p.restarting(failure.cause, text, running_text=what, event=("Warning", failure.cause, f"{text}. Fix: {fix}"))


def restart_gang_for(p: Pass, current: dict, why: str) -> bool:
    """An in-place rung gave way to RestartGang: every pod deleted, a new attempt (the incident was counted
    when it began)."""
    if p.s.recovery is not None:
        p.s.recovery.rung = p.s.recovery.replacing = p.s.recovery.unplaced = None
    record = recovery.current_incident(p.s.recoveries)
    p.avoid(record.avoid if record is not None else ())
    attempt = p.end_attempt(list(current.values()))
    p.restarting("RecoveryEscalated", f"{why}: restarting the whole gang as attempt {attempt}")
    return True


# -- what the launchers say --------------------------------------------------------------------------------
def rank_generation(p: Pass) -> int:
    return p.rank_generation


def launcher_reports(p: Pass, current: dict) -> dict[int, LauncherReport]:
    """The report of each current pod's launcher, by pod index; a report of an earlier pod of the same name
    (another UID) is not this pod's."""
    found = {}
    for index, pod in current.items():
        meta = pod.get("metadata") or {}
        report = p.o.launchers.get(meta.get("name") or "")
        if report is not None and report.uid == meta.get("uid"):
            found[index] = report
    return found


def in_place_ready(p: Pass, current: dict, excluding: int | None = None) -> tuple[bool, str]:
    """Whether every pod (but `excluding`, the one ReplacePod makes again) can restart its ranks in place:
    running, its launcher heard on the channel."""
    e = p.resolved
    reports = launcher_reports(p, current)
    if not reports:
        return False, (f"no launcher of this attempt ever reported on LauncherChannel "
                       f"{names.launcher_channel(p.meta['name'])} (an image without the bundled launcher, "
                       f"or no ServiceAccount token in the pods)")
    for index in range(e.pod_count):
        if index == excluding:
            continue
        pod = current.get(index)
        name = membership.member_name(p, index)
        if pod is None or phase_of(pod) != "Running":
            return False, f"pod {name} is not running"
        if index not in reports:
            return False, (f"the launcher of pod {name} never reported on LauncherChannel "
                           f"{names.launcher_channel(p.meta['name'])} (an image without the bundled "
                           f"launcher, or no ServiceAccount token in the pod)")
    return True, ""


def launcher_failure(p: Pass, current: dict) -> Failure | Wait | None:
    """A launcher whose ranks of the current generation failed (its pod still runs): the earliest real cause
    among them, as failures.first_failed orders pod failures (echoes wait for the real cause)."""
    generation = rank_generation(p)
    reports = launcher_reports(p, current)
    failed, others_run = [], False
    for index, report in sorted(reports.items()):
        pod = current[index]
        if report.generation != generation or phase_of(pod) != "Running":
            continue
        if report.state != FAILED:
            others_run = True
            continue
        failed.append(Failure(report.cause or "Unknown", report.detail or "the launcher's ranks failed",
                              pod=pod["metadata"]["name"], index=index, node=node_of(pod), rank=report.rank,
                              step=report.step, time=report.time or p.o.now,
                              conditions=true_conditions(pod)))
    if not failed:
        return None
    return first_failed(failed, others_run, p.o.now)


# -- the decision --------------------------------------------------------------------------------------------
def bounds(p: Pass) -> Bounds:
    return Bounds.of(p.resolved.spec.run_policy.recovery)


def not_replacing(p: Pass) -> str | None:
    """Why ReplacePod may not be taken for this job (None: it may)."""
    if not REPLACE_POD_AVAILABLE:
        return NOT_REPLACING
    return NOT_REPLACING_QUEUED if p.queue else None


def start_rung(p: Pass, wanted: str, why: str, current: dict, failed_index: int | None) -> recovery.Start:
    """The rung the failure starts at: RestartRanks needs every pod ready in place; ReplacePod every pod but the
    failed one (so a RestartRanks whose failed pod cannot restart in place becomes ReplacePod)."""
    ledger, limits = p.s.recoveries, bounds(p)
    ready, reason = in_place_ready(p, current)
    if failed_index is None:
        replace_ready, replace_reason = False, "the failure names no pod to replace"
    else:
        replace_ready, replace_reason = in_place_ready(p, current, excluding=failed_index)
    refused = not_replacing(p)
    if recovery.coarser(wanted, limits.finest_rung) == RESTART_RANKS and not ready and replace_ready \
            and refused is None:
        wanted, why = REPLACE_POD, f"{why}; {reason}: replacing that pod"
    rung = recovery.coarser(wanted, limits.finest_rung)
    start = recovery.starting_rung(wanted, why, limits, ledger, p.o.now,
                                   replace_ready if rung == REPLACE_POD else ready,
                                   replace_reason if rung == REPLACE_POD else reason)
    if start.rung == REPLACE_POD and refused is not None:
        return recovery.Start(RESTART_GANG, f"{start.why}; {refused}")
    return start


def escalate_for(p: Pass, record: RecoveryRecord, failure: Failure, what: str, fix: str, current: dict) -> Decision:
    """A second failure while an in-place rung runs: the next rung for the same incident (not counted again).
    ReplacePod when RestartRanks failed and every other pod can restart in place, else RestartGang."""
    previous = record.rungs[-1]
    following = recovery.escalate(previous)
    why = f"{what}: a second failure while {previous} ran"
    if following == REPLACE_POD:
        ready, reason = (in_place_ready(p, current, excluding=failure.index) if failure.index is not None
                         else (False, "the failure names no pod to replace"))
        refused = not_replacing(p)
        if ready and refused is None:
            recovery.climb(record, REPLACE_POD, why, p.o.now)
            text = (f"{why}; escalating to ReplacePod: replacing pod index {failure.index}, the others restart "
                    f"their ranks in place, rank generation {rank_generation(p) + 1}")
            return replace_pod(p, record, failure, text, fix, current)
        following, why = RESTART_GANG, f"{why}; {refused or reason}"
    recovery.climb(record, following, why, p.o.now)
    p.d.emit("Warning", "RecoveryEscalated", f"{why}; escalating to {following}")
    restart_gang_for(p, current, f"{why}; escalating to {following}")
    return p.d


def start_incident(p: Pass, failure: Failure, start: recovery.Start, counted: bool) -> RecoveryRecord:
    training_step = p.training_step
    return recovery.open_incident(
        p.s.recoveries, cause=failure.cause, rung=start.rung, why=start.why, detected=failure.time or p.o.now,
        decided=p.o.now, attempt=p.attempt, counted=counted, pod=failure.pod,
        node=failure.node, rank=failure.rank, step=failure.step if failure.step is not None else training_step)


def restart_ranks(p: Pass, record: RecoveryRecord, failure: Failure, text: str, fix: str) -> Decision:
    """RestartRanks: the next rank generation to every launcher; pods, IPs, chips and rank table kept."""
    generation = rank_generation(p) + 1
    p.recovery().generation, p.recovery().rung = generation, RESTART_RANKS
    recovery.mark(record, "pods_ready", p.o.now)  # no pod went: they are ready at the decision
    return _relaunch(p, generation, failure, text, fix)


def replace_pod(p: Pass, record: RecoveryRecord, failure: Failure, text: str, fix: str, current: dict) -> Decision:
    """ReplacePod: the failed pod deleted (at once, without grace, when its node is lost) and placed again at
    its index; the next rank generation to every launcher, the new pod's included."""
    index = failure.index
    if index is None:
        raise ValueError("ReplacePod needs the failed pod's index (start_rung never picks it without one)")
    generation = rank_generation(p) + 1
    state = p.recovery()
    state.generation, state.rung, state.replacing, state.unplaced = generation, REPLACE_POD, index, None
    membership.replaced(p, index)
    old = current.get(index)
    if old is not None and not is_deleting(old):
        p.d.act(DeletePods((old["metadata"]["name"],), force=failure.cause == "NodeNotReady"))
    p.d.act(PlaceReplacement(index, replacement_request(p, index, record)))
    return _relaunch(p, generation, failure, text, fix)


def replacement_request(p: Pass, index: int, record: RecoveryRecord) -> GangRequest:
    """The one-pod request ReplacePod places: the job's chips, near the pod's peers, the suspects avoided."""
    avoided = set(p.s.avoided_nodes) | set(record.avoid)
    return replace(p.gang_request(p.resolved, avoided), pod_count=1, groups=(),
                   near_nodes=frozenset(peer_nodes(p, index)))


def peer_nodes(p: Pass, index: int) -> list[str]:
    """The nodes of the pods that share the first placement group of pod `index` (its TP/stage/DP peers, in the
    priority order of gang/layout): the racks the replacement should join, as the gang's placement would."""
    nodes = p.placed_nodes  # under Volcano "" for a pod it has not bound
    for group in layouts.from_resolved(p.resolved).placement_groups():
        peers = [nodes[i] for i in group if i != index and i < len(nodes) and nodes[i]]
        if index in group and peers:
            return peers
    return [node for i, node in enumerate(nodes) if i != index and node]


def _relaunch(p: Pass, generation: int, failure: Failure, text: str, fix: str) -> Decision:
    """The next rank generation to every launcher, and the job Restarting until they report it stepping."""
    p.d.act(membership.signal(p, generation))
    return p.restarting(failure.cause, text, event=("Warning", failure.cause, f"{text}. Fix: {fix}"))


def replacing(p: Pass) -> int | None:
    return p.s.recovery.replacing if p.s.recovery and p.rung == REPLACE_POD else None


def seen_for_failures(p: Pass, current: dict) -> dict:
    """The pods a failure is looked for in: not the old pod ReplacePod is deleting."""
    index = replacing(p)
    if index is None or index not in current or not is_deleting(current[index]):
        return current
    return {i: pod for i, pod in current.items() if i != index}


def replacement_step(p: Pass, current: dict) -> bool:
    """While ReplacePod runs and its pod is not back: RestartGang when no node fits it or the rung timed out;
    the wait while the old pod goes. True when the pass ends here."""
    index = replacing(p)
    record = recovery.current_incident(p.s.recoveries)
    if index is None or record is None:
        return False
    state = p.recovery()
    if state.unplaced and elastic_steps.unplaced_step(p, current, record, index,
                                                      replacement_request(p, index, record)):
        return True
    if state.unplaced:
        why = f"no node fits the replacement of pod index {index}: {state.unplaced}"
        recovery.climb(record, RESTART_GANG, why, p.o.now)
        p.d.emit("Warning", "RecoveryEscalated", f"{why}; escalating to RestartGang")
        return restart_gang_for(p, current, why)
    over = recovery.timed_out(REPLACE_POD, parse_time(record.decided), bounds(p), p.o.now)
    if over is not None:
        why = f"ReplacePod passed its timeout of {bounds(p).replace_pod_timeout:.0f}s (spec.runPolicy.recovery)"
        recovery.climb(record, RESTART_GANG, why, p.o.now)
        p.d.emit("Warning", "RecoveryTimeout", f"{why}: escalating to RestartGang")
        return restart_gang_for(p, current, why)
    old = current.get(index)
    if old is not None and is_deleting(old):
        name = old["metadata"]["name"]
        p.phase("Restarting", f"ReplacePod: waiting for the old pod {name} to go")
        p.requeue(1.0)
        return True
    return False



# -- following a rung ----------------------------------------------------------------------------------------
def signal_launchers(p: Pass) -> None:
    """Level-based: the channel holds the generation status names (after a failover, a lost write, a
    deleted channel too). A channel without one (none yet, or only the launchers' reports) means generation 0."""
    wanted = membership.signal(p, rank_generation(p))
    if wanted in p.d.actions:
        return  # this pass says it already
    if (p.o.launcher_generation or 0) != wanted.generation or p.o.launcher_world != wanted.world \
            or p.o.launcher_checkpoint != wanted.checkpoint:
        p.d.act(wanted)


def follow_in_place(p: Pass, current: dict) -> bool:
    """While an in-place rung runs: its milestones from the launchers' reports; Recovered at the first step
    after; the next rung when it passes its timeout. True while it still runs (the pass ends here)."""
    rung, record = p.rung, recovery.current_incident(p.s.recoveries)
    if rung not in FOLLOWED_IN_PLACE or record is None:
        if rung is not None:
            p.recovery().rung = None
        return False
    generation, pod_count = rank_generation(p), p.resolved.pod_count
    reports = {index: report for index, report in launcher_reports(p, current).items()
               if report.generation == generation}
    started = [report for report in reports.values() if report.state in (STARTED, STEPPING)]
    recovery.mark(record, "pods_ready", p.o.now)  # this step runs once every pod runs (ReplacePod: again)
    if len(started) == pod_count:
        recovery.mark(record, "ranks_relaunched", max((r.time or p.o.now) for r in started))
    stepping = [report for report in reports.values() if report.state == STEPPING]
    if stepping:
        recovered(p, record, min(stepping, key=lambda r: (r.time or p.o.now)))
        p.recovery().replacing = None
        return False
    timer = REPLACE_POD if rung in (SHRINK, GROW) else rung  # an elastic rung that kept pods: bounded as ReplacePod
    over = recovery.timed_out(timer, parse_time(record.decided), bounds(p), p.o.now)
    if over is not None:
        # every pod runs: no lost pod for ReplacePod to make again, so a timed-out rung restarts the gang
        limit = bounds(p).timeout(timer)
        why = f"{rung} passed its timeout of {limit:.0f}s (spec.runPolicy.recovery)"
        recovery.climb(record, RESTART_GANG, why, p.o.now)
        p.d.emit("Warning", "RecoveryTimeout", f"{why}: escalating to RestartGang")
        return restart_gang_for(p, current, why)
    message = (f"{rung} (rank generation {generation}): {len(started)}/{pod_count} launchers restarted their "
               f"ranks; waiting for the first step")
    p.phase("Restarting", message)
    p.cond("Running", False, record.cause, message)
    left = recovery.seconds_left(timer, parse_time(record.decided), bounds(p), p.o.now)
    p.requeue(min(2.0, left) if left is not None else 2.0)
    return True


def recovered(p: Pass, record: RecoveryRecord, report: LauncherReport) -> None:
    moment = report.time or p.o.now
    recovery.resumed(record, report.step if report.step is not None else (report.resumed_from or 0) + 1,
                     moment, report.resumed_from)
    if p.s.recovery is not None:
        p.s.recovery.rung = None
    redone = f", {record.steps_redone} steps redone" if record.steps_redone is not None else ""
    message = (f"{record.recovered_by}: training stepped again {record.seconds or 0:.1f}s after the "
               f"fault, from the checkpoint of step {record.resumed_from_step}{redone}")
    p.cond("Restarting", False, "Recovered", message)
    p.d.emit("Normal", "Recovered", message)


def follow_gang(p: Pass, current: dict) -> None:
    """The milestones of a whole-gang restart, once the new attempt runs: pods ready now; ranks relaunched and
    the first step after from the launchers' reports, else from telemetry of the new attempt."""
    record = recovery.current_incident(p.s.recoveries)
    if record is None or record.rungs[-1] not in WHOLE_GANG_RUNGS or (record.attempt or 0) >= p.attempt:
        return
    recovery.mark(record, "pods_ready", p.o.now)
    reports = list(launcher_reports(p, current).values())
    started = [report for report in reports if report.state in (STARTED, STEPPING)]
    if reports and len(started) == p.resolved.pod_count:
        recovery.mark(record, "ranks_relaunched", max((r.time or p.o.now) for r in started))
    stepping = [report for report in reports if report.state == STEPPING]
    if stepping:
        recovered(p, record, min(stepping, key=lambda r: (r.time or p.o.now)))
        return
    sample, decided = p.o.telemetry, parse_time(record.decided)
    if sample is not None and sample.ok and sample.step and decided and sample.sampled_at >= decided:
        recovery.resumed(record, int(sample.step), sample.sampled_at)
        message = f"{record.rungs[-1]}: training stepped again {record.seconds or 0:.1f}s after the fault"
        p.cond("Restarting", False, "Recovered", message)
        p.d.emit("Normal", "Recovered", message)
