"""Live anomalies of a running attempt (pure): each telemetry sample, folded into the attempt's short history in
status.monitoring, turns the conditions LoadImbalanced, Straggling and TrainingStalled on or off.

- LoadImbalanced: the busiest and the idlest chip of the job differ by more than
  spec.monitoring.utilizationSpreadPercent points for imbalanceSamples samples in a row (seed §5.3 in
  docs/design.md §11: some NPUs busy, some idle). Off at the first sample under the threshold.
- Straggling: the step time since the last sample (its wall time per step, the lead trainer's checkpoint saves
  between the two samples taken out) is above stragglerFactor × the median of the recent ones (stragglerWindow)
  and, where the planner predicts a step time, above stragglerFactor × the prediction as well (a job as slow as the
  planner said is not straggling), for stragglerSamples samples in a row: a save still running when the trainer
  was read makes one sample slow, not two. Needs three earlier step times; off at the next step on pace. The
  slowest pod is named where pods report their own step times.
- TrainingStalled: the step has not advanced for stallSeconds, counted from the first step seen (graph compilation
  before step 1 is no stall). Off when the step moves.

Everything is computed from the samples' own times, so a pass that sees the same sample again changes nothing.
The history is the status model (MonitoringStatus): `fold` returns a new one and leaves the one it was given as it
was.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from datetime import datetime

from ascend_hybrid.contracts.conditions import parse_time, timestamp
from ascend_hybrid.monitoring.progress import ChipReading, Sample
from ascend_hybrid.spec.api import Monitoring, MonitoringStatus

LOAD_IMBALANCED, STRAGGLING, TRAINING_STALLED = "LoadImbalanced", "Straggling", "TrainingStalled"
CONDITIONS = (LOAD_IMBALANCED, STRAGGLING, TRAINING_STALLED)
MIN_HISTORY = 3           # step times needed before a median means anything
SLOWEST_POD_MARGIN = 1.1  # a pod is named the slowest when it is this much slower than the median pod
SHOWN_CHIPS = 3
IMBALANCE_CHECKS = ("check the pipeline stage split (layers per stage; the embedding and output layers add work to "
                    "the first and last stage), the MoE routing (expert load, capacity factor, auxiliary loss) and "
                    "the data distribution across the data-parallel ranks")


@dataclass(frozen=True)
class Change:
    """The state of one anomaly condition after a sample."""

    kind: str
    on: bool
    reason: str
    message: str


def _chip(reading: ChipReading) -> str:
    return f"chip {reading.chip} of pod {reading.pod} at {reading.percent:.0f}%"


def imbalance(chips: tuple[ChipReading, ...], count: int, spec: Monitoring) -> Change:
    ordered = sorted(chips, key=lambda reading: (reading.percent, reading.pod, reading.chip))
    low, high = ordered[0], ordered[-1]
    spread = high.percent - low.percent
    median = statistics.median(reading.percent for reading in ordered)
    figures = (f"NPU utilization spread {spread:.0f} points between {_chip(low)} and {_chip(high)} (median "
               f"{median:.0f}%, threshold spec.monitoring.utilizationSpreadPercent={spec.utilization_spread_percent:g})")
    if count >= spec.imbalance_samples:
        idlest = ", ".join(_chip(reading) for reading in ordered[:SHOWN_CHIPS])
        return Change(LOAD_IMBALANCED, True, "UtilizationSpread",
                      f"{figures} for {count} samples; idlest: {idlest}; {IMBALANCE_CHECKS}")
    return Change(LOAD_IMBALANCED, False, "Balanced" if spread <= spec.utilization_spread_percent else "Watching",
                  figures)


def slowest_pod(per_pod: tuple[tuple[str, float], ...]) -> str:
    if len(per_pod) < 2:
        return ""
    pod, seconds = max(per_pod, key=lambda item: (item[1], item[0]))
    median = statistics.median(value for _, value in per_pod)
    if seconds <= SLOWEST_POD_MARGIN * median:
        return ""
    return f"; the slowest pod is {pod} ({seconds:.3g}s per step, median pod {median:.3g}s)"


def is_slow(recent: float, history: list[float], spec: Monitoring, predicted: float | None) -> bool:
    """The step time is above stragglerFactor × the recent median (and × the planner's prediction, where it has
    one); never before there is a history to compare with."""
    if len(history) < MIN_HISTORY:
        return False
    factor = spec.straggler_factor
    return recent > factor * statistics.median(history) and (predicted is None or recent > factor * predicted)


def straggling(recent: float, history: list[float], spec: Monitoring, predicted: float | None,
               per_pod: tuple[tuple[str, float], ...], slow_samples: int) -> Change | None:
    if len(history) < MIN_HISTORY:
        return None
    median = statistics.median(history)
    figures = f"the last steps took {recent:.3g}s each, the median of the recent ones {median:.3g}s"
    if predicted is not None:
        figures += f", the planner predicted {predicted:.3g}s"
    if slow_samples == 0:
        return Change(STRAGGLING, False, "OnPace", figures)
    if slow_samples < spec.straggler_samples:
        return Change(STRAGGLING, False, "Watching", f"{figures}: {slow_samples} of "
                      f"spec.monitoring.stragglerSamples={spec.straggler_samples} slow samples")
    return Change(STRAGGLING, True, "SlowSteps",
                  f"{figures} for {slow_samples} samples: above spec.monitoring.stragglerFactor="
                  f"{spec.straggler_factor:g} times{slowest_pod(per_pod)}; check that pod's node (npu-smi: "
                  "utilization, temperature, other work on its NPUs) and the HCCL bandwidth between the nodes")


def mark_saves(state: MonitoringStatus, sample: Sample) -> None:
    """Keeps the lead trainer's checkpoint seconds beside lastStep, where it reports them."""
    seconds = sample.checkpoint_seconds_sum
    if seconds is None or seconds != seconds:
        state.checkpoint_seconds = None
    else:
        state.checkpoint_seconds = round(float(seconds), 6)


def saved_seconds(state: MonitoringStatus, sample: Sample) -> float:
    """The lead trainer's checkpoint seconds since the last step reading (0 where either reading has none); a sum
    below the last one is a new trainer process's, counted from its start."""
    before, now = state.checkpoint_seconds, sample.checkpoint_seconds_sum
    if before is None or now is None or now != now:
        return 0.0
    return float(now) - before if float(now) >= before else float(now)


def stalled(step: int, since: datetime, now: datetime, spec: Monitoring) -> Change:
    idle = (now - since).total_seconds()
    figures = f"step {step} since {timestamp(since)} ({idle:.0f}s; threshold spec.monitoring.stallSeconds=" \
              f"{spec.stall_seconds})"
    if idle < spec.stall_seconds:
        return Change(TRAINING_STALLED, False, "Progressing", figures)
    return Change(TRAINING_STALLED, True, "NoProgress",
                  f"no training step for {idle:.0f}s while every pod runs: {figures}. A hung collective ends as "
                  "HCCLExecTimeout after spec.hccl.execTimeoutSeconds; check the pods' logs, the data loader and "
                  "npu-smi on their nodes")


def fold_step(state: MonitoringStatus, step: int, sample: Sample, spec: Monitoring,
              predicted: float | None) -> list[Change]:
    """Folds the lead trainer's step into `state`: Straggling and TrainingStalled as the step moved or not."""
    now = sample.sampled_at
    last_step, last_at = state.last_step, parse_time(state.last_step_at)
    if last_step is None or last_at is None or step < last_step:
        state.last_step, state.last_step_at, state.slow_samples = step, timestamp(now), 0  # the first, or a restart
        mark_saves(state, sample)
        return []
    if step == last_step:
        return [stalled(step, last_at, now, spec)] if step >= 1 else []
    history = list(state.step_seconds)
    recent = max((now - last_at).total_seconds() - saved_seconds(state, sample), 0.0) / (step - last_step)
    slow_samples = (state.slow_samples or 0) + 1 if is_slow(recent, history, spec, predicted) else 0
    state.slow_samples = slow_samples
    change = straggling(recent, history, spec, predicted, sample.pod_step_seconds, slow_samples)
    measured = history + [recent] if recent > 0 else history  # a save that filled the interval measured no step
    state.last_step, state.last_step_at = step, timestamp(now)
    state.step_seconds = [round(value, 6) for value in measured[-spec.straggler_window:]]
    mark_saves(state, sample)
    return ([change] if change else []) + [stalled(step, now, now, spec)]


def fold(previous: MonitoringStatus | None, sample: Sample, spec: Monitoring,
         predicted_step_seconds: float | None = None) -> tuple[MonitoringStatus, list[Change]] | None:
    """The new status.monitoring and the changes this sample makes (only conditions it says something about);
    None when the sample is not newer than the last one folded in."""
    now = sample.sampled_at
    last_sampled = parse_time(previous.sampled_at) if previous is not None else None
    if last_sampled is not None and now <= last_sampled:
        return None
    state = previous.model_copy(deep=True) if previous is not None else MonitoringStatus()
    state.sampled_at = timestamp(now)
    changes: list[Change] = []
    chips = tuple(reading for reading in sample.chips if reading.percent == reading.percent)
    if len(chips) >= 2:
        spread = max(r.percent for r in chips) - min(r.percent for r in chips)
        count = (state.imbalanced_samples or 0) + 1 if spread > spec.utilization_spread_percent else 0
        state.imbalanced_samples = count
        changes.append(imbalance(chips, count, spec))
    if sample.step is not None and sample.step == sample.step:
        changes += fold_step(state, int(sample.step), sample, spec, predicted_step_seconds)
    return state, changes
