"""The planner in the job's life: an auto job's strategy chosen once, a manual job's scored, the fit verdicts, the
auto rules in Python and CEL, and predicted against measured."""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import UTC, datetime

import celpy
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_hybrid.planner import hardware
from ascend_hybrid.reconcile import status_edge, strategy
from ascend_hybrid.reconcile.actions import CreatePods, Place, PostEvent
from ascend_hybrid.reconcile.decision import decide
from ascend_hybrid.reconcile.state import Observed
from ascend_hybrid.spec import crd, rules
from ascend_hybrid.spec.api import (
    AscendHybridJobSpec,
    AscendHybridJobStatus,
    PlanStatus,
    TrainingStatus,
    UtilizationStatus,
)
from support.builders import apply_defaults

NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
SPEC = crd.build()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
AUTO = {"parallelism": {"auto": True, "world": 16}, "model": {"preset": "gpt-1b"},
        "training": {"globalBatchSize": 64}}


def body(spec: dict, status: dict | None = None, name: str = "auto") -> dict:
    return {"apiVersion": "hybrid.ascend.dev/v1alpha1", "kind": "AscendHybridJob",
            "metadata": {"name": name, "namespace": "ns", "uid": "uid-1", "generation": 1,
                         "creationTimestamp": "2026-12-01T11:59:00Z"},
            "spec": copy.deepcopy(spec), "status": status or {}}


def observe(job: dict, profiles=None) -> Observed:
    return Observed(job=job, resolved=rules.parse(job), spec_problems=(), pods=(), rank_table={"status": "initializing"},
                    children_ready=True, sched_ip="127.32.0.10", nodes={}, now=NOW,
                    hardware_profiles=profiles or {})


def events(decision) -> list[tuple[str, str]]:
    return [(a.type, a.reason) for a in decision.actions if isinstance(a, PostEvent)]


def test_an_auto_job_is_planned_once_and_placed_with_the_chosen_degrees():
    decision = decide(observe(body(AUTO)))
    plan = decision.status["plan"]
    degrees = plan["parallelism"]
    assert plan["source"] == "planned" and plan["hardware"] == "910B" and plan["fits"]
    assert degrees["data"] * degrees["tensor"] * degrees["pipeline"] == 16
    assert plan["considered"] > plan["rejected"] >= 0 and plan["why"]
    assert decision.status["parallelism"]["tensor"] == degrees["tensor"]
    assert decision.status["worldSize"] == 16
    fits = next(c for c in decision.status["conditions"] if c["type"] == "StrategyFits")
    assert (fits["status"], fits["reason"]) == ("True", "Planned")
    assert ("Normal", "StrategyChosen") in events(decision)
    place = next(a for a in decision.actions if isinstance(a, Place))
    assert place.request.pod_count == 16 // 8 and place.job.tensor == degrees["tensor"]
    assert place.job.spec.parallelism.auto is None  # the pods run a spec with the strategy written in
    # the next pass (and every restart) reuses the recorded choice: no second plan, no second event
    again = decide(observe(body(AUTO, status=decision.status)))
    assert again.status["plan"] == plan and ("Normal", "StrategyChosen") not in events(again)


def test_an_auto_jobs_recorded_plan_that_does_not_choose_everything_is_planned_again_not_failed():
    """A plan a hand or another version of the operator wrote, without a degree or a flag the pods run with."""
    first = decide(observe(body(AUTO)))
    plan = first.status["plan"]
    broken = copy.deepcopy(first.status)
    del broken["plan"]["parallelism"]["microBatches"], broken["plan"]["recompute"]
    again = decide(observe(body(AUTO, status=broken)))
    assert again.status["phase"] != "Failed" and again.status["plan"]["parallelism"] == plan["parallelism"]
    assert again.status["plan"]["recompute"] == plan["recompute"] and ("Normal", "StrategyChosen") in events(again)


def test_the_chosen_strategy_reaches_the_pods():
    first = decide(observe(body(AUTO)))
    status = copy.deepcopy(first.status)
    degrees = status["plan"]["parallelism"]
    status["placement"] = {"attempt": 1, "nodes": ["n1", "n2"]}
    decision = decide(observe(body(AUTO, status=status)))
    created = next(a for a in decision.actions if isinstance(a, CreatePods))
    env = {e["name"]: e.get("value") for e in created.pods[0].manifest["spec"]["containers"][0]["env"]}
    assert env["MS_WORKER_NUM"] == "16" and f'"tensor": {degrees["tensor"]}' in env["AHJ_PARALLEL"]


def test_changing_the_model_of_an_auto_job_plans_again():
    first = decide(observe(body(AUTO))).status
    changed = copy.deepcopy(AUTO)
    changed["model"] = {"preset": "tiny"}
    second = decide(observe(body(changed, status=first))).status
    assert second["plan"]["specHash"] != first["plan"]["specHash"]


def test_an_auto_job_no_strategy_fits_fails_naming_the_closest():
    spec = copy.deepcopy(AUTO)
    spec["model"] = {"preset": "moe-100b"}
    spec["parallelism"]["world"] = 8
    decision = decide(observe(body(spec)))
    assert decision.status["phase"] == "Failed"
    failed = next(c for c in decision.status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "NoStrategyFits" and "closest" in failed["message"] and "GiB" in failed["message"]


def manual(**overrides) -> dict:
    """gpt-1b with 8 long samples per DP rank in one micro-batch: far over a 910B's HBM."""
    spec = {"parallelism": {"data": 8}, "model": {"preset": "gpt-1b"}, "npu": {"perPod": 8},
            "training": {"globalBatchSize": 64, "seqLength": 4096}}
    spec.update(overrides)
    return spec


def test_a_manual_job_predicted_out_of_memory_warns_with_the_alternative_and_still_runs():
    decision = decide(observe(body(manual(), name="oom")))
    fits = next(c for c in decision.status["conditions"] if c["type"] == "StrategyFits")
    assert (fits["status"], fits["reason"]) == ("False", "PredictedOutOfMemory")
    alternative = decision.status["plan"]["alternative"]
    assert alternative["totalGiB"] <= 57.6 and alternative["parallelism"]["microBatches"] > 1
    assert f"the planner's best for 8 × 910B: {alternative['summary']}" in fits["message"]
    assert ("Warning", "PredictedOutOfMemory") in events(decision)
    assert any(isinstance(a, Place) for a in decision.actions)  # the user may know better
    assert decision.status["plan"]["source"] == "evaluated" and not decision.status["plan"]["fits"]


def test_refuse_unfit_strategy_fails_before_any_pod_exists():
    spec = manual(runPolicy={"refuseUnfitStrategy": True})
    decision = decide(observe(body(spec, name="oom")))
    assert decision.status["phase"] == "Failed"
    failed = next(c for c in decision.status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "PredictedOutOfMemory" and "refuseUnfitStrategy" in failed["message"]
    assert not any(isinstance(a, Place | CreatePods) for a in decision.actions)


def test_a_deep_pipeline_with_few_micro_batches_is_a_large_bubble():
    spec = {"parallelism": {"data": 1, "tensor": 1, "pipeline": 8, "microBatches": 8}, "npu": {"perPod": 8},
            "model": {"preset": "tiny"}}
    decision = decide(observe(body(spec, name="bubble")))
    fits = next(c for c in decision.status["conditions"] if c["type"] == "StrategyFits")
    assert fits["reason"] == "LargePipelineBubble" and "46.7%" in fits["message"]  # 7 / (8 + 8 - 1)


def test_a_named_hardware_profile_is_used_and_an_unknown_one_is_an_invalid_spec():
    cpu = hardware.from_mapping({"name": "cpu-2core", "chipsPerNode": 8, "hbmGiB": 4, "usableFraction": 0.9,
                                 "peakTflops": 0.05, "intraNode": {"gbps": 5}, "interNode": {"gbps": 1}})
    spec = {"parallelism": {"data": 2}, "npu": {"perPod": 1, "hardwareProfile": "cpu-2core"}}
    decision = decide(observe(body(spec, name="real"), profiles={"cpu-2core": cpu}))
    assert decision.status["plan"]["hardware"] == "cpu-2core"
    unknown = decide(observe(body(spec, name="real")))
    failed = next(c for c in unknown.status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "InvalidSpec" and "spec.npu.hardwareProfile='cpu-2core'" in failed["message"]


def test_measured_figures_give_the_step_time_ratio():
    plan = PlanStatus(time={"stepSeconds": 2.0}, fits=True)
    out = strategy.measured(plan, TrainingStatus(step_seconds=3.0, tokens_per_second=100.0),
                            UtilizationStatus(hbm_percent=40.0))
    assert shown(out)["measured"] == {"stepSeconds": 3.0, "tokensPerSecond": 100.0, "hbmPercent": 40.0}
    assert out.step_time_ratio == 1.5 and plan.step_time_ratio is None and plan.measured is None


@pytest.mark.parametrize("parallelism, problem", [
    ({"auto": True, "world": 16, "tensor": 2},
     "spec.parallelism.tensor: must not be set when spec.parallelism.auto is true (the planner chooses it)"),
    ({"auto": True},
     "spec.parallelism.world: is required when spec.parallelism.auto is true (the NPUs the planner may use)"),
    ({"data": 2, "world": 16}, "spec.parallelism.world: only with spec.parallelism.auto: true (set the degrees instead)"),
])
def test_auto_rules_name_the_field(parallelism, problem):
    spec = {"parallelism": parallelism, "npu": {"perPod": 1}, "training": {"globalBatchSize": 16}}
    with pytest.raises(rules.SpecError) as error:
        rules.parse(body(spec))
    assert problem in error.value.problems


ENV = celpy.Environment()
PROGRAMS = [(rule, ENV.program(ENV.compile(rule.cel)), ENV.program(ENV.compile(rule.cel_message)))
            for rule in rules.RULES if rule.cel and rule.check.__qualname__.startswith(("_auto", "_world_needs"))]

auto_specs = st.fixed_dictionaries({
    "parallelism": st.fixed_dictionaries({}, optional={
        "auto": st.booleans(), "world": st.sampled_from([8, 16]), "data": st.just(2), "tensor": st.just(2),
        "microBatches": st.just(4), "autoConstraints": st.just({"maxTensor": 8}), "context": st.just(2),
        "pipelineLayers": st.just([24])}),
    "npu": st.just({"perPod": 2}),
    "training": st.fixed_dictionaries({}, optional={"globalBatchSize": st.just(32)}),
})


@settings(max_examples=200, deadline=None)
@given(spec=auto_specs)
def test_cel_and_python_agree_on_the_auto_rules(spec):
    assert len(PROGRAMS) == 11  # eight unset degrees, world, world/constraints only with auto, the global batch
    activation = {"self": celpy.json_to_cel(apply_defaults(SPEC, spec))}
    resolved = rules.resolve("job", AscendHybridJobSpec.model_validate(spec))
    for rule, check, message in PROGRAMS:
        expected = rule.check(resolved)
        assert bool(check.evaluate(activation)) == (expected is None), (rule.check, spec)
        if expected is not None:
            assert str(message.evaluate(activation)) == expected


def test_an_auto_long_sequence_job_records_context_parallelism_and_the_status_schema_keeps_it():
    """A planned CP degree (and an uneven split) must survive the apiserver's pruning of status.plan, or a restart
    would resolve the job with another world."""
    from ascend_hybrid.spec.api import AscendHybridJobStatus

    long = {"parallelism": {"auto": True, "world": 32},
            "model": {"preset": "custom", "layers": 32, "hidden": 4096, "heads": 32, "kvHeads": 8, "vocab": 128256,
                      "ffnType": "swiglu", "ffnHidden": 14336},
            "training": {"globalBatchSize": 32, "seqLength": 131072, "flashAttention": True}}
    decision = decide(observe(body(long)))
    degrees = decision.status["plan"]["parallelism"]
    assert degrees["context"] > 1 and decision.status["worldSize"] == 32
    kept = AscendHybridJobStatus.model_validate(decision.status).model_dump(by_alias=True, exclude_none=True)
    assert kept["plan"]["parallelism"]["context"] == degrees["context"]
    assert kept["parallelism"]["context"] == degrees["context"]
    status_schema = crd.build()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    plan_degrees = status_schema["properties"]["plan"]["properties"]["parallelism"]["properties"]
    assert {"context", "pipelineLayers"} <= set(plan_degrees)
    again = decide(observe(body(long, status=decision.status)))
    assert again.status["worldSize"] == 32 and again.status["plan"] == decision.status["plan"]


def test_the_ratio_is_the_steady_steps_once_past_warm_up():
    plan = PlanStatus(time={"stepSeconds": 2.0}, fits=True)
    training, none = TrainingStatus(step_seconds=6.0), UtilizationStatus()  # the cumulative mean: a 90 s compile in it
    early = strategy.measured(plan, training, none, (50.0, 10.0))
    assert "warmupMark" not in shown(early)["measured"] and early.step_time_ratio == 3.0
    marked = strategy.measured(early, training, none, (120.0, 20.0))
    assert shown(marked)["measured"]["warmupMark"] == {"steps": 20.0, "seconds": 120.0}
    assert "steadySteps" not in shown(marked)["measured"]
    few = strategy.measured(marked, training, none, (124.2, 22.0))
    assert shown(few)["measured"]["steadyStepSeconds"] == 2.1 and few.step_time_ratio == 3.0  # 2 steps: not yet
    steady = strategy.measured(few, training, none, (141.0, 30.0))
    assert (shown(steady)["measured"]["steadySteps"], shown(steady)["measured"]["steadyStepSeconds"]) == (10.0, 2.1)
    assert steady.step_time_ratio == 1.05
    restarted = strategy.measured(steady, training, none, (40.0, 8.0))  # a new process: counters back at 8
    assert "warmupMark" not in shown(restarted)["measured"] and restarted.step_time_ratio == 3.0
    unknown = strategy.measured(steady, training, none, (None, None))  # a source without the totals keeps the mark
    assert shown(unknown)["measured"]["warmupMark"] == {"steps": 20.0, "seconds": 120.0}


def shown(plan: PlanStatus) -> dict:
    """status.plan as the operator writes it."""
    return status_edge.dump(status_edge.Parsed(AscendHybridJobStatus(plan=plan)))["plan"]


def test_an_opted_in_job_is_planned_with_the_clusters_factor_and_later_factors_do_not_replan_it():
    from ascend_hybrid.planner import observed

    factor = {"910B": observed.Observed("910B", 1.5, ("ns/a", "ns/b", "ns/c"), 1.2, 1.8, "2026-12-01T11:00:00Z")}
    plain = decide(observe(body(AUTO))).status["plan"]
    ignored = decide(replace(observe(body(AUTO)), observed_efficiency=factor)).status["plan"]
    assert ignored == plain and "observed" not in ignored  # not opted in: the factor is not read
    opted = {**AUTO, "npu": {"useObservedEfficiency": True}}
    decision = decide(replace(observe(body(opted)), observed_efficiency=factor))
    plan = decision.status["plan"]
    assert plan["observed"] == {"stepScale": 1.5, "jobs": 3}
    assert plan["time"]["stepSeconds"] == pytest.approx(1.5 * plain["time"]["stepSeconds"], rel=1e-3)
    fits = next(c for c in decision.status["conditions"] if c["type"] == "StrategyFits")
    assert "scaled by the observed 1.5× of 3 jobs on 910B" in fits["message"]
    # the next pass sees a new factor: the recorded plan stands (same specHash), so the pods keep their degrees
    later = {"910B": observed.Observed("910B", 3.0, ("ns/a",))}
    again = decide(replace(observe(body(opted, decision.status)), observed_efficiency=later)).status["plan"]
    assert again["specHash"] == plan["specHash"] and again["observed"]["stepScale"] == 1.5
    # a manual job scores its own strategy with it too
    manual = {"parallelism": {"data": 2}, "npu": {"perPod": 1, "useObservedEfficiency": True}}
    scored = decide(replace(observe(body(manual, name="manual")), observed_efficiency=factor)).status
    assert scored["plan"]["source"] == "evaluated" and scored["plan"]["observed"]["stepScale"] == 1.5
