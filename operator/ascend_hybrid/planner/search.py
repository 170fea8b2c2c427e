"""Search: every strategy for a world size, validity decided by rules.py, ranked by predicted step time.

Each candidate is the job's own spec with its degrees and training flags replaced, resolved by rules.resolve and
checked by rules.broken_rules, so the planner never keeps a strategy the operator would refuse, and never carries a
rule of its own. The model's memory and time come from memory.py and timing.py.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from ascend_hybrid.contracts.chips import CHIPS
from ascend_hybrid.planner.compute import model_flops_per_step
from ascend_hybrid.planner.hardware import Hardware
from ascend_hybrid.planner.memory import MIXED_PRECISION_ADAM, StageMemory, StatesFormat, most_loaded
from ascend_hybrid.planner.timing import (
    Group,
    StepTime,
    balanced_split,
    groups,
    near_even_split,
    step_time,
)
from ascend_hybrid.planner.workload import Strategy, Workload
from ascend_hybrid.spec import rules
from ascend_hybrid.spec.field_rules import FIELD_RULES
from ascend_hybrid.spec.resolved import resolve

RECOMPUTE_KINDS = ("none", "selective", "full")
EXAMPLES_PER_REASON = 3


class PlanError(ValueError):
    """Input the planner cannot work with (one line, naming what is wrong)."""


@dataclass(frozen=True)
class Evaluation:
    strategy: Strategy
    memory: StageMemory
    usable: float
    time: StepTime
    layout: dict[str, Group]
    tokens_per_second_per_device: float
    mfu: float
    workload: Workload | None = None  # what was evaluated (the warnings read it)

    @property
    def fits(self) -> bool:
        return self.memory.total <= self.usable

    @property
    def rank_key(self) -> tuple:
        return (self.time.step, self.memory.total, self.strategy.sort_key())


@dataclass
class Rejections:
    count: int = 0
    by_reason: Counter = field(default_factory=Counter)
    examples: dict[str, list[tuple[Strategy, str, float]]] = field(default_factory=dict)

    def add(self, strategy: Strategy, category: str, reason: str, closeness: float = 0.0, count: int = 1) -> None:
        self.count += count
        self.by_reason[category] += count
        kept = self.examples.setdefault(category, [])
        kept.append((strategy, reason, closeness))
        if len(kept) > 4 * EXAMPLES_PER_REASON:  # keep the closest few without holding every rejected strategy
            kept.sort(key=lambda item: (item[2], item[0].sort_key()))
            del kept[EXAMPLES_PER_REASON:]

    def example_list(self) -> list[tuple[Strategy, str]]:
        out = []
        for category in sorted(self.by_reason, key=lambda c: (-self.by_reason[c], c)):
            kept = sorted(self.examples[category], key=lambda item: (item[2], item[0].sort_key()))
            out += [(strategy, reason) for strategy, reason, _ in kept[:EXAMPLES_PER_REASON]]
        return out


@dataclass
class Plan:
    world: int
    hardware: Hardware
    workload: Workload
    candidates: list[Evaluation]  # the strategies that fit, best first, without variants that only cost memory
    fitting: int  # every strategy that fits, those variants included
    rejected: Rejections
    considered: int
    closest: Evaluation | None  # when nothing fits: the strategy that misses by the least


def _divisors(n: int) -> list[int]:
    small = [k for k in range(1, int(n ** 0.5) + 1) if n % k == 0]
    return sorted(set(small + [n // k for k in small]))


def rule_category(problem: str) -> str:
    """`spec.model.heads=12 must be divisible by spec.parallelism.tensor=8` → the rule without its values."""
    return re.sub(r"=[^\s,()]+", "", problem)


def evaluate_strategy(w: Workload, s: Strategy, hw: Hardware, fmt: StatesFormat = MIXED_PRECISION_ADAM,
                      memory: StageMemory | None = None) -> Evaluation:
    memory = memory or most_loaded(w, s, fmt)
    time = step_time(w, s, hw, memory.parameters, fmt.gradient_bytes)
    step = time.step
    tokens = w.tokens_per_step / step / s.world
    mfu = model_flops_per_step(w) / (step * s.world * hw.peak_tflops * 1e12)
    return Evaluation(s, memory, hw.usable_bytes, time, groups(s, hw), tokens, mfu, w)



def _check_pods_fit_nodes(per_pod: int, hw: Hardware) -> None:
    if per_pod > hw.chips_per_node:
        raise PlanError(f"spec.npu.perPod={per_pod} exceeds chipsPerNode={hw.chips_per_node} of hardware "
                        f"{hw.name}: a pod must fit one node")


def evaluate_job(resolved: Any, hw: Hardware, fmt: StatesFormat = MIXED_PRECISION_ADAM) -> Evaluation:
    """Exactly the job's own strategy, fitting or not."""
    _check_pods_fit_nodes(resolved.per_pod, hw)
    return evaluate_strategy(Workload.from_job(resolved), Strategy.from_job(resolved), hw, fmt)


@dataclass(frozen=True)
class Constraints:
    """What an auto job's spec.parallelism.autoConstraints lets the planner choose (None: anything)."""

    max_pipeline: int | None = None
    max_tensor: int | None = None
    expert_placement: str | None = None
    recompute: tuple[str, ...] = RECOMPUTE_KINDS

    @classmethod
    def of_spec(cls, spec: Any) -> Constraints:
        given = spec.parallelism.auto_constraints
        if given is None:
            return cls()
        return cls(given.max_pipeline, given.max_tensor, given.expert_placement,
                   tuple(given.recompute) if given.recompute else RECOMPUTE_KINDS)


# Context parallelism is searched for long sequences only (FlashAttention on, at least this many tokens): below
# that, ring attention's extra traffic buys memory that sequence parallelism and recompute buy more cheaply.
CONTEXT_FROM_SEQUENCE = 16384
CONTEXT_DEGREES = (2, 4, 8, 16)


def _context_options(w: Workload, world: int) -> list[int]:
    if not w.flash_attention or w.seq_length < CONTEXT_FROM_SEQUENCE or w.sliding_window is not None:
        return [1]
    return [1] + [c for c in CONTEXT_DEGREES if world % c == 0 and w.seq_length % c == 0]


def _structures(w: Workload, world: int, limits: Constraints) -> Iterator[tuple[int, int, int, int, str, int, int,
                                                                                int]]:
    """(data, tensor, pipeline, expert, placement, microBatches, virtualStages, context) of the search space.
    Micro-batches range over what splits the global batch; a DP degree that cannot split it gets one entry, which
    the rules refuse. A pipeline degree that does not divide the layers is searched with uneven stages."""
    batch = w.global_batch
    expert_options = [(1, "dataParallel")]
    if w.is_moe:
        expert_options += [(e, placement) for e in _divisors(w.experts) if e > 1
                           for placement in ("dataParallel", "intraNode")
                           if limits.expert_placement in (None, placement)]
    for context in _context_options(w, world):
        for tensor in _divisors(world // context):
            if limits.max_tensor is not None and tensor > limits.max_tensor:
                continue
            for pipeline in _divisors(world // (context * tensor)):
                if limits.max_pipeline is not None and pipeline > limits.max_pipeline:
                    continue
                data = world // (context * tensor * pipeline)
                micro = _divisors(batch // data) if batch % data == 0 else [pipeline]
                chunks = _divisors(w.layers // pipeline) if pipeline > 1 and w.layers % pipeline == 0 else [1]
                for expert, placement in expert_options:
                    for micro_batches in micro:
                        for virtual in chunks:
                            yield data, tensor, pipeline, expert, placement, micro_batches, virtual, context


def _variants(replicas: int, tensor: int, recompute_kinds: tuple[str, ...]) -> Iterator[tuple[str, bool, bool]]:
    """Recompute × sequence parallelism × optimizer sharding. SP without TP and sharding without replicas (DP × CP)
    change nothing, so they are not separate candidates."""
    for recompute in recompute_kinds:
        for sequence_parallel in ((False, True) if tensor > 1 else (False,)):
            for shard in ((False, True) if replicas > 1 else (False,)):
                yield recompute, sequence_parallel, shard


def plan(resolved: Any, hw: Hardware, world: int | None = None, chip: str | None = None,
         fmt: StatesFormat = MIXED_PRECISION_ADAM) -> Plan:
    """Every valid strategy for `world` NPUs (default: the job's), the fitting ones ranked by step time.

    The rules are checked once per structure (degrees, micro-batches, chunks) on the job's spec with those degrees
    and the job's own training flags: no rule reads recompute, sequenceParallel or optimizerShard (a unit test
    holds rules.py to that), so each structure's verdict is its flag variants' verdict.
    """
    world = world or resolved.world_size
    base = resolved.spec
    limits = Constraints.of_spec(base)
    npu = base.npu if chip is None else base.npu.model_copy(update={"chip": chip})
    _check_pods_fit_nodes(npu.per_pod or CHIPS[npu.chip].chips_per_node, hw)
    w = Workload.from_job(resolved)
    training = base.training.model_copy(update={"global_batch_size": resolved.global_batch_size})
    fitting: list[Evaluation] = []
    rejected = Rejections()
    closest: tuple | None = None  # (GiB over, tie-break, strategy) of the strategy that misses by the least
    considered = 0
    field_problems: list[str] | None = None
    for data, tensor, pipeline, expert, placement, micro_batches, virtual, context in _structures(w, world, limits):
        # each candidate is a manual spec (an auto job's own auto, world and constraints cleared); a pipeline that
        # does not divide the layers gets the near-even split, then the balanced one below
        uneven = list(near_even_split(w.layers, pipeline)) if w.layers % pipeline and w.layers >= pipeline else None
        parallelism = base.parallelism.model_copy(update={
            "data": data, "tensor": tensor, "pipeline": pipeline, "expert": expert, "expert_placement": placement,
            "micro_batches": micro_batches, "virtual_pipeline_stages": virtual, "auto": None, "world": None,
            "auto_constraints": None, "context": context if context > 1 else None, "pipeline_layers": uneven})
        spec = base.model_copy(update={"parallelism": parallelism, "training": training, "npu": npu})
        screened = resolve(resolved.name, spec)
        if field_problems is None:  # the pods' own fields read no degree: checked once, on the first structure
            field_problems = rules.broken_rules(screened, FIELD_RULES)
        broken = rules.broken_rules(screened, rules.STRATEGY_RULES) + field_problems
        variants = list(_variants(data * context, tensor, limits.recompute))
        considered += len(variants)
        structure = Strategy.from_job(screened)
        if broken:
            rejected.add(structure, rule_category(broken[0]), broken[0], count=len(variants))
            continue
        for strategy in _with_splits(w, structure, variants, hw):
            stage = most_loaded(w, strategy, fmt)
            over = stage.total - hw.usable_bytes
            if over <= 0:
                fitting.append(evaluate_strategy(w, strategy, hw, fmt, stage))
                continue
            # What does not fit needs no step time, except the one closest to fitting, timed at the end.
            rejected.add(strategy, "out of memory", out_of_memory_reason(stage, hw.usable_bytes), over)
            if closest is None or (over, strategy.sort_key()) < closest:
                closest = (over, strategy.sort_key(), strategy)
    fitting.sort(key=lambda evaluation: evaluation.rank_key)
    nearest = evaluate_strategy(w, closest[2], hw, fmt) if closest and not fitting else None
    return Plan(world, hw, w, _without_memory_only_variants(fitting), len(fitting), rejected, considered, nearest)


def _with_splits(w: Workload, structure: Strategy, variants: list[tuple[str, bool, bool]],
                 hw: Hardware) -> Iterator[Strategy]:
    """Each flag variant of a structure, and for a pipeline without interleaving also its balanced split (seed
    §3.3) when that differs: the balanced split puts fewer layers on the stage with the LM head but more on the
    first stages, which hold the most micro-batches in flight, so both are weighed."""
    for recompute, sequence_parallel, shard in variants:
        strategy = structure.with_flags(recompute, sequence_parallel, shard)
        yield strategy
        if strategy.pipeline > 1 and strategy.virtual_stages == 1:
            balanced = balanced_split(w, strategy, hw)
            if balanced != strategy.layers_of(w.layers):
                yield replace(strategy, stage_layers=balanced)


def _without_memory_only_variants(ranked: list[Evaluation]) -> list[Evaluation]:
    """Sequence parallelism never costs time (it splits the norms' vector work and moves the same TP bytes) and
    saves memory: of two candidates that differ in it alone and take the same time (a scalar hardware profile does
    not price vector work), the ranking already put the smaller first, so the other one is left out."""
    seen: set[tuple] = set()
    kept = []
    for evaluation in ranked:
        s = evaluation.strategy
        key = (s.with_flags(s.recompute, False, s.optimizer_shard), evaluation.time.step)
        if key not in seen:
            seen.add(key)
            kept.append(evaluation)
    return kept


def out_of_memory_reason(stage: StageMemory, usable: float) -> str:
    gib = 2 ** 30
    return f"out of memory: {stage.total / gib:.1f} > {usable / gib:.1f} GiB on stage {stage.stage}"
