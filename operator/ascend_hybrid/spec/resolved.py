"""A job with every default applied (ResolvedJob), how it is resolved (an auto job with its chosen strategy), the
error listing a job's problems, and the shape of one rule: what layout, placement, render, the planner and the
rule table (rules.py) share."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, cast

from ascend_hybrid.contracts.chips import CHIPS
from ascend_hybrid.spec.api import AscendHybridJobSpec, EffectiveParallelism, Parallelism, PlanStatus
from ascend_hybrid.spec.cel import cel_degrees
from ascend_hybrid.spec.models import resolved_model


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
    auto: bool = False      # the planner chooses the strategy (spec.parallelism.auto)
    planned: bool = True    # False: an auto job whose strategy is not chosen yet; its degrees are placeholders
    context: int = 1        # context parallelism: ranks that split each sequence
    pipeline_layers: tuple[int, ...] | None = None  # layers of each stage; None: the even split

    @property
    def world_size(self) -> int:
        return self.data * self.tensor * self.pipeline * self.context

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
        if self.context != 1:
            degrees["context"] = self.context
        if self.pipeline_layers:
            degrees["pipelineLayers"] = list(self.pipeline_layers)
        return degrees


def planned_spec(spec: AscendHybridJobSpec, strategy: PlanStatus) -> AscendHybridJobSpec:
    """An auto job's spec with the chosen strategy written in, as if the user had written it: what layout,
    placement, render and the trainer read. `strategy` is the planner's choice as status.plan records it."""
    missing = unchosen(strategy)
    chosen = strategy.parallelism
    if missing or chosen is None:
        raise SpecError([f"status.plan: the recorded strategy does not choose {', '.join(missing)}"])
    parallelism = Parallelism(
        data=chosen.data, tensor=chosen.tensor, pipeline=chosen.pipeline, expert=chosen.expert,
        expert_placement=chosen.expert_placement, micro_batches=chosen.micro_batches,
        virtual_pipeline_stages=chosen.virtual_pipeline_stages or 1, context=chosen.context,
        pipeline_layers=chosen.pipeline_layers)
    training = spec.training.model_copy(update={"recompute": strategy.recompute,
                                                "sequence_parallel": strategy.sequence_parallel,
                                                "optimizer_shard": strategy.optimizer_shard})
    return spec.model_copy(update={"parallelism": parallelism, "training": training})


def unchosen(strategy: PlanStatus) -> list[str]:
    """What a recorded strategy leaves unchosen of what planned_spec writes in (a plan a hand or another version
    of the operator wrote): the planner chose every one of them."""
    chosen = strategy.parallelism or EffectiveParallelism()
    degrees = {"data": chosen.data, "tensor": chosen.tensor, "pipeline": chosen.pipeline, "expert": chosen.expert,
               "microBatches": chosen.micro_batches}
    flags = {"recompute": strategy.recompute, "sequenceParallel": strategy.sequence_parallel,
             "optimizerShard": strategy.optimizer_shard}
    return [f"parallelism.{name}" for name, value in degrees.items() if value is None] + [
        name for name, value in flags.items() if value is None]


def resolve(name: str, spec: AscendHybridJobSpec, strategy: PlanStatus | None = None) -> ResolvedJob:
    """Every default applied. An auto job resolves with its chosen `strategy`; without one it is unplanned: pure
    data parallelism over its world stands in, for validation and as the planner's starting point."""
    par = spec.parallelism
    if par.auto and strategy is not None:
        return replace(resolve(name, planned_spec(spec, strategy)), auto=True)
    pipeline = par.pipeline or 1
    data = par.world or 1 if par.auto else par.data or 1
    micro_batches = par.micro_batches or pipeline
    chip = cast(str, spec.npu.chip)  # use_enum_values: the field holds the member's value, a str
    return ResolvedJob(
        name=name, spec=spec, data=data, tensor=par.tensor or 1, pipeline=pipeline, expert=par.expert or 1,
        expert_placement=par.expert_placement or "dataParallel", micro_batches=micro_batches, chip=chip,
        per_pod=spec.npu.per_pod or CHIPS[chip].chips_per_node, model=resolved_model(spec.model),
        global_batch_size=spec.training.global_batch_size or data * micro_batches,
        virtual_pipeline_stages=par.virtual_pipeline_stages or 1, auto=bool(par.auto), planned=not par.auto,
        context=par.context or 1, pipeline_layers=tuple(par.pipeline_layers) if par.pipeline_layers else None,
    )


@dataclass(frozen=True)
class Rule:
    check: Callable[[ResolvedJob], str | None]
    cel: str | None = None  # evaluated on `spec`; None where CEL cannot express it
    cel_message: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "cel", cel_degrees(self.cel))
        object.__setattr__(self, "cel_message", cel_degrees(self.cel_message))
