"""The goodput account (diagnosis/goodput.py, pure): the buckets add up to the wall time whatever happens, and on
a simulated run whose truth is known they measure it — slow steps charged, redone steps, saves, starts and
placement waits each in their own bucket, a healthy noisy run charged (almost) nothing."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_hybrid.diagnosis import goodput
from ascend_hybrid.diagnosis.goodput import (
    PLACEMENT,
    PRODUCTIVE,
    REDONE,
    RUNNING,
    SAVES,
    SLOW,
    STARTING,
    STARTS,
    WAITING,
    Reading,
)
from ascend_hybrid.reconcile import status_edge
from ascend_hybrid.spec.api import AscendHybridJobStatus, GoodputAccount

T0 = datetime(2026, 12, 8, 0, 0, 0, tzinfo=UTC)


def published(account: GoodputAccount) -> dict:
    """status.goodputAccount as the operator writes it."""
    return status_edge.dump(status_edge.Parsed(AscendHybridJobStatus(goodput_account=account)))["goodputAccount"]


@dataclass
class Run:
    """A simulated job and the operator's passes over it: the truth of every second is kept beside the account."""

    step_seconds: float = 1.0
    jitter: float = 0.05
    sample_every: float = 30.0
    save_every: int = 100
    save_seconds: float = 4.0
    seed: int = 7
    clock: float = 0.0
    step: int = 0
    high: int = 0
    epoch: int = 0
    base: int = 0
    saves: float = 0.0
    next_sample: float = 30.0
    account: GoodputAccount | None = None
    truth: dict = field(default_factory=lambda: {bucket: 0.0 for bucket in goodput.BUCKETS})

    def __post_init__(self):
        self.random = random.Random(self.seed)

    def at(self) -> datetime:
        return T0 + timedelta(seconds=self.clock)

    def fold(self, mode: str, reading: Reading | None = None, trained_to: int | None = None) -> None:
        self.account = goodput.fold(self.account, since=T0, now=self.at(), mode=mode, epoch=f"1/{self.epoch}",
                                    reading=reading, world=8, trained_to=trained_to)

    def reading(self) -> Reading:
        return Reading(self.at(), self.step, self.step - self.base, self.saves)

    def wait(self, seconds: float, mode: str, bucket: str) -> None:
        self.fold(mode)
        self.clock += seconds
        self.truth[bucket] += seconds
        self.fold(mode)

    def start(self, seconds: float, resume_from: int) -> None:
        """A new trainer process: `seconds` of start-up, then it steps from the checkpoint."""
        self.epoch += 1
        self.fold(STARTING, trained_to=self.step if self.step else None)  # the ledger's step of the failure
        self.clock += seconds
        self.truth[STARTS] += seconds
        self.step = self.base = resume_from
        self.saves = 0.0
        self.fold(RUNNING, self.reading())
        self.next_sample = self.clock + self.sample_every

    def train(self, steps: int, slowdown: float = 1.0) -> None:
        for _ in range(steps):
            healthy = self.step_seconds * (1 + self.jitter * (2 * self.random.random() - 1))
            took = healthy * slowdown
            self.clock += took
            self.step += 1
            if self.step > self.high:
                self.truth[PRODUCTIVE] += self.step_seconds
                self.truth[SLOW] += took - self.step_seconds
                self.high = self.step
            else:
                self.truth[REDONE] += took
            if self.step % self.save_every == 0:
                self.clock += self.save_seconds
                self.saves += self.save_seconds
                self.truth[SAVES] += self.save_seconds
            if self.clock >= self.next_sample:
                self.fold(RUNNING, self.reading())
                self.next_sample = self.clock + self.sample_every

    def end(self) -> dict:
        """A last reading, at the last step: the account as published."""
        self.fold(RUNNING, self.reading())
        assert self.account is not None
        return published(self.account)


def near(measured: float, true: float, relative: float, absolute: float) -> bool:
    return abs(measured - true) <= max(relative * true, absolute)


def test_a_run_with_a_slow_node_a_restart_saves_and_a_placement_wait_is_measured_bucket_by_bucket():
    run = Run()
    run.start(60.0, 0)
    run.train(1000)
    run.train(1200, slowdown=1.5)   # a node at 1.5x compute: every rank waits for it
    run.train(350)
    run.start(45.0, 2500)           # RestartRanks from the checkpoint of step 2500: 50 steps redone
    run.train(800)
    run.wait(120.0, WAITING, PLACEMENT)  # a whole-gang restart waits for nodes
    run.start(50.0, 3300)
    run.train(700)
    account = run.end()
    buckets, wall = account["seconds"], account["wallSeconds"]
    assert abs(goodput.unaccounted(run.account)) <= 0.01 * wall
    assert near(buckets[PRODUCTIVE], run.truth[PRODUCTIVE], 0.02, 5)
    assert near(buckets[SLOW], run.truth[SLOW], 0.05, 10), (buckets[SLOW], run.truth[SLOW])
    assert near(buckets[REDONE], run.truth[REDONE], 0.10, 10), (buckets[REDONE], run.truth[REDONE])
    # a save after the last reading before a failure goes with the restart (the reading interval's blur)
    assert near(buckets[SAVES], run.truth[SAVES], 0.01, run.save_seconds)
    assert near(buckets[PLACEMENT], run.truth[PLACEMENT], 0.0, 1)
    # the restarts' own seconds, plus what the sample interval blurs at each edge
    assert near(buckets[STARTS], run.truth[STARTS], 0.0, 3 * run.sample_every)
    assert account["healthyStepSeconds"] == pytest.approx(1.0, rel=0.02)
    assert goodput.goodput(run.account) == pytest.approx(run.truth[PRODUCTIVE] / wall, abs=0.01)
    assert account["stepsKept"] == 4000 and account["stepsRedone"] == 50


def test_a_slow_node_lowers_goodput_where_the_measured_step_time_would_not():
    healthy, slow = Run(seed=1), Run(seed=1)
    for run, slowdown in ((healthy, 1.0), (slow, 2.0)):
        run.start(30.0, 0)
        run.train(600)
        run.train(600, slowdown=slowdown)
        run.train(300)
    healthy.end()
    dragged = slow.end()
    assert goodput.goodput(slow.account) < goodput.goodput(healthy.account) - 0.2
    assert dragged["seconds"][SLOW] == pytest.approx(600 * 1.0, rel=0.05)


def test_readings_of_whole_steps_do_not_bias_the_pace():
    """Readings every 15 s of a 2 s step see 7 or 8 steps (±7 %): windows of a minute, and a MAD of at least one
    step's share, keep the healthy pace the mean, not the faster mode."""
    run = Run(step_seconds=2.0, jitter=0.0, sample_every=15.0)
    run.start(30.0, 0)
    run.train(2000)
    account = run.end()
    assert account["healthyStepSeconds"] == pytest.approx(2.0, rel=0.01)
    assert account["seconds"][SLOW] < 0.01 * account["wallSeconds"]


def test_a_healthy_noisy_run_is_charged_almost_nothing_for_slowness():
    run = Run(jitter=0.10, seed=3)
    run.start(30.0, 0)
    run.train(5000)
    account = run.end()
    assert account["seconds"][SLOW] < 0.01 * account["wallSeconds"]
    assert account["healthyStepSeconds"] == pytest.approx(1.0, rel=0.02)


def test_nothing_is_attributed_until_the_pace_is_known_then_the_held_intervals_are():
    run = Run()
    run.start(20.0, 0)
    run.train(40)
    assert goodput.goodput(run.account) is None and published(run.account)["pending"]
    run.train(300)  # three windows of a minute: the pace is known
    assert "pending" not in published(run.account) and goodput.goodput(run.account) is not None


def test_a_job_started_on_an_existing_checkpoint_counts_its_steps_as_new():
    run = Run()
    run.high = 500
    run.start(20.0, 500)
    run.train(300)
    account = run.end()
    assert account["stepsRedone"] == 0 and account["stepsKept"] == 300


def test_a_stall_is_carried_by_the_steps_that_end_it():
    run = Run(jitter=0.0)
    run.start(10.0, 0)
    run.train(300)
    before = dict(run.end()["seconds"])
    run.clock += 90.0               # a hung collective that resolved itself
    run.fold(RUNNING, run.reading())
    assert published(run.account)["seconds"] == before
    run.train(40)
    account = run.end()
    assert account["seconds"][SLOW] == pytest.approx(90.0, abs=1.0)


def test_a_changed_world_measures_its_pace_afresh():
    account = None
    for index in range(20):
        reading = Reading(T0 + timedelta(seconds=10 * (index + 1)), 10 * (index + 1), 10 * (index + 1))
        account = goodput.fold(account, since=T0, now=reading.at, mode=RUNNING, epoch="1/0", reading=reading,
                               world=8)
    assert published(account)["healthyStepSeconds"] == pytest.approx(1.0)
    reading = Reading(T0 + timedelta(seconds=210), 210, 210)
    account = goodput.fold(account, since=T0, now=reading.at, mode=RUNNING, epoch="1/0", reading=reading, world=4)
    shown = published(account)
    assert "healthyStepSeconds" not in shown and "pace" not in shown and shown["world"] == 4


def test_a_pass_that_changes_nothing_leaves_the_account_as_it_was():
    first = goodput.fold(None, since=T0, now=T0 + timedelta(seconds=5), mode=STARTING, epoch="1/0", reading=None,
                         world=2)
    again = goodput.fold(first, since=T0, now=T0 + timedelta(seconds=9), mode=STARTING, epoch="1/0", reading=None,
                         world=2)
    assert published(again) == published(first)  # no status write for a pass that only moves the clock
    assert again is not first and first.mode == STARTING


def test_an_empty_account_is_started_afresh():
    """`goodputAccount: {}` (written by hand, or by another version): the account starts at the job's start."""
    account = goodput.fold(GoodputAccount(), since=T0, now=T0 + timedelta(seconds=5), mode=STARTING, epoch="1/0",
                           reading=None, world=2)
    assert account.since is not None and published(account)["stepsKept"] == 0


def test_an_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="mode 'idle'"):
        goodput.fold(None, since=T0, now=T0, mode="idle", epoch="1/0", reading=None, world=1)


EVENT = st.one_of(
    st.tuples(st.just("wait"), st.sampled_from([WAITING, STARTING, RUNNING]), st.floats(0, 600)),
    st.tuples(st.just("steps"), st.integers(0, 400), st.floats(0.01, 5.0)),
    st.tuples(st.just("save"), st.floats(0, 60), st.just(0)),
    st.tuples(st.just("restart"), st.integers(0, 2000), st.floats(0, 300)),
    st.tuples(st.just("world"), st.sampled_from([2, 4, 8]), st.just(0)),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(EVENT, max_size=60))
def test_the_buckets_add_up_to_the_wall_time_whatever_happens(events):
    clock, step, base, saves, epoch, world, mode = 0.0, 0, 0, 0.0, 0, 8, STARTING
    account = None

    def fold():
        nonlocal account
        reading = Reading(T0 + timedelta(seconds=clock), step, step - base, saves) if mode == RUNNING else None
        account = goodput.fold(account, since=T0, now=T0 + timedelta(seconds=clock), mode=mode,
                               epoch=f"1/{epoch}", reading=reading, world=world)

    for kind, first, second in events:
        if kind == "wait":
            mode, clock = first, clock + second
        elif kind == "steps":
            mode, step, clock = RUNNING, step + first, clock + first * second
        elif kind == "save":
            saves, clock = saves + first, clock + first
        elif kind == "restart":
            epoch, mode, clock = epoch + 1, RUNNING, clock + second
            step = base = min(first, step)
            saves = 0.0
        else:
            world = first
        fold()
    if account is None:
        return
    shown = published(account)
    wall = shown["wallSeconds"]
    assert set(shown["seconds"]) == set(goodput.BUCKETS) and all(value >= 0 for value in shown["seconds"].values())
    assert abs(goodput.unaccounted(account)) <= max(0.01 * wall, 0.01)
    value = goodput.goodput(account)
    assert value is None or 0.0 <= value <= 1.0


def test_the_account_is_what_the_crd_keeps():
    """The status the account is written in is pruned to the CRD's schema: every key of it is declared."""
    run = Run()
    run.start(20.0, 0)
    run.train(40)
    GoodputAccount.model_validate(published(run.account))  # pending intervals
    run.train(400)
    GoodputAccount.model_validate(run.end())
