"""What one training run needs, read from the operator's contract (design §8: env, §3/§6: job.json).

contract.py validates the documents as written (one line per violation, never a traceback); this module resolves
them: model presets, the defaults of defaults.py, and the rules of design §3 that tie fields together. Pure: no
MindSpore, no I/O beyond reading the file named by AHJ_JOB_CONFIG.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, cast

from . import defaults
from .contract import (
    DEFAULT_LOG_EVERY,
    DEFAULT_METRICS_PORT,
    ConfigError,
    DataError,
    EnvSettings,
    JobDocument,
    ModelDocument,
    ParallelismDocument,
    TrainingDocument,
    validated,
)

# Same numbers as the operator's presets (design §3); the trainer keeps its own copy because it never imports the
# operator package (the contract is env + files).
MODEL_PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {"layers": 24, "hidden": 128, "heads": 8, "ffnHidden": 512, "vocab": 512, "experts": 0, "topK": None},
    "gpt-1b": {"layers": 24, "hidden": 2048, "heads": 16, "ffnHidden": 8192, "vocab": 50304, "experts": 0,
               "topK": None},
    "moe-100b": {"layers": 64, "hidden": 5120, "heads": 40, "ffnHidden": 20480, "vocab": 64000, "experts": 8,
                 "topK": 2},
}
DEFAULT_TOP_K = defaults.MODEL_EXTENSIONS["topK"]  # custom models' and presets' default, as in rules.resolved_model
DEFAULT_CAPACITY_FACTOR = defaults.MODEL_EXTENSIONS["capacityFactor"]
DEFAULT_AUX_LOSS_WEIGHT = defaults.MODEL_EXTENSIONS["auxLossWeight"]
DEFAULT_CHECKPOINT_DIR = defaults.CHECKPOINT_DIR
DEFAULT_CHECKPOINT_EVERY = defaults.CHECKPOINT["everySteps"]

__all__ = ["ConfigError", "DataError", "EnvSettings"]  # the errors and settings callers know from here


# --- the resolved configuration the trainer runs with --------------------------------------------------------------

@dataclass(frozen=True)
class Parallelism:
    data: int = defaults.PARALLELISM["data"]
    tensor: int = defaults.PARALLELISM["tensor"]
    pipeline: int = defaults.PARALLELISM["pipeline"]
    expert: int = defaults.PARALLELISM["expert"]
    expert_placement: str = defaults.PARALLELISM["expertPlacement"]
    micro_batches: int = defaults.PARALLELISM["pipeline"]  # = pipeline
    virtual_pipeline_stages: int = defaults.PARALLELISM["virtualPipelineStages"]
    context: int = defaults.PARALLELISM["context"]  # ranks that split each sequence (ring attention)
    pipeline_layers: tuple[int, ...] | None = None  # layers of each stage; None: the even split

    @property
    def world_size(self) -> int:
        return self.data * self.tensor * self.pipeline * self.context

    @property
    def only_data_parallel(self) -> bool:
        return self.tensor == 1 and self.pipeline == 1 and self.expert == 1 and self.context == 1


@dataclass(frozen=True)
class ModelConfig:
    layers: int
    hidden: int
    heads: int
    ffn_hidden: int
    vocab: int
    experts: int = 0
    top_k: int = DEFAULT_TOP_K
    capacity_factor: float = DEFAULT_CAPACITY_FACTOR
    aux_loss_weight: float = DEFAULT_AUX_LOSS_WEIGHT
    kv_heads: int | None = None  # None: = heads (multi-head attention)
    ffn_type: str = defaults.MODEL_EXTENSIONS["ffnType"]
    sliding_window: int | None = None  # keys each query attends to, itself included; None: full causal attention

    def __post_init__(self) -> None:
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def query_groups(self) -> int:
        """Query heads sharing one key/value head (1: multi-head attention)."""
        return self.heads // cast(int, self.kv_heads)  # __post_init__ replaced a None


@dataclass(frozen=True)
class TrainingConfig:
    steps: int = defaults.TRAINING["steps"]
    global_batch_size: int = 1
    seq_length: int = defaults.TRAINING["seqLength"]
    learning_rate: float = defaults.TRAINING["learningRate"]
    seed: int = defaults.TRAINING["seed"]
    recompute: str = defaults.TRAINING["recompute"]  # none | selective (the attention core) | full (each layer)
    optimizer_shard: bool = defaults.TRAINING["optimizerShard"]
    sequence_parallel: bool = defaults.TRAINING["sequenceParallel"]
    flash_attention: bool = defaults.TRAINING["flashAttention"]
    gradient_bucket_mb: int | None = None  # None: MindSpore's own gradient fusion
    gradient_clip_norm: float = defaults.TRAINING_EXTENSIONS["gradientClipNorm"]
    divergence_loss_factor: float = defaults.TRAINING_EXTENSIONS["divergenceLossFactor"]
    divergence_grad_factor: float = defaults.TRAINING_EXTENSIONS["divergenceGradFactor"]
    checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY
    checkpoint_claim: str | None = None


@dataclass(frozen=True)
class RunConfig:
    parallelism: Parallelism
    model: ModelConfig
    training: TrainingConfig
    checkpoint_dir: str | None = None  # None: no checkpoints (the job names no claim and no directory was given)
    dataset_path: str | None = None
    metrics_port: int = DEFAULT_METRICS_PORT
    log_every: int = DEFAULT_LOG_EVERY
    checkpoint_keep: int = defaults.ENV["AHJ_CHECKPOINT_KEEP"]
    env: EnvSettings = field(default_factory=lambda: EnvSettings.model_validate({}))


def parse_parallelism(given: Mapping[str, Any]) -> Parallelism:
    raw = {**defaults.PARALLELISM, **given}
    pipeline = raw["pipeline"]
    return Parallelism(
        data=raw["data"], tensor=raw["tensor"], pipeline=pipeline, expert=raw["expert"],
        expert_placement=raw["expertPlacement"], micro_batches=raw.get("microBatches") or pipeline,
        virtual_pipeline_stages=raw["virtualPipelineStages"], context=raw["context"],
        pipeline_layers=tuple(raw["pipelineLayers"]) if raw.get("pipelineLayers") else None)


def parse_model(document: ModelDocument) -> ModelConfig:
    explicit = document.given()
    preset = explicit.pop("preset", defaults.MODEL["preset"])
    if preset == "custom":
        missing = [key for key in ("layers", "hidden", "heads", "vocab") if key not in explicit]
        if missing:
            raise ConfigError(f"model: preset custom needs {', '.join(missing)}")
        merged: dict[str, Any] = {"experts": 0, "ffnHidden": 4 * explicit["hidden"], **explicit}
    else:
        merged = {**{key: value for key, value in MODEL_PRESETS[preset].items() if value is not None}, **explicit}
    model = ModelConfig(
        layers=merged["layers"], hidden=merged["hidden"], heads=merged["heads"], ffn_hidden=merged["ffnHidden"],
        vocab=merged["vocab"], experts=merged.get("experts", 0), top_k=merged.get("topK", DEFAULT_TOP_K),
        capacity_factor=merged.get("capacityFactor", DEFAULT_CAPACITY_FACTOR),
        aux_loss_weight=merged.get("auxLossWeight", DEFAULT_AUX_LOSS_WEIGHT),
        kv_heads=merged.get("kvHeads"), ffn_type=merged.get("ffnType", defaults.MODEL_EXTENSIONS["ffnType"]),
        sliding_window=merged.get("slidingWindow"))
    problems = []
    if model.hidden % model.heads:
        problems.append(f"model.hidden={model.hidden} must be divisible by model.heads={model.heads}")
    if model.heads % cast(int, model.kv_heads):  # __post_init__ replaced a None with heads
        problems.append(f"model.kvHeads={model.kv_heads} must divide model.heads={model.heads} (each key/value "
                        f"head serves an equal group of query heads)")
    if model.is_moe and model.top_k > model.experts:
        problems.append(f"model.topK={model.top_k} must not exceed model.experts={model.experts}")
    if problems:
        raise ConfigError("; ".join(problems))
    return model


def parse_training(document: TrainingDocument, degrees: Parallelism) -> TrainingConfig:
    given = {**defaults.TRAINING, **defaults.TRAINING_EXTENSIONS, **document.given()}
    checkpoint = {**defaults.CHECKPOINT, **(document.checkpoint.given() if document.checkpoint else {})}
    training = TrainingConfig(
        steps=given["steps"],
        # The operator's default global batch: one sample per DP rank and micro-batch (design §3 / api.py).
        global_batch_size=given.get("globalBatchSize") or degrees.data * degrees.micro_batches,
        seq_length=given["seqLength"], learning_rate=float(given["learningRate"]), seed=given["seed"],
        recompute=given["recompute"], optimizer_shard=given["optimizerShard"], sequence_parallel=given["sequenceParallel"],
        flash_attention=given["flashAttention"], gradient_clip_norm=float(given["gradientClipNorm"]),
        gradient_bucket_mb=given.get("gradientBucketMB"),
        divergence_loss_factor=float(given["divergenceLossFactor"]),
        divergence_grad_factor=float(given["divergenceGradFactor"]),
        # auto: the default interval until the operator's reaches the ranks (checkpoint.Interval)
        checkpoint_every=(DEFAULT_CHECKPOINT_EVERY if checkpoint["everySteps"] == "auto" else checkpoint["everySteps"]),
        checkpoint_claim=checkpoint.get("claimName") or None,
    )
    per_step_split = degrees.data * degrees.micro_batches
    if training.global_batch_size % per_step_split:
        raise ConfigError(
            f"training.globalBatchSize={training.global_batch_size} must be a multiple of data x microBatches "
            f"= {degrees.data} x {degrees.micro_batches}, so every DP rank and micro-batch gets whole samples")
    return training


def _pipeline_layers_problems(model: ModelConfig, degrees: Parallelism) -> list[str]:
    split, problems = degrees.pipeline_layers or (), []
    if len(split) != degrees.pipeline:
        problems.append(f"parallelism.pipelineLayers has {len(split)} entries: it needs one per stage "
                        f"(parallelism.pipeline={degrees.pipeline})")
    if sum(split) != model.layers:
        problems.append(f"parallelism.pipelineLayers sums to {sum(split)}: it must sum to model.layers={model.layers}")
    if degrees.virtual_pipeline_stages > 1:
        problems.append("parallelism.pipelineLayers: not with virtualPipelineStages > 1 (interleaving cuts the "
                        "layers into equal chunks)")
    return problems


def check_model_fits_degrees(model: ModelConfig, degrees: Parallelism) -> None:
    """The validation rules of design §3 that involve the model; the operator checks them too, the trainer
    repeats them because it may be started by hand with a job.json of its own."""
    problems = []
    chunks = degrees.pipeline * degrees.virtual_pipeline_stages
    if degrees.pipeline_layers:
        problems += _pipeline_layers_problems(model, degrees)
    elif model.layers % chunks:
        problems.append(f"model.layers={model.layers} must be divisible by parallelism.pipeline={degrees.pipeline}"
                        + (f" x virtualPipelineStages={degrees.virtual_pipeline_stages}"
                           if degrees.virtual_pipeline_stages > 1 else ""))
    if model.heads % degrees.tensor:
        problems.append(f"model.heads={model.heads} must be divisible by parallelism.tensor={degrees.tensor}")
    if cast(int, model.kv_heads) % degrees.tensor:  # __post_init__ replaced a None with heads
        problems.append(f"model.kvHeads={model.kv_heads} must be divisible by parallelism.tensor={degrees.tensor} "
                        f"(each tensor-parallel rank holds whole key/value heads)")
    if degrees.virtual_pipeline_stages > 1 and degrees.pipeline == 1:
        problems.append(f"parallelism.virtualPipelineStages={degrees.virtual_pipeline_stages} needs "
                        f"parallelism.pipeline > 1 (interleaving splits each pipeline stage into model chunks)")
    if degrees.pipeline > 1 and degrees.micro_batches < degrees.pipeline:
        problems.append(f"parallelism.microBatches={degrees.micro_batches} must be >= parallelism.pipeline="
                        f"{degrees.pipeline} (MindSpore's pipeline needs a micro-batch for every stage)")
    if degrees.expert > 1:
        if not model.is_moe or model.experts % degrees.expert:
            problems.append(f"parallelism.expert={degrees.expert} needs model.experts > 0 and divisible by it "
                            f"(experts={model.experts})")
        if degrees.expert_placement == "dataParallel" and degrees.data % degrees.expert:
            problems.append(f"parallelism.expert={degrees.expert} must divide parallelism.data={degrees.data} "
                            f"for expertPlacement dataParallel")
    if problems:
        raise ConfigError("; ".join(problems))


def parse_job(job: Any, env_parallel: Any = None) -> RunConfig:
    """job.json plus AHJ_PARALLEL (the env wins where both name a degree: it is what the pod was rendered with)."""
    if not isinstance(job, Mapping):
        raise ConfigError(f"job.json must be a JSON object, not {type(job).__name__}")
    document = validated(JobDocument, job)
    given_parallel = document.parallelism.given()
    if env_parallel is not None:
        given_parallel.update(validated(ParallelismDocument, env_parallel, prefix="AHJ_PARALLEL.").given())
    degrees = parse_parallelism(given_parallel)
    model = parse_model(document.model)
    check_model_fits_degrees(model, degrees)
    if document.world_size is not None and document.world_size != degrees.world_size:
        raise ConfigError(f"worldSize={document.world_size} but parallelism data x tensor x pipeline"
                          f"{' x context' if degrees.context > 1 else ''} = {degrees.world_size}")
    return RunConfig(parallelism=degrees, model=model, training=parse_training(document.training, degrees))


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    duplicates = sorted({key for key in keys if keys.count(key) > 1})
    if duplicates:
        raise ConfigError(f"duplicate key {', '.join(map(repr, duplicates))}")
    return dict(pairs)


def _non_finite(token: str) -> float:
    raise ConfigError(f"{token} is not JSON (a non-finite number); give a finite number")


def read_json(text: str, what: str) -> Any:
    """Strict JSON: no duplicate keys, no NaN/Infinity (Python's json module accepts both)."""
    try:
        return json.loads(text, object_pairs_hook=_no_duplicate_keys, parse_constant=_non_finite)
    except ConfigError as error:
        raise ConfigError(f"{what}: {error}") from None
    except json.JSONDecodeError as error:
        raise ConfigError(f"{what}: not valid JSON ({error})") from None


def load_run_config(env: Mapping[str, str] = os.environ) -> RunConfig:
    settings = EnvSettings.from_env(env)
    job: Any = {}
    if settings.job_config:
        try:
            with open(settings.job_config, encoding="utf-8") as handle:
                text = handle.read()
        except FileNotFoundError:
            raise ConfigError(f"AHJ_JOB_CONFIG={settings.job_config}: no such file (the operator mounts the job "
                              f"ConfigMap there)") from None
        except (OSError, UnicodeDecodeError) as error:
            raise ConfigError(f"AHJ_JOB_CONFIG={settings.job_config}: cannot be read ({error})") from None
        job = read_json(text, f"AHJ_JOB_CONFIG={settings.job_config}")
    env_parallel = read_json(settings.parallel, "AHJ_PARALLEL") if settings.parallel else None
    config = parse_job(job, env_parallel)
    # The operator mounts the claim at /checkpoints only when the job names one (design §6).
    checkpoint_dir = settings.checkpoint_dir or (
        DEFAULT_CHECKPOINT_DIR if config.training.checkpoint_claim else None)
    return replace(config, checkpoint_dir=checkpoint_dir, dataset_path=settings.dataset_path,
                   metrics_port=settings.metrics_port, log_every=settings.log_every_steps,
                   checkpoint_keep=settings.checkpoint_keep, env=settings)
