"""The model and one candidate strategy as plain numbers: what the memory and time models read.

A Workload comes from a resolved job (rules.resolve), so presets, explicit fields and defaults mean exactly what
they mean to the operator and the trainer. A Strategy is one point of the search space.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

# The trainer's MoE capacity factor (trainer/ascend_hybrid_trainer/defaults.py), when spec.model.capacityFactor is unset.
CAPACITY_FACTOR = 1.25
# The busiest expert's load relative to the mean under a load-balancing loss. An assumption, not a measurement:
# GShard and Switch Transformer chose capacity factors of 1.0-1.25 as what routing with an auxiliary loss needs to
# drop few tokens, so 1.25 is taken as the spread capacity must absorb (docs/planner.md, "MoE").
MOE_IMBALANCE = 1.25


def dropped_share(capacity_factor: float, imbalance: float = MOE_IMBALANCE) -> float:
    """Share of routed tokens above capacity, with expert loads spread evenly between (2 - imbalance) and imbalance
    times the mean: E[max(0, load - capacity)] / mean. None when capacity covers the busiest expert; 1 - capacity
    when it is below even the idlest one."""
    low, high = 2 - imbalance, imbalance
    if capacity_factor >= high:
        return 0.0
    if capacity_factor <= low:
        return 1 - capacity_factor
    return (high - capacity_factor) ** 2 / (2 * (high - low))


@dataclass(frozen=True)
class Workload:
    """Frozen, so the derived sizes are cached on first use (cached_property writes the instance dict directly)."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn_hidden: int
    ffn_type: str
    vocab: int
    experts: int
    top_k: int
    seq_length: int
    global_batch: int
    flash_attention: bool
    capacity_factor: float = CAPACITY_FACTOR
    gradient_bucket_mb: int | None = None  # training.gradientBucketMB; None: MindSpore's own fusion
    sliding_window: int | None = None  # model.slidingWindow; None: full causal attention

    @classmethod
    def from_job(cls, resolved: Any) -> Workload:
        model, training = resolved.model, resolved.spec.training
        experts = model.get("experts") or 0
        return cls(layers=model["layers"], hidden=model["hidden"], heads=model["heads"],
                   kv_heads=model.get("kvHeads") or model["heads"], ffn_hidden=model["ffnHidden"],
                   ffn_type=model.get("ffnType") or "gelu", vocab=model["vocab"], experts=experts,
                   top_k=(model.get("topK") or 2) if experts else 0, seq_length=training.seq_length,
                   global_batch=resolved.global_batch_size, flash_attention=training.flash_attention,
                   capacity_factor=model.get("capacityFactor") or CAPACITY_FACTOR,
                   gradient_bucket_mb=training.gradient_bucket_mb, sliding_window=model.get("slidingWindow"))

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @cached_property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @cached_property
    def attention_parameters(self) -> int:
        """Q and output projections h², K and V h·(h/a)·kv each: 4h² without grouped-query attention."""
        h = self.hidden
        return 2 * h * h + 2 * h * self.head_dim * self.kv_heads

    @cached_property
    def mlp_matrices(self) -> int:
        return 3 if self.ffn_type == "swiglu" else 2

    @cached_property
    def mlp_parameters(self) -> int:
        """One feed-forward block (one expert of an MoE layer)."""
        return self.mlp_matrices * self.hidden * self.ffn_hidden

    @cached_property
    def layer_parameters(self) -> int:
        if self.is_moe:
            return self.attention_parameters + self.experts * self.mlp_parameters + self.hidden * self.experts
        return self.attention_parameters + self.mlp_parameters

    @cached_property
    def total_parameters(self) -> int:
        """Every parameter of the bundled trainer's model (trainer/ascend_hybrid_trainer/parameters.py; equal by
        tests/contract/test_parameter_count.py): the layers' matrices, two layer norms per layer and a final one
        (gamma and beta, 2h each), learned positions (seq·h), an untied embedding and LM head; no biases. The
        memory model counts the matrices, embedding and head only (the norms and positions are < 0.1 %)."""
        h = self.hidden
        norms = (2 * self.layers + 1) * 2 * h
        return self.layers * self.layer_parameters + norms + self.seq_length * h + 2 * self.vocab * h

    @cached_property
    def attended_keys(self) -> float:
        """Keys a query's scores are computed against, on average, in the count the FLOPs formulas use (the whole
        sequence; causal masking is priced apart): the sequence, or with FlashAttention and a sliding window
        shorter than it the window's mean, whose blocks are all the kernel computes (the first slidingWindow - 1
        queries see fewer keys)."""
        window = self.sliding_window
        if not self.flash_attention or window is None or window >= self.seq_length:
            return float(self.seq_length)
        return min(float(self.seq_length), 2 * window - window * (window - 1) / self.seq_length)

    @cached_property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.seq_length


@dataclass(frozen=True)
class Strategy:
    data: int
    tensor: int
    pipeline: int
    expert: int = 1
    expert_placement: str = "dataParallel"
    micro_batches: int = 1
    virtual_stages: int = 1
    recompute: str = "none"
    sequence_parallel: bool = False
    optimizer_shard: bool = False
    micro_batch_size: int = 1
    per_pod: int = 8
    context: int = 1  # context parallelism: ranks that split each sequence (ring attention)
    stage_layers: tuple[int, ...] = ()  # layers of each pipeline stage; () is the even split

    @classmethod
    def from_job(cls, resolved: Any) -> Strategy:
        training = resolved.spec.training
        unit = resolved.data * resolved.micro_batches
        return cls(resolved.data, resolved.tensor, resolved.pipeline, resolved.expert,
                   resolved.expert_placement, resolved.micro_batches, resolved.virtual_pipeline_stages,
                   training.recompute, training.sequence_parallel, training.optimizer_shard,
                   max(resolved.global_batch_size // unit, 1), resolved.per_pod,
                   getattr(resolved, "context", 1), tuple(getattr(resolved, "pipeline_layers", None) or ()))

    def with_flags(self, recompute: str, sequence_parallel: bool, optimizer_shard: bool) -> Strategy:
        """The same degrees with other training flags (positional: dataclasses.replace is slow in the search loop)."""
        return Strategy(self.data, self.tensor, self.pipeline, self.expert, self.expert_placement,
                        self.micro_batches, self.virtual_stages, recompute, sequence_parallel, optimizer_shard,
                        self.micro_batch_size, self.per_pod, self.context, self.stage_layers)

    @property
    def world(self) -> int:
        return self.data * self.tensor * self.pipeline * self.context

    @property
    def replicas(self) -> int:
        """Devices that hold the same slice of a weight: the DP ranks and, as they split only the sequence, the CP
        ranks. The gradients are reduced over them and the parallel optimizer shards over them (MindSpore's optimizer
        parallel splits a parameter across its duplicate slices; Megatron-core's distributed optimizer across the
        data-parallel group with context parallelism)."""
        return self.data * self.context

    def layers_of(self, layers: int) -> tuple[int, ...]:
        """Layers on each pipeline stage: the explicit split, or `layers` cut evenly."""
        return self.stage_layers or (layers // self.pipeline,) * self.pipeline

    @property
    def sequence_split(self) -> int:
        """How many ways the activations TP leaves whole are split: by TP with sequence parallelism, else not."""
        return self.tensor if self.sequence_parallel else 1

    def parallelism(self) -> dict[str, Any]:
        out = {"data": self.data, "tensor": self.tensor, "pipeline": self.pipeline, "expert": self.expert,
               "expertPlacement": self.expert_placement, "microBatches": self.micro_batches,
               "virtualPipelineStages": self.virtual_stages}
        if self.context > 1:
            out["context"] = self.context
        if self.stage_layers:
            out["pipelineLayers"] = list(self.stage_layers)
        return out

    def sort_key(self) -> tuple:
        """Deterministic tie-break: less model parallelism first, then fewer micro-batches, then the flags."""
        return (self.tensor, self.context, self.pipeline, self.expert, self.expert_placement, self.stage_layers,
                self.micro_batches,
                self.virtual_stages, ("none", "selective", "full").index(self.recompute), self.sequence_parallel,
                self.optimizer_shard)
