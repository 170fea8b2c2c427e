"""The planner's search: the seed §4.5 case (docs/design.md §11), what it recommends, and properties of the model
and the search."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_hybrid.planner import explain, hardware, memory, search, timing
from ascend_hybrid.planner.workload import Strategy, Workload
from ascend_hybrid.spec import rules
from ascend_hybrid.spec.api import AscendHybridJobSpec
from support.strategies import valid_specs

HW = hardware.builtin("910B")


@pytest.fixture(scope="module")
def seed(examples):
    [body] = [d for d in yaml.safe_load_all((examples / "seed-moe-128.yaml").read_text()) if d]
    return rules.parse(body)


@pytest.fixture(scope="module")
def seed_plan(seed):
    return search.plan(seed, HW)


def test_seed_case_evaluates_to_its_bubble_with_tp_and_ep_inside_nodes(seed):
    evaluation = search.evaluate_job(seed, HW)
    document = explain.candidate_document(evaluation, Workload.from_job(seed), HW)
    p, m = 8, 32
    assert document["time"]["bubbleFraction"] == round((p - 1) / (m + p - 1), 3) == 0.179
    assert document["groups"]["tensor"] == {"size": 8, "nodes": 1, "tier": "intraNode"}
    assert document["groups"]["expert"] == {"size": 4, "nodes": 1, "tier": "intraNode"}
    assert document["groups"]["pipeline"]["tier"] == "interNode"
    assert document["parallelism"] == {"data": 2, "tensor": 8, "pipeline": 8, "expert": 4,
                                       "expertPlacement": "intraNode", "microBatches": 32,
                                       "virtualPipelineStages": 1}
    assert (document["recompute"], document["optimizerShard"], document["microBatchSize"]) == ("full", True, 8)
    assert "TP 8 inside one node over HCCS" in document["why"] and "bubble 17.9 % with 32 micro-batches" in document["why"]


def test_seed_best_on_910b_keeps_tp_inside_a_node(seed_plan):
    best = seed_plan.candidates[0]
    assert best.fits and best.layout["tensor"].tier == "intraNode" and best.layout["tensor"].nodes == 1
    # Narayanan's takeaway: TP inside one server, PP across servers. (Not necessarily all 8 chips: the calibrated
    # matmul efficiency makes TP 8's 640-wide slices of this model slower than TP 4's.)
    assert best.layout["pipeline"].tier == "interNode"
    assert [c.time.step for c in seed_plan.candidates] == sorted(c.time.step for c in seed_plan.candidates)


def test_every_candidate_passes_the_rules_exactly(seed, seed_plan):
    """Each ranked candidate, rebuilt as a spec and resolved the operator's way, breaks no rule."""
    for evaluation in seed_plan.candidates[:200] + seed_plan.candidates[-50:]:
        s = evaluation.strategy
        spec = seed.spec.model_copy(update={
            "parallelism": seed.spec.parallelism.model_copy(update={
                "data": s.data, "tensor": s.tensor, "pipeline": s.pipeline, "expert": s.expert,
                "expert_placement": s.expert_placement, "micro_batches": s.micro_batches,
                "virtual_pipeline_stages": s.virtual_stages}),
            "training": seed.spec.training.model_copy(update={
                "recompute": s.recompute, "sequence_parallel": s.sequence_parallel,
                "optimizer_shard": s.optimizer_shard, "global_batch_size": seed.global_batch_size})})
        body = {"metadata": {"name": seed.name}, "spec": spec.model_dump(by_alias=True, exclude_none=True)}
        resolved = rules.parse(body)  # raises SpecError if any rule is broken
        assert resolved.world_size == seed_plan.world and Strategy.from_job(resolved) == s


def test_rejections_name_their_reasons_with_counts_and_examples(seed_plan):
    rejected = seed_plan.rejected
    assert rejected.count == sum(rejected.by_reason.values())
    assert seed_plan.considered == rejected.count + seed_plan.fitting
    assert "spec.parallelism.tensor must divide spec.npu.perPod" in rejected.by_reason
    examples = {reason.split(":")[0]: reason for _, reason in rejected.example_list()}
    assert examples["out of memory"].startswith("out of memory: ") and " GiB on stage " in examples["out of memory"]
    document = explain.rejected_document(rejected, seed_plan.workload)
    assert list(document["byReason"].values()) == sorted(document["byReason"].values(), reverse=True)


def test_plans_are_deterministic(seed):
    first = explain.plan_document(search.plan(seed, HW), 20)
    second = explain.plan_document(search.plan(seed, HW), 20)
    assert json.dumps(first) == json.dumps(second)


def test_nothing_fits_names_the_closest_candidate(seed):
    small = search.plan(seed, HW, world=16)
    assert small.candidates == [] and small.fitting == 0
    closest = small.closest
    assert closest is not None and not closest.fits
    misses = [over for _, _, over in small.rejected.examples["out of memory"]]
    assert closest.memory.total - closest.usable == min(misses) > 0
    assert small.rejected.by_reason["out of memory"] > 0


def test_rules_do_not_read_the_training_flags():
    """The search checks each structure once with the job's own flags (search.plan's docstring): that is exact
    only while no rule reads recompute, sequenceParallel or optimizerShard. A rule that does breaks this test."""

    @settings(max_examples=80, deadline=None)
    @given(st.data())
    def check(data):
        spec = AscendHybridJobSpec.model_validate(data.draw(valid_specs()))
        verdicts = set()
        for recompute, sequence_parallel, shard in search._variants(2, 2, search.RECOMPUTE_KINDS):
            training = spec.training.model_copy(update={"recompute": recompute, "sequence_parallel": sequence_parallel,
                                                        "optimizer_shard": shard})
            variant = spec.model_copy(update={"training": training})
            verdicts.add(tuple(rules.broken_rules(rules.resolve("job", variant))))
        assert len(verdicts) == 1

    check()


# --- properties of the model -------------------------------------------------------------------------------

workloads = st.builds(
    Workload, layers=st.sampled_from([8, 16, 24]), hidden=st.sampled_from([1024, 4096]),
    heads=st.sampled_from([16, 32]), kv_heads=st.sampled_from([8, 16]), ffn_hidden=st.sampled_from([4096, 11008]),
    ffn_type=st.sampled_from(["gelu", "swiglu"]), vocab=st.sampled_from([32000, 64000]),
    experts=st.sampled_from([0, 8]), top_k=st.sampled_from([1, 2]), seq_length=st.sampled_from([1024, 4096]),
    global_batch=st.just(256), flash_attention=st.booleans())
strategies = st.builds(
    Strategy, data=st.sampled_from([1, 2, 4]), tensor=st.sampled_from([1, 2, 4, 8]), pipeline=st.sampled_from([1, 2, 4, 8]),
    expert=st.sampled_from([1, 2, 4]), expert_placement=st.sampled_from(["dataParallel", "intraNode"]),
    micro_batches=st.integers(1, 64), virtual_stages=st.sampled_from([1, 2]),
    recompute=st.sampled_from(["none", "selective", "full"]), sequence_parallel=st.booleans(),
    optimizer_shard=st.booleans(), micro_batch_size=st.sampled_from([1, 2, 4]))


@settings(max_examples=300, deadline=None)
@given(strategies, st.integers(1, 64))
def test_more_micro_batches_never_raise_the_idle_fraction(s, more):
    assert timing.bubble_fraction(replace(s, micro_batches=s.micro_batches + more)) <= timing.bubble_fraction(s)


@settings(max_examples=300, deadline=None)
@given(workloads, strategies)
def test_recompute_never_raises_activation_memory(w, s):
    for stage in {0, s.pipeline - 1}:
        kinds = [memory.stage_memory(w, replace(s, recompute=kind), stage) for kind in ("none", "selective", "full")]
        activations = [k.activations + k.moe_buffers for k in kinds]
        assert activations[0] >= activations[1] >= activations[2]
        # what recompute brings back while one layer's backward runs never outweighs what it saved
        assert kinds[0].total >= kinds[1].total and kinds[0].total >= kinds[2].total


@settings(max_examples=300, deadline=None)
@given(workloads, strategies)
def test_sharding_never_raises_state_memory(w, s):
    for stage in {0, s.pipeline - 1}:
        sharded = memory.stage_memory(w, replace(s, optimizer_shard=True), stage).states
        assert sharded <= memory.stage_memory(w, replace(s, optimizer_shard=False), stage).states


@settings(max_examples=200, deadline=None)
@given(workloads, strategies)
def test_sequence_parallelism_never_raises_memory_nor_time(w, s):
    """SP moves the same TP bytes and splits the norms' and residuals' vector work t ways: never slower."""
    on, off = replace(s, sequence_parallel=True), replace(s, sequence_parallel=False)
    assert memory.stage_memory(w, on, 0).total <= memory.stage_memory(w, off, 0).total
    assert timing.step_time(w, on, HW, 10 ** 9).step <= timing.step_time(w, off, HW, 10 ** 9).step


small_jobs = st.fixed_dictionaries({
    "parallelism": st.just({"data": 1}),
    "npu": st.sampled_from([{"chip": "910B", "perPod": 8}, {"chip": "910B", "perPod": 4}, {"chip": "910A", "perPod": 4}]),
    "model": st.sampled_from([{"preset": "tiny"}, {"preset": "gpt-1b"}, {"preset": "moe-100b", "layers": 8},
                              {"preset": "gpt-1b", "kvHeads": 4, "ffnType": "swiglu"}]),
    "training": st.fixed_dictionaries({"globalBatchSize": st.sampled_from([16, 64]),
                                       "seqLength": st.sampled_from([1024, 2048]),
                                       "flashAttention": st.booleans()}),
})


@settings(max_examples=25, deadline=None)
@given(small_jobs, st.sampled_from([8, 16, 32]))
def test_every_candidate_of_random_jobs_passes_the_rules_and_ranks_by_time(spec, world):
    spec = dict(spec, npu=dict(spec["npu"]))
    body = {"metadata": {"name": "job"}, "spec": {**spec, "parallelism": {"data": spec["npu"]["perPod"]}}}
    resolved = rules.parse(body)
    result = search.plan(resolved, hardware.builtin(spec["npu"]["chip"]), world)
    for evaluation in result.candidates:
        s = evaluation.strategy
        assert evaluation.fits and s.world == world
        parallelism = {**s.parallelism(), "expertPlacement": s.expert_placement}
        candidate = {**body["spec"], "parallelism": parallelism,
                     "training": {**spec["training"], "globalBatchSize": resolved.global_batch_size,
                                  "recompute": s.recompute, "sequenceParallel": s.sequence_parallel,
                                  "optimizerShard": s.optimizer_shard}}
        assert rules.broken_rules(rules.resolve("job", AscendHybridJobSpec.model_validate(candidate))) == []
    steps = [c.rank_key for c in result.candidates]
    assert steps == sorted(steps)


# --- context parallelism and uneven stages --------------------------------------------------------

@settings(max_examples=300, deadline=None)
@given(workloads, strategies, st.sampled_from([1, 2, 4, 8]), st.sampled_from([2, 4, 8]))
def test_more_context_parallelism_never_raises_activation_memory(w, s, context, more):
    """Each CP rank holds seq/cp of every activation: a larger CP degree never holds more, on any stage. Nor more
    in all without the parallel optimizer: with it, a parameter whose first dimension the larger replica count
    (DP × CP) no longer divides stays whole (MindSpore's rule), so the states may grow, as they would on Ascend."""
    w = replace(w, flash_attention=True)
    fewer, more_cp = replace(s, context=context), replace(s, context=context * more)
    for stage in range(s.pipeline):
        assert (memory.stage_memory(w, more_cp, stage).activations
                <= memory.stage_memory(w, fewer, stage).activations)
        if not s.optimizer_shard:
            assert memory.stage_memory(w, more_cp, stage).total <= memory.stage_memory(w, fewer, stage).total


def _slowest_stage(w, s):
    layout = timing.groups(s, HW)
    return max(timing._stage_slot(w, s, HW, layout, layers, stage == s.pipeline - 1).total
               + (timing._embedding_seconds(w, s, HW) if stage == 0 else 0.0)
               for stage, layers in enumerate(s.layers_of(w.layers)))


@settings(max_examples=200, deadline=None)
@given(workloads, strategies, st.sampled_from([24, 30, 70, 80]))
def test_a_balanced_split_never_has_a_slower_slowest_stage_than_the_even_split(w, s, layers):
    s = replace(s, virtual_stages=1)
    w = replace(w, layers=layers)
    if layers < s.pipeline:
        return
    even = replace(s, stage_layers=timing.near_even_split(layers, s.pipeline))
    balanced = replace(s, stage_layers=timing.balanced_split(w, even, HW))
    assert sum(balanced.stage_layers) == layers and min(balanced.stage_layers) >= 1
    assert _slowest_stage(w, balanced) <= _slowest_stage(w, even) * (1 + 1e-12)


def test_a_70_layer_model_on_12_stages_gets_a_split_that_lightens_the_head_stage():
    """The issue's case: 70 layers do not divide 12 stages; the planner splits them itself, the stage with the
    LM head (vocab 152064) taking fewer layers."""
    w = Workload(70, 8192, 64, 8, 29568, "swiglu", 152064, 0, 0, 4096, 96, True)
    s = Strategy(1, 8, 12, micro_batches=96, sequence_parallel=True)
    split = timing.balanced_split(w, s, HW)
    assert sum(split) == 70 and len(split) == 12
    assert split[-1] < max(split)
    even = replace(s, stage_layers=timing.near_even_split(70, 12))
    assert _slowest_stage(w, replace(s, stage_layers=split)) < _slowest_stage(w, even)


def test_the_search_offers_uneven_stages_where_the_pipeline_does_not_divide_the_layers():
    body = {"metadata": {"name": "uneven"}, "spec": {
        "parallelism": {"auto": True, "world": 24, "autoConstraints": {"maxTensor": 8}},
        "model": {"preset": "custom", "layers": 70, "hidden": 4096, "heads": 32, "vocab": 64000,
                  "ffnType": "swiglu", "ffnHidden": 11008},
        "training": {"globalBatchSize": 48, "seqLength": 4096, "flashAttention": True}}}
    found = search.plan(rules.parse(body), HW, world=24)
    uneven = [c for c in found.candidates if c.strategy.stage_layers]
    assert uneven, "a pipeline of 3 stages needs an uneven split of 70 layers"
    for candidate in uneven[:20]:
        split = candidate.strategy.stage_layers
        assert sum(split) == 70 and len(split) == candidate.strategy.pipeline
        document = explain.candidate_document(candidate, found.workload, HW)
        assert document["parallelism"]["pipelineLayers"] == list(split)


def test_a_sliding_window_keeps_the_search_off_context_parallelism():
    """The trainer's ring attention is causal only (rules refuse slidingWindow with context > 1): the search never
    offers it, and a windowed 32K sequence still finds strategies."""
    body = {"metadata": {"name": "window"}, "spec": {
        "parallelism": {"auto": True, "world": 8},
        "model": {"preset": "custom", "layers": 32, "hidden": 4096, "heads": 32, "kvHeads": 8, "vocab": 32000,
                  "ffnType": "swiglu", "ffnHidden": 14336, "slidingWindow": 4096},
        "training": {"globalBatchSize": 32, "seqLength": 32768, "flashAttention": True, "sequenceParallel": True}}}
    found = search.plan(rules.parse(body), HW, world=8)
    assert found.candidates and all(c.strategy.context == 1 for c in found.candidates)


def test_long_sequences_search_context_parallelism_and_its_ranks_follow_tensor():
    body = {"metadata": {"name": "long"}, "spec": {
        "parallelism": {"auto": True, "world": 32},
        "model": {"preset": "custom", "layers": 32, "hidden": 4096, "heads": 32, "kvHeads": 8, "vocab": 128256,
                  "ffnType": "swiglu", "ffnHidden": 14336},
        "training": {"globalBatchSize": 32, "seqLength": 131072, "flashAttention": True}}}
    found = search.plan(rules.parse(body), HW, world=32)
    best = found.candidates[0]
    assert best.strategy.context > 1, "128K tokens on 32 NPUs: only context parallelism fits the activations"
    assert best.layout["context"].size == best.strategy.context
    assert best.strategy.world == 32
