"""Live anomalies (anomalies.py, pure): samples folded into status.monitoring turn LoadImbalanced, Straggling and
TrainingStalled on and off."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from ascend_hybrid.monitoring.anomalies import LOAD_IMBALANCED, STRAGGLING, TRAINING_STALLED, fold
from ascend_hybrid.monitoring.progress import ChipReading, Sample
from ascend_hybrid.spec.api import Monitoring

T0 = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
SPEC = Monitoring()  # spread 30 points, 3 samples, factor 1.5 for 2 samples, window 10, stall 300 s
ONE_SAMPLE = Monitoring(stragglerSamples=1)


def chips(*percents):
    readings = [ChipReading(f"job-a1-{i // 2}", str(i % 2), p) for i, p in enumerate(percents)]
    return tuple(readings)


def sample(t, step=None, utilization=(), per_pod=(), saved=None):
    return Sample("trainer", T0 + timedelta(seconds=t), step=step, chips=utilization, pod_step_seconds=per_pod,
                  checkpoint_seconds_sum=saved)


def run(samples, spec=SPEC, predicted=None):
    """Folds the samples in order; the last state of each condition that a sample spoke about, and the history."""
    state, last = None, {}
    trace = []
    for item in samples:
        folded = fold(state, item, spec, predicted)
        if folded is None:
            continue
        state, changes = folded
        for change in changes:
            last[change.kind] = change
        trace.append({kind: change.on for kind, change in last.items()})
    return state, last, trace


def test_a_skewed_chip_turns_load_imbalanced_on_after_n_samples_and_off_at_once():
    skewed, even = chips(90, 91, 20, 89), chips(90, 91, 88, 89)
    state, last, trace = run([sample(t, utilization=skewed) for t in (0, 30, 60)])
    assert [t[LOAD_IMBALANCED] for t in trace] == [False, False, True]
    message = last[LOAD_IMBALANCED].message
    assert "spread 71 points" in message and "chip 0 of pod job-a1-1 at 20%" in message
    assert "stage split" in message and "MoE routing" in message and "data distribution" in message
    assert state.imbalanced_samples == 3
    state, changes = fold(state, sample(90, utilization=even), SPEC)
    assert [(c.kind, c.on, c.reason) for c in changes] == [(LOAD_IMBALANCED, False, "Balanced")]
    assert state.imbalanced_samples == 0


def test_an_interrupted_imbalance_starts_counting_again():
    skewed, even = chips(90, 20), chips(90, 85)
    _, _, trace = run([sample(0, utilization=skewed), sample(30, utilization=skewed), sample(60, utilization=even),
                       sample(90, utilization=skewed), sample(120, utilization=skewed)])
    assert [t[LOAD_IMBALANCED] for t in trace] == [False] * 5


def test_the_same_sample_twice_changes_nothing():
    first = fold(None, sample(0, step=5, utilization=chips(90, 20)), SPEC)
    assert fold(first[0], sample(0, step=5, utilization=chips(90, 20)), SPEC) is None
    assert fold(first[0], sample(-5, step=6), SPEC) is None  # nor an older one


def steady(steps, seconds, start=0, t0=0.0, interval=10.0):
    """Samples every `interval` s of a trainer doing one step per `seconds`."""
    return [sample(t0 + k * interval, step=start + int(k * interval / seconds)) for k in range(steps)]


def test_a_slowdown_is_straggling_after_straggler_samples_naming_the_slowest_pod_and_back_on_pace_clears_it():
    history = steady(6, 0.5)  # 20 steps per 10 s sample
    per_pod = (("job-a1-0", 0.5), ("job-a1-1", 2.4), ("job-a1-2", 0.6))
    first = sample(60, step=history[-1].step + 4, per_pod=per_pod)
    second = sample(70, step=first.step + 4, per_pod=per_pod)
    state, last, trace = run([*history, first, second])
    assert [t.get(STRAGGLING) for t in trace[-3:]] == [False, False, True]
    message = last[STRAGGLING].message
    assert "2.5s each" in message and "for 2 samples" in message and "median of the recent ones 0.5s" in message
    assert "the slowest pod is job-a1-1 (2.4s per step" in message
    watching = run([*history, first])[1][STRAGGLING]
    assert (watching.on, watching.reason) == (False, "Watching") and "1 of spec.monitoring.stragglerSamples=2" \
        in watching.message
    again = fold(state, sample(80, step=second.step + 20), SPEC)[1]
    assert [(c.kind, c.on, c.reason) for c in again if c.kind == STRAGGLING] == [(STRAGGLING, False, "OnPace")]


def test_a_checkpoint_save_between_two_readings_is_not_step_time():
    history = [sample(10 * k, step=20 * k, saved=4.0) for k in range(6)]  # 0.5 s a step, one earlier save of 4 s
    saving = sample(60, step=history[-1].step + 2, saved=13.0)  # 9 s of the 10 s went to a save
    state, last, _ = run([*history, saving], ONE_SAMPLE)
    assert not last[STRAGGLING].on and state.step_seconds[-1] == 0.5 and state.checkpoint_seconds == 13.0
    _, last, _ = run([*history, sample(60, step=history[-1].step + 2, saved=4.0)], ONE_SAMPLE)
    assert last[STRAGGLING].on  # the same 2 steps in 10 s with no save are slow
    restarted = sample(70, step=history[-1].step + 22, saved=0.0)  # a new process: its sum starts again
    assert fold(state, restarted, ONE_SAMPLE)[0].step_seconds[-1] == 0.5


def test_a_save_still_running_when_the_trainer_is_read_makes_one_slow_sample_not_straggling():
    history = steady(6, 0.5)
    during = sample(60, step=history[-1].step + 2)  # the save has run 9 s and is not counted yet
    after = sample(70, step=during.step + 18, saved=10.0)  # it ended 1 s after the last reading
    _, last, trace = run([*history, during, after])
    assert [t.get(STRAGGLING) for t in trace[-2:]] == [False, False]
    assert last[STRAGGLING].reason == "OnPace"


def test_no_straggling_before_there_is_a_history_or_when_the_planner_expected_it():
    _, last, _ = run([sample(0, step=0), sample(10, step=20), sample(20, step=22)])
    assert STRAGGLING not in last  # two step times: no median yet
    history = steady(6, 0.5)
    slow = sample(60, step=history[-1].step + 4)
    _, last, _ = run([*history, slow], predicted=2.0)  # 2.5 s ≤ 1.5 × the predicted 2 s
    assert not last[STRAGGLING].on and "the planner predicted 2s" in last[STRAGGLING].message
    _, last, _ = run([*history, slow], ONE_SAMPLE, predicted=0.001)
    assert last[STRAGGLING].on


def test_the_window_keeps_the_recent_step_times_only():
    spec = Monitoring(stragglerWindow=3)
    state, _, _ = run(steady(12, 0.5), spec)
    assert state.step_seconds == [0.5, 0.5, 0.5]


def test_no_progress_for_stall_seconds_is_training_stalled_and_a_step_clears_it():
    spec = Monitoring(stallSeconds=60)
    samples = [sample(0, step=3), sample(10, step=8)] + [sample(10 + t, step=8) for t in (20, 50, 70)]
    state, last, trace = run(samples, spec)
    assert [t.get(TRAINING_STALLED) for t in trace] == [None, False, False, False, True]
    assert "no training step for 70s" in last[TRAINING_STALLED].message
    assert state.last_step == 8 and state.last_step_at == "2026-11-29T12:00:10Z"
    _, changes = fold(state, sample(90, step=9), spec)
    assert any(c.kind == TRAINING_STALLED and not c.on for c in changes)


def test_before_the_first_step_nothing_is_a_stall():
    _, last, _ = run([sample(t, step=0) for t in (0, 400, 800)])
    assert TRAINING_STALLED not in last


def test_a_trainer_that_starts_over_is_not_a_stall_or_a_straggler():
    state, last, _ = run([*steady(5, 0.5), sample(50, step=2), sample(60, step=22)])
    assert last[STRAGGLING].on is False and last[TRAINING_STALLED].on is False
    assert state.last_step == 22 and state.step_seconds == [0.5] * 5  # the restart's jump measured nothing


@given(st.lists(st.floats(0, 100), min_size=2, max_size=16), st.floats(1, 99))
def test_load_imbalanced_needs_a_spread_above_the_threshold(percents, threshold):
    spec = Monitoring(utilizationSpreadPercent=threshold, imbalanceSamples=1)
    _, changes = fold(None, sample(0, utilization=chips(*percents)), spec)
    (change,) = [c for c in changes if c.kind == LOAD_IMBALANCED]
    assert change.on == (max(percents) - min(percents) > threshold)


@given(st.lists(st.integers(1, 50), min_size=1, max_size=30), st.integers(0, 10))
def test_steps_only_move_forward_in_the_state(advances, start):
    state, step = None, start
    for k, advance in enumerate(advances):
        step += advance
        state, _ = fold(state, sample(10 * k, step=step), SPEC)
        assert state.last_step == step
        assert all(value > 0 for value in state.step_seconds)
        assert len(state.step_seconds) <= SPEC.straggler_window


def test_a_new_trainer_process_counts_its_saves_from_its_start_and_an_interval_all_save_measures_no_step():
    history = [sample(10 * k, step=20 * k, saved=30.0) for k in range(6)]
    restarted = sample(60, step=history[-1].step + 2, saved=9.0)  # a new process: 9 s of saves since it began
    state, last, _ = run([*history, restarted], ONE_SAMPLE)
    assert not last[STRAGGLING].on and state.step_seconds[-1] == 0.5
    straddled = sample(70, step=restarted.step + 1, saved=19.0)  # a 10 s save filled the whole 10 s
    after = fold(state, straddled, ONE_SAMPLE)[0]
    assert after.step_seconds == state.step_seconds and after.last_step == straddled.step
