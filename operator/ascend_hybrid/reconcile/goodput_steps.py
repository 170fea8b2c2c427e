"""The reconcile step of the goodput account (pure): every pass of a started job attributes the time since the
last one to a bucket (diagnosis/goodput.py) and writes status.goodputAccount and status.goodput.

It runs after the pass's other steps (decide()), so the job's state at the end of the pass names the bucket:
an attempt not placed yet is waiting for placement, a Running job is stepping (its time split by the lead
trainer's readings), anything else is starting or restarting.
"""

from __future__ import annotations

from ascend_hybrid.contracts.conditions import TERMINAL_JOB_PHASES, parse_time
from ascend_hybrid.diagnosis import goodput
from ascend_hybrid.monitoring.progress import Sample
from ascend_hybrid.reconcile import strategy
from ascend_hybrid.reconcile.state import Pass
from ascend_hybrid.spec.api import RecoveryRecord


def mode(p: Pass) -> str:
    """The job's state over the interval that ends with this pass."""
    if (p.s.placement.attempt if p.s.placement is not None else None) != p.s.attempt:
        return goodput.WAITING
    if p.s.phase in ("Running", *TERMINAL_JOB_PHASES):
        return goodput.RUNNING
    return goodput.STARTING


def reading(sample: Sample | None) -> goodput.Reading | None:
    """The lead trainer's process as the sample saw it; None without a step count (an image that does not export
    the step-time histogram)."""
    if sample is None or not sample.ok or sample.step is None or sample.step_count is None:
        return None
    if sample.step != sample.step or sample.step_count != sample.step_count:  # NaN: no data
        return None
    return goodput.Reading(sample.sampled_at, int(sample.step), int(sample.step_count),
                           float(sample.checkpoint_seconds_sum or 0.0), int(sample.checkpoint_count or 0))


def failed_at(ledger: list[RecoveryRecord]) -> int | None:
    """The step the newest incident hit (the trainer's report): trained, so redone when trained again."""
    return ledger[-1].step if ledger else None


def account(p: Pass, terminal_before: bool) -> None:
    """Fold this pass into status.goodputAccount; status.goodput once the healthy pace is known. Nothing before the
    job first started, nor after a pass that found it finished."""
    since = parse_time(p.s.start_time)
    if terminal_before or since is None or p.o.resolved is None:
        return
    epoch = f"{p.s.attempt}/{p.rank_generation}"
    folded = goodput.fold(p.s.goodput_account, since=since, now=p.o.now, mode=mode(p),
                          epoch=epoch, reading=reading(p.o.telemetry), world=p.resolved.world_size,
                          predicted_step_seconds=strategy.predicted_step_seconds(p.s.plan),
                          trained_to=failed_at(p.s.recoveries))
    p.s.goodput_account = folded
    value = goodput.goodput(folded)
    if value is not None:
        p.s.goodput = value
