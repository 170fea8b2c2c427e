"""What one training run needs, read from the operator's contract (design §8: env, §3/§6: job.json).

Pure: no MindSpore, no I/O beyond reading the job file named by AHJ_JOB_CONFIG. Every missing optional key takes
the design's default, so a hand-written job.json with only {"parallelism": {"data": 2}} is enough.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from . import defaults

# Same numbers as the operator's presets (design §3); the trainer keeps its own copy because it never imports the
# operator package (the contract is env + files).
MODEL_PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {"layers": 24, "hidden": 128, "heads": 8, "ffnHidden": 512, "vocab": 512, "experts": 0, "topK": None},
    "gpt-1b": {"layers": 24, "hidden": 2048, "heads": 16, "ffnHidden": 8192, "vocab": 50304, "experts": 0,
               "topK": None},
    "moe-100b": {"layers": 64, "hidden": 5120, "heads": 40, "ffnHidden": 20480, "vocab": 64000, "experts": 8,
                 "topK": 2},
}
DEFAULT_TOP_K = 2  # custom models' and presets' default, as in the operator's rules.effective_model
DEFAULT_CAPACITY_FACTOR = 1.25
DEFAULT_AUX_LOSS_WEIGHT = 0.01
DEFAULT_CHECKPOINT_DIR = "/checkpoints"
DEFAULT_CHECKPOINT_EVERY = defaults.CHECKPOINT["everySteps"]
DEFAULT_METRICS_PORT = 9400
DEFAULT_LOG_EVERY = 10


class ConfigError(ValueError):
    """A setting the trainer cannot run with; the message names the setting and the rule."""


@dataclass(frozen=True)
class Parallelism:
    data: int = defaults.PARALLELISM["data"]
    tensor: int = defaults.PARALLELISM["tensor"]
    pipeline: int = defaults.PARALLELISM["pipeline"]
    expert: int = defaults.PARALLELISM["expert"]
    expert_placement: str = defaults.PARALLELISM["expertPlacement"]
    micro_batches: int = defaults.PARALLELISM["pipeline"]  # = pipeline

    @property
    def world_size(self) -> int:
        return self.data * self.tensor * self.pipeline

    @property
    def only_data_parallel(self) -> bool:
        return self.tensor == 1 and self.pipeline == 1 and self.expert == 1


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

    @property
    def is_moe(self) -> bool:
        return self.experts > 0


@dataclass(frozen=True)
class TrainingConfig:
    steps: int = defaults.TRAINING["steps"]
    global_batch_size: int = 1
    seq_length: int = defaults.TRAINING["seqLength"]
    learning_rate: float = defaults.TRAINING["learningRate"]
    seed: int = defaults.TRAINING["seed"]
    recompute: bool = defaults.TRAINING["recompute"] == "full"
    optimizer_shard: bool = defaults.TRAINING["optimizerShard"]
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


def refuse_unimplemented(section: str, raw: Mapping[str, Any], only: Mapping[str, Any]) -> None:
    """Settings the operator's API accepts but this trainer cannot run yet: refused by name, never ignored, so a
    job never trains something other than what its spec says. A setting at its default value is fine."""
    for key, default in only.items():
        value = raw.get(key)
        if value is not None and value != default:
            raise ConfigError(f"{section}.{key}={value!r}: not implemented by this trainer yet (only {default!r}); "
                              f"remove it or set it to {default!r}")


def parse_recompute(raw: Mapping[str, Any]) -> bool:
    """`recompute`: the old boolean, or none | selective | full. The trainer recomputes whole layers (full) only."""
    value = raw.get("recompute", defaults.TRAINING["recompute"])
    if isinstance(value, bool):
        return value
    if value in ("none", "full"):
        return value == "full"
    if value == "selective":
        raise ConfigError("training.recompute='selective': not implemented by this trainer yet (only none or full)")
    raise ConfigError(f"training.recompute={value!r}: must be none, selective, full, true or false")


def parse_parallelism(raw: Mapping[str, Any]) -> Parallelism:
    refuse_unimplemented("parallelism", raw, {"virtualPipelineStages": defaults.PARALLELISM["virtualPipelineStages"]})
    raw = {**defaults.PARALLELISM, **{key: value for key, value in raw.items() if value is not None}}
    pipeline = int(raw["pipeline"])
    placement = raw["expertPlacement"]
    if placement not in ("dataParallel", "intraNode"):
        raise ConfigError(f"parallelism.expertPlacement={placement!r}: must be dataParallel or intraNode")
    degrees = Parallelism(
        data=int(raw["data"]), tensor=int(raw["tensor"]), pipeline=pipeline,
        expert=int(raw["expert"]), expert_placement=placement,
        micro_batches=int(raw.get("microBatches") or pipeline),
    )
    for name in ("data", "tensor", "pipeline", "expert", "micro_batches"):
        if getattr(degrees, name) < 1:
            raise ConfigError(f"parallelism.{name}={getattr(degrees, name)}: must be an integer >= 1")
    return degrees


def parse_model(raw: Mapping[str, Any]) -> ModelConfig:
    preset = raw.get("preset") or defaults.MODEL["preset"]
    if preset != "custom" and preset not in MODEL_PRESETS:
        raise ConfigError(f"model.preset={preset!r}: must be one of {', '.join(MODEL_PRESETS)} or custom")
    explicit = {key: value for key, value in raw.items() if value is not None and key != "preset"}
    heads = explicit.get("heads", MODEL_PRESETS.get(preset, {}).get("heads"))
    # kvHeads equal to heads is ordinary multi-head attention, which the trainer implements.
    refuse_unimplemented("model", raw, {"kvHeads": heads, "ffnType": "gelu"})
    if preset == "custom":
        missing = [key for key in ("layers", "hidden", "heads", "vocab") if key not in explicit]
        if missing:
            raise ConfigError(f"model: preset custom needs {', '.join(missing)}")
        merged: dict[str, Any] = {"experts": 0, "ffnHidden": 4 * int(explicit["hidden"]), **explicit}
    else:
        merged = {**MODEL_PRESETS[preset], **explicit}
    model = ModelConfig(
        layers=int(merged["layers"]), hidden=int(merged["hidden"]), heads=int(merged["heads"]),
        ffn_hidden=int(merged["ffnHidden"]), vocab=int(merged["vocab"]), experts=int(merged.get("experts") or 0),
        top_k=int(merged.get("topK") or DEFAULT_TOP_K),
        capacity_factor=float(merged.get("capacityFactor") or DEFAULT_CAPACITY_FACTOR),
        aux_loss_weight=float(merged.get("auxLossWeight", DEFAULT_AUX_LOSS_WEIGHT)),
    )
    if model.hidden % model.heads:
        raise ConfigError(f"model.hidden={model.hidden} must be divisible by model.heads={model.heads}")
    if model.is_moe and model.top_k > model.experts:
        raise ConfigError(f"model.topK={model.top_k} must not exceed model.experts={model.experts}")
    return model


def parse_training(raw: Mapping[str, Any], degrees: Parallelism) -> TrainingConfig:
    refuse_unimplemented("training", raw, {key: defaults.TRAINING[key] for key in ("sequenceParallel", "flashAttention")})
    checkpoint = {**defaults.CHECKPOINT, **(raw.get("checkpoint") or {})}
    given = {**defaults.TRAINING, **{key: value for key, value in raw.items() if value is not None}}
    training = TrainingConfig(
        steps=int(given["steps"]),
        # The operator's default global batch: one sample per DP rank and micro-batch (design §3 / api.py).
        global_batch_size=int(given.get("globalBatchSize") or degrees.data * degrees.micro_batches),
        seq_length=int(given["seqLength"]),
        learning_rate=float(given["learningRate"]),
        seed=int(given["seed"]),
        recompute=parse_recompute(given),
        optimizer_shard=bool(given["optimizerShard"]),
        checkpoint_every=int(checkpoint["everySteps"]),
        checkpoint_claim=checkpoint.get("claimName") or None,
    )
    per_step_split = degrees.data * degrees.micro_batches
    if training.global_batch_size % per_step_split:
        raise ConfigError(
            f"training.globalBatchSize={training.global_batch_size} must be a multiple of data x microBatches "
            f"= {degrees.data} x {degrees.micro_batches}, so every DP rank and micro-batch gets whole samples")
    return training


def check_model_fits_degrees(model: ModelConfig, degrees: Parallelism) -> None:
    """The validation rules of design §3 that involve the model; the operator checks them too, the trainer
    repeats them because it may be started by hand with a job.json of its own."""
    problems = []
    if model.layers % degrees.pipeline:
        problems.append(f"model.layers={model.layers} must be divisible by parallelism.pipeline={degrees.pipeline}")
    if model.heads % degrees.tensor:
        problems.append(f"model.heads={model.heads} must be divisible by parallelism.tensor={degrees.tensor}")
    if degrees.expert > 1:
        if not model.is_moe or model.experts % degrees.expert:
            problems.append(f"parallelism.expert={degrees.expert} needs model.experts > 0 and divisible by it "
                            f"(experts={model.experts})")
        if degrees.expert_placement == "dataParallel" and degrees.data % degrees.expert:
            problems.append(f"parallelism.expert={degrees.expert} must divide parallelism.data={degrees.data} "
                            f"for expertPlacement dataParallel")
    if problems:
        raise ConfigError("; ".join(problems))


def parse_job(job: Mapping[str, Any], env_parallel: Mapping[str, Any] | None = None) -> RunConfig:
    """job.json plus AHJ_PARALLEL (the env wins where both name a degree: it is what the pod was rendered with)."""
    raw_parallel = {**(job.get("parallelism") or {}), **(env_parallel or {})}
    degrees = parse_parallelism(raw_parallel)
    model = parse_model(job.get("model") or {})
    check_model_fits_degrees(model, degrees)
    return RunConfig(parallelism=degrees, model=model, training=parse_training(job.get("training") or {}, degrees))


def load_run_config(env: Mapping[str, str] = os.environ) -> RunConfig:
    job: dict[str, Any] = {}
    job_path = env.get("AHJ_JOB_CONFIG")
    if job_path:
        try:
            with open(job_path, encoding="utf-8") as handle:
                job = json.load(handle)
        except FileNotFoundError:
            raise ConfigError(f"AHJ_JOB_CONFIG={job_path}: no such file (the operator mounts the job ConfigMap "
                              f"there)") from None
        except json.JSONDecodeError as error:
            raise ConfigError(f"AHJ_JOB_CONFIG={job_path}: not valid JSON ({error})") from None
    env_parallel = None
    if env.get("AHJ_PARALLEL"):
        try:
            env_parallel = json.loads(env["AHJ_PARALLEL"])
        except json.JSONDecodeError as error:
            raise ConfigError(f"AHJ_PARALLEL: not valid JSON ({error})") from None
    config = parse_job(job, env_parallel)
    # The operator mounts the claim at /checkpoints only when the job names one (design §6).
    checkpoint_dir = env.get("AHJ_CHECKPOINT_DIR") or (
        DEFAULT_CHECKPOINT_DIR if config.training.checkpoint_claim else None)
    return replace(
        config,
        checkpoint_dir=checkpoint_dir,
        dataset_path=env.get("AHJ_DATASET_PATH") or None,
        metrics_port=_int_env(env, "AHJ_METRICS_PORT", DEFAULT_METRICS_PORT),
        log_every=max(1, _int_env(env, "AHJ_LOG_EVERY_STEPS", DEFAULT_LOG_EVERY)),
    )


def _int_env(env: Mapping[str, str], name: str, default: int) -> int:
    value = env.get(name)
    if value in (None, ""):
        return default
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"{name}={value!r}: must be an integer") from None
