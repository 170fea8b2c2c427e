"""The reconcile steps of a slow node (pure): each telemetry sample scored for SlowNode (monitoring/slowness.py),
and a confirmed slow node acted on by spec.runPolicy.slowness at the next checkpoint.

- Report: the condition, one Warning event SlowNode, the metric — nothing else.
- Replace: once training passed a checkpoint after the confirmation (the interval's next, or one the trainer is
  asked for — saveAt on the launchers' channel — when waiting for the interval's at the slowdown loses more than a
  save costs), the node is avoided and only its pod made again elsewhere (the recovery ladder's ReplacePod; the other pods restart their ranks in place from that
  checkpoint); with spec.elastic and no node that fits, the ladder shrinks around it after
  replacementTimeoutSeconds, as for a lost node.
- Shrink (spec.elastic): at the checkpoint, the node avoided and the running pods but its own kept in a smaller data
  degree (the global batch kept), grown back once a node fits the whole gang again.

An action is taken only while the job's steps are at least minSlowdown times its healthy pace, at most
maxActionsPerHour times an hour, and only when the steps left are worth more than it costs (a recovery as long as
the job's past ones, or before it has any as long as its own start, RECOVERY_COST_SECONDS before either is measured;
the benefit counted with a margin of COST_MARGIN).
Each action is an incident of the ledger with cause SlowNode, not counted against backoffLimit; the node joins
status.avoidedNodes and status.slowNodes (kept avoided when an elastic job grows back).
"""

from __future__ import annotations

import math
import statistics
from datetime import timedelta

from ascend_hybrid.contracts.conditions import parse_time, timestamp
from ascend_hybrid.contracts.podview import node_of
from ascend_hybrid.diagnosis import goodput, recovery
from ascend_hybrid.diagnosis.failures import Failure
from ascend_hybrid.diagnosis.recovery import REPLACE_POD, SHRINK
from ascend_hybrid.monitoring import slowness
from ascend_hybrid.reconcile import checkpoint_steps, elastic_steps, recovery_steps
from ascend_hybrid.reconcile.state import Pass
from ascend_hybrid.spec.api import GoodputAccount, RecoveryRecord, SlowNodeFinding, SlowNodeRecord

REPORT, REPLACE, SHRINK_ACTION = "Report", "Replace", "Shrink"
UNMEASURED_SAVE_SECONDS = 20.0  # what a save costs before the trainer has timed one
SAVE_MARGIN_SECONDS = 15.0     # the asked save's step this far ahead: every launcher has it before
RECOVERY_COST_SECONDS = 120.0  # what a recovery costs before the job has measured one, or its own start
COST_MARGIN = 2.0              # the steps left must be worth this many times the action's cost
SLOW_NODES_KEPT = 16
PACE_SAMPLES = 3               # step times the recent pace is the median of


def record_slowness(p: Pass, current: dict) -> bool:
    """SlowNode from this pass's sample; the policy's action when one is due. True when the pass ends here (an
    action was decided)."""
    sample = p.o.telemetry
    e = p.resolved
    if sample is not None and sample.ok:
        stage_size = max(e.world_size // max(e.pipeline, 1), 1)
        node_of_pod = {pod["metadata"]["name"]: node_of(pod) or "" for pod in current.values()}
        healthy = healthy_pace(p)
        recent = recent_pace(p.s.monitoring.step_seconds if p.s.monitoring is not None else [])
        epoch = f"{p.s.attempt}/{recovery_steps.rank_generation(p)}"
        folded = slowness.fold(p.s.slowness, sample, node_of_pod, lambda rank: rank // stage_size,
                               e.spec.run_policy.slowness, healthy, recent, epoch)
        if folded is not None:
            p.s.slowness, change = folded
            if change is not None:
                report(p, change)
    return act(p, current)


def healthy_pace(p: Pass) -> float | None:
    """The job's healthy seconds per step (status.goodputAccount), None until the account has measured it."""
    account = p.s.goodput_account
    return account.healthy_step_seconds if account is not None else None


def recent_pace(step_seconds: list[float]) -> float | None:
    """The job's recent wall time per step, as its healthy pace is measured: the median of its last PACE_SAMPLES
    step times, so one reading that a checkpoint save straddled (the save's seconds taken out of the wrong one)
    moves it not at all."""
    recent = [float(value) for value in step_seconds[-PACE_SAMPLES:]]
    return statistics.median(recent) if recent else None


def report(p: Pass, change: slowness.Change) -> None:
    if change.on and not p.holds(slowness.SLOW_NODE):
        p.d.emit("Warning", slowness.SLOW_NODE, change.message)
    p.cond(slowness.SLOW_NODE, change.on, change.reason, change.message)


def act(p: Pass, current: dict) -> bool:
    """The policy's action on the confirmed slow node, once it is due; why not, once, in status.slowness.decision."""
    confirmed = p.s.slowness.confirmed if p.s.slowness is not None else None
    policy = p.resolved.spec.run_policy.slowness
    if confirmed is None or policy.action == REPORT or confirmed.acted or recovery_steps.in_place_running(p):
        return False
    why_not = hold(p, confirmed)
    if why_not is not None:
        confirmed.decision = why_not
        return False
    node = confirmed.node
    indexes = sorted(index for index, pod in current.items() if node_of(pod) == node)
    if len(indexes) != 1:
        confirmed.decision = (f"node {node} runs {len(indexes)} pods of this job: only a node with one pod is "
                                 "replaced or shrunk around (reported only)")
        return False
    index = indexes[0]
    pod = current[index]["metadata"]["name"]
    ready, reason = recovery_steps.in_place_ready(p, current, excluding=index)
    if not ready:
        confirmed.decision = f"the other pods cannot restart in place ({reason}): reported only"
        return False
    return replace_or_shrink(p, current, confirmed, index, pod)


def hold(p: Pass, confirmed: SlowNodeFinding) -> str | None:
    """Why the action waits or is not taken (None: it is due now)."""
    policy = p.resolved.spec.run_policy.slowness
    slowdown = confirmed.slowdown
    if slowdown is None:
        return "waiting for the job's healthy pace (status.goodputAccount) to weigh the slowdown"
    if slowdown < policy.min_slowdown:
        return (f"the job's steps take {slowdown:.2f}× its healthy pace, under "
                f"spec.runPolicy.slowness.minSlowdown={policy.min_slowdown:g}: reported only")
    hour_ago = p.o.now - timedelta(hours=1)
    taken = [record for record in p.s.recoveries if record.cause == slowness.SLOW_NODE
             and (parse_time(record.decided) or hour_ago) > hour_ago]
    if len(taken) >= policy.max_actions_per_hour:
        return (f"{len(taken)} actions for slowness in the last hour reach "
                f"spec.runPolicy.slowness.maxActionsPerHour={policy.max_actions_per_hour}: reported only")
    every = checkpoint_steps.every_steps(p)
    if every is None:
        return "the job keeps no checkpoint: an action would restart it from its first step (reported only)"
    worth = worth_it(p, slowdown)
    if worth is not None:
        return worth
    return checkpoint_wait(p, confirmed, every, slowdown)


def checkpoint_wait(p: Pass, confirmed: SlowNodeFinding, every: int, slowdown: float) -> str | None:
    """None once training passed a checkpoint after the confirmation: any the lead trainer finished since
    (`saved_since`), the one asked for (saveAt), or the interval's next. When waiting for the interval's, beyond
    SAVE_MARGIN_SECONDS, loses more at the slowdown than one save costs (`save_cost`), the trainer is asked for one
    SAVE_MARGIN_SECONDS ahead (the launchers' channel, checkpoint_steps.channel_value)."""
    step, since = p.training_step, confirmed.at_step
    if step is None or since is None:
        return "waiting for the training step"
    if saved_since(p, confirmed):
        return None
    asked = confirmed.save_at
    if asked is not None:
        return None if step > asked else f"waiting for the checkpoint asked for at step {asked}"
    boundary = (since // every + 1) * every
    if step > boundary:
        return None
    pace = (healthy_pace(p) or 0.0) * slowdown
    waiting, save = (boundary - step) * pace, save_cost(p)
    if pace > 0 and (waiting - SAVE_MARGIN_SECONDS) * (1 - 1 / slowdown) > save:
        asked = step + max(2, math.ceil(SAVE_MARGIN_SECONDS / pace))
        confirmed.save_at = asked
        return (f"asked the trainer for a checkpoint at step {asked}: the next of the interval, step {boundary}, is "
                f"{waiting:.0f}s away, which at {slowdown:.2f}× loses more than a save's {save:.0f}s")
    return f"waiting for the checkpoint of step {boundary} (training.checkpoint.everySteps={every})"


def saved_since(p: Pass, confirmed: SlowNodeFinding) -> bool:
    """The lead trainer finished a checkpoint save since the confirmation: its count of saves (this process's) grew
    past the count at the confirmation, whichever step it saved."""
    sample, before = p.o.telemetry, confirmed.saves_at
    count = sample.checkpoint_count if sample is not None and sample.ok else None
    return before is not None and count is not None and count == count and int(count) > before


def save_cost(p: Pass) -> float:
    """Seconds one checkpoint save takes: the trainer's own timing (its mean so far), UNMEASURED_SAVE_SECONDS
    before it has saved."""
    sample = p.o.telemetry
    if sample is not None and sample.ok and sample.checkpoint_count:
        return float(sample.checkpoint_seconds_sum or 0.0) / float(sample.checkpoint_count)
    measured = p.s.checkpoint_interval.save_seconds if p.s.checkpoint_interval is not None else None
    return measured if measured else UNMEASURED_SAVE_SECONDS


def action_cost(ledger: list[RecoveryRecord], account: GoodputAccount | None) -> float:
    """Seconds an action is expected to cost: the median of the job's past recoveries; before it has any, its own
    start (the goodput account's startsAndRestarts: pods made to its first step — what a replaced pod and the
    others' restarted ranks go through again); RECOVERY_COST_SECONDS before either is measured."""
    past = [record.seconds for record in ledger if record.outcome == recovery.RECOVERED and record.seconds is not None]
    if past:
        return statistics.median(past)
    started = goodput.buckets(account)[goodput.STARTS]
    return started if started > 0 else RECOVERY_COST_SECONDS


def worth_it(p: Pass, slowdown: float) -> str | None:
    """None when the steps left at this slowdown lose more than the action costs (with COST_MARGIN), else why not."""
    account = p.s.goodput_account
    healthy = healthy_pace(p)
    step = p.training_step
    if not healthy or step is None:
        return "waiting for the job's healthy pace"
    left = max(p.resolved.spec.training.steps - int(step), 0) * float(healthy) * slowdown
    loss = left * (1 - 1 / slowdown)
    cost = action_cost(p.s.recoveries, account)
    if loss < COST_MARGIN * cost:
        return (f"the {left:.0f}s of training left lose {loss:.0f}s at this slowdown, less than {COST_MARGIN:g}× what "
                f"an action costs ({cost:.0f}s): reported only")
    return None


def replace_or_shrink(p: Pass, current: dict, confirmed: SlowNodeFinding, index: int, pod: str) -> bool:
    policy = p.resolved.spec.run_policy.slowness
    node = confirmed.node
    step = p.training_step
    evidence = confirmed.evidence or f"node {node} is slow"
    failure = Failure(slowness.SLOW_NODE, evidence, pod=pod, index=index, node=node, step=step, time=p.o.now)
    shrink = policy.action == SHRINK_ACTION and p.resolved.spec.elastic is not None and not p.queue
    why = f"spec.runPolicy.slowness.action={policy.action}: {evidence}"
    record = recovery.open_incident(p.s.recoveries, cause=slowness.SLOW_NODE,
                                    rung=SHRINK if shrink else REPLACE_POD, why=why,
                                    detected=parse_time(confirmed.since) or p.o.now, decided=p.o.now,
                                    attempt=p.attempt, counted=False, pod=pod, node=node, step=step)
    p.avoid([node])
    remember(p, confirmed, policy.action)
    confirmed.acted = timestamp(p.o.now)
    confirmed.decision = f"{policy.action} at step {step}"
    if shrink and elastic_steps.shrink_in_place(p, current, index):
        shrunk = p.s.recoveries[-1]  # the same incident, read again: shrink_in_place climbed it with its own words
        shrunk.rungs, shrunk.why = [SHRINK], why
        p.d.emit("Warning", slowness.SLOW_NODE, f"{why}: shrinking around pod {pod}, node {node} avoided")
        return True
    if shrink:
        record.rungs = [REPLACE_POD]
        confirmed.decision = (f"Shrink at step {step}: no smaller data degree keeps the running pods (a checkpoint "
                                 "sliced per rank, or too few pods running): replaced instead")
    text = (f"{why}: node {node} avoided, pod {pod} (index {index}) made again elsewhere at the checkpoint, the "
            f"others restart their ranks in place, rank generation {recovery_steps.rank_generation(p) + 1}")
    recovery_steps.replace_pod(p, record, failure, text, "the node is avoided by this job; check its NPUs", current)
    return True


def remember(p: Pass, confirmed: SlowNodeFinding, action: str) -> None:
    """status.slowNodes: the nodes this job found slow (and acted on), newest last."""
    found = p.s.slow_nodes
    found.append(SlowNodeRecord(node=confirmed.node, since=confirmed.since, ratio=confirmed.ratio,
                                slowdown=confirmed.slowdown, action=action, at=timestamp(p.o.now)))
    del found[:-SLOW_NODES_KEPT]

