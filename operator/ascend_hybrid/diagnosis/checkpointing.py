"""The checkpoint interval of `training.checkpoint.everySteps: auto` (pure): Young/Daly's optimum from the save
cost the trainer measures and the failure rate the operator sees, in steps, bounded, changed only when it moves.

Daly (2006), for a blocking save of δ seconds and a mean time between failures M:
    τ = √(2δM) · (1 + ⅓·√(δ/2M) + ⅑·(δ/2M)) − δ     for δ < 2M, else M
(Young's √(2δM) is its first term). The interval is τ of training between saves, in steps of the job's healthy
pace; Du et al. (ICPP 2020) show the formula holds for stochastic step times when saves fall on step ends.

The failure rate: this job's incidents (any cause but a growth or an action for slowness), as an exponentially
weighted count over FAILURE_HORIZON (old failures fade; once the ledger holds its 32 incidents, over the span they
cover), plus — where
the cluster's node faults are known (the shell counts them over every job's ledger) — its nodes' share of them in
place of the job's own node faults: a job of 64 nodes on a cluster of 1 024 learns its node-fault rate from sixteen
times the faults it would see alone. With no failure seen yet, the job's exposure counts as one failure (an
interval that grows as the job runs cleanly), so the first failures do not find it checkpointing too rarely.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from ascend_hybrid.contracts.conditions import parse_time, timestamp
from ascend_hybrid.spec.api import AscendHybridJobStatus, CheckpointInterval, RecoveryRecord

FAILURE_HORIZON_SECONDS = 7 * 86400.0  # the weight of a failure halves about every 4.9 days
MIN_INTERVAL_SECONDS = 30.0            # never save more often than this
MAX_INTERVAL_SECONDS = 6 * 3600.0      # nor less often (a lost node costs at most this much training)
MAX_SAVE_SHARE = 0.5                   # nor so often that saves take more than half the time
CHANGE_FRACTION = 0.1                  # a new interval is announced only when it differs by more than this
MARGIN_SECONDS = 60.0                  # it applies from a step at least this far ahead (every launcher has it)
MIN_MARGIN_STEPS = 2
NOT_FAILURES = frozenset({"CapacityReturned", "SlowNode"})  # a growth, an action for slowness: no fault
NODE_CAUSES = frozenset({"NodeNotReady", "ChipUnhealthy"})
LEDGER_KEPT = 32  # status.recoveries keeps this many incidents (recovery.LEDGER_SIZE)


@dataclass(frozen=True)
class NodeFaults:
    """The cluster's node faults over a window: faults seen on the nodes jobs ran on, and those nodes' exposure."""

    faults: float
    node_seconds: float

    @property
    def rate(self) -> float | None:
        """Faults per node-second; None without enough exposure or any fault."""
        return self.faults / self.node_seconds if self.faults > 0 and self.node_seconds > 0 else None


def daly_seconds(save_seconds: float, mtbf_seconds: float) -> float:
    """Daly's optimal compute time between saves (seconds)."""
    if save_seconds <= 0:
        return MIN_INTERVAL_SECONDS
    if save_seconds >= 2 * mtbf_seconds:
        return mtbf_seconds
    ratio = save_seconds / (2 * mtbf_seconds)
    return math.sqrt(2 * save_seconds * mtbf_seconds) * (1 + math.sqrt(ratio) / 3 + ratio / 9) - save_seconds


def expected_waste(interval_seconds: float, save_seconds: float, mtbf_seconds: float,
                   restart_seconds: float = 0.0) -> float:
    """First-order fraction of wall time lost: the saves, half an interval redone per failure, the restarts."""
    return (save_seconds / (interval_seconds + save_seconds)
            + (interval_seconds + save_seconds) / (2 * mtbf_seconds) + restart_seconds / mtbf_seconds)


def weighted_failures(ledger: Iterable[RecoveryRecord], now: datetime, causes: frozenset[str] | None = None,
                      excluded: frozenset[str] = frozenset()) -> float:
    """The job's incidents, each weighted exp(−age / horizon)."""
    total = 0.0
    for record in ledger:
        cause = record.cause
        detected = parse_time(record.detected)
        if detected is None or cause in NOT_FAILURES or cause in excluded or (causes is not None and cause not in causes):
            continue
        total += math.exp(-max((now - detected).total_seconds(), 0.0) / FAILURE_HORIZON_SECONDS)
    return total


def weighted_exposure(age_seconds: float) -> float:
    """∫ exp(−t / horizon) over the job's age: the exposure the weighted count is measured over."""
    return FAILURE_HORIZON_SECONDS * (1 - math.exp(-max(age_seconds, 0.0) / FAILURE_HORIZON_SECONDS))


@dataclass(frozen=True)
class FailureRate:
    mtbf_seconds: float
    failures: float       # weighted failures of the job (node faults excluded when the cluster's rate is used)
    exposure_seconds: float
    node_rate: float | None = None  # the cluster's node faults per node-second, where used
    nodes: int = 0

    def describe(self) -> str:
        text = f"{self.failures:.1f} weighted failures over {self.exposure_seconds / 3600:.1f} h"
        if self.node_rate is not None:
            text += (f" besides node faults, plus {self.nodes} nodes at the cluster's "
                     f"{self.node_rate * 86400:.3g} node faults per node-day")
        return text


def failure_rate(ledger: Iterable[RecoveryRecord], since: datetime, now: datetime, nodes: int,
                 cluster: NodeFaults | None = None) -> FailureRate:
    """The job's mean time between failures as the operator sees it (see the module's docstring)."""
    records = list(ledger)
    age = (now - since).total_seconds()
    if len(records) >= LEDGER_KEPT:  # the ledger dropped older incidents: count over the span it still covers
        oldest = min((moment for r in records if (moment := parse_time(r.detected)) is not None), default=since)
        age = min(age, (now - oldest).total_seconds())
    exposure = weighted_exposure(age)
    node_rate = cluster.rate if cluster is not None else None
    if node_rate is not None:
        failures = weighted_failures(records, now, excluded=NODE_CAUSES)
        rate = failures / exposure if exposure > 0 else 0.0
        rate += node_rate * nodes
        if rate <= 0:
            rate = 1 / max(exposure, 1.0)
        return FailureRate(1 / rate, failures, exposure, node_rate, nodes)
    failures = weighted_failures(records, now)
    return FailureRate(max(exposure, 1.0) / max(failures, 1.0), failures, exposure)


def bounded_steps(interval_seconds: float, step_seconds: float, save_seconds: float, total_steps: int) -> int:
    """The interval in whole steps, within [MIN_INTERVAL_SECONDS, MAX_INTERVAL_SECONDS], no shorter than the
    saves themselves (at most MAX_SAVE_SHARE of the time), at most the job's steps."""
    low = max(MIN_INTERVAL_SECONDS, save_seconds * (1 - MAX_SAVE_SHARE) / MAX_SAVE_SHARE)
    seconds = min(max(interval_seconds, low), MAX_INTERVAL_SECONDS)
    return max(1, min(round(seconds / step_seconds), max(total_steps, 1)))


def fold(previous: CheckpointInterval | None, *, now: datetime, since: datetime, step: int | None,
         step_seconds: float | None, save_seconds: float | None, saves: int, ledger: Iterable[RecoveryRecord],
         nodes: int, total_steps: int, start_steps: int, cluster: NodeFaults | None = None) -> CheckpointInterval:
    """status.checkpointInterval after a pass: the interval in force (`everySteps`, from `fromStep`), the inputs it
    was computed from, and the optimum they give now. A new interval replaces the one in force only when it differs
    by more than CHANGE_FRACTION; it applies from a step MARGIN_SECONDS ahead, so every launcher has it before.
    `previous` is not changed."""
    state = previous.model_copy() if previous is not None else CheckpointInterval()
    if state.every_steps is None:
        state.every_steps = start_steps
    if state.from_step is None:
        state.from_step = 0
    if save_seconds is not None and saves > 0:
        state.save_seconds, state.saves = round(save_seconds, 4), saves
    rate = failure_rate(ledger, since, now, nodes, cluster)
    state.mtbf_seconds, state.failures = round(rate.mtbf_seconds, 1), round(rate.failures, 3)
    state.exposure_seconds, state.basis = round(rate.exposure_seconds, 1), rate.describe()
    if rate.node_rate is not None:
        state.node_faults_per_node_day = round(rate.node_rate * 86400, 6)
    measured = state.save_seconds
    if measured is None or not step_seconds or step_seconds <= 0:
        state.reason = "waiting for the first measured save" if measured is None else "waiting for the job's healthy pace"
        return state
    optimum = daly_seconds(measured, rate.mtbf_seconds)
    wanted = bounded_steps(optimum, step_seconds, measured, total_steps)
    state.optimum_seconds, state.step_seconds, state.optimum_steps = round(optimum, 1), round(step_seconds, 6), wanted
    current = state.every_steps
    if abs(wanted - current) <= CHANGE_FRACTION * current or step is None:
        state.reason = "in force" if wanted == current else f"within {CHANGE_FRACTION:.0%} of the optimum"
        return state
    margin = max(MIN_MARGIN_STEPS, math.ceil(MARGIN_SECONDS / step_seconds))
    state.previous_every_steps = in_force_before(state, step)
    state.every_steps, state.from_step, state.changed_at = wanted, step + margin, timestamp(now)
    state.reason = (f"Daly: save {measured:.3g}s, MTBF {rate.mtbf_seconds / 3600:.3g}h → "
                    f"{optimum:.0f}s = {wanted} steps of {step_seconds:.3g}s")
    return state


def in_force_before(state: CheckpointInterval, step: int) -> int:
    """The interval the trainer processes save at by `step`: the last one once its fromStep is reached, else the
    one before it (a change not in force yet is replaced as a whole)."""
    every = state.every_steps or 0
    if step >= (state.from_step or 0) or state.previous_every_steps is None:
        return every
    return state.previous_every_steps


def cluster_node_faults(statuses: Iterable[AscendHybridJobStatus], now: datetime) -> NodeFaults:
    """The node faults every job's ledger saw (a node lost under two jobs at once counts once), weighted as the
    job's own failures are, against the weighted time the jobs' nodes ran them: the rate of node faults per node
    on the nodes jobs use."""
    seen: dict[tuple[str, int], float] = {}
    exposure = 0.0
    for status in statuses:
        since = parse_time(status.start_time)
        nodes = len(set(status.placement.nodes if status.placement is not None else ()))
        if since is None or not nodes:
            continue
        exposure += nodes * weighted_exposure((now - since).total_seconds())
        for record in status.recoveries:
            detected = parse_time(record.detected)
            if record.cause in NODE_CAUSES and record.node and detected is not None:
                weight = math.exp(-max((now - detected).total_seconds(), 0.0) / FAILURE_HORIZON_SECONDS)
                seen[(record.node, int(detected.timestamp()) // 60)] = weight
    return NodeFaults(sum(seen.values()), exposure)
