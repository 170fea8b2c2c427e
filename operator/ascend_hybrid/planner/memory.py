"""Memory per device: parameters, model states, activations (Korthikanti et al. 2022) and extras, per stage.

All figures are bytes; GiB (2^30) only at the edges. Formulas and where they come from are in docs/planner.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ascend_hybrid.planner.workload import Strategy, Workload


@dataclass(frozen=True)
class StatesFormat:
    """Bytes per parameter of each kind of model state."""

    weight_bytes: float = 2  # 16-bit weights
    gradient_bytes: float = 2  # 16-bit gradients
    master_bytes: float = 4  # fp32 master weights
    optimizer_bytes: float = 8  # Adam momentum and variance in fp32

    @property
    def per_parameter(self) -> float:
        return self.weight_bytes + self.gradient_bytes + self.master_bytes + self.optimizer_bytes


# ZeRO §3.1's mixed-precision Adam (16 B/param) and Megatron-LM's estimator (fp32 main gradients: 18 B/param).
MIXED_PRECISION_ADAM = StatesFormat()
MEGATRON_ADAM = StatesFormat(gradient_bytes=4)

# What is partitioned across a weight's replicas (Strategy.replicas: DP × CP). ZeRO §5's stages, and MindSpore's
# parallel optimizer (`enable_parallel_optimizer`), which shards the optimizer states and the weights but keeps whole
# gradients.
UNSHARDED: frozenset[str] = frozenset()
ZERO_OPTIMIZER = frozenset({"optimizer"})
ZERO_GRADIENTS = frozenset({"optimizer", "gradients"})
ZERO_WEIGHTS = frozenset({"optimizer", "gradients", "weights"})
MINDSPORE_PARALLEL_OPTIMIZER = frozenset({"optimizer", "weights"})


def state_bytes(parameters: float, fmt: StatesFormat = MIXED_PRECISION_ADAM, sharded: frozenset[str] = UNSHARDED,
                data: int = 1, shardable: float | None = None) -> float:
    """Weights + gradients + optimizer states of `parameters`; the `shardable` ones (default all) of each sharded
    kind are split `data` ways. ZeRO's 7.5 B / 64-way example: 120, 31.4, 16.6 and 1.9 GB."""
    shardable = parameters if shardable is None else shardable
    kept_whole = parameters - shardable

    def held(kind: str, bytes_per_parameter: float) -> float:
        if kind in sharded and data > 1:
            return bytes_per_parameter * (shardable / data + kept_whole)
        return bytes_per_parameter * parameters

    return (held("weights", fmt.weight_bytes) + held("gradients", fmt.gradient_bytes)
            + held("optimizer", fmt.master_bytes + fmt.optimizer_bytes))


@lru_cache(maxsize=4096)
def _layer_matrices(w: Workload, tensor: int, expert: int, placement: str) -> tuple[tuple[int, int], ...]:
    """(first dimension, elements) of each weight matrix one device holds of one layer, after TP and EP splits.

    MindSpore's MatMul(transpose_b) weights are [out, in]: column-parallel ones (QKV, FFN in) split the first
    dimension by TP, row-parallel ones (attention out, FFN out) the second.
    """
    h, t, kv_width = w.hidden, tensor, w.head_dim * w.kv_heads
    matrices = [(h // t, h * h // t), (kv_width // t, kv_width * h // t), (kv_width // t, kv_width * h // t),
                (h, h * h // t)]
    if not w.is_moe:
        matrices += [(w.ffn_hidden // t, w.ffn_hidden * h // t)] * (w.mlp_matrices - 1)
        matrices.append((h, w.ffn_hidden * h // t))
        return tuple(matrices)
    local_experts = w.experts // expert
    # dataParallel EP: strategy (ep, 1, mp); intraNode EP is carved out of the TP group: (ep, 1, mp // ep).
    ffn_split = t if placement == "dataParallel" else max(t // expert, 1)
    per_matrix = local_experts * h * (w.ffn_hidden // ffn_split)
    matrices += [(local_experts, per_matrix)] * w.mlp_matrices
    matrices.append((w.experts, w.experts * h))  # the router, whole on every rank
    return tuple(matrices)


def stage_parameters(w: Workload, s: Strategy, stage: int) -> tuple[int, int]:
    return _stage_parameters(w, s.replicas, s.tensor, s.layers_of(w.layers)[stage], s.expert, s.expert_placement,
                             (stage == 0) + (stage == s.pipeline - 1))


@lru_cache(maxsize=65536)
def _stage_parameters(w: Workload, replicas: int, tensor: int, layers: int, expert: int, placement: str,
                      vocab_slices: int) -> tuple[int, int]:
    """(parameters, of which the parallel optimizer can shard) one device of a stage holds.

    MindSpore shards a parameter only when its replicas (DP × CP, Strategy.replicas) divide its first dimension
    (MindFormers guide); the embedding sits on the first stage and the LM head on the last, both split by TP along
    the vocabulary.
    """
    matrices = _layer_matrices(w, tensor, expert, placement)
    extra = [(w.vocab // tensor, w.vocab * w.hidden // tensor)] * vocab_slices
    total = layers * sum(size for _, size in matrices) + sum(size for _, size in extra)
    if replicas == 1:
        return total, 0
    shardable = (layers * sum(size for first, size in matrices if first % replicas == 0)
                 + sum(size for first, size in extra if first % replicas == 0))
    return total, shardable


def layer_activation_bytes(w: Workload, s: Strategy) -> float:
    """Bytes one layer keeps for its backward pass per micro-batch on one device (Korthikanti Table 2).

    s·b·h·(10/sp + (4 + 4·kv/a + mlp)/t + 5·a·s/(h·t)): 10 the layer norms, the inputs of attention and MLP and the
    dropout masks (split only by sequence parallelism); Q, K, V and the attention output, then the MLP's
    intermediates (4·f/h for GeLU, 6·f/h for SwiGLU, × topK × capacity for an MoE layer) split by TP; 5·a·s/h the
    attention scores, softmax and dropout, removed by selective recompute and by FlashAttention. Full recompute
    keeps the layer input only: 2·s·b·h (split by sequence parallelism). Context parallelism gives each device
    s/cp of the sequence: every term shrinks cp ways (the scores are s/cp queries against s keys).
    """
    sbh = w.seq_length / s.context * s.micro_batch_size * w.hidden
    split = s.sequence_split
    if s.recompute == "full":
        return 2 * sbh / split
    mlp = (6 if w.ffn_type == "swiglu" else 4) * w.ffn_hidden / w.hidden
    if w.is_moe:
        mlp *= w.top_k * w.capacity_factor
    per_tensor = 4 + 4 * w.kv_heads / w.heads + mlp
    scores = 0.0 if (s.recompute == "selective" or w.flash_attention) else 5 * w.heads * w.seq_length / w.hidden
    return sbh * (10 / split + (per_tensor + scores) / s.tensor)


def moe_buffer_bytes(w: Workload, s: Strategy) -> float:
    """MoE dispatch and combine buffers (16-bit, topK × capacity slots per token) and the fp32 router logits and
    probabilities of one layer and micro-batch; intraNode EP spreads one TP group's tokens over its EP ranks."""
    if not w.is_moe:
        return 0.0
    tokens = w.seq_length / s.context * s.micro_batch_size
    slots = tokens * w.top_k * w.capacity_factor / (s.expert if s.expert_placement == "intraNode" else 1)
    return 2 * 2 * slots * w.hidden + 2 * 4 * tokens * w.experts / s.sequence_split


def in_flight(s: Strategy, stage: int) -> float:
    """Micro-batches' worth of the stage's layers held at the peak: 1F1B keeps min(m, p - stage) in flight; the
    interleaved schedule multiplies that by 1 + (p - 1)/(p·v) (Korthikanti §4.2.3; applied to every stage here)."""
    held = float(min(s.micro_batches, s.pipeline - stage))
    if s.virtual_stages > 1:
        held *= 1 + (s.pipeline - 1) / (s.pipeline * s.virtual_stages)
    return held


@dataclass(frozen=True)
class StageMemory:
    stage: int
    parameters: int
    states: float
    activations: float  # the transformer layers, as Korthikanti's Fig. 1 counts them
    moe_buffers: float
    other: float  # embedding dropout, output layer and loss, the working set of the layer being recomputed

    @property
    def total(self) -> float:
        return self.states + self.activations + self.moe_buffers + self.other


def stage_memory(w: Workload, s: Strategy, stage: int, fmt: StatesFormat = MIXED_PRECISION_ADAM) -> StageMemory:
    parameters, shardable = stage_parameters(w, s, stage)
    sharded = MINDSPORE_PARALLEL_OPTIMIZER if s.optimizer_shard else UNSHARDED
    states = state_bytes(parameters, fmt, sharded, s.replicas, shardable)
    held = in_flight(s, stage) * s.layers_of(w.layers)[stage]
    per_layer = layer_activation_bytes(w, s)
    buffers = 0.0 if s.recompute == "full" else moe_buffer_bytes(w, s)
    sbh = w.seq_length / s.context * s.micro_batch_size * w.hidden
    other = 0.0
    if stage == 0:
        other += sbh * min(s.micro_batches, s.pipeline) / s.sequence_split  # embedding dropout masks
    if stage == s.pipeline - 1:
        other += 4 * sbh * (1 + w.vocab / w.hidden) / s.tensor  # output layer and loss (vocab-parallel logits)
    if s.recompute != "none":
        other += _recompute_working_set(w, s)
    return StageMemory(stage, parameters, states, held * per_layer, held * buffers, other)


def _recompute_working_set(w: Workload, s: Strategy) -> float:
    """While one layer's backward runs, what recompute dropped exists again for that layer and micro-batch (the
    kept layer input is part of it, so it is not counted twice)."""
    if s.recompute == "full":
        kept = s.with_flags("none", s.sequence_parallel, s.optimizer_shard)
        return layer_activation_bytes(w, kept) - layer_activation_bytes(w, s) + moe_buffer_bytes(w, s)
    if w.flash_attention:
        return 0.0
    return 5 * w.heads * w.seq_length ** 2 / s.context * s.micro_batch_size / s.tensor


def most_loaded(w: Workload, s: Strategy, fmt: StatesFormat = MIXED_PRECISION_ADAM) -> StageMemory:
    """The stage with the largest total: the first under 1F1B, unless the LM head tips the last one over.
    Middle stages hold the first stage's layers with fewer micro-batches in flight, so only the ends compete —
    unless an explicit split gives a middle stage more layers, then every stage is weighed."""
    first = stage_memory(w, s, 0, fmt)
    if s.pipeline == 1:
        return first
    if s.stage_layers:
        return max(every_stage(w, s, fmt), key=lambda stage: stage.total)
    last = stage_memory(w, s, s.pipeline - 1, fmt)
    return last if last.total > first.total else first


def every_stage(w: Workload, s: Strategy, fmt: StatesFormat = MIXED_PRECISION_ADAM) -> list[StageMemory]:
    return [stage_memory(w, s, stage, fmt) for stage in range(s.pipeline)]
