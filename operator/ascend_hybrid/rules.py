"""Resolved values (every default applied) and cross-field rules of an AscendHybridJob, in Python and in CEL.

Each rule is written once here with both forms, so the apiserver (CEL, at admission) and the operator
(Python, for everything CEL cannot see) report the very same message naming the field and the rule.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from .api import MAX_JOB_NAME, MAX_WORLD_SIZE, AscendHybridJobSpec
from .causes import RESTART_AVOIDING_NODE, SOFTWARE_CAUSES
from .chips import CHIPS, cel_allowed_per_pod, cel_allowed_text, cel_chips_per_node

MODEL_PRESETS: dict[str, dict[str, int | None]] = {
    "tiny": {"layers": 24, "hidden": 128, "heads": 8, "ffnHidden": 512, "vocab": 512, "experts": 0, "topK": None},
    "gpt-1b": {"layers": 24, "hidden": 2048, "heads": 16, "ffnHidden": 8192, "vocab": 50304, "experts": 0, "topK": None},
    "moe-100b": {"layers": 64, "hidden": 5120, "heads": 40, "ffnHidden": 20480, "vocab": 64000, "experts": 8, "topK": 2},
}
CUSTOM_REQUIRED = ("layers", "hidden", "heads", "vocab")


class SpecError(ValueError):
    """Every problem of a job, each one line `field: rule` (or `field=value rule`)."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class ResolvedJob:
    """The spec with every default resolved: what layout, placement, render and the trainer use."""

    name: str
    spec: AscendHybridJobSpec
    data: int
    tensor: int
    pipeline: int
    expert: int
    expert_placement: str
    micro_batches: int
    chip: str
    per_pod: int
    model: dict[str, Any]
    global_batch_size: int
    virtual_pipeline_stages: int = 1

    @property
    def world_size(self) -> int:
        return self.data * self.tensor * self.pipeline

    @property
    def pod_count(self) -> int:
        return self.world_size // self.per_pod

    @property
    def degrees(self) -> dict[str, Any]:
        degrees = {"data": self.data, "tensor": self.tensor, "pipeline": self.pipeline, "expert": self.expert,
                   "expertPlacement": self.expert_placement, "microBatches": self.micro_batches}
        if self.virtual_pipeline_stages != 1:
            # Only when interleaving: jobs that do not interleave render job.json and AHJ_PARALLEL as before.
            degrees["virtualPipelineStages"] = self.virtual_pipeline_stages
        return degrees


def effective_model(model) -> dict[str, Any]:
    explicit = model.model_dump(by_alias=True, exclude={"preset"}, exclude_none=True)
    if model.preset == "custom":
        base: dict[str, Any] = {"experts": 0, "topK": 2}
        if "hidden" in explicit:
            base["ffnHidden"] = 4 * explicit["hidden"]
    else:
        base = dict(MODEL_PRESETS[model.preset])
    return {"preset": model.preset, **base, **explicit}


def resolve(name: str, spec: AscendHybridJobSpec) -> ResolvedJob:
    par = spec.parallelism
    micro_batches = par.micro_batches or par.pipeline
    return ResolvedJob(
        name=name, spec=spec, data=par.data, tensor=par.tensor, pipeline=par.pipeline, expert=par.expert,
        expert_placement=par.expert_placement, micro_batches=micro_batches, chip=spec.npu.chip,
        per_pod=spec.npu.per_pod or CHIPS[spec.npu.chip].chips_per_node, model=effective_model(spec.model),
        global_batch_size=spec.training.global_batch_size or par.data * micro_batches,
        virtual_pipeline_stages=par.virtual_pipeline_stages,
    )


@dataclass(frozen=True)
class Rule:
    check: Callable[[ResolvedJob], str | None]
    cel: str | None = None  # evaluated on `spec`; None where CEL cannot express it
    cel_message: str | None = None


# CEL views of effective values; the CRD defaults every object, so only optional scalars need has().
_CEL_PER_POD = f"(has(self.npu.perPod) ? self.npu.perPod : {cel_chips_per_node('self.npu.chip')})"
_CEL_MICRO = "(has(self.parallelism.microBatches) ? self.parallelism.microBatches : self.parallelism.pipeline)"
_CEL_WORLD = "(self.parallelism.data * self.parallelism.tensor * self.parallelism.pipeline)"


def _cel_model(field: str) -> str:
    presets = ", ".join(f"'{preset}': {values[field] or 0}" for preset, values in MODEL_PRESETS.items())
    return f"(has(self.model.{field}) ? self.model.{field} : {{{presets}}}[self.model.preset])"


def _cel_model_or_zero(field: str) -> str:
    """Like _cel_model, with custom's default of 0 for fields (experts) that custom may leave out."""
    presets = ", ".join(f"'{preset}': {values[field] or 0}" for preset, values in MODEL_PRESETS.items())
    return f"(has(self.model.{field}) ? self.model.{field} : {{{presets}, 'custom': 0}}[self.model.preset])"


def _cel_known(field: str) -> str:
    return f"(has(self.model.{field}) || self.model.preset != 'custom')"


def _fmt(template: str, *arguments: str) -> str:
    """A CEL messageExpression via the strings `format` function: the apiserver's cost estimator refuses
    `string(int)` concatenations (unbounded size), but accepts format."""
    return f"'{template}'.format([{', '.join(arguments)}])"


def _world(e: ResolvedJob) -> str | None:
    if e.world_size > MAX_WORLD_SIZE:
        return f"spec.parallelism: world size data×tensor×pipeline={e.world_size} exceeds {MAX_WORLD_SIZE}"
    return None


def _per_pod_divides_world(e: ResolvedJob) -> str | None:
    if e.world_size % e.per_pod:
        return f"spec.npu.perPod={e.per_pod} must divide the world size data×tensor×pipeline={e.world_size}"
    return None


def _tensor_divides_per_pod(e: ResolvedJob) -> str | None:
    if e.per_pod % e.tensor:
        return f"spec.parallelism.tensor={e.tensor} must divide spec.npu.perPod={e.per_pod}"
    return None


def _per_pod_allowed(e: ResolvedJob) -> str | None:
    allowed = CHIPS[e.chip].allowed_per_pod
    if e.per_pod not in allowed:
        return f"spec.npu.perPod={e.per_pod} is not allowed for chip {e.chip} (allowed: {', '.join(map(str, allowed))})"
    return None


def _micro_batches(e: ResolvedJob) -> str | None:
    if e.pipeline > 1 and e.micro_batches < e.pipeline:
        return f"spec.parallelism.microBatches={e.micro_batches} must be ≥ spec.parallelism.pipeline={e.pipeline}"
    return None


def _model_divisible(field: str, by_label: str, by: Callable[[ResolvedJob], int]) -> Callable[[ResolvedJob], str | None]:
    def check(e: ResolvedJob) -> str | None:
        value, divisor = e.model.get(field), by(e)
        if value is None or divisor is None or value % divisor == 0:
            return None
        return f"spec.model.{field}={value} must be divisible by {by_label}={divisor}"
    return check


def _custom_required(e: ResolvedJob) -> str | None:
    if e.model["preset"] != "custom":
        return None
    absent = [field for field in CUSTOM_REQUIRED if e.model.get(field) is None]
    if absent:
        return f"spec.model: preset custom needs {', '.join(absent)}"
    return None


def _expert_needs_experts(e: ResolvedJob) -> str | None:
    if e.expert > 1 and not e.model.get("experts"):
        return f"spec.parallelism.expert={e.expert} needs spec.model.experts > 0"
    return None


def _experts_divisible(e: ResolvedJob) -> str | None:
    experts = e.model.get("experts") or 0
    if e.expert > 1 and experts and experts % e.expert:
        return f"spec.model.experts={experts} must be divisible by spec.parallelism.expert={e.expert}"
    return None


def _expert_divides_group(e: ResolvedJob) -> str | None:
    if e.expert == 1:
        return None
    if e.expert_placement == "intraNode" and e.per_pod % e.expert:
        return f"spec.parallelism.expert={e.expert} must divide spec.npu.perPod={e.per_pod} (expertPlacement intraNode)"
    if e.expert_placement == "dataParallel" and e.data % e.expert:
        return f"spec.parallelism.expert={e.expert} must divide spec.parallelism.data={e.data} (expertPlacement dataParallel)"
    return None


def _expert_inside_tensor(e: ResolvedJob) -> str | None:
    if e.expert > 1 and e.expert_placement == "intraNode" and e.tensor % e.expert:
        return (f"spec.parallelism.expert={e.expert} must divide spec.parallelism.tensor={e.tensor} "
                "(expertPlacement intraNode carves the expert groups out of the TP group)")
    return None


def _kv_heads_divide_heads(e: ResolvedJob) -> str | None:
    kv_heads, heads = e.model.get("kvHeads"), e.model.get("heads")
    if kv_heads is None or heads is None or heads % kv_heads == 0:
        return None
    return f"spec.model.kvHeads={kv_heads} must divide spec.model.heads={heads}"


def _virtual_stages_need_pipeline(e: ResolvedJob) -> str | None:
    if e.virtual_pipeline_stages > 1 and e.pipeline == 1:
        return (f"spec.parallelism.virtualPipelineStages={e.virtual_pipeline_stages} needs "
                "spec.parallelism.pipeline > 1 (interleaving splits each pipeline stage into model chunks)")
    return None


def _layers_divisible_by_chunks(e: ResolvedJob) -> str | None:
    layers, chunks = e.model.get("layers"), e.pipeline * e.virtual_pipeline_stages
    if e.virtual_pipeline_stages == 1 or layers is None or layers % chunks == 0:
        return None
    return f"spec.model.layers={layers} must be divisible by pipeline×virtualPipelineStages={chunks}"


def _global_batch(e: ResolvedJob) -> str | None:
    unit = e.data * e.micro_batches
    if e.global_batch_size % unit:
        return (f"spec.training.globalBatchSize={e.global_batch_size} must be a multiple of "
                f"data×microBatches={unit}")
    return None


def _factor_rule(field: str) -> Rule:
    """A divergence factor is 0 (the check off) or above 1 (at or below 1 every step would be a divergence)."""
    message = f"spec.training.{field} must be 0 (off) or above 1"

    def check(e: ResolvedJob) -> str | None:
        value = getattr(e.spec.training, re.sub(r"[A-Z]", lambda m: "_" + m[0].lower(), field))
        return message if 0 < value <= 1 else None
    return Rule(check, f"self.training.{field} == 0.0 || self.training.{field} > 1.0", repr(message))


_POLICY_RULES = "self.runPolicy.failurePolicy.rules"
_ONE_MATCHER_MESSAGE = ("spec.runPolicy.failurePolicy.rules: each rule sets exactly one of causes, exitCodes or "
                        "podConditions")
_SOFTWARE_LIST = sorted(SOFTWARE_CAUSES)
_NO_AVOID_MESSAGE = (f"spec.runPolicy.failurePolicy.rules: {' and '.join(_SOFTWARE_LIST)} are failures of the job "
                     f"itself: {RESTART_AVOIDING_NODE} would mark a healthy node (use RestartJob or FailJob)")


def _one_matcher(e: ResolvedJob) -> str | None:
    for rule in e.spec.run_policy.failure_policy.rules:
        if sum(matcher is not None for matcher in (rule.causes, rule.exit_codes, rule.pod_conditions)) != 1:
            return _ONE_MATCHER_MESSAGE
    return None


def _no_avoiding_for_software(e: ResolvedJob) -> str | None:
    for rule in e.spec.run_policy.failure_policy.rules:
        if rule.action == RESTART_AVOIDING_NODE and SOFTWARE_CAUSES & set(rule.causes or ()):
            return _NO_AVOID_MESSAGE
    return None


RULES: tuple[Rule, ...] = (
    Rule(_world, f"{_CEL_WORLD} <= {MAX_WORLD_SIZE}",
         _fmt(f"spec.parallelism: world size data×tensor×pipeline=%d exceeds {MAX_WORLD_SIZE}", _CEL_WORLD)),
    Rule(_per_pod_divides_world, f"{_CEL_WORLD} % {_CEL_PER_POD} == 0",
         _fmt("spec.npu.perPod=%d must divide the world size data×tensor×pipeline=%d", _CEL_PER_POD, _CEL_WORLD)),
    Rule(_tensor_divides_per_pod, f"{_CEL_PER_POD} % self.parallelism.tensor == 0",
         _fmt("spec.parallelism.tensor=%d must divide spec.npu.perPod=%d", "self.parallelism.tensor", _CEL_PER_POD)),
    Rule(_per_pod_allowed, f"{_CEL_PER_POD} in {cel_allowed_per_pod('self.npu.chip')}",
         _fmt("spec.npu.perPod=%d is not allowed for chip %s (allowed: %s)", _CEL_PER_POD, "self.npu.chip",
              cel_allowed_text("self.npu.chip"))),
    Rule(_micro_batches, f"self.parallelism.pipeline == 1 || {_CEL_MICRO} >= self.parallelism.pipeline",
         _fmt("spec.parallelism.microBatches=%d must be ≥ spec.parallelism.pipeline=%d", _CEL_MICRO,
              "self.parallelism.pipeline")),
    Rule(_custom_required),
    Rule(_model_divisible("layers", "spec.parallelism.pipeline", lambda e: e.pipeline),
         f"!{_cel_known('layers')} || {_cel_model('layers')} % self.parallelism.pipeline == 0",
         _fmt("spec.model.layers=%d must be divisible by spec.parallelism.pipeline=%d", _cel_model("layers"),
              "self.parallelism.pipeline")),
    Rule(_model_divisible("heads", "spec.parallelism.tensor", lambda e: e.tensor),
         f"!{_cel_known('heads')} || {_cel_model('heads')} % self.parallelism.tensor == 0",
         _fmt("spec.model.heads=%d must be divisible by spec.parallelism.tensor=%d", _cel_model("heads"),
              "self.parallelism.tensor")),
    Rule(_model_divisible("hidden", "spec.model.heads", lambda e: e.model.get("heads")),
         f"!{_cel_known('hidden')} || !{_cel_known('heads')} || {_cel_model('hidden')} % {_cel_model('heads')} == 0",
         _fmt("spec.model.hidden=%d must be divisible by spec.model.heads=%d", _cel_model("hidden"), _cel_model("heads"))),
    Rule(_expert_needs_experts, f"self.parallelism.expert == 1 || {_cel_model_or_zero('experts')} > 0",
         _fmt("spec.parallelism.expert=%d needs spec.model.experts > 0", "self.parallelism.expert")),
    Rule(_experts_divisible,
         f"self.parallelism.expert == 1 || {_cel_model_or_zero('experts')} == 0 || "
         f"{_cel_model_or_zero('experts')} % self.parallelism.expert == 0",
         _fmt("spec.model.experts=%d must be divisible by spec.parallelism.expert=%d", _cel_model_or_zero("experts"),
              "self.parallelism.expert")),
    Rule(_expert_divides_group,
         "self.parallelism.expert == 1 || (self.parallelism.expertPlacement == 'intraNode' ? "
         f"{_CEL_PER_POD} % self.parallelism.expert == 0 : self.parallelism.data % self.parallelism.expert == 0)",
         "self.parallelism.expertPlacement == 'intraNode' ? "
         + _fmt("spec.parallelism.expert=%d must divide spec.npu.perPod=%d (expertPlacement intraNode)",
                "self.parallelism.expert", _CEL_PER_POD)
         + " : "
         + _fmt("spec.parallelism.expert=%d must divide spec.parallelism.data=%d (expertPlacement dataParallel)",
                "self.parallelism.expert", "self.parallelism.data")),
    Rule(_expert_inside_tensor,
         "self.parallelism.expert == 1 || self.parallelism.expertPlacement != 'intraNode' || "
         "self.parallelism.tensor % self.parallelism.expert == 0",
         _fmt("spec.parallelism.expert=%d must divide spec.parallelism.tensor=%d (expertPlacement intraNode carves "
              "the expert groups out of the TP group)", "self.parallelism.expert", "self.parallelism.tensor")),
    Rule(_global_batch,
         f"!has(self.training.globalBatchSize) || self.training.globalBatchSize % (self.parallelism.data * {_CEL_MICRO}) == 0",
         _fmt("spec.training.globalBatchSize=%d must be a multiple of data×microBatches=%d",
              "self.training.globalBatchSize", f"self.parallelism.data * {_CEL_MICRO}")),
    Rule(_kv_heads_divide_heads,
         f"!has(self.model.kvHeads) || !{_cel_known('heads')} || {_cel_model('heads')} % self.model.kvHeads == 0",
         _fmt("spec.model.kvHeads=%d must divide spec.model.heads=%d", "self.model.kvHeads", _cel_model("heads"))),
    # Megatron-style attention gives each TP rank whole key/value heads (query groups), so TP must divide them.
    Rule(_model_divisible("kvHeads", "spec.parallelism.tensor", lambda e: e.tensor),
         "!has(self.model.kvHeads) || self.model.kvHeads % self.parallelism.tensor == 0",
         _fmt("spec.model.kvHeads=%d must be divisible by spec.parallelism.tensor=%d", "self.model.kvHeads",
              "self.parallelism.tensor")),
    Rule(_virtual_stages_need_pipeline,
         "self.parallelism.virtualPipelineStages == 1 || self.parallelism.pipeline > 1",
         _fmt("spec.parallelism.virtualPipelineStages=%d needs spec.parallelism.pipeline > 1 (interleaving splits "
              "each pipeline stage into model chunks)", "self.parallelism.virtualPipelineStages")),
    Rule(_layers_divisible_by_chunks,
         f"self.parallelism.virtualPipelineStages == 1 || !{_cel_known('layers')} || "
         f"{_cel_model('layers')} % (self.parallelism.pipeline * self.parallelism.virtualPipelineStages) == 0",
         _fmt("spec.model.layers=%d must be divisible by pipeline×virtualPipelineStages=%d", _cel_model("layers"),
              "self.parallelism.pipeline * self.parallelism.virtualPipelineStages")),
    _factor_rule("divergenceLossFactor"),
    _factor_rule("divergenceGradFactor"),
    Rule(_one_matcher,
         f"!has({_POLICY_RULES}) || {_POLICY_RULES}.all(r, (has(r.causes) ? 1 : 0) + (has(r.exitCodes) ? 1 : 0) + "
         "(has(r.podConditions) ? 1 : 0) == 1)", repr(_ONE_MATCHER_MESSAGE)),
    Rule(_no_avoiding_for_software,
         f"!has({_POLICY_RULES}) || {_POLICY_RULES}.all(r, r.action != '{RESTART_AVOIDING_NODE}' || "
         f"!has(r.causes) || !r.causes.exists(c, c in {_SOFTWARE_LIST!r}))", repr(_NO_AVOID_MESSAGE)),
)


def broken_rules(effective: ResolvedJob) -> list[str]:
    """Every rule a resolved job breaks, in RULES order: parse() reports them, the planner drops such candidates."""
    return [problem for rule in RULES if (problem := rule.check(effective))]

NAME_PATTERN = "^[a-z]([-a-z0-9]*[a-z0-9])?$"  # a DNS-1035 label: the job's name is also its Services' names
NAME_RULE_CEL = f"size(self.metadata.name) <= {MAX_JOB_NAME} && self.metadata.name.matches('{NAME_PATTERN}')"
NAME_RULE_MESSAGE = (f"metadata.name must be at most {MAX_JOB_NAME} characters (pod names <job>-a<attempt>-<index> "
                     "must stay valid labels) of lowercase letters, digits and '-', starting with a letter "
                     "(Service names)")


def _pydantic_problem(error: dict) -> str:
    path = "spec" + "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in error["loc"])
    kind, context, value = error["type"], error.get("ctx", {}), error.get("input")
    if kind == "extra_forbidden":
        return f"{path}: unknown field"
    if kind == "missing":
        return f"{path}: is required"
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        symbol = {"greater_than_equal": "≥", "greater_than": ">", "less_than_equal": "≤", "less_than": "<"}[kind]
        bound = next(iter(context.values()))
        return f"{path}={value} must be {symbol} {bound}"
    if kind == "enum":
        return f"{path}={value!r} must be one of {context.get('expected')}"
    return f"{path}={value!r}: {error['msg'].lower()}"


def _json_default(value: Any) -> Any:
    return dict(value) if isinstance(value, Mapping) else str(value)  # YAML dates become strings, as with kubectl


def parse(body: Mapping) -> ResolvedJob:
    """Validates a whole AscendHybridJob object (as the API returns it); raises SpecError listing every problem."""
    metadata = body.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    problems: list[str] = []
    if name is None or name == "":
        problems.append("metadata.name: is required")
        name = ""
    elif not isinstance(name, str):
        problems.append(f"metadata.name={name!r}: must be a string")
        name = ""
    elif len(name) > MAX_JOB_NAME or not re.match(NAME_PATTERN, name):
        problems.append(f"metadata.name={name!r}: {NAME_RULE_MESSAGE.removeprefix('metadata.name ')}")
    spec_body = body.get("spec")
    if not isinstance(spec_body, Mapping):
        raise SpecError([*problems, "spec: is required (an object with at least spec.parallelism)"])
    try:
        # Strict JSON validation sees the spec as the apiserver does: "2" or true is no integer, 1 is no string.
        spec = AscendHybridJobSpec.model_validate_json(json.dumps(spec_body, default=_json_default), strict=True)
    except ValidationError as error:
        raise SpecError([*problems, *(_pydantic_problem(item) for item in error.errors())]) from None
    effective = resolve(name, spec)
    problems += broken_rules(effective)
    if problems:
        raise SpecError(problems)
    return effective
