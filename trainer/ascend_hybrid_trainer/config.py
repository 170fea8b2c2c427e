"""What one training run needs, read from the operator's contract (design §8: env, §3/§6: job.json).

The contract is a pydantic model: `JobDocument` mirrors job.json section by section, `EnvSettings` the AHJ_*
environment. A value of the wrong type is refused, never coerced (the string "2", the float 2.0 and the boolean
true are not integers; 1 is not a boolean), so are out-of-range values (`data: 0`, `steps: 0`), integers beyond
int64, non-finite floats (`Infinity`, `NaN`), duplicate keys and keys the contract does not have. Every violation
becomes ONE line naming the field and the rule (ConfigError, the ConfigError exit code): never a traceback.

The validated document is then resolved: model presets, the defaults of defaults.py, and the rules of design §3 that
tie fields together. Pure: no MindSpore, no I/O beyond reading the file named by AHJ_JOB_CONFIG.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

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
DEFAULT_TOP_K = defaults.MODEL_EXTENSIONS["topK"]  # custom models' and presets' default, as in rules.effective_model
DEFAULT_CAPACITY_FACTOR = defaults.MODEL_EXTENSIONS["capacityFactor"]
DEFAULT_AUX_LOSS_WEIGHT = defaults.MODEL_EXTENSIONS["auxLossWeight"]
DEFAULT_CHECKPOINT_DIR = defaults.CHECKPOINT_DIR
DEFAULT_CHECKPOINT_EVERY = defaults.CHECKPOINT["everySteps"]
DEFAULT_METRICS_PORT = defaults.ENV["AHJ_METRICS_PORT"]
DEFAULT_LOG_EVERY = defaults.ENV["AHJ_LOG_EVERY_STEPS"]
INT64_MAX = 2**63 - 1  # the CRD's integers are int64


class ConfigError(ValueError):
    """A setting the trainer cannot run with; the message names the setting and the rule, on one line."""


class DataError(ValueError):
    """The training data cannot be read or does not fit the model (missing file, wrong shape, token ids out of the
    vocabulary); the message names the data set and what is wrong."""


# --- the contract as it is written: job.json and the AHJ_* environment -------------------------------------------

PositiveInt = Annotated[int, Field(ge=1, le=INT64_MAX)]
NonNegativeInt = Annotated[int, Field(ge=0, le=INT64_MAX)]
PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
NonNegativeFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class _Section(BaseModel):
    """One object of job.json: camelCase keys, strict types, no unknown keys; null means absent."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=True,
                              alias_generator=to_camel)

    def given(self) -> dict[str, Any]:
        """The keys the document sets (camelCase), without the absent ones."""
        return self.model_dump(by_alias=True, exclude_none=True)


class ParallelismDocument(_Section):
    data: PositiveInt | None = None
    tensor: PositiveInt | None = None
    pipeline: PositiveInt | None = None
    expert: PositiveInt | None = None
    expert_placement: Literal["dataParallel", "intraNode"] | None = None
    micro_batches: PositiveInt | None = None
    virtual_pipeline_stages: PositiveInt | None = None


class ModelDocument(_Section):
    preset: Literal["tiny", "gpt-1b", "moe-100b", "custom"] | None = None
    layers: PositiveInt | None = None
    hidden: PositiveInt | None = None
    heads: PositiveInt | None = None
    kv_heads: PositiveInt | None = None
    ffn_hidden: PositiveInt | None = None
    ffn_type: Literal["gelu", "swiglu"] | None = None
    vocab: PositiveInt | None = None
    experts: NonNegativeInt | None = None
    top_k: PositiveInt | None = None
    capacity_factor: PositiveFloat | None = None
    aux_loss_weight: NonNegativeFloat | None = None


class CheckpointDocument(_Section):
    claim_name: str | None = None
    every_steps: PositiveInt | None = None


RECOMPUTE_KINDS = ("none", "selective", "full")


def _factor(value: float | None) -> float | None:
    if value is not None and 0 < value <= 1:
        raise ValueError("must be 0 (off) or greater than 1")
    return value


class TrainingDocument(_Section):
    steps: PositiveInt | None = None
    global_batch_size: PositiveInt | None = None
    seq_length: PositiveInt | None = None
    learning_rate: PositiveFloat | None = None
    seed: NonNegativeInt | None = None
    recompute: str | None = None  # the kind, or the old boolean (true = full, false = none)
    sequence_parallel: bool | None = None
    flash_attention: bool | None = None
    optimizer_shard: bool | None = None
    gradient_clip_norm: NonNegativeFloat | None = None
    divergence_loss_factor: NonNegativeFloat | None = None
    divergence_grad_factor: NonNegativeFloat | None = None
    checkpoint: CheckpointDocument | None = None

    _factors = field_validator("divergence_loss_factor", "divergence_grad_factor")(_factor)

    @field_validator("recompute", mode="plain")
    @classmethod
    def _recompute_kind(cls, value: Any) -> str | None:
        if isinstance(value, bool):  # the old boolean form: true = full, as the CRD reads it
            return "full" if value else "none"
        if value is None or value in RECOMPUTE_KINDS:
            return value
        raise ValueError(f"must be one of {', '.join(RECOMPUTE_KINDS)}, true or false")


class NpuDocument(_Section):
    chip: str | None = None
    per_pod: PositiveInt | None = None


class JobDocument(_Section):
    """job.json as the operator renders it (render.job_config): only the sections the trainer reads are typed
    deeper; `name`, `worldSize` and `npu` are checked for type and used for the world-size check."""

    name: str | None = None
    world_size: PositiveInt | None = None
    npu: NpuDocument | None = None
    parallelism: ParallelismDocument = Field(default_factory=ParallelismDocument)
    model: ModelDocument = Field(default_factory=ModelDocument)
    training: TrainingDocument = Field(default_factory=TrainingDocument)


class EnvSettings(BaseModel):
    """The AHJ_* variables (design §8-§9, docs/trainer.md). Values arrive as strings: "10" is read as the number
    10, "ten", "1.5" for an integer, "inf" or a negative timeout are refused; an empty value means unset."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    job_config: str | None = Field(None, alias="AHJ_JOB_CONFIG")
    parallel: str | None = Field(None, alias="AHJ_PARALLEL")
    checkpoint_dir: str | None = Field(None, alias="AHJ_CHECKPOINT_DIR")
    checkpoint_keep: Annotated[int, Field(ge=0)] = Field(defaults.ENV["AHJ_CHECKPOINT_KEEP"],
                                                         alias="AHJ_CHECKPOINT_KEEP")
    metrics_port: Annotated[int, Field(ge=0, le=65535)] = Field(DEFAULT_METRICS_PORT, alias="AHJ_METRICS_PORT")
    log_every_steps: Annotated[int, Field(ge=1)] = Field(DEFAULT_LOG_EVERY, alias="AHJ_LOG_EVERY_STEPS")
    dataset_path: str | None = Field(None, alias="AHJ_DATASET_PATH")
    ranktable_timeout_seconds: Annotated[float, Field(gt=0, allow_inf_nan=False)] = Field(
        defaults.ENV["AHJ_RANKTABLE_TIMEOUT_SECONDS"], alias="AHJ_RANKTABLE_TIMEOUT_SECONDS")
    stop_grace_seconds: Annotated[float, Field(ge=0, allow_inf_nan=False)] = Field(
        defaults.ENV["AHJ_STOP_GRACE_SECONDS"], alias="AHJ_STOP_GRACE_SECONDS")
    termination_log: str = Field(defaults.ENV["AHJ_TERMINATION_LOG"], alias="AHJ_TERMINATION_LOG")
    launch_mode: Literal["dynamic", "ranktable"] = Field("dynamic", alias="AHJ_LAUNCH_MODE")

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> EnvSettings:
        given = {key: value for key, value in env.items() if key.startswith("AHJ_") and value != ""}
        try:
            return cls.model_validate(given)
        except ValidationError as error:
            raise ConfigError(one_line(error)) from None


_RULES = {
    "greater_than_equal": lambda ctx: f"must be >= {ctx['ge']}",
    "greater_than": lambda ctx: f"must be > {ctx['gt']}",
    "less_than_equal": lambda ctx: ("must fit in a signed 64-bit integer" if ctx["le"] == INT64_MAX
                                    else f"must be <= {ctx['le']}"),
    "int_type": lambda ctx: "must be an integer",
    "int_parsing": lambda ctx: "must be an integer",
    "int_from_float": lambda ctx: "must be an integer",
    "float_type": lambda ctx: "must be a number",
    "float_parsing": lambda ctx: "must be a number",
    "finite_number": lambda ctx: "must be a finite number",
    "bool_type": lambda ctx: "must be true or false",
    "string_type": lambda ctx: "must be a string",
    "literal_error": lambda ctx: f"must be one of {ctx['expected']}",
    "model_type": lambda ctx: "must be an object",
    "dict_type": lambda ctx: "must be an object",
    "extra_forbidden": lambda ctx: "not a setting of the job contract this trainer implements",
    "value_error": lambda ctx: str(ctx.get("error", "invalid value")),
}


def one_line(error: ValidationError, prefix: str = "") -> str:
    """Pydantic's errors as one line: `training.steps=0: must be >= 1; model.heads='8': must be an integer`."""
    parts = []
    for item in error.errors():
        path = prefix + ".".join(str(part) for part in item["loc"])
        rule = _RULES.get(item["type"])
        text = rule(item.get("ctx") or {}) if rule else item["msg"]
        parts.append(f"{path}={item['input']!r}: {text}".replace("\n", " "))
    return "; ".join(parts)


def validated(document_class: type[BaseModel], raw: Any, prefix: str = "") -> Any:
    try:
        return document_class.model_validate(raw)
    except ValidationError as error:
        raise ConfigError(one_line(error, prefix)) from None


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
    kv_heads: int | None = None  # None: = heads (multi-head attention)
    ffn_type: str = defaults.MODEL_EXTENSIONS["ffnType"]

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
        return self.heads // self.kv_heads


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
        virtual_pipeline_stages=raw["virtualPipelineStages"])


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
        kv_heads=merged.get("kvHeads"), ffn_type=merged.get("ffnType", defaults.MODEL_EXTENSIONS["ffnType"]))
    problems = []
    if model.hidden % model.heads:
        problems.append(f"model.hidden={model.hidden} must be divisible by model.heads={model.heads}")
    if model.heads % model.kv_heads:
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
        divergence_loss_factor=float(given["divergenceLossFactor"]),
        divergence_grad_factor=float(given["divergenceGradFactor"]),
        checkpoint_every=checkpoint["everySteps"], checkpoint_claim=checkpoint.get("claimName") or None,
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
    chunks = degrees.pipeline * degrees.virtual_pipeline_stages
    if model.layers % chunks:
        problems.append(f"model.layers={model.layers} must be divisible by parallelism.pipeline={degrees.pipeline}"
                        + (f" x virtualPipelineStages={degrees.virtual_pipeline_stages}"
                           if degrees.virtual_pipeline_stages > 1 else ""))
    if model.heads % degrees.tensor:
        problems.append(f"model.heads={model.heads} must be divisible by parallelism.tensor={degrees.tensor}")
    if model.kv_heads % degrees.tensor:
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
        raise ConfigError(f"worldSize={document.world_size} but parallelism data x tensor x pipeline = "
                          f"{degrees.world_size}")
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
