"""The planner against published Ascend runs (docs/planner.md, "Calibration"): the table in the docs is what the
model predicts, and the model holds its accuracy; a change to the cost model that moves a prediction shows here."""

from __future__ import annotations

import re

import pytest
import yaml

from ascend_hybrid.planner import calibration
from support.paths import PLANNER_FIXTURES, REPO_ROOT

RUNS = yaml.safe_load((PLANNER_FIXTURES / "published-runs.yaml").read_text())


@pytest.fixture(scope="module")
def scored():
    return calibration.score_all(RUNS)


def test_the_docs_show_the_table_the_model_predicts(scored):
    text = (REPO_ROOT / "docs" / "planner.md").read_text()
    shown = re.search(r"<!-- calibration-table -->\n(.*?)\n<!-- /calibration-table -->", text, re.S)
    assert shown, "docs/planner.md lost its calibration table markers"
    assert shown.group(1) == calibration.document(scored), "run hack/calibration_table.py and paste its output"


def test_every_run_names_its_source_and_a_published_figure():
    for raw in RUNS["runs"]:
        assert raw["source"].split()[0] in ("mindspeed", "mindformers-a2", "mindformers-910a"), raw["name"]
        assert raw["published"] > 0


def _dense(scored):
    return [s for s in scored if s.error is not None and not s.run.job["spec"]["model"].get("experts")]


def test_dense_runs_meet_the_median_goal_fitted_and_held_out(scored):
    fitted = calibration.summary([s for s in _dense(scored) if not s.run.held_out])
    held_out = calibration.summary([s for s in _dense(scored) if s.run.held_out])
    assert fitted.count >= 20 and held_out.count >= 20
    assert fitted.median_abs_error <= 0.06
    assert held_out.median_abs_error <= 0.04


def test_all_runs_hold_their_median_fitted_and_held_out(scored):
    fitted = calibration.summary([s for s in scored if not s.run.held_out])
    held_out = calibration.summary([s for s in scored if s.run.held_out])
    assert fitted.median_abs_error <= 0.071 and held_out.median_abs_error <= 0.044
    assert calibration.summary(scored).median_abs_error <= 0.06  # the calibration's goal, over every scored run


def test_the_runs_beyond_20_percent_are_the_documented_misses(scored):
    misses = {s.run.name for s in scored if s.error is not None and abs(s.error) > 0.2}
    assert misses == {"llama3.1-8b-8k", "llama3.1-8b-128k"}
    assert max(abs(s.error) for s in scored if s.error is not None) < 0.3


def test_moe_runs_stay_within_their_documented_bounds(scored):
    """One expert share for MindSpeed's sequential (Mixtral, Grok-1) and grouped (MiniCPM) expert GEMMs."""
    moe = {s.run.name: s.error for s in scored if s.error is not None and s.run.job["spec"]["model"].get("experts")}
    assert set(moe) == {"mixtral-8x7b-32k", "grok1-40b-8k", "minicpm-8x2b-4k"}
    assert all(abs(error) < 0.2 for error in moe.values())
    assert abs(moe["grok1-40b-8k"]) < 0.15 and abs(moe["minicpm-8x2b-4k"]) < 0.08


def test_every_expressible_published_strategy_fits(scored):
    unfit = {s.run.name for s in scored if s.predicted is not None and not s.fits}
    assert unfit == set()
    unscored = {s.run.name for s in scored if s.predicted is None}
    assert unscored == {"mixtral-8x22b-32k", "chatglm3-6b-32k", "chatglm3-6b-64k", "baichuan2-13b-4k", "gemma-7b-8k",
                        "gemma2-9b-8k", "gemma2-27b-8k", "qwen2-57b-a14b-4k", "deepseek2-60b-8k",
                        "deepseek2-lite-16b-8k"}
    assert all(s.run.held_out for s in scored if s.predicted is None and s.run.name != "mixtral-8x22b-32k")


def test_the_sliding_window_run_is_held_out_and_within_the_median_goal(scored):
    """Mistral 7B at 32K with a 4K window: scored since the window is modelled, never fitted on."""
    (mistral,) = [s for s in scored if s.run.name == "mistral-7b-32k"]
    assert mistral.run.held_out and mistral.run.job["spec"]["model"]["slidingWindow"] == 4096
    assert mistral.error is not None and abs(mistral.error) < 0.06


def test_910a_runs_use_their_own_profile_within_17_percent(scored):
    on_910a = [s for s in scored if s.run.chip == "910A"]
    assert len(on_910a) == 4 and all(abs(s.error) <= 0.17 for s in on_910a)
