"""The operator ↔ trainer contract: what the operator renders (job.json, env) is read by the trainer as the job
says, and every default both state — the CRD's and the trainer's own table — is the same value."""

from __future__ import annotations

import json

import pytest
import yaml

from ascend_hybrid.gang import render
from ascend_hybrid.reconcile import elastic_steps
from ascend_hybrid.spec import crd, models, rules
from ascend_hybrid_trainer import cli as trainer_cli
from ascend_hybrid_trainer import defaults
from ascend_hybrid_trainer.config import MODEL_PRESETS, parse_job
from ascend_hybrid_trainer.strategy import SEMI_AUTO_PARALLEL, plan_parallel
from support.paths import EXAMPLES

SPEC = crd.build()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]


def crd_default(*path: str):
    schema = {"properties": SPEC}
    for key in path:
        schema = schema["properties"][key]
    return schema["default"]


def test_the_trainers_degree_defaults_are_the_operators():
    """The degrees have no CRD defaults (an auto job leaves them unset): rules.resolve applies them."""
    body = {"metadata": {"name": "defaults"}, "spec": {"parallelism": {}, "npu": {"perPod": 1}}}
    resolved = rules.parse(body)
    degrees = {"data": resolved.data, "tensor": resolved.tensor, "pipeline": resolved.pipeline,
                "expert": resolved.expert, "expertPlacement": resolved.expert_placement,
                "virtualPipelineStages": resolved.virtual_pipeline_stages, "context": resolved.context}
    assert degrees == defaults.PARALLELISM


@pytest.mark.parametrize("section, table, path", [
    ("model", defaults.MODEL, ("model",)),
    ("training", defaults.TRAINING, ("training",)),
    ("checkpoint", defaults.CHECKPOINT, ("training", "checkpoint")),
])
def test_the_trainers_defaults_are_the_crds(section, table, path):
    for key, value in table.items():
        assert crd_default(*path, key) == value, f"{section}.{key}"


def test_the_local_runner_takes_the_same_defaults():
    args = trainer_cli.build_parser().parse_args(["local", "--data", "2"])
    assert (args.steps, args.seq_length, args.learning_rate, args.seed, args.preset, args.checkpoint_every) == (
        defaults.TRAINING["steps"], defaults.TRAINING["seqLength"], defaults.TRAINING["learningRate"],
        defaults.TRAINING["seed"], defaults.MODEL["preset"], defaults.CHECKPOINT["everySteps"])


def test_a_job_with_defaults_and_the_local_runner_run_the_same_training():
    """The user's check: `local --data 2 --seed 11 --global-batch 8 --steps 20` must train exactly what
    a DP 2 job (tiny, seed 11, global batch 8, 20 steps) trains: the same config on both paths."""
    body = {"apiVersion": "hybrid.ascend.dev/v1alpha1", "kind": "AscendHybridJob", "metadata": {"name": "dp2"},
            "spec": {"parallelism": {"data": 2}, "npu": {"perPod": 1},
                     "training": {"seed": 11, "globalBatchSize": 8, "steps": 20}}}
    from_job = parse_job(render.job_config(rules.parse(body)))
    from ascend_hybrid_trainer.local import job_document

    args = trainer_cli.build_parser().parse_args(["local", "--data", "2", "--seed", "11", "--global-batch", "8",
                                                  "--steps", "20"])
    from_local = parse_job(job_document(args))
    assert from_local.training == from_job.training
    assert from_local.model == from_job.model and from_local.parallelism == from_job.parallelism


def test_presets_match_the_operator():
    assert MODEL_PRESETS == models.MODEL_PRESETS


@pytest.mark.parametrize("example", ["job.yaml", "seed-moe-128.yaml"])
def test_the_job_json_the_operator_renders_is_read_as_the_job_says(example):
    body = yaml.safe_load((EXAMPLES / example).read_text())
    resolved = rules.parse(body)
    config = parse_job(render.job_config(resolved))
    degrees = config.parallelism
    assert (degrees.data, degrees.tensor, degrees.pipeline, degrees.expert, degrees.micro_batches) == (
        resolved.data, resolved.tensor, resolved.pipeline, resolved.expert, resolved.micro_batches)
    assert degrees.expert_placement == resolved.expert_placement
    model = resolved.model
    assert (config.model.layers, config.model.hidden, config.model.heads, config.model.ffn_hidden,
            config.model.vocab, config.model.experts) == (model["layers"], model["hidden"], model["heads"],
                                                          model["ffnHidden"], model["vocab"], model["experts"])
    assert config.training.global_batch_size == resolved.global_batch_size
    assert config.training.steps == body["spec"]["training"]["steps"]
    plan_parallel(config.parallelism, config.model, config.training)  # the trainer accepts what the operator did




@pytest.mark.parametrize("parallelism", [{"data": 4}, {"data": 2, "tensor": 2}, {"data": 2, "pipeline": 2},
                                         {"data": 2, "tensor": 2, "expert": 2}, {"data": 2, "context": 2}])
@pytest.mark.parametrize("optimizer_shard", [False, True])
def test_the_operator_knows_which_checkpoints_the_trainer_slices_per_rank(parallelism, optimizer_shard):
    """An elastic shrink restarts from the checkpoint at another data degree: the operator takes it only when the
    trainer writes whole checkpoints (train.py: per rank in semi-auto parallel or with the parallel optimizer)."""
    body = {"apiVersion": "hybrid.ascend.dev/v1alpha1", "kind": "AscendHybridJob", "metadata": {"name": "ckpt"},
            "spec": {"parallelism": parallelism, "npu": {"perPod": 4},
                     "model": {"preset": "tiny", "experts": 4 if parallelism.get("expert") else 0},
                     "training": {"globalBatchSize": 8, "optimizerShard": optimizer_shard,
                                  "flashAttention": bool(parallelism.get("context")),
                                  "checkpoint": {"claimName": "ckpt", "everySteps": 2}}}}
    resolved = rules.parse(body)
    config = parse_job(render.job_config(resolved))
    plan = plan_parallel(config.parallelism, config.model, config.training)
    per_rank = plan.mode == SEMI_AUTO_PARALLEL or bool(plan.context.get("enable_parallel_optimizer"))
    assert (elastic_steps.sliced_checkpoints(resolved) is not None) == per_rank


def crd_property(*path: str) -> dict | None:
    schema = {"properties": SPEC}
    for key in path:
        schema = schema.get("properties", {}).get(key)
        if schema is None:
            return None
    return schema


@pytest.mark.parametrize("section, table", [("training", defaults.TRAINING_EXTENSIONS),
                                            ("model", defaults.MODEL_EXTENSIONS)])
def test_the_trainers_own_fields_agree_with_the_crd_once_it_has_them(section, table):
    """Fields the trainer reads that the CRD does not define (yet): the moment the CRD defines one with a default,
    it must be the trainer's."""
    for key, value in table.items():
        schema = crd_property(section, key)
        if schema is not None and "default" in schema:
            assert schema["default"] == value, f"{section}.{key}"


def test_the_job_json_of_every_planner_field_is_read_as_the_job_says():
    """A job using every field the planner can choose: the operator's job.json, read by the trainer, is the job."""
    body = {"apiVersion": "hybrid.ascend.dev/v1alpha1", "kind": "AscendHybridJob", "metadata": {"name": "all"},
            "spec": {"parallelism": {"data": 2, "tensor": 4, "pipeline": 2, "virtualPipelineStages": 2,
                                     "microBatches": 4},
                     "npu": {"perPod": 8},
                     "model": {"preset": "gpt-1b", "kvHeads": 4, "ffnType": "swiglu"},
                     "training": {"recompute": "selective", "sequenceParallel": True, "flashAttention": True,
                                  "globalBatchSize": 16}}}
    resolved = rules.parse(body)
    job = render.job_config(resolved)
    config = parse_job(job)
    assert (config.model.kv_heads, config.model.ffn_type) == (4, "swiglu")
    assert (config.training.recompute, config.training.sequence_parallel, config.training.flash_attention) == (
        "selective", True, True)
    assert config.parallelism.micro_batches == 4
    assert config.parallelism.virtual_pipeline_stages == job["parallelism"].get("virtualPipelineStages", 1) == 2
    plan = plan_parallel(config.parallelism, config.model, config.training)
    assert plan.sequence_parallel and plan.flash_attention and plan.virtual_stages == 2
    assert plan.micro_batch_size == resolved.global_batch_size // (2 * 4)


def test_the_job_json_of_context_parallelism_uneven_stages_and_the_seed_knobs_reaches_the_trainer():
    """Fields that reach the trainer: CP, pipelineLayers, capacityFactor, auxLossWeight and gradientBucketMB, from the spec
    through job.json and AHJ_PARALLEL to the trainer's plan."""
    body = {"apiVersion": "hybrid.ascend.dev/v1alpha1", "kind": "AscendHybridJob", "metadata": {"name": "knobs"},
            "spec": {"parallelism": {"data": 2, "tensor": 2, "pipeline": 2, "context": 2, "microBatches": 4,
                                     "pipelineLayers": [5, 3], "expert": 2},
                     "npu": {"perPod": 8},
                     "model": {"preset": "moe-100b", "layers": 8, "capacityFactor": 0.8, "auxLossWeight": 0.001},
                     "training": {"flashAttention": True, "globalBatchSize": 16, "seqLength": 256,
                                  "gradientBucketMB": 32}}}
    resolved = rules.parse(body)
    assert resolved.world_size == 16
    job = render.job_config(resolved)
    assert job["worldSize"] == 16 and job["parallelism"]["context"] == 2
    assert job["parallelism"]["pipelineLayers"] == [5, 3] and job["training"]["gradientBucketMB"] == 32
    config = parse_job(job, env_parallel=json.loads(json.dumps(resolved.degrees)))
    assert (config.parallelism.context, config.parallelism.pipeline_layers) == (2, (5, 3))
    assert (config.model.capacity_factor, config.model.aux_loss_weight) == (0.8, 0.001)
    plan = plan_parallel(config.parallelism, config.model, config.training)
    assert plan.layer_stages == (0, 0, 0, 0, 0, 1, 1, 1) and plan.shards.ring_attention
    assert plan.context["device_num"] == 16 and plan.context["comm_fusion"]["allreduce"]["config"] == 32


def test_the_sliding_window_reaches_the_trainers_attention():
    body = {"apiVersion": "hybrid.ascend.dev/v1alpha1", "kind": "AscendHybridJob", "metadata": {"name": "window"},
            "spec": {"parallelism": {"data": 2}, "npu": {"perPod": 2},
                     "model": {"preset": "tiny", "slidingWindow": 16}, "training": {"seqLength": 64}}}
    resolved = rules.parse(body)
    job = render.job_config(resolved)
    assert job["model"]["slidingWindow"] == 16
    config = parse_job(job, env_parallel=json.loads(json.dumps(resolved.degrees)))
    assert config.model.sliding_window == 16
    without = parse_job(render.job_config(rules.parse({**body, "spec": {**body["spec"], "model": {"preset": "tiny"}}})),
                        env_parallel=json.loads(json.dumps(resolved.degrees)))
    assert without.model.sliding_window is None


@pytest.mark.parametrize("pods", [2, 2048])
def test_the_trainer_reads_the_rank_table_as_the_operator_writes_it_plain_or_gzipped(tmp_path, pods):
    """The ConfigMap as the kubelet mounts it (a file per key, binaryData decoded): a 16 384-rank table is
    gzipped beside a small hccl.json; the launcher reads through it and hands its workers a plain copy."""
    import base64
    import json

    from ascend_hybrid.gang import ranktable
    from ascend_hybrid_trainer import rank_table

    servers = [{"server_id": f"127.0.{index // 250}.{index % 250}", "container_ip": f"127.16.{index // 250}.{index % 250}",
                "device": [{"device_id": str(chip), "device_ip": f"127.100.0.{chip}", "rank_id": str(index * 8 + chip)}
                           for chip in range(8)]} for index in range(pods)]
    table = {"status": "completed", "version": "1.0", "server_count": str(pods), "server_list": servers}
    data, binary = ranktable.config_map_data(table)
    volume = tmp_path / "config"
    volume.mkdir()
    for key, value in data.items():
        (volume / key).write_text(value)
    for key, value in binary.items():
        (volume / key).write_bytes(base64.b64decode(value))
    path = str(volume / "hccl.json")
    assert rank_table.wait_for_completed(path, timeout_seconds=1) == table
    assert rank_table.local_device_ids(table, range(8 * pods - 8, 8 * pods), path) == [str(chip) for chip in range(8)]
    workdir = tmp_path / "work"
    workdir.mkdir()
    plain = rank_table.plain_rank_table_file(path, table, str(workdir))
    assert (plain == path) == (pods == 2)
    assert json.loads(open(plain).read()) == table
    if binary:
        (volume / ranktable.COMPRESSED_KEY).unlink()  # the volume swapped between the pointer and its sibling
        assert rank_table.read_rank_table(path) is None


def test_the_recovery_channel_is_spelled_alike_on_both_sides():
    """The operator and the launchers speak through <job>-recovery (docs/reliability.md): the generation key and
    the report states are the wire, spelled once on each side (the trainer imports nothing of the operator)."""
    from ascend_hybrid.contracts.names import RECOVERY_GENERATION_KEY, RECOVERY_WORLD_KEY
    from ascend_hybrid.diagnosis import recovery
    from ascend_hybrid_trainer import control

    assert control.GENERATION_KEY == RECOVERY_GENERATION_KEY
    assert (control.STARTED, control.STEPPING, control.FAILED) == (recovery.STARTED, recovery.STEPPING,
                                                                   recovery.FAILED)
    assert control.WORLD_KEY == RECOVERY_WORLD_KEY
    from ascend_hybrid.contracts.names import RECOVERY_CHECKPOINT_KEY

    assert control.CHECKPOINT_KEY == RECOVERY_CHECKPOINT_KEY


def test_the_world_the_operator_writes_for_kept_pods_is_the_world_the_launcher_runs():
    """An elastic shrink kept pods elastic-a1-0 and elastic-a1-2 as pods 0 and 1 of a DP 2 world (2 micro-batches):
    the operator's `world` (membership.launcher_world) read by the trainer's launcher (generations.moved) and
    its job.json and AHJ_PARALLEL resolved by the trainer's own config."""
    import json
    from datetime import UTC, datetime

    from ascend_hybrid.reconcile import elastic_steps, membership
    from ascend_hybrid.reconcile.state import Observed, Pass
    from ascend_hybrid.spec.rules import parse
    from ascend_hybrid_trainer import config
    from ascend_hybrid_trainer.generations import moved
    from ascend_hybrid_trainer.launcher import PodLaunch
    from support.builders import JobBuilder

    body = (JobBuilder("elastic", namespace="ns").uid("uid-1").parallelism(data=4).per_pod(1)
            .section("model", preset="tiny").section("training", globalBatchSize=8, steps=10)
            .section("elastic", minData=2)
            .status({"attempt": 2, "elastic": {"data": 2, "microBatches": 2, "fromData": 4},
                     "recovery": {"kept": ["elastic-a1-0", "elastic-a1-2"], "keptAttempt": 2}}).build())
    p = Pass(Observed(job=body, resolved=parse(body), spec_problems=(), pods=(), rank_table=None, children_ready=True,
                      sched_ip="127.32.0.10", nodes={}, now=datetime.now(UTC)))
    elastic_steps.run_shrunk(p)
    world = json.loads(membership.launcher_world(p, ()) or "null")
    launch = PodLaunch(pod_index=2, local_workers=1, rank_start=2, world_size=4, sched_host="127.0.0.9",
                       sched_port="2222", pod_ip=None, rank_table_file="hccl.json", launch_mode="dynamic",
                       ranktable_timeout=1, stop_grace=1)
    moved_launch, env = moved(launch, {"RANK_SIZE": "4"}, world, world["pods"]["elastic-a1-2"], "job.json")
    assert (moved_launch.pod_index, moved_launch.rank_start, moved_launch.world_size) == (1, 1, 2)
    run = config.parse_job(world["jobConfig"], json.loads(env["AHJ_PARALLEL"]))
    assert (run.parallelism.data, run.parallelism.world_size) == (2, int(env["RANK_SIZE"]))
    assert run.training.global_batch_size == 8 and run.parallelism.micro_batches == 2


def test_the_trainers_step_and_save_figures_are_what_the_goodput_account_reads():
    """The lead pod's step count and checkpoint seconds, served by the trainer, become the goodput account's
    reading of its process (steps this process completed, seconds it saved)."""
    from datetime import UTC, datetime

    from prometheus_client import generate_latest

    from ascend_hybrid.monitoring.progress import from_trainer_text
    from ascend_hybrid.reconcile.goodput_steps import reading
    from ascend_hybrid_trainer.metrics import TrainerMetrics

    metrics = TrainerMetrics()
    metrics.step.set(40)  # resumed from the checkpoint of step 40
    for step in range(41, 46):
        metrics.record_step(step, 2.0, 0.5, 8, 1024, 1.0)
    metrics.record_save(3.25)
    now = datetime(2026, 12, 8, tzinfo=UTC)
    sample = from_trainer_text({0: generate_latest(metrics.registry).decode()}, now)
    assert (sample.checkpoint_seconds_sum, sample.checkpoint_count) == (3.25, 1)
    got = reading(sample)
    assert got is not None and (got.step, got.steps_done, got.save_seconds, got.saves) == (45, 5, 3.25, 1)


def test_an_auto_interval_is_read_by_the_trainer_and_the_operators_value_moves_it_at_its_step(tmp_path):
    """job.json says everySteps: auto, which the trainer starts at the operator's start interval; the interval the
    operator writes on the channel (checkpoint_steps.channel_value), passed on as a file by the launcher, moves the
    ranks' saves from its fromStep on."""
    from ascend_hybrid.reconcile.checkpoint_steps import START_STEPS
    from ascend_hybrid_trainer.checkpoint import Interval

    spec = {"parallelism": {"data": 2}, "npu": {"perPod": 1},
            "training": {"steps": 500, "checkpoint": {"claimName": "ckpt", "everySteps": "auto"}}}
    body = {"apiVersion": "hybrid.ascend.dev/v1alpha1", "kind": "AscendHybridJob", "metadata": {"name": "auto"},
            "spec": spec}
    config = parse_job(render.job_config(rules.parse(body)))
    assert config.training.checkpoint_every == START_STEPS == defaults.CHECKPOINT["everySteps"]
    path = tmp_path / "checkpoint-interval.json"
    interval = Interval(config.training.checkpoint_every, str(path))
    assert [step for step in range(1, 121) if interval.due(step)] == [100]
    path.write_text(json.dumps({"everySteps": 7, "fromStep": 130}, sort_keys=True))
    assert [step for step in range(121, 150) if interval.due(step)] == [133, 140, 147]
