"""The planner learning from the cluster's own jobs (`plan --learn`): which measurements count, how they fold."""

from __future__ import annotations

import pytest

from ascend_hybrid.cli import commands as cli
from ascend_hybrid.planner import hardware, observed, search


def job(name: str, ratio: float | None, step: int = 100, profile: str = "910B", phase: str = "Running") -> dict:
    return {"metadata": {"namespace": "ns", "name": name},
            "status": {"phase": phase, "training": {"step": step},
                       "plan": {"hardware": profile, "stepTimeRatio": ratio}}}


def test_only_running_jobs_past_their_warm_up_on_the_profile_count():
    jobs = [job("a", 1.1), job("b", 1.3), job("c", 0.9), job("warm", 5.0, step=observed.WARMUP_STEPS - 1),
            job("other", 2.0, profile="910A"), job("done", 2.0, phase="Succeeded"), job("none", None),
            job("broken", 100.0)]
    seen = observed.observe(jobs, "910B")
    assert seen is not None and seen.factor == pytest.approx(1.1) and seen.jobs == ("ns/a", "ns/b", "ns/c")
    assert observed.observe(jobs, "A3") is None
    assert "3 running jobs on 910B measure 1.1×" in seen.describe()


def test_the_observed_factor_scales_every_predicted_time_and_nothing_else(examples):
    import yaml

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


def test_plan_learn_reads_the_clusters_jobs_and_says_what_it_used(monkeypatch, capsys, examples):
    from ascend_hybrid.cli import plan as plan_cli

    monkeypatch.setattr(plan_cli, "cluster_jobs", lambda kubeconfig: [job("a", 2.0), job("b", 2.0)])
    assert cli.main(["plan", "-f", str(examples / "seed-moe-128.yaml"), "--evaluate", "--learn"]) == 0
    learned = capsys.readouterr()
    assert "observed: 2 running jobs on 910B measure 2× the predicted step" in learned.err
    assert cli.main(["plan", "-f", str(examples / "seed-moe-128.yaml"), "--evaluate"]) == 0
    plain = capsys.readouterr().out
    step = [line.split()[-4] for line in (learned.out, plain) for line in [line.splitlines()[2]]]
    assert float(step[0]) == pytest.approx(2 * float(step[1]), rel=1e-3)
    monkeypatch.setattr(plan_cli, "cluster_jobs", lambda kubeconfig: [])
    assert cli.main(["plan", "-f", str(examples / "seed-moe-128.yaml"), "--evaluate", "--learn"]) == 0
    assert "observed: no running job on 910B past 20 steps; predictions unscaled" in capsys.readouterr().err
