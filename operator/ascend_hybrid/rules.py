"""Resolved values (every default applied) and cross-field rules of an AscendHybridJob, in Python and in CEL.

Each rule is written once here with both forms, so the apiserver (CEL, at admission) and the operator
(Python, for everything CEL cannot see) report the very same message naming the field and the rule.
Kubernetes' own rules on what the pods will carry (k8s_validation.py) are in the table where CEL can check them
(the image, object names, the queue label, topology-tier keys); map keys and free-form objects (labels, annotations,
env, resources, tolerations, volumes) CEL cannot see, and `template_problems` checks them in Python only. parse()
also refuses what JSON and Kubernetes cannot hold (NaN, Infinity, integers beyond int64) and names wrong types as such.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from . import k8s_validation as k8s
from . import names
from .api import MAX_JOB_NAME, MAX_WORLD_SIZE, AscendHybridJobSpec
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
    return f"{_cel_string(template)}.format([{', '.join(arguments)}])"


def _cel_string(text: str) -> str:
    """A CEL string literal (single-quoted; backslashes and quotes escaped)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _cel_full_match(expression: str, pattern: str) -> str:
    """`expression` matches the whole of `pattern` (CEL's matches() searches, as RE2 does, so it is anchored)."""
    return f"{expression}.matches({_cel_string('^(?:' + pattern + ')$')})"


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


# --- fields the apiserver validates in the pods: Kubernetes' own rules (k8s_validation.py), here where CEL can check
# them at admission too. Python and CEL give the same message; a value is shown in double quotes.

IMAGE_EMPTY = "spec.template.image: must not be empty (the container image of every pod)"
_IMAGE_TEXT = f"spec.template.image=\"%s\" {k8s.IMAGE_REFERENCE_MESSAGE}"
_SUBDOMAIN_TEXT = ("must be a lowercase RFC 1123 subdomain ({what} name): lower case alphanumeric characters, '-' or "
                   "'.', starting and ending with an alphanumeric character (e.g. 'example.com')")
_QUEUE_TEXT = ("spec.scheduling.queue=\"%s\" is not a valid label value (the pods carry it as a label): "
               f"{k8s.LABEL_VALUE_MESSAGE}, at most {k8s.LABEL_VALUE_MAX} characters")
_TIER_TEXT = ("spec.scheduling.topologyTiers: \"%s\" is not a valid node label key: an optional DNS subdomain prefix "
              f"(at most {k8s.DNS1123_SUBDOMAIN_MAX} characters) and '/', then a name of at most "
              f"{k8s.LABEL_KEY_NAME_MAX} characters that {k8s.LABEL_KEY_NAME_MESSAGE} "
              "(e.g. 'huawei.com/topotree.rackid')")


def _shown(text: str, value: str) -> str:
    return text.replace('"%s"', k8s.quoted(value))


def _image(e: ResolvedJob) -> str | None:
    image = e.spec.template.image
    if not image:
        return IMAGE_EMPTY
    return None if k8s.is_image_reference(image) else _shown(_IMAGE_TEXT, image)


def _image_details(e: ResolvedJob) -> str | None:
    """What only the kubelet's parser sees (a 64-hex id, a repository over 255 characters, the digest's algorithm
    and length): Python only, the regular expression of the CEL rule above cannot count or compare."""
    errors = k8s.image_detail_errors(e.spec.template.image)
    return f"spec.template.image={k8s.quoted(e.spec.template.image)}: {'; '.join(errors)}" if errors else None


def _subdomain_rule(path: str, what: str, value_of: Callable[[AscendHybridJobSpec], str | None], cel_guard: str) -> Rule:
    """`path` (spec.a.b) names an object the apiserver requires to be a DNS-1123 subdomain; empty means unset,
    except where `cel_guard` says the field is required (a claim name)."""
    text = f"{path}=\"%s\": {_SUBDOMAIN_TEXT.format(what=what)}"
    cel_path = "self." + path.removeprefix("spec.")
    optional = cel_guard == ""

    def check(e: ResolvedJob) -> str | None:
        value = value_of(e.spec)
        if value is None or (optional and value == "") or not k8s.dns1123_subdomain_errors(value):
            return None
        return _shown(text, value)

    guard = f"!has({cel_path}) || size({cel_path}) == 0" if optional else cel_guard
    return Rule(check, f"{guard} || {_cel_full_match(cel_path, k8s.DNS1123_SUBDOMAIN)}", _fmt(text, cel_path))


def _queue(e: ResolvedJob) -> str | None:
    queue = e.spec.scheduling.queue
    return _shown(_QUEUE_TEXT, queue) if queue is not None and k8s.label_value_errors(queue) else None


def _topology_tiers(e: ResolvedJob) -> str | None:
    bad = [tier for tier in e.spec.scheduling.topology_tiers if k8s.label_key_errors(tier)]
    return _shown(_TIER_TEXT, bad[0]) if bad else None


_LONG_PREFIX = "^[^/]{" + str(k8s.DNS1123_SUBDOMAIN_MAX + 1) + ",}/"  # a prefix over 253 characters
_CEL_TIER_OK = f"{_cel_full_match('t', k8s.LABEL_KEY)} && !t.matches({_cel_string(_LONG_PREFIX)})"
_CEL_IMAGE = "self.template.image"

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
    Rule(_image, f"size({_CEL_IMAGE}) > 0 && {_cel_full_match(_CEL_IMAGE, k8s.IMAGE_REFERENCE)}",
         f"size({_CEL_IMAGE}) == 0 ? {_cel_string(IMAGE_EMPTY)} : {_fmt(_IMAGE_TEXT, _CEL_IMAGE)}"),
    Rule(_image_details),
    _subdomain_rule("spec.template.serviceAccountName", "a ServiceAccount", lambda s: s.template.service_account_name,
                    ""),
    _subdomain_rule("spec.template.priorityClassName", "a PriorityClass", lambda s: s.template.priority_class_name,
                    ""),
    _subdomain_rule("spec.scheduling.schedulerName", "a scheduler", lambda s: s.scheduling.scheduler_name, ""),
    _subdomain_rule("spec.training.checkpoint.claimName", "a PersistentVolumeClaim",
                    lambda s: s.training.checkpoint.claim_name if s.training.checkpoint else None,
                    "!has(self.training.checkpoint)"),
    Rule(_queue, f"!has(self.scheduling.queue) || {_cel_full_match('self.scheduling.queue', k8s.LABEL_VALUE)}",
         _fmt(_QUEUE_TEXT, "self.scheduling.queue")),
    Rule(_topology_tiers,
         f"!has(self.scheduling.topologyTiers) || self.scheduling.topologyTiers.all(t, {_CEL_TIER_OK})",
         _fmt(_TIER_TEXT, f"self.scheduling.topologyTiers.filter(t, !({_CEL_TIER_OK}))[0]")),
)


def broken_rules(effective: ResolvedJob) -> list[str]:
    """Every rule a resolved job breaks, in RULES order: parse() reports them, the planner drops such candidates."""
    return [problem for rule in RULES if (problem := rule.check(effective))]

NAME_PATTERN = "^[a-z]([-a-z0-9]*[a-z0-9])?$"  # a DNS-1035 label: the job's name is also its Services' names
NAME_RULE_CEL = f"size(self.metadata.name) <= {MAX_JOB_NAME} && self.metadata.name.matches('{NAME_PATTERN}')"
NAME_RULE_MESSAGE = (f"metadata.name must be at most {MAX_JOB_NAME} characters (pod names <job>-a<attempt>-<index> "
                     "must stay valid labels) of lowercase letters, digits and '-', starting with a letter "
                     "(Service names)")


INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1
_EXPECTED = {"int_type": "an integer", "int_parsing": "an integer", "int_from_float": "an integer",
             "float_type": "a number", "float_parsing": "a number", "string_type": "a string",
             "bool_type": "a boolean", "bool_parsing": "a boolean", "dict_type": "an object",
             "model_type": "an object", "model_attributes_type": "an object", "list_type": "a list",
             "finite_number": "a finite number"}
_NON_FINITE_WORDS = {"inf", "+inf", "-inf", "infinity", "+infinity", "-infinity", "nan", ".inf", "-.inf", ".nan"}


def field_path(loc: tuple) -> str:
    return "spec" + "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc)


def shown(value: Any) -> str:
    """A value as the user wrote it in YAML: 'text', 3, true, null, short JSON for objects and lists."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, int | float):
        return str(value)
    text = repr(value) if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= 80 else text[:77] + "…"


def _pydantic_problem(error: dict) -> str:
    path = field_path(tuple(error["loc"]))
    kind, context, value = error["type"], error.get("ctx", {}), error.get("input")
    if kind == "extra_forbidden":
        return f"{path}: unknown field"
    if kind == "missing":
        return f"{path}: is required"
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        symbol = {"greater_than_equal": "≥", "greater_than": ">", "less_than_equal": "≤", "less_than": "<"}[kind]
        bound = next(iter(context.values()))
        return f"{path}={shown(value)} must be {symbol} {bound}"
    if kind == "enum":
        return f"{path}={shown(value)} must be one of {context.get('expected')}"
    if kind == "string_too_long":
        return f"{path}={shown(value)}: must be at most {context['max_length']} characters"
    if kind == "too_long":
        return f"{path}: must have at most {context['max_length']} items"
    if kind in _EXPECTED:
        expected = _EXPECTED[kind]
        if expected == "a number" and isinstance(value, str) and value.strip().lower() in _NON_FINITE_WORDS:
            expected = "a finite number (JSON and Kubernetes have no NaN or Infinity)"
        elif expected == "a string" and isinstance(value, int | float) and not isinstance(value, bool):
            expected = f"a string (quote it: '{value}')"
        return f"{path}={shown(value)}: must be {expected}"
    return f"{path}={shown(value)}: {error['msg'][:1].lower()}{error['msg'][1:]}"


def _number_problems(value: Any, loc: tuple = ()) -> dict[tuple, str]:
    """Numbers Kubernetes cannot hold, by location: NaN and ±Infinity (not JSON: YAML's .nan and .inf) and integers
    beyond int64 (the apiserver's, and the CRD's `format: int64`)."""
    found: dict[tuple, str] = {}
    if isinstance(value, Mapping):
        for key, item in value.items():
            found.update(_number_problems(item, (*loc, str(key))))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found.update(_number_problems(item, (*loc, index)))
    elif isinstance(value, float) and not math.isfinite(value):
        found[loc] = f"{field_path(loc)}={shown(value)}: must be a finite number (JSON and Kubernetes have no NaN or Infinity)"
    elif isinstance(value, int) and not isinstance(value, bool) and not INT64_MIN <= value <= INT64_MAX:
        found[loc] = (f"{field_path(loc)}={value}: is beyond the int64 range of Kubernetes integers "
                      f"({INT64_MIN} to {INT64_MAX})")
    return found


def _sanitized(value: Any, bad: dict[tuple, str], loc: tuple = ()) -> Any:
    """The spec with every value _number_problems reported replaced by 0, so the schema stage still sees the rest."""
    if loc in bad:
        return 0
    if isinstance(value, Mapping):
        return {key: _sanitized(item, bad, (*loc, str(key))) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_sanitized(item, bad, (*loc, index)) for index, item in enumerate(value)]
    return value


def template_problems(spec: AscendHybridJobSpec) -> list[str]:
    """What the apiserver would refuse in the pods and CEL cannot see (map keys, free-form objects): Kubernetes' own
    rules from k8s_validation.py, each problem naming the job's field."""
    template = spec.template
    npu = spec.npu.resource  # the operator sets it in requests and limits itself
    operator_volumes = [names.RANK_TABLE_VOLUME, names.JOB_CONFIG_VOLUME]
    operator_paths = [names.RANK_TABLE_DIR, names.JOB_CONFIG_DIR]
    if spec.training.checkpoint:
        operator_volumes.append(names.CHECKPOINT_VOLUME)
        operator_paths.append(names.CHECKPOINT_DIR)
    user_volumes = [v["name"] for v in template.volumes if isinstance(v.get("name"), str)]
    return [
        *k8s.label_problems("spec.template.metadata.labels", template.metadata.labels),
        *k8s.annotation_problems("spec.template.metadata.annotations", template.metadata.annotations),
        *k8s.label_problems("spec.template.nodeSelector", template.node_selector),
        *k8s.env_problems("spec.template.env", template.env),
        *k8s.env_name_problems("spec.hccl.env", spec.hccl.env),
        *k8s.resources_problems("spec.template.resources",
                                {k: v for k, v in template.resources.requests.items() if k != npu},
                                {k: v for k, v in template.resources.limits.items() if k != npu}),
        *k8s.toleration_problems("spec.template.tolerations", template.tolerations),
        *k8s.volume_problems("spec.template.volumes", template.volumes, operator_volumes),
        *k8s.volume_mount_problems("spec.template.volumeMounts", template.volume_mounts,
                                   operator_volumes + user_volumes, operator_paths),
    ]


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
    numbers = _number_problems(spec_body)
    problems += numbers.values()
    try:
        # Strict JSON validation sees the spec as the apiserver does: "2" or true is no integer, 1 is no string.
        text = json.dumps(_sanitized(spec_body, numbers) if numbers else spec_body, default=_json_default)
        spec = AscendHybridJobSpec.model_validate_json(text, strict=True)
    except ValidationError as error:
        raise SpecError([*problems, *(_pydantic_problem(item) for item in error.errors()
                                      if tuple(item["loc"]) not in numbers)]) from None
    if numbers:
        raise SpecError(problems)
    effective = resolve(name, spec)
    problems += broken_rules(effective)
    problems += template_problems(spec)
    if problems:
        raise SpecError(problems)
    return effective
