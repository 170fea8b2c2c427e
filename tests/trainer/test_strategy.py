"""Degrees → MindSpore parallel context and shard strategies (design §9's table), and the trainer's reading of
job.json. Pure: nothing here imports MindSpore."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ascend_hybrid_trainer.config import ConfigError, Parallelism, parse_job
from ascend_hybrid_trainer.strategy import (
    DATA_PARALLEL,
    SEMI_AUTO_PARALLEL,
    STAND_ALONE,
    check_runnable,
    layer_stages,
    plan_parallel,
    validate_run,
)

SEED_JOB = {
    "parallelism": {"data": 2, "tensor": 8, "pipeline": 8, "expert": 4, "expertPlacement": "intraNode",
                    "microBatches": 32},
    "model": {"preset": "moe-100b", "layers": 64, "experts": 8, "topK": 2},
    "training": {"steps": 10000, "globalBatchSize": 512, "seqLength": 4096, "learningRate": 2e-4,
                 "recompute": True, "optimizerShard": True},
}


def plan_of(job: dict):
    config = parse_job(job)
    return config, plan_parallel(config.parallelism, config.model, config.training)


def test_seed_layout_tp8_pp8_dp2_ep4_intra_node_maps_to_the_table():
    config, plan = plan_of(SEED_JOB)
    assert plan.mode == SEMI_AUTO_PARALLEL
    assert plan.context == {"parallel_mode": "semi_auto_parallel", "device_num": 128, "pipeline_stages": 8,
                            "full_batch": True, "gradients_mean": True, "enable_parallel_optimizer": True}
    shards = plan.shards
    assert shards.qkv == ((2, 1), (8, 1))
    assert shards.ffn_in == ((2, 1), (8, 1))
    assert shards.attention_output == ((2, 8), (1, 8))
    assert shards.ffn_out == ((2, 8), (1, 8))
    assert shards.embedding == ((8, 1), (2, 1))
    assert shards.lm_head == ((2, 1), (8, 1))
    assert shards.expert_weights == (4, 1, 2)
    assert plan.layer_stages[17] == 2
    assert plan.micro_batches == 32 and plan.pipeline_stages == 8 and plan.recompute and plan.full_batch


def test_data_parallel_expert_placement_shards_experts_by_ep_and_ffn_by_tp():
    _, plan = plan_of({"parallelism": {"data": 4, "tensor": 2, "expert": 2}, "model": {"preset": "moe-100b"},
                       "training": {"globalBatchSize": 8}})
    assert plan.shards.expert_weights == (2, 1, 2)
    assert plan.shards.expert_ffn_in == ((2, 2, 1), (2, 1, 2))
    assert plan.shards.expert_ffn_out == ((2, 2, 2), (2, 2, 1))


@pytest.mark.parametrize("placement", ["dataParallel", "intraNode"])
@pytest.mark.parametrize("data,tensor,expert", [(8, 8, 4), (4, 4, 2), (8, 2, 2), (4, 8, 4), (2, 4, 2)])
def test_expert_strategies_use_every_rank_of_a_stage_once(placement, data, tensor, expert):
    job = {"parallelism": {"data": data, "tensor": tensor, "expert": expert, "expertPlacement": placement},
           "model": {"preset": "moe-100b"}, "training": {"globalBatchSize": data}}
    _, plan = plan_of(job)
    tokens, weights = plan.shards.expert_ffn_in
    assert tokens[0] == weights[0] == expert
    assert tokens[0] * tokens[1] * weights[2] == data * tensor


def test_only_data_parallel_maps_to_data_parallel_mode():
    config, plan = plan_of({"parallelism": {"data": 4}, "training": {"globalBatchSize": 8}})
    assert plan.mode == DATA_PARALLEL
    assert plan.context == {"parallel_mode": "data_parallel", "device_num": 4, "gradients_mean": True}
    assert plan.shards is None and not plan.full_batch and not plan.uses_pipeline


def test_data_parallel_with_optimizer_shard_enables_the_parallel_optimizer():
    _, plan = plan_of({"parallelism": {"data": 2}, "training": {"optimizerShard": True}})
    assert plan.context["enable_parallel_optimizer"] is True


def test_one_rank_is_stand_alone():
    _, plan = plan_of({})
    assert plan.mode == STAND_ALONE and plan.context == {"parallel_mode": "stand_alone"}


def test_tensor_only_job_has_no_pipeline_and_one_micro_batch():
    _, plan = plan_of({"parallelism": {"data": 2, "tensor": 4}, "training": {"globalBatchSize": 16}})
    assert plan.context["pipeline_stages"] == 1 and plan.micro_batches == 1
    assert set(plan.layer_stages) == {0}


@given(st.integers(1, 16), st.integers(1, 8))
def test_layer_stages_are_contiguous_equal_blocks(pipeline, per_stage):
    stages = layer_stages(pipeline * per_stage, pipeline)
    assert list(stages) == sorted(stages)
    assert [stages.count(stage) for stage in range(pipeline)] == [per_stage] * pipeline
    assert all(stages[index] == index // per_stage for index in range(len(stages)))


def test_intra_node_expert_must_divide_tensor():
    job = {"parallelism": {"data": 8, "tensor": 2, "expert": 4, "expertPlacement": "intraNode"},
           "model": {"preset": "moe-100b"}, "training": {"globalBatchSize": 8}}
    with pytest.raises(ConfigError, match=r"parallelism.expert=4 must divide parallelism.tensor=2"):
        plan_of(job)


def test_vocab_not_divisible_by_tensor_is_refused():
    job = {"parallelism": {"tensor": 3}, "model": {"preset": "custom", "layers": 2, "hidden": 48, "heads": 3,
                                                   "vocab": 100}}
    with pytest.raises(ConfigError, match=r"model.vocab=100 must be divisible by parallelism.tensor=3"):
        plan_of(job)


@pytest.mark.parametrize("degree", ["tensor", "pipeline", "expert"])
def test_cpu_refuses_every_degree_but_data_with_a_clear_message(degree):
    job = {"parallelism": {"data": 2, degree: 2}, "model": {"preset": "tiny", "experts": 4},
           "training": {"globalBatchSize": 4}}
    config, plan = plan_of(job)
    with pytest.raises(ConfigError) as refused:
        check_runnable(plan, config.parallelism, "CPU")
    message = str(refused.value)
    assert f"{degree}=2" in message and "CPU backend can run only data parallel" in message
    assert "does not change the strategy" in message
    check_runnable(plan, config.parallelism, "Ascend")  # the same plan is fine on NPUs


def test_cpu_runs_data_parallel_but_not_the_parallel_optimizer():
    config, plan = plan_of({"parallelism": {"data": 2}})
    check_runnable(plan, config.parallelism, "CPU")
    config, plan = plan_of({"parallelism": {"data": 2}, "training": {"optimizerShard": True}})
    with pytest.raises(ConfigError, match="training.optimizerShard=true"):
        check_runnable(plan, config.parallelism, "CPU")


def test_validate_run_checks_world_size_and_cpu_rank_table_launch():
    config = parse_job({"parallelism": {"data": 2}})
    with pytest.raises(ConfigError, match=r"data x tensor x pipeline = 2 but RANK_SIZE=4"):
        validate_run(config.parallelism, config.model, config.training, 4, "CPU", "dynamic")
    with pytest.raises(ConfigError, match="CPU backend ignores RANK_TABLE_FILE"):
        validate_run(config.parallelism, config.model, config.training, 2, "CPU", "ranktable")


def test_missing_keys_take_the_design_defaults():
    config = parse_job({})
    assert config.parallelism == Parallelism()
    assert (config.model.layers, config.model.hidden, config.model.heads, config.model.vocab) == (24, 128, 8, 512)
    assert config.training.steps == 1000 and config.training.seq_length == 128
    assert config.training.learning_rate == 1e-3 and config.training.seed == 0
    assert config.training.global_batch_size == 1 and config.training.checkpoint_every == 100


def test_global_batch_must_split_over_data_and_micro_batches():
    with pytest.raises(ConfigError, match=r"globalBatchSize=6 must be a multiple of data x microBatches = 2 x 2"):
        parse_job({"parallelism": {"data": 2, "pipeline": 2}, "model": {"layers": 2},
                   "training": {"globalBatchSize": 6}})


def test_custom_model_needs_its_shape():
    with pytest.raises(ConfigError, match="preset custom needs layers, hidden"):
        parse_job({"model": {"preset": "custom", "heads": 4, "vocab": 64}})


def test_the_mapping_and_the_launcher_do_not_import_mindspore():
    probe = ("import sys, ascend_hybrid_trainer.strategy, ascend_hybrid_trainer.launcher, "
             "ascend_hybrid_trainer.local; print('mindspore' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


# --- the fields the planner can choose: Ascend mappings as pure data --------------------------------

def test_sequence_parallel_splits_norms_and_residuals_along_the_tokens_and_reduce_scatters_the_row_outputs():
    job = {"parallelism": {"data": 2, "tensor": 4}, "training": {"sequenceParallel": True, "globalBatchSize": 4}}
    _, plan = plan_of(job)
    shards = plan.shards
    assert plan.sequence_parallel
    assert shards.layer_norm == ((8, 1), (1,), (1,)) and shards.residual_add == ((8, 1), (8, 1))
    assert shards.row_parallel_output == ((8, 1),)
    assert shards.qkv == ((2, 1), (4, 1)) and shards.attention_output == ((2, 4), (1, 4))  # TP unchanged
    _, without = plan_of({**job, "training": {"globalBatchSize": 4}})
    assert without.shards.layer_norm == ((2, 1), (1,), (1,)) and without.shards.row_parallel_output is None


def test_sequence_parallel_needs_the_sequence_to_split_and_means_nothing_without_tensor_parallelism():
    with pytest.raises(ConfigError, match=r"training.seqLength=130 must be divisible by parallelism.tensor=4"):
        plan_of({"parallelism": {"tensor": 4}, "training": {"sequenceParallel": True, "seqLength": 130}})
    _, plan = plan_of({"parallelism": {"data": 2}, "training": {"sequenceParallel": True}})
    assert not plan.sequence_parallel and plan.mode == DATA_PARALLEL


def test_flash_attention_is_sharded_like_the_attention_heads():
    _, plan = plan_of({"parallelism": {"data": 2, "tensor": 4}, "model": {"kvHeads": 4},
                       "training": {"flashAttention": True, "globalBatchSize": 4}})
    assert plan.flash_attention
    assert plan.shards.flash_attention == ((2, 4, 1, 1), (2, 4, 1, 1), (2, 4, 1, 1), (1, 1))
    assert plan.shards.attention_scores == ((2, 4, 1, 1), (2, 4, 1, 1))  # kv heads split like the QKV columns


def test_grouped_query_attention_needs_whole_key_value_heads_per_tensor_rank():
    with pytest.raises(ConfigError, match=r"model.kvHeads=2 must be divisible by parallelism.tensor=4"):
        plan_of({"parallelism": {"tensor": 4}, "model": {"kvHeads": 2}})
    _, plan = plan_of({"parallelism": {"tensor": 4}, "model": {"kvHeads": 4, "ffnType": "swiglu"}})
    assert plan.shards.ffn_in == ((1, 1), (4, 1)) and plan.shards.gate_multiply == ((1, 4), (1, 4))


def test_interleaved_pipeline_deals_chunks_round_robin_and_turns_on_the_interleaved_schedule():
    config, plan = plan_of({"parallelism": {"pipeline": 4, "virtualPipelineStages": 3, "microBatches": 8},
                            "training": {"globalBatchSize": 8}})
    assert plan.context["pipeline_config"] == {"pipeline_interleave": True, "pipeline_scheduler": "1f1b"}
    assert plan.virtual_stages == 3 and plan.pipeline_stages == 4
    # 24 layers in 12 chunks of 2: chunk c on stage c % 4
    assert plan.layer_stages == tuple((index // 2) % 4 for index in range(24))
    assert [plan.layer_stages.count(stage) for stage in range(4)] == [6] * 4
    _, plain = plan_of({"parallelism": {"pipeline": 4}, "training": {"globalBatchSize": 4}})
    assert "pipeline_config" not in plain.context and plain.layer_stages == tuple(i // 6 for i in range(24))


@given(st.integers(1, 6), st.integers(1, 4), st.integers(1, 3))
def test_interleaved_stages_hold_equal_shares_of_the_layers(pipeline, virtual, per_chunk):
    stages = layer_stages(pipeline * virtual * per_chunk, pipeline, virtual)
    assert [stages.count(stage) for stage in range(pipeline)] == [virtual * per_chunk] * pipeline
    assert stages[0] == 0 and stages[-1] == pipeline - 1  # embedding's stage first, the loss head's last


@pytest.mark.parametrize("job, size, accumulates", [
    ({"parallelism": {"data": 2, "microBatches": 4}, "training": {"globalBatchSize": 16}}, 2, True),
    ({"parallelism": {"data": 2}, "training": {"globalBatchSize": 16}}, 8, False),
    ({"parallelism": {"data": 2, "pipeline": 2, "microBatches": 4}, "model": {"layers": 4},
      "training": {"globalBatchSize": 16}}, 2, False),
    ({"parallelism": {"data": 2, "tensor": 2, "microBatches": 2}, "training": {"globalBatchSize": 8}}, 2, True),
])
def test_micro_batches_set_the_micro_batch_size_and_accumulate_without_a_pipeline(job, size, accumulates):
    _, plan = plan_of(job)
    assert plan.micro_batch_size == size and plan.accumulates_gradients == accumulates
    assert plan.micro_batches == job["parallelism"].get("microBatches", job["parallelism"].get("pipeline", 1))


@pytest.mark.parametrize("recompute, kind", [(True, "full"), ("selective", "selective"), ("none", "none")])
def test_the_plan_carries_the_recompute_kind(recompute, kind):
    _, plan = plan_of({"parallelism": {"tensor": 2}, "training": {"recompute": recompute}})
    assert plan.recompute == kind


def test_cpu_runs_selective_recompute_micro_batches_gqa_and_swiglu_but_not_flash_attention():
    config, plan = plan_of({"parallelism": {"data": 2, "microBatches": 2}, "model": {"kvHeads": 2,
                            "ffnType": "swiglu"}, "training": {"recompute": "selective", "globalBatchSize": 4}})
    check_runnable(plan, config.parallelism, "CPU")
    config, plan = plan_of({"parallelism": {"data": 2}, "training": {"flashAttention": True}})
    with pytest.raises(ConfigError, match="training.flashAttention=true: flash_attention_score .* has kernels for "
                                          "Ascend only"):
        check_runnable(plan, config.parallelism, "CPU")
    check_runnable(plan, config.parallelism, "Ascend")


# --- uneven pipeline stages, context parallelism, gradient buckets ------------------------------------

def test_explicit_pipeline_layers_map_contiguous_blocks_of_those_sizes():
    """MindSpeed's --num-layer-list 17,20,22,21 for an 80-layer model on 4 stages (its Llama 3 70B script)."""
    config, plan = plan_of({"parallelism": {"pipeline": 4, "microBatches": 4, "pipelineLayers": [17, 20, 22, 21]},
                            "model": {"layers": 80}, "training": {"globalBatchSize": 4}})
    assert config.parallelism.pipeline_layers == (17, 20, 22, 21)
    assert [plan.layer_stages.count(stage) for stage in range(4)] == [17, 20, 22, 21]
    assert plan.layer_stages == tuple(sorted(plan.layer_stages))  # contiguous: stage numbers never go back
    assert plan.layer_stages[16] == 0 and plan.layer_stages[17] == 1 and plan.layer_stages[-1] == 3


@given(st.lists(st.integers(1, 9), min_size=1, max_size=8))
def test_any_explicit_split_gives_each_stage_its_count_in_order(split):
    stages = layer_stages(sum(split), len(split), 1, tuple(split))
    assert [stages.count(stage) for stage in range(len(split))] == split
    assert list(stages) == sorted(stages)


@pytest.mark.parametrize("split, message", [
    ([10, 10, 4], r"parallelism.pipelineLayers has 3 entries: it needs one per stage \(parallelism.pipeline=2\)"),
    ([12, 11], r"parallelism.pipelineLayers sums to 23: it must sum to model.layers=24"),
])
def test_explicit_pipeline_layers_are_checked_against_the_model(split, message):
    with pytest.raises(ConfigError, match=message):
        plan_of({"parallelism": {"pipeline": 2, "microBatches": 2, "pipelineLayers": split},
                 "training": {"globalBatchSize": 2}})


def test_context_parallelism_splits_the_sequence_and_turns_on_ring_attention():
    config, plan = plan_of({"parallelism": {"data": 2, "tensor": 2, "context": 4}, "model": {"kvHeads": 8},
                            "training": {"flashAttention": True, "globalBatchSize": 4, "seqLength": 512}})
    assert config.parallelism.world_size == 16 and plan.context["device_num"] == 16
    shards = plan.shards
    assert shards.ring_attention
    # q, k, v in BNSD: batch over DP, heads over TP, the sequence over CP (MindSpore's ring-attention layout)
    assert shards.flash_attention == ((2, 2, 4, 1), (2, 2, 4, 1), (2, 2, 4, 1), (1, 1))
    # every token-splitting op splits the flattened [batch·seq] tokens DP·CP ways; weights stay whole across CP
    assert shards.qkv == ((8, 1), (2, 1)) and shards.attention_output == ((8, 2), (1, 2))
    assert shards.embedding == ((2, 1), (2, 4)) and shards.cross_entropy == ((8, 1), (8, 1))


def test_context_parallelism_needs_flash_attention_and_a_divisible_sequence():
    with pytest.raises(ConfigError, match=r"parallelism.context=2 needs training.flashAttention"):
        plan_of({"parallelism": {"tensor": 2, "context": 2}, "training": {"globalBatchSize": 1}})
    with pytest.raises(ConfigError, match=r"training.seqLength=130 must be divisible by parallelism.context=4"):
        plan_of({"parallelism": {"tensor": 2, "context": 4},
                 "training": {"flashAttention": True, "seqLength": 130, "globalBatchSize": 1}})
    with pytest.raises(ConfigError, match=r"model.slidingWindow=64: not with parallelism.context=2"):
        plan_of({"parallelism": {"tensor": 2, "context": 2}, "model": {"slidingWindow": 64},
                 "training": {"flashAttention": True, "seqLength": 128, "globalBatchSize": 1}})


def test_cpu_refuses_context_parallelism():
    config, plan = plan_of({"parallelism": {"data": 2, "context": 2},
                            "training": {"flashAttention": True, "globalBatchSize": 2}})
    assert plan.mode == SEMI_AUTO_PARALLEL  # CP is never plain data parallelism
    with pytest.raises(ConfigError, match=r"parallelism context=2: the CPU backend can run only data parallel"):
        check_runnable(plan, config.parallelism, "CPU")


def test_gradient_bucket_size_becomes_mindspore_comm_fusion():
    fusion = {"allreduce": {"mode": "size", "config": 32}, "reducescatter": {"mode": "size", "config": 32}}
    _, data_only = plan_of({"parallelism": {"data": 4}, "training": {"gradientBucketMB": 32}})
    assert data_only.context["comm_fusion"] == fusion
    _, hybrid = plan_of({"parallelism": {"data": 2, "tensor": 2}, "training": {"gradientBucketMB": 32}})
    assert hybrid.context["comm_fusion"] == fusion
    _, default = plan_of({"parallelism": {"data": 4}})
    assert "comm_fusion" not in default.context
