"""The reconcile step of the checkpoint interval (pure): for `training.checkpoint.everySteps: auto`, every pass of
a running job folds the lead trainer's save cost, the job's healthy pace and the failure rate into
status.checkpointInterval (diagnosis/checkpointing.py), whose interval in force goes to the launchers beside the
rank generation (membership.signal, key `checkpoint` of `<job>-recovery`)."""

from __future__ import annotations

import json

from ascend_hybrid.contracts.conditions import parse_time
from ascend_hybrid.diagnosis import checkpointing
from ascend_hybrid.reconcile.state import Pass
from ascend_hybrid.spec.api import AUTO, SlownessStatus
from ascend_hybrid.spec.resolved import ResolvedJob

START_STEPS = 100  # the trainer's interval for an auto job until the operator says one (trainer defaults.py too)


def is_auto(job: ResolvedJob) -> bool:
    checkpoint = job.spec.training.checkpoint
    return checkpoint is not None and checkpoint.every_steps == AUTO


def every_steps(p: Pass) -> int | None:
    """The interval the trainer saves at now: the spec's, or the one in force for an auto job; None without
    checkpoints."""
    checkpoint = p.resolved.spec.training.checkpoint
    if checkpoint is None:
        return None
    if checkpoint.every_steps != AUTO:
        return int(checkpoint.every_steps)
    state = p.s.checkpoint_interval
    return state.every_steps if state is not None and state.every_steps else START_STEPS


def channel_value(p: Pass) -> str | None:
    """What the launchers are told (JSON {"everySteps", "fromStep"}, "previousEverySteps" — the interval before
    fromStep, for a process that starts before it — and, while an action waits for it, "saveAt": one more save at
    that step); None for a job that saves at its spec's interval and was asked for no save."""
    if p.o.resolved is None or p.resolved.spec.training.checkpoint is None:
        return None
    save_at = requested_save(p.s.slowness)
    if not is_auto(p.resolved) and save_at is None:
        return None
    state = p.s.checkpoint_interval
    value = {"everySteps": every_steps(p) or START_STEPS, "fromStep": (state.from_step if state else None) or 0}
    if state is not None and state.previous_every_steps is not None:
        value["previousEverySteps"] = state.previous_every_steps
    if save_at is not None:
        value["saveAt"] = save_at
    return json.dumps(value, sort_keys=True)


def requested_save(state: SlownessStatus | None) -> int | None:
    """The step a confirmed slow node's action asked the trainer to save at (slowness_steps), until it acted."""
    confirmed = state.confirmed if state is not None else None
    return confirmed.save_at if confirmed is not None and not confirmed.acted else None


def record_interval(p: Pass) -> None:
    """status.checkpointInterval from this pass's reading (an auto job that runs); gone for any other job."""
    if not is_auto(p.resolved):
        p.s.checkpoint_interval = None
        return
    since = parse_time(p.s.start_time)
    if since is None:
        return
    sample = p.o.telemetry
    save, saves = None, 0
    if sample is not None and sample.ok and sample.checkpoint_count:
        saves = int(sample.checkpoint_count)
        save = float(sample.checkpoint_seconds_sum or 0.0) / saves
    account = p.s.goodput_account
    read = sample.step if sample is not None and sample.ok else None
    step = int(read) if read is not None and read == read else p.training_step
    nodes = len(set(p.placed_nodes))
    p.s.checkpoint_interval = checkpointing.fold(
        p.s.checkpoint_interval, now=p.o.now, since=since, step=step,
        step_seconds=account.healthy_step_seconds if account is not None else None, save_seconds=save, saves=saves,
        ledger=p.s.recoveries, nodes=nodes, total_steps=p.resolved.spec.training.steps,
        start_steps=START_STEPS, cluster=p.o.node_faults)
