"""`ascend-hybrid demo` without the trainer extra: one line says what to install, the simulated jobs still run."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from ascend_hybrid.devcluster.paths import ClusterPaths
from ascend_hybrid.devtools import demo

PATHS = ClusterPaths(name="demo-test", root=Path("/nonexistent/demo-test"))
SIMULATED = [{"metadata": {"name": "seed-moe-128"}}, {"metadata": {"name": "tiny-tp4-dp2"}}]


class NoApi:
    def __getattr__(self, name):
        raise AssertionError(f"the real job must not be touched without MindSpore (called {name})")


@pytest.fixture
def applied(monkeypatch):
    monkeypatch.setattr(demo, "apply_examples", lambda kubeconfig: list(SIMULATED))


def test_without_mindspore_one_line_says_what_to_install_and_only_the_simulated_jobs_run(applied, monkeypatch,
                                                                                         capsys):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *rest: None if name == "mindspore" else real_find_spec(name, *rest))
    jobs, real = demo.jobs_to_watch(PATHS, NoApi(), NoApi())
    assert jobs == SIMULATED and real is False
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and "pip install 'ascend-hybrid[trainer]'" in lines[0] and demo.REAL_JOB in lines[0]


def test_with_mindspore_the_real_job_is_started_too(applied, monkeypatch, capsys):
    monkeypatch.setattr(demo, "mindspore_missing", lambda: False)
    monkeypatch.setattr(demo, "start_real_job", lambda custom, core, paths: {"metadata": {"name": "tiny-dp2-real"}})
    jobs, real = demo.jobs_to_watch(PATHS, NoApi(), NoApi())
    assert [job["metadata"]["name"] for job in jobs] == ["seed-moe-128", "tiny-tp4-dp2", "tiny-dp2-real"] and real
    assert capsys.readouterr().out == ""


def test_mindspore_missing_asks_the_interpreter_the_runtime_uses(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *rest: None)
    assert demo.mindspore_missing()
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *rest: object())
    assert not demo.mindspore_missing()


def test_the_demos_simulated_jobs_ask_for_step_times_at_their_predicted_pace(examples):
    """So the demo's StepRatio column reads within the simulation's declared noise of 1."""
    import yaml

    from ascend_hybrid.devcluster.telemetry import figures
    from ascend_hybrid.spec import rules

    for name in demo.EXAMPLES:
        original = yaml.safe_load((examples / name).read_text())
        body = demo.following_the_prediction(yaml.safe_load((examples / name).read_text()))
        annotations = body["spec"]["template"]["metadata"]["annotations"]
        assert annotations == {**(original["spec"].get("template", {}).get("metadata", {}).get("annotations") or {}),
                               figures.STEP_SECONDS_ANNOTATION: figures.PREDICTED}
        assert rules.parse(body).spec.parallelism == rules.parse(original).spec.parallelism
