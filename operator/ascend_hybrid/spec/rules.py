"""Resolved values (every default applied) and cross-field rules of an AscendHybridJob, in Python and in CEL.

Each rule is written once here with both forms, so the apiserver (CEL, at admission) and the operator
(Python, for everything CEL cannot see) report the very same message naming the field and the rule.
Kubernetes' own rules on what the pods will carry (k8s_validation/) are in the table where CEL can check them
(the image, object names, the queue label, topology-tier keys); map keys and free-form objects (labels, annotations,
env, resources, tolerations, volumes) CEL cannot see, and `template_problems` checks them in Python only. parse()
also refuses what JSON and Kubernetes cannot hold (NaN, Infinity, integers beyond int64) and names wrong types as such.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import cast

from pydantic import ValidationError

from ascend_hybrid.contracts.chips import CHIPS, cel_allowed_per_pod, cel_allowed_text
from ascend_hybrid.contracts.volcano import SUPER_POD_CHIPS_PER_POD
from ascend_hybrid.spec.api import MAX_JOB_NAME, MAX_WORLD_SIZE, AscendHybridJobSpec
from ascend_hybrid.spec.causes import RESTART_AVOIDING_NODE, SOFTWARE_CAUSES
from ascend_hybrid.spec.cel import (
    CEL_AUTO,
    CEL_MICRO,
    CEL_PER_POD,
    CEL_WORLD,
    cel_format,
    cel_known,
    cel_model,
    cel_model_or_zero,
    cel_top_k,
)
from ascend_hybrid.spec.field_rules import FIELD_RULES, IMAGE_EMPTY  # noqa: F401 - IMAGE_EMPTY: part of the rules' surface
from ascend_hybrid.spec.models import CUSTOM_REQUIRED, DEFAULT_TOP_K
from ascend_hybrid.spec.resolved import ResolvedJob, Rule, SpecError, planned_spec, resolve  # noqa: F401 - the rules' surface


def _world_formula(e: ResolvedJob) -> str:
    """The world's product as the job spells it: ×context only when the job has context parallelism."""
    return "data×tensor×pipeline×context" if e.context > 1 else "data×tensor×pipeline"


_CEL_WORLD_FORMULA = "(self.parallelism.context > 1 ? 'data×tensor×pipeline×context' : 'data×tensor×pipeline')"


def _world(e: ResolvedJob) -> str | None:
    if e.world_size > MAX_WORLD_SIZE:
        return f"spec.parallelism: world size {_world_formula(e)}={e.world_size} exceeds {MAX_WORLD_SIZE}"
    return None


def _per_pod_divides_world(e: ResolvedJob) -> str | None:
    if e.world_size % e.per_pod:
        return f"spec.npu.perPod={e.per_pod} must divide the world size {_world_formula(e)}={e.world_size}"
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


def _model_divisible(field: str, by_label: str,
                     by: Callable[[ResolvedJob], int | None]) -> Callable[[ResolvedJob], str | None]:
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


def _top_k_within_experts(e: ResolvedJob) -> str | None:
    experts = e.model.get("experts") or 0
    top_k = e.model.get("topK") or DEFAULT_TOP_K
    if experts and top_k > experts:
        return (f"spec.model.topK={top_k} must not exceed spec.model.experts={experts} (each token goes to topK "
                "distinct experts)")
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


def _pipeline_layers_per_stage(e: ResolvedJob) -> str | None:
    if e.pipeline_layers and len(e.pipeline_layers) != e.pipeline:
        return (f"spec.parallelism.pipelineLayers has {len(e.pipeline_layers)} entries: it needs one per stage, "
                f"spec.parallelism.pipeline={e.pipeline}")
    return None


def _pipeline_layers_sum(e: ResolvedJob) -> str | None:
    layers = e.model.get("layers")
    if e.pipeline_layers and layers is not None and sum(e.pipeline_layers) != layers:
        return (f"spec.parallelism.pipelineLayers sums to {sum(e.pipeline_layers)}: it must sum to "
                f"spec.model.layers={layers}")
    return None


def _pipeline_layers_not_interleaved(e: ResolvedJob) -> str | None:
    if e.pipeline_layers and e.virtual_pipeline_stages > 1:
        return (f"spec.parallelism.pipelineLayers: not with spec.parallelism.virtualPipelineStages="
                f"{e.virtual_pipeline_stages} (interleaving cuts the layers into equal chunks)")
    return None


def _sequence_divisible_by_context(e: ResolvedJob) -> str | None:
    seq = e.spec.training.seq_length
    if e.context > 1 and seq % e.context:
        return (f"spec.training.seqLength={seq} must be divisible by spec.parallelism.context={e.context} "
                "(each context-parallel rank holds an equal part of the sequence)")
    return None


def _context_needs_flash_attention(e: ResolvedJob) -> str | None:
    if e.context > 1 and not e.spec.training.flash_attention:
        return (f"spec.parallelism.context={e.context} needs spec.training.flashAttention: true (ring attention is "
                "a FlashAttentionScore feature)")
    return None


def _window_without_context(e: ResolvedJob) -> str | None:
    window = e.model.get("slidingWindow")
    if window is not None and e.context > 1:
        return (f"spec.model.slidingWindow={window}: not with spec.parallelism.context={e.context} (the trainer's "
                "ring attention runs the causal mask only)")
    return None


def _moe_only(field: str) -> Callable[[ResolvedJob], str | None]:
    def check(e: ResolvedJob) -> str | None:
        if e.model.get(field) is not None and not e.model.get("experts"):
            return f"spec.model.{field}: only for MoE models (spec.model.experts > 0)"
        return None
    return check


def _global_batch(e: ResolvedJob) -> str | None:
    if not e.planned:
        return None  # the planner chooses the split of the batch
    unit = e.data * e.micro_batches
    if e.global_batch_size % unit:
        return (f"spec.training.globalBatchSize={e.global_batch_size} must be a multiple of "
                f"data×microBatches={unit}")
    return None


AUTO_CHOSEN = ("data", "tensor", "pipeline", "expert", "microBatches", "virtualPipelineStages", "context",
               "pipelineLayers")


def _auto_leaves_unset(field: str) -> Callable[[ResolvedJob], str | None]:
    def check(e: ResolvedJob) -> str | None:
        par = e.spec.parallelism
        if par.auto and par.model_dump(by_alias=True).get(field) is not None:
            return f"spec.parallelism.{field}: must not be set when spec.parallelism.auto is true (the planner chooses it)"
        return None
    return check


def _auto_needs_world(e: ResolvedJob) -> str | None:
    par = e.spec.parallelism
    if par.auto and par.world is None:
        return "spec.parallelism.world: is required when spec.parallelism.auto is true (the NPUs the planner may use)"
    return None


def _world_needs_auto(e: ResolvedJob) -> str | None:
    par = e.spec.parallelism
    for field, value in (("world", par.world), ("autoConstraints", par.auto_constraints)):
        if value is not None and not par.auto:
            return f"spec.parallelism.{field}: only with spec.parallelism.auto: true (set the degrees instead)"
    return None


def _auto_needs_global_batch(e: ResolvedJob) -> str | None:
    if e.spec.parallelism.auto and e.spec.training.global_batch_size is None:
        return ("spec.training.globalBatchSize: is required when spec.parallelism.auto is true (the planner splits "
                "it over data parallelism and micro-batches)")
    return None


_AUTO_RULES = tuple(
    Rule(_auto_leaves_unset(field), f"!{CEL_AUTO} || !has(self.parallelism.{field})",
         f"'spec.parallelism.{field}: must not be set when spec.parallelism.auto is true (the planner chooses it)'")
    for field in AUTO_CHOSEN) + (
    Rule(_auto_needs_world, f"!{CEL_AUTO} || has(self.parallelism.world)",
         "'spec.parallelism.world: is required when spec.parallelism.auto is true (the NPUs the planner may use)'"),
    Rule(_world_needs_auto, f"{CEL_AUTO} || (!has(self.parallelism.world) && !has(self.parallelism.autoConstraints))",
         "has(self.parallelism.world) ? 'spec.parallelism.world: only with spec.parallelism.auto: true (set the "
         "degrees instead)' : 'spec.parallelism.autoConstraints: only with spec.parallelism.auto: true (set the "
         "degrees instead)'"),
    Rule(_auto_needs_global_batch, f"!{CEL_AUTO} || has(self.training.globalBatchSize)",
         "'spec.training.globalBatchSize: is required when spec.parallelism.auto is true (the planner splits it "
         "over data parallelism and micro-batches)'"),
)

def _factor_rule(field: str) -> Rule:
    """A divergence factor is 0 (the check off) or above 1 (at or below 1 every step would be a divergence)."""
    message = f"spec.training.{field} must be 0 (off) or above 1"

    def check(e: ResolvedJob) -> str | None:
        value = getattr(e.spec.training, re.sub(r"[A-Z]", lambda m: "_" + m[0].lower(), field))
        return message if 0 < value <= 1 else None
    return Rule(check, f"self.training.{field} == 0.0 || self.training.{field} > 1.0", repr(message))


_ELASTIC_AUTO_MESSAGE = ("spec.elastic: not with spec.parallelism.auto: true (the planner's strategy is fixed for "
                         "the job's life; set the degrees to shrink the data degree)")


def _min_data_within_data(e: ResolvedJob) -> str | None:
    elastic = e.spec.elastic
    if elastic is None or e.spec.parallelism.auto or elastic.min_data <= e.data:
        return None
    return f"spec.elastic.minData={elastic.min_data} must be ≤ spec.parallelism.data={e.data}"


def _elastic_not_auto(e: ResolvedJob) -> str | None:
    return _ELASTIC_AUTO_MESSAGE if e.spec.elastic is not None and e.spec.parallelism.auto else None


_SHRINK_MESSAGE = ("spec.runPolicy.slowness.action: Shrink needs spec.elastic (the data degree it shrinks, and "
                   "minData, how far)")


def _shrink_needs_elastic(e: ResolvedJob) -> str | None:
    return _SHRINK_MESSAGE if e.spec.run_policy.slowness.action == "Shrink" and e.spec.elastic is None else None


_ELASTIC_RULES = (
    Rule(_min_data_within_data, f"!has(self.elastic) || {CEL_AUTO} || self.elastic.minData <= self.parallelism.data",
         cel_format("spec.elastic.minData=%d must be ≤ spec.parallelism.data=%d", "self.elastic.minData",
                    "self.parallelism.data")),
    Rule(_elastic_not_auto, f"!has(self.elastic) || !{CEL_AUTO}", repr(_ELASTIC_AUTO_MESSAGE)),
    Rule(_shrink_needs_elastic,
         "!has(self.runPolicy) || !has(self.runPolicy.slowness) || !has(self.runPolicy.slowness.action) || "
         "self.runPolicy.slowness.action != 'Shrink' || has(self.elastic)", repr(_SHRINK_MESSAGE)),
)

_KUEUE_OR_VOLCANO_MESSAGE = (
    "spec.scheduling.queue (a Kueue LocalQueue) and Volcano (spec.scheduling.schedulerName: volcano, or "
    "spec.scheduling.volcano) exclude each other: a job is admitted by Kueue or scheduled by Volcano, not both (a "
    "Volcano Queue is spec.scheduling.volcano.queue)")
_VOLCANO_OPTIONS_MESSAGE = ("spec.scheduling.volcano: only for a job Volcano schedules (spec.scheduling.schedulerName "
                            "volcano, or empty)")
_CEL_NAMES_VOLCANO = "(has(self.scheduling.schedulerName) && self.scheduling.schedulerName == 'volcano')"
_CEL_SP_BLOCK = "self.scheduling.volcano.spBlock"
_CEL_HAS_SP_BLOCK = f"(has(self.scheduling.volcano) && has({_CEL_SP_BLOCK}))"


def _sp_block_of(e: ResolvedJob) -> int | None:
    options = e.spec.scheduling.volcano
    return options.sp_block if options is not None else None


def _kueue_or_volcano(e: ResolvedJob) -> str | None:
    scheduling = e.spec.scheduling
    if scheduling.queue and (scheduling.scheduler_name == "volcano" or scheduling.volcano is not None):
        return _KUEUE_OR_VOLCANO_MESSAGE
    return None


def _volcano_options_need_volcano(e: ResolvedJob) -> str | None:
    scheduling = e.spec.scheduling
    if scheduling.volcano is not None and scheduling.scheduler_name not in (None, "", "volcano"):
        return _VOLCANO_OPTIONS_MESSAGE
    return None


def _sp_block_on_whole_a3_nodes(e: ResolvedJob) -> str | None:
    block = _sp_block_of(e)
    if block is not None and (e.chip != "A3" or e.per_pod != SUPER_POD_CHIPS_PER_POD):
        return (f"spec.scheduling.volcano.spBlock={block}: only for chip A3 with spec.npu.perPod="
                f"{SUPER_POD_CHIPS_PER_POD} (a logical super-pod of whole nodes)")
    return None


def _sp_block_divides_world(e: ResolvedJob) -> str | None:
    block = _sp_block_of(e)
    if block is not None and (block % SUPER_POD_CHIPS_PER_POD or e.world_size % block):
        return (f"spec.scheduling.volcano.spBlock={block} must be a multiple of {SUPER_POD_CHIPS_PER_POD} that "
                f"divides the job's chips, world size {e.world_size}")
    return None


_VOLCANO_RULES = (
    Rule(_kueue_or_volcano,
         "!has(self.scheduling.queue) || size(self.scheduling.queue) == 0 || "
         f"(!{_CEL_NAMES_VOLCANO} && !has(self.scheduling.volcano))", repr(_KUEUE_OR_VOLCANO_MESSAGE)),
    Rule(_volcano_options_need_volcano,
         "!has(self.scheduling.volcano) || !has(self.scheduling.schedulerName) || "
         "size(self.scheduling.schedulerName) == 0 || self.scheduling.schedulerName == 'volcano'",
         repr(_VOLCANO_OPTIONS_MESSAGE)),
    Rule(_sp_block_on_whole_a3_nodes,
         f"!{_CEL_HAS_SP_BLOCK} || (self.npu.chip == 'A3' && {CEL_PER_POD} == {SUPER_POD_CHIPS_PER_POD})",
         cel_format(f"spec.scheduling.volcano.spBlock=%d: only for chip A3 with spec.npu.perPod="
                    f"{SUPER_POD_CHIPS_PER_POD} (a logical super-pod of whole nodes)", _CEL_SP_BLOCK)),
    Rule(_sp_block_divides_world,
         f"!{_CEL_HAS_SP_BLOCK} || ({_CEL_SP_BLOCK} % {SUPER_POD_CHIPS_PER_POD} == 0 && "
         f"{CEL_WORLD} % {_CEL_SP_BLOCK} == 0)",
         cel_format(f"spec.scheduling.volcano.spBlock=%d must be a multiple of {SUPER_POD_CHIPS_PER_POD} that "
                    "divides the job's chips, world size %d", _CEL_SP_BLOCK, CEL_WORLD)),
)

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
        # use_enum_values: the field holds the member's value, a str
        if cast(str, rule.action) == RESTART_AVOIDING_NODE and SOFTWARE_CAUSES & set(rule.causes or ()):
            return _NO_AVOID_MESSAGE
    return None


RULES: tuple[Rule, ...] = _AUTO_RULES + (
    Rule(_world, f"{CEL_WORLD} <= {MAX_WORLD_SIZE}",
         cel_format(f"spec.parallelism: world size %s=%d exceeds {MAX_WORLD_SIZE}", _CEL_WORLD_FORMULA, CEL_WORLD)),
    Rule(_per_pod_divides_world, f"{CEL_WORLD} % {CEL_PER_POD} == 0",
         cel_format("spec.npu.perPod=%d must divide the world size %s=%d", CEL_PER_POD, _CEL_WORLD_FORMULA,
                    CEL_WORLD)),
    Rule(_tensor_divides_per_pod, f"{CEL_PER_POD} % self.parallelism.tensor == 0",
         cel_format("spec.parallelism.tensor=%d must divide spec.npu.perPod=%d", "self.parallelism.tensor", CEL_PER_POD)),
    Rule(_per_pod_allowed, f"{CEL_PER_POD} in {cel_allowed_per_pod('self.npu.chip')}",
         cel_format("spec.npu.perPod=%d is not allowed for chip %s (allowed: %s)", CEL_PER_POD, "self.npu.chip",
              cel_allowed_text("self.npu.chip"))),
    Rule(_micro_batches, f"self.parallelism.pipeline == 1 || {CEL_MICRO} >= self.parallelism.pipeline",
         cel_format("spec.parallelism.microBatches=%d must be ≥ spec.parallelism.pipeline=%d", CEL_MICRO,
              "self.parallelism.pipeline")),
    Rule(_custom_required),
    Rule(_model_divisible("layers", "spec.parallelism.pipeline", lambda e: None if e.pipeline_layers else e.pipeline),
         f"has(self.parallelism.pipelineLayers) || !{cel_known('layers')} || "
         f"{cel_model('layers')} % self.parallelism.pipeline == 0",
         cel_format("spec.model.layers=%d must be divisible by spec.parallelism.pipeline=%d", cel_model("layers"),
              "self.parallelism.pipeline")),
    Rule(_model_divisible("heads", "spec.parallelism.tensor", lambda e: e.tensor),
         f"!{cel_known('heads')} || {cel_model('heads')} % self.parallelism.tensor == 0",
         cel_format("spec.model.heads=%d must be divisible by spec.parallelism.tensor=%d", cel_model("heads"),
              "self.parallelism.tensor")),
    Rule(_model_divisible("hidden", "spec.model.heads", lambda e: e.model.get("heads")),
         f"!{cel_known('hidden')} || !{cel_known('heads')} || {cel_model('hidden')} % {cel_model('heads')} == 0",
         cel_format("spec.model.hidden=%d must be divisible by spec.model.heads=%d", cel_model("hidden"), cel_model("heads"))),
    Rule(_expert_needs_experts, f"self.parallelism.expert == 1 || {cel_model_or_zero('experts')} > 0",
         cel_format("spec.parallelism.expert=%d needs spec.model.experts > 0", "self.parallelism.expert")),
    Rule(_experts_divisible,
         f"self.parallelism.expert == 1 || {cel_model_or_zero('experts')} == 0 || "
         f"{cel_model_or_zero('experts')} % self.parallelism.expert == 0",
         cel_format("spec.model.experts=%d must be divisible by spec.parallelism.expert=%d", cel_model_or_zero("experts"),
              "self.parallelism.expert")),
    Rule(_top_k_within_experts,
         f"{cel_model_or_zero('experts')} == 0 || {cel_top_k()} <= {cel_model_or_zero('experts')}",
         cel_format("spec.model.topK=%d must not exceed spec.model.experts=%d (each token goes to topK distinct "
                    "experts)", cel_top_k(), cel_model_or_zero("experts"))),
    Rule(_expert_divides_group,
         "self.parallelism.expert == 1 || (self.parallelism.expertPlacement == 'intraNode' ? "
         f"{CEL_PER_POD} % self.parallelism.expert == 0 : self.parallelism.data % self.parallelism.expert == 0)",
         "self.parallelism.expertPlacement == 'intraNode' ? "
         + cel_format("spec.parallelism.expert=%d must divide spec.npu.perPod=%d (expertPlacement intraNode)",
                "self.parallelism.expert", CEL_PER_POD)
         + " : "
         + cel_format("spec.parallelism.expert=%d must divide spec.parallelism.data=%d (expertPlacement dataParallel)",
                "self.parallelism.expert", "self.parallelism.data")),
    Rule(_expert_inside_tensor,
         "self.parallelism.expert == 1 || self.parallelism.expertPlacement != 'intraNode' || "
         "self.parallelism.tensor % self.parallelism.expert == 0",
         cel_format("spec.parallelism.expert=%d must divide spec.parallelism.tensor=%d (expertPlacement intraNode carves "
              "the expert groups out of the TP group)", "self.parallelism.expert", "self.parallelism.tensor")),
    Rule(_global_batch,
         f"!has(self.training.globalBatchSize) || self.training.globalBatchSize % (self.parallelism.data * {CEL_MICRO}) == 0",
         cel_format("spec.training.globalBatchSize=%d must be a multiple of data×microBatches=%d",
              "self.training.globalBatchSize", f"self.parallelism.data * {CEL_MICRO}")),
    Rule(_kv_heads_divide_heads,
         f"!has(self.model.kvHeads) || !{cel_known('heads')} || {cel_model('heads')} % self.model.kvHeads == 0",
         cel_format("spec.model.kvHeads=%d must divide spec.model.heads=%d", "self.model.kvHeads", cel_model("heads"))),
    # Megatron-style attention gives each TP rank whole key/value heads (query groups), so TP must divide them.
    Rule(_model_divisible("kvHeads", "spec.parallelism.tensor", lambda e: e.tensor),
         "!has(self.model.kvHeads) || self.model.kvHeads % self.parallelism.tensor == 0",
         cel_format("spec.model.kvHeads=%d must be divisible by spec.parallelism.tensor=%d", "self.model.kvHeads",
              "self.parallelism.tensor")),
    Rule(_virtual_stages_need_pipeline,
         "self.parallelism.virtualPipelineStages == 1 || self.parallelism.pipeline > 1",
         cel_format("spec.parallelism.virtualPipelineStages=%d needs spec.parallelism.pipeline > 1 (interleaving splits "
              "each pipeline stage into model chunks)", "self.parallelism.virtualPipelineStages")),
    Rule(_layers_divisible_by_chunks,
         f"self.parallelism.virtualPipelineStages == 1 || !{cel_known('layers')} || "
         f"{cel_model('layers')} % (self.parallelism.pipeline * self.parallelism.virtualPipelineStages) == 0",
         cel_format("spec.model.layers=%d must be divisible by pipeline×virtualPipelineStages=%d", cel_model("layers"),
              "self.parallelism.pipeline * self.parallelism.virtualPipelineStages")),
    Rule(_pipeline_layers_per_stage,
         "!has(self.parallelism.pipelineLayers) || size(self.parallelism.pipelineLayers) == self.parallelism.pipeline",
         cel_format("spec.parallelism.pipelineLayers has %d entries: it needs one per stage, "
                    "spec.parallelism.pipeline=%d", "size(self.parallelism.pipelineLayers)",
                    "self.parallelism.pipeline")),
    Rule(_pipeline_layers_sum,
         f"!has(self.parallelism.pipelineLayers) || !{cel_known('layers')} || "
         f"self.parallelism.pipelineLayers.sum() == {cel_model('layers')}",
         cel_format("spec.parallelism.pipelineLayers sums to %d: it must sum to spec.model.layers=%d",
                    "self.parallelism.pipelineLayers.sum()", cel_model("layers"))),
    Rule(_pipeline_layers_not_interleaved,
         "!has(self.parallelism.pipelineLayers) || self.parallelism.virtualPipelineStages == 1",
         cel_format("spec.parallelism.pipelineLayers: not with spec.parallelism.virtualPipelineStages=%d "
                    "(interleaving cuts the layers into equal chunks)", "self.parallelism.virtualPipelineStages")),
    Rule(_sequence_divisible_by_context,
         "self.parallelism.context == 1 || self.training.seqLength % self.parallelism.context == 0",
         cel_format("spec.training.seqLength=%d must be divisible by spec.parallelism.context=%d (each "
                    "context-parallel rank holds an equal part of the sequence)", "self.training.seqLength",
                    "self.parallelism.context")),
    Rule(_context_needs_flash_attention,
         "self.parallelism.context == 1 || self.training.flashAttention",
         cel_format("spec.parallelism.context=%d needs spec.training.flashAttention: true (ring attention is a "
                    "FlashAttentionScore feature)", "self.parallelism.context")),
    Rule(_window_without_context,
         "!has(self.model.slidingWindow) || self.parallelism.context == 1",
         cel_format("spec.model.slidingWindow=%d: not with spec.parallelism.context=%d (the trainer's ring attention "
                    "runs the causal mask only)", "self.model.slidingWindow", "self.parallelism.context")),
    *(Rule(_moe_only(field), f"!has(self.model.{field}) || {cel_model_or_zero('experts')} > 0",
           repr(f"spec.model.{field}: only for MoE models (spec.model.experts > 0)"))
      for field in ("capacityFactor", "auxLossWeight")),
    _factor_rule("divergenceLossFactor"),
    _factor_rule("divergenceGradFactor"),
    Rule(_one_matcher,
         f"!has({_POLICY_RULES}) || {_POLICY_RULES}.all(r, (has(r.causes) ? 1 : 0) + (has(r.exitCodes) ? 1 : 0) + "
         "(has(r.podConditions) ? 1 : 0) == 1)", repr(_ONE_MATCHER_MESSAGE)),
    *_ELASTIC_RULES,
    *_VOLCANO_RULES,
    Rule(_no_avoiding_for_software,
         f"!has({_POLICY_RULES}) || {_POLICY_RULES}.all(r, r.action != '{RESTART_AVOIDING_NODE}' || "
         f"!has(r.causes) || !r.causes.exists(c, c in {_SOFTWARE_LIST!r}))", repr(_NO_AVOID_MESSAGE)),
) + FIELD_RULES


# The rules that read the strategy (everything but Kubernetes' own rules on the pods' fields, which FIELD_RULES
# holds and which read neither degrees nor model): the planner checks FIELD_RULES once per plan, these per structure.
STRATEGY_RULES: tuple[Rule, ...] = tuple(rule for rule in RULES if rule not in FIELD_RULES)


def broken_rules(resolved: ResolvedJob, table: tuple[Rule, ...] = RULES) -> list[str]:
    """Every rule of `table` a resolved job breaks, in its order: parse() reports them, the planner drops such
    candidates."""
    return [problem for rule in table if (problem := rule.check(resolved))]

NAME_PATTERN = "^[a-z]([-a-z0-9]*[a-z0-9])?$"  # a DNS-1035 label: the job's name is also its Services' names
NAME_RULE_CEL = f"size(self.metadata.name) <= {MAX_JOB_NAME} && self.metadata.name.matches('{NAME_PATTERN}')"
NAME_RULE_MESSAGE = (f"metadata.name must be at most {MAX_JOB_NAME} characters (pod names <job>-a<attempt>-<index> "
                     "must stay valid labels) of lowercase letters, digits and '-', starting with a letter "
                     "(Service names)")


from ascend_hybrid.spec.problems import (
    json_default,
    number_problems,
    pydantic_problem,
    sanitized,
    template_problems,
)


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
    if spec_body is None:
        raise SpecError([*problems, "spec: is required (an object with at least spec.parallelism)"])
    if not isinstance(spec_body, Mapping):
        raise SpecError([*problems, f"spec={json.dumps(spec_body)}: must be an object (with at least spec.parallelism)"])
    numbers = number_problems(spec_body)
    problems += numbers.values()
    try:
        # Strict JSON validation sees the spec as the apiserver does: "2" or true is no integer, 1 is no string, and
        # only the CRD's (camelCase) names are fields: `micro_batches` is unknown, as `kubectl apply` would say.
        text = json.dumps(sanitized(spec_body, numbers) if numbers else spec_body, default=json_default)
        spec = AscendHybridJobSpec.model_validate_json(text, strict=True, by_alias=True, by_name=False)
    except ValidationError as error:
        raise SpecError([*problems, *(pydantic_problem(item) for item in error.errors()
                                      if tuple(item["loc"]) not in numbers)]) from None
    if numbers:
        raise SpecError(problems)
    resolved = resolve(name, spec)
    problems += broken_rules(resolved)
    problems += template_problems(spec)
    if problems:
        raise SpecError(problems)
    return resolved
