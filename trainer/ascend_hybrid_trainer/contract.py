"""The trainer's side of the operator's contract as it is written (design §8: env, §3/§6: job.json): `JobDocument`
mirrors job.json section by section, `EnvSettings` the AHJ_* environment. A value of the wrong type is refused,
never coerced (the string "2", the float 2.0 and the boolean true are not integers; 1 is not a boolean), so are
out-of-range values (`data: 0`, `steps: 0`), integers beyond int64, non-finite floats (`Infinity`, `NaN`),
duplicate keys and keys the contract does not have. Every violation becomes ONE line naming the field and the rule
(ConfigError, the ConfigError exit code): never a traceback. config.py resolves the validated document."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from . import defaults

INT64_MAX = 2**63 - 1  # the CRD's integers are int64
DEFAULT_METRICS_PORT = defaults.ENV["AHJ_METRICS_PORT"]
DEFAULT_LOG_EVERY = defaults.ENV["AHJ_LOG_EVERY_STEPS"]


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
    context: PositiveInt | None = None
    pipeline_layers: list[PositiveInt] | None = None


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
    sliding_window: PositiveInt | None = None


AUTO_MESSAGE = "must be an integer >= 1 or auto"


class CheckpointDocument(_Section):
    claim_name: str | None = None
    every_steps: int | str | None = None  # auto: the operator's interval (checkpoint.Interval)

    @field_validator("every_steps", mode="before")
    @classmethod
    def _count_or_auto(cls, value: Any) -> Any:
        if value is None or value == "auto" or (
                isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= INT64_MAX):
            return value
        raise ValueError(AUTO_MESSAGE)


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
    gradient_bucket_mb: PositiveInt | None = Field(None, alias="gradientBucketMB")
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
    recovery_wait_seconds: Annotated[float, Field(gt=0, allow_inf_nan=False)] = Field(
        defaults.ENV["AHJ_RECOVERY_WAIT_SECONDS"], alias="AHJ_RECOVERY_WAIT_SECONDS")
    launcher_channel: str | None = Field(None, alias="AHJ_LAUNCHER_CHANNEL")
    service_account_dir: str | None = Field(None, alias="AHJ_SERVICE_ACCOUNT_DIR")
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
