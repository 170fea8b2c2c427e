"""The planner learning from the cluster's own jobs: which measurements count, how they fold into the book per
hardware profile (bounded, order-independent, robust to one outlier), how the book travels in its ConfigMap, and
`plan --learn/--explain` reading it."""

from __future__ import annotations

import json
import statistics

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_hybrid.cli import commands as cli
from ascend_hybrid.planner import hardware, observed, search


def status(steady: float | None = 3.0, predicted: float = 2.0, steps: float = 10, phase: str = "Running",
           profile: str = "910B", scale: float | None = None, at: str = "2026-12-01T12:00:00Z") -> dict:
    plan = {"hardware": profile, "time": {"stepSeconds": predicted},
            "measured": {"steadySteps": steps, **({"steadyStepSeconds": steady} if steady is not None else {})}}
    if scale is not None:
        plan["observed"] = {"stepScale": scale, "jobs": 3}
    return {"phase": phase, "utilization": {"sampledAt": at}, "plan": plan}


def test_a_reading_is_a_running_jobs_steady_step_over_its_unscaled_prediction():
    reading = observed.reading_of("ns", "a", status())
    assert reading == observed.Reading("2026-12-01T12:00:00Z", "ns/a", "910B", 1.5)
    # a plan already scaled by 1.5 that measures its prediction: the hardware still runs 1.5× the unscaled one
    assert observed.reading_of("ns", "a", status(steady=3.0, predicted=3.0, scale=1.5)).ratio == pytest.approx(1.5)
    for broken in (status(steps=observed.MIN_STEADY_STEPS - 1), status(phase="Succeeded"), status(steady=None),
                   status(steady=100.0, predicted=1.0), status(profile=""), status(scale=0.0)):
        assert observed.reading_of("ns", "a", broken) is None
    assert observed.reading_of("ns", "a", {"phase": "Running"}) is None


def test_a_shrunk_jobs_reading_is_over_the_prediction_at_the_degrees_it_runs():
    shrunk = status(steady=3.0, predicted=1.0)
    shrunk["plan"]["running"] = {"data": 2, "microBatches": 2, "stepSeconds": 2.0}
    assert observed.reading_of("ns", "a", shrunk).ratio == pytest.approx(1.5)


def test_the_book_keeps_each_jobs_latest_reading_and_the_factor_is_their_median():
    early = observed.Reading("2026-12-01T12:00:00Z", "ns/a", "910B", 3.0)
    late = observed.Reading("2026-12-01T12:05:00Z", "ns/a", "910B", 1.2)
    others = [observed.Reading("2026-12-01T12:01:00Z", "ns/b", "910B", 1.0),
              observed.Reading("2026-12-01T12:01:00Z", "ns/c", "910B", 1.4),
              observed.Reading("2026-12-01T12:01:00Z", "ns/d", "910A", 2.0)]
    book = observed.fold(observed.fold({}, [late, *others]), [early])  # the older reading arrives last
    assert book["910B"]["ns/a"] == (1.2, "2026-12-01T12:05:00Z")
    seen = observed.observe(book, "910B")
    assert seen is not None and seen.factor == pytest.approx(1.2) and seen.jobs == ("ns/a", "ns/b", "ns/c")
    assert (seen.low, seen.high, seen.updated) == (1.0, 1.4, "2026-12-01T12:05:00Z")
    assert seen.efficiency == pytest.approx(1 / 1.2)
    assert "3 jobs on 910B measure 1.2× the predicted step" in seen.describe()
    assert observed.observe(book, "A3") is None
    assert set(observed.observe_all(book)) == {"910A", "910B"}


def test_the_book_keeps_the_most_recent_jobs_only():
    readings = [observed.Reading(f"2026-12-01T12:{minute:02d}:00Z", f"ns/j{minute}", "910B", 1.0 + minute / 100)
                for minute in range(observed.MAX_JOBS + 5)]
    book = observed.fold({}, readings)
    assert len(book["910B"]) == observed.MAX_JOBS and "ns/j0" not in book["910B"] and "ns/j54" in book["910B"]


readings = st.lists(st.builds(
    observed.Reading, at=st.sampled_from([f"2026-12-01T12:0{minute}:00Z" for minute in range(4)]),
    job=st.sampled_from([f"ns/j{index}" for index in range(8)]), profile=st.sampled_from(["910A", "910B"]),
    ratio=st.floats(0.01, 30.0)), max_size=30)


@settings(max_examples=150, deadline=None)
@given(readings, st.randoms(use_true_random=False))
def test_folding_is_bounded_and_order_independent(found, shuffler):
    book = observed.fold({}, found)
    shuffled = list(found)
    shuffler.shuffle(shuffled)
    half = len(shuffled) // 2
    assert observed.fold(observed.fold({}, shuffled[:half]), shuffled[half:]) == book
    for seen in observed.observe_all(book).values():
        assert observed.PLAUSIBLE[0] <= seen.low <= seen.factor <= seen.high <= observed.PLAUSIBLE[1]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.floats(0.5, 2.0), min_size=3, max_size=12), st.floats(0.05, 20.0))
def test_one_outlier_cannot_move_the_factor_outside_the_other_jobs_range(ratios, outlier):
    honest = [observed.Reading("2026-12-01T12:00:00Z", f"ns/j{index}", "910B", ratio)
              for index, ratio in enumerate(ratios)]
    wild = observed.Reading("2026-12-01T12:00:00Z", "ns/wild", "910B", outlier)
    seen = observed.observe(observed.fold({}, [*honest, wild]), "910B")
    assert seen is not None and min(ratios) <= seen.factor <= max(ratios)


def test_the_book_round_trips_through_its_config_map_data_and_bad_data_is_named():
    book = observed.fold({}, [observed.Reading("2026-12-01T12:00:00Z", "ns/a", "910B", 1.25),
                              observed.Reading("2026-12-01T12:00:00Z", "ns/b", "cpu 2 core", 0.8)])
    data = observed.to_data(book)
    assert observed.from_data(data) == book
    shown = json.loads(data[observed.DATA_KEY])["910B"]
    assert (shown["stepScale"], shown["efficiency"], shown["jobs"]) == (1.25, 0.8, 1)
    assert observed.from_data(None) == {} and observed.from_data({}) == {}
    for bad, problem in ((("{",), "not JSON"), (("[]",), "expected a mapping"),
                         (('{"910B": {}}',), "910B.readings: expected a mapping"),
                         (('{"910B": {"readings": {"ns/a": {"ratio": 99, "at": "t"}}}}',), "910B.readings.ns/a")):
        with pytest.raises(observed.ObservedError, match=problem):
            observed.from_data({observed.DATA_KEY: bad[0]})


def test_the_observed_factor_scales_every_predicted_time_and_nothing_else(examples):
    from ascend_hybrid.spec import rules

    resolved = rules.parse(yaml.safe_load((examples / "seed-moe-128.yaml").read_text()))
    hw = hardware.builtin("910B")
    plain = search.evaluate_job(resolved, hw)
    learned = search.evaluate_job(resolved, observed.scaled(hw, observed.Observed("910B", 1.25, ("ns/a",))))
    assert learned.time.step == pytest.approx(1.25 * plain.time.step)
    assert learned.time.bubble_fraction == plain.time.bubble_fraction  # the seed's 17.9 % is the schedule's
    assert learned.memory == plain.memory
    assert learned.tokens_per_second_per_device == pytest.approx(plain.tokens_per_second_per_device / 1.25)
    assert observed.scaled(hw, None) is hw


def config_map_file(tmp_path, ratios: dict[str, float], profile: str = "910B"):
    book = observed.fold({}, [observed.Reading("2026-12-01T12:00:00Z", job, profile, ratio)
                              for job, ratio in ratios.items()])
    path = tmp_path / "observed.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"},
                                    "data": observed.to_data(book)}))
    return path


def step_of(table: str) -> float:
    return float(table.splitlines()[2].split()[-4])


def test_plan_learn_scales_by_the_book_and_explain_says_job_by_job(tmp_path, capsys, examples):
    job = str(examples / "seed-moe-128.yaml")
    book = config_map_file(tmp_path, {"ns/a": 2.0, "ns/b": 2.0, "ns/c": 9.0})
    assert cli.main(["plan", "-f", job, "--evaluate"]) == 0
    plain = step_of(capsys.readouterr().out)
    assert cli.main(["plan", "-f", job, "--evaluate", "--learn", "--observed", str(book)]) == 0
    learned = capsys.readouterr()
    assert "observed: 3 jobs on 910B measure 2× the predicted step" in learned.err
    assert step_of(learned.out) == pytest.approx(2 * plain, rel=1e-3)
    assert cli.main(["plan", "-f", job, "--evaluate", "--explain", "--observed", str(book)]) == 0
    explained = capsys.readouterr()
    assert "not scaled (add --learn)" in explained.err and "ns/c: 9× at 2026-12-01T12:00:00Z" in explained.err
    assert step_of(explained.out) == pytest.approx(plain, rel=1e-3)
    elsewhere = config_map_file(tmp_path, {"ns/a": 2.0}, profile="910A")
    assert cli.main(["plan", "-f", job, "--evaluate", "--learn", "--explain", "--observed", str(elsewhere)]) == 0
    nothing = capsys.readouterr()
    assert "no job on 910B has a steady reading yet" in nothing.err and "other profiles: 910A 2×" in nothing.err
    assert step_of(nothing.out) == pytest.approx(plain, rel=1e-3)


def test_plan_learn_refuses_what_it_cannot_use(tmp_path, capsys, examples):
    job = str(examples / "seed-moe-128.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump({"data": {observed.DATA_KEY: '{"910B": 3}'}}))
    assert cli.main(["plan", "-f", job, "--learn", "--observed", str(broken)]) == 2
    assert "broken.yaml: data.observed.json: 910B.readings: expected a mapping" in capsys.readouterr().err
    assert cli.main(["plan", "-f", job, "--observed", str(broken)]) == 2
    assert "read only with --learn or --explain" in capsys.readouterr().err


def test_the_median_is_what_statistics_says():
    book = observed.fold({}, [observed.Reading("t", f"ns/{index}", "910B", ratio)
                              for index, ratio in enumerate([0.9, 1.1, 1.3, 5.0])])
    assert observed.observe(book, "910B").factor == statistics.median([0.9, 1.1, 1.3, 5.0])
