"""The checkpoint interval of everySteps: auto (diagnosis/checkpointing.py, pure): Daly's formula on his own worked
cases, the failure rate the operator sees, the bounds, and a simulated run whose failures come at a known rate: the
interval it sets lands within 10 % of the analytic optimum at 1, 3 and 12 hours between failures, and its time lost
is within 10 % of what the optimum interval loses on the same failures."""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from ascend_hybrid.contracts.conditions import timestamp
from ascend_hybrid.diagnosis import checkpointing
from ascend_hybrid.diagnosis.checkpointing import NodeFaults
from ascend_hybrid.spec.api import AscendHybridJobStatus, CheckpointInterval, RecoveryRecord

T0 = datetime(2026, 12, 1, tzinfo=UTC)
HOUR = 3600.0


@pytest.mark.parametrize(("mtbf_hours", "minutes"), [(24, 117), (6, 57), (0.25, 9.1)])
def test_dalys_worked_cases(mtbf_hours, minutes):
    """Daly (2006): a save of 5 minutes; the optimum at 24 h, 6 h and 15 min between failures."""
    assert checkpointing.daly_seconds(300.0, mtbf_hours * HOUR) / 60 == pytest.approx(minutes, abs=0.5)


def incident(cause, hours_ago, node="n1") -> RecoveryRecord:
    return RecoveryRecord(cause=cause, node=node, detected=timestamp(T0 - timedelta(hours=hours_ago)))


def raw(record: RecoveryRecord) -> dict:
    """An incident as another job's status holds it (the shell reads every job's)."""
    return record.model_dump(by_alias=True, exclude_unset=True, mode="json")


def test_the_failure_rate_counts_the_jobs_failures_but_not_its_growths_or_actions_for_slowness():
    ledger = [incident("Unknown", 1), incident("NodeNotReady", 2), incident("CapacityReturned", 3),
              incident("SlowNode", 4)]
    rate = checkpointing.failure_rate(ledger, T0 - timedelta(hours=10), T0, nodes=4)
    assert rate.failures == pytest.approx(2.0, rel=0.02)  # weighted by their age: a week halves one
    assert rate.mtbf_seconds == pytest.approx(5 * HOUR, rel=0.05)
    clean = checkpointing.failure_rate([], T0 - timedelta(hours=10), T0, nodes=4)
    assert clean.mtbf_seconds == pytest.approx(10 * HOUR, rel=0.05)  # no failure yet: the exposure counts as one


def test_a_full_ledger_counts_its_failures_over_the_span_it_covers():
    ledger = [incident("Unknown", hours) for hours in range(32, 0, -1)]  # one an hour, the older ones dropped
    rate = checkpointing.failure_rate(ledger, T0 - timedelta(days=5), T0, nodes=4)
    assert rate.mtbf_seconds == pytest.approx(HOUR, rel=0.05)
    from ascend_hybrid.diagnosis.recovery import LEDGER_SIZE

    assert checkpointing.LEDGER_KEPT == LEDGER_SIZE


def test_the_clusters_node_faults_replace_the_jobs_own_node_faults():
    ledger = [incident("Unknown", 1), incident("NodeNotReady", 2)]
    cluster = NodeFaults(faults=20.0, node_seconds=1000 * 10 * HOUR)  # one fault per 500 node-hours
    rate = checkpointing.failure_rate(ledger, T0 - timedelta(hours=10), T0, nodes=50, cluster=cluster)
    expected = 1 / (1 / (10 * HOUR) + 50 * 20 / (1000 * 10 * HOUR))  # its software failure + 50 nodes' share
    assert rate.mtbf_seconds == pytest.approx(expected, rel=0.05)


def test_the_clusters_node_faults_come_from_every_jobs_ledger_once_per_node_and_moment():
    placed = {"startTime": timestamp(T0 - timedelta(hours=5)), "placement": {"nodes": ["n1", "n2"]}}
    one = {**placed, "recoveries": [raw(incident("NodeNotReady", 1, "n1")), raw(incident("Unknown", 1, "n2"))]}
    two = {**placed, "recoveries": [raw(incident("NodeNotReady", 1, "n1")), raw(incident("ChipUnhealthy", 2, "n2"))]}
    statuses = [AscendHybridJobStatus.model_validate(status) for status in (one, two, {"phase": "Pending"})]
    faults = checkpointing.cluster_node_faults(statuses, T0)
    assert faults.faults == pytest.approx(2.0, rel=0.01)  # n1's fault under both jobs counts once
    assert faults.node_seconds == pytest.approx(2 * 2 * 5 * HOUR, rel=0.05)


def test_the_interval_is_bounded_by_the_saves_the_clock_and_the_jobs_length():
    assert checkpointing.bounded_steps(5.0, 1.0, 1.0, 10_000) == 30            # never under 30 s
    assert checkpointing.bounded_steps(50.0, 1.0, 40.0, 10_000) == 50          # saves at most half the time
    assert checkpointing.bounded_steps(40_000.0, 1.0, 1.0, 100_000) == 21_600  # at most 6 hours
    assert checkpointing.bounded_steps(600.0, 1.0, 1.0, 200) == 200            # at most the job


def test_a_new_interval_is_announced_only_when_it_moves_and_from_a_step_ahead():
    state = checkpointing.fold(None, now=T0, since=T0 - timedelta(hours=2), step=500, step_seconds=1.0,
                               save_seconds=None, saves=0, ledger=[], nodes=2, total_steps=10**6, start_steps=100)
    assert (state.every_steps, state.reason) == (100, "waiting for the first measured save")
    ledger = [incident("Unknown", 1)]
    state = checkpointing.fold(state, now=T0, since=T0 - timedelta(hours=2), step=500, step_seconds=1.0,
                               save_seconds=10.0, saves=1, ledger=ledger, nodes=2, total_steps=10**6, start_steps=100)
    optimum = checkpointing.daly_seconds(10.0, state.mtbf_seconds)
    assert state.every_steps == round(optimum) and state.from_step == 560  # 60 s ahead at 1 s a step
    again = checkpointing.fold(state, now=T0 + timedelta(minutes=5), since=T0 - timedelta(hours=2), step=800,
                               step_seconds=1.02, save_seconds=10.3, saves=2, ledger=ledger, nodes=2,
                               total_steps=10**6, start_steps=100)
    assert (again.every_steps, again.from_step) == (state.every_steps, 560)  # within 10 %: not moved


@dataclass
class Cluster:
    """The job's nodes inside a larger cluster whose node faults all come at the same rate."""

    job_nodes: int
    others: int
    node_mtbf: float
    rng: random.Random
    faults: list[float] = field(default_factory=list)  # times of the other nodes' faults
    upcoming: float | None = None

    def other_faults_until(self, moment: float) -> None:
        rate = self.others / self.node_mtbf
        if self.upcoming is None:
            self.upcoming = self.rng.expovariate(rate)
        while self.upcoming <= moment:
            self.faults.append(self.upcoming)
            self.upcoming += self.rng.expovariate(rate)

    def view(self, now: float, job_faults: list[float]) -> NodeFaults:
        weight = sum(math.exp(-(now - t) / checkpointing.FAILURE_HORIZON_SECONDS)
                     for t in [*self.faults, *job_faults])
        exposure = (self.job_nodes + self.others) * checkpointing.weighted_exposure(now)
        return NodeFaults(weight, exposure)


def simulate(mtbf_hours: float, seed: int, hours: float, every: int | None = None, save: float = 30.0,
             restart: float = 60.0, step: float = 1.0) -> tuple[float, list[int]]:
    """A job of 32 nodes in a cluster of 512, each node failing at rate 1/(32·MTBF): saves of `save` seconds, a
    restart of `restart`, work since the last save lost at a failure. The operator folds the interval at every
    save and failure (`every`: a fixed interval instead). Returns the fraction of wall time lost and the intervals
    it set."""
    rng = random.Random(seed)
    job_nodes, mtbf = 32, mtbf_hours * HOUR
    cluster = Cluster(job_nodes, 480, mtbf * job_nodes, random.Random(seed + 1))
    clock, trained, next_failure = 0.0, 0, rng.expovariate(1 / mtbf)
    state: CheckpointInterval | None = None
    ledger: list[RecoveryRecord] = []
    failures: list[float] = []
    intervals: list[int] = []
    useful = 0.0
    while clock < hours * HOUR:
        now = T0 + timedelta(seconds=clock)
        if every is None:
            cluster.other_faults_until(clock)
            state = checkpointing.fold(state, now=now, since=T0, step=trained, step_seconds=step,
                                       save_seconds=save if trained else None, saves=1 if trained else 0,
                                       ledger=ledger, nodes=job_nodes, total_steps=10**9, start_steps=100,
                                       cluster=cluster.view(clock, failures))
            interval = state.every_steps
            intervals.append(interval)
        else:
            interval = every
        segment = interval * step + save
        if clock + segment <= next_failure:
            clock += segment
            trained += interval
            useful += interval * step
            continue
        clock = next_failure + restart  # the work since the last save is lost
        failures.append(next_failure)
        ledger.append(RecoveryRecord(cause="NodeNotReady", node=f"n{len(failures)}",
                                     detected=timestamp(T0 + timedelta(seconds=next_failure))))
        ledger = ledger[-32:]
        next_failure = clock + rng.expovariate(1 / mtbf)
    return 1 - useful / clock, intervals


@pytest.mark.parametrize("mtbf_hours", [1, 3, 12])
def test_auto_lands_within_ten_percent_of_the_analytic_optimum(mtbf_hours):
    save, hours = 30.0, max(200.0, 40 * mtbf_hours)
    optimum = checkpointing.daly_seconds(save, mtbf_hours * HOUR)
    wasted, intervals = simulate(mtbf_hours, seed=mtbf_hours, hours=hours, save=save)
    settled = statistics.median(intervals[len(intervals) // 4:])
    assert settled == pytest.approx(optimum, rel=0.10), (settled, optimum)
    best, _ = simulate(mtbf_hours, seed=mtbf_hours, hours=hours, every=round(optimum), save=save)
    analytic = checkpointing.expected_waste(optimum, save, mtbf_hours * HOUR, restart_seconds=60.0)
    print(f"\nMTBF {mtbf_hours} h: optimum {optimum:.0f} s, auto settled at {settled:.0f} s; time lost: auto "
          f"{wasted:.2%}, the optimum interval {best:.2%} on the same failures, analytic {analytic:.2%}")
    assert wasted == pytest.approx(best, rel=0.10)


def test_the_interval_before_from_step_is_the_one_the_running_processes_save_at():
    """A process that starts before fromStep is told previousEverySteps: the last interval once its fromStep was
    reached, else the one before it (a change not in force yet is replaced whole)."""
    changed = CheckpointInterval(every_steps=51, from_step=279, previous_every_steps=46)
    assert checkpointing.in_force_before(changed, 270) == 46 and checkpointing.in_force_before(changed, 279) == 51
    assert checkpointing.in_force_before(CheckpointInterval(every_steps=100, from_step=0), 5) == 100
