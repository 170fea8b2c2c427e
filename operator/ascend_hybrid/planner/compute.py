"""Compute time of one micro-batch on one device: FLOPs at a scalar share of peak, or the calibrated shape model
(each matmul at its own efficiency, FlashAttention at its kernel's, element-wise work at HBM bandwidth), and what
the Cube tile's padding of misaligned splits costs. docs/planner.md, "Calibration", gives every constant's source.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ascend_hybrid.planner.hardware import CUBE_TILE, Hardware
from ascend_hybrid.planner.workload import Strategy, Workload

BYTES_16BIT = 2


@lru_cache(maxsize=1024)
def layer_forward_flops(w: Workload, padded: bool) -> float:
    """Forward FLOPs of one layer per token: 2 per weight of each matmul, plus 4·s·h for attention scores and their
    product with V (s the keys attended, the sliding window's with FlashAttention). An MoE layer runs topK experts
    per token (× capacity factor for what the device computes)."""
    mlp: float = 2 * w.mlp_parameters
    if w.is_moe:
        mlp = mlp * w.top_k * (w.capacity_factor if padded else 1) + 2 * w.hidden * w.experts
    return 2 * w.attention_parameters + 4 * w.attended_keys * w.hidden + mlp


def model_flops_per_step(w: Workload) -> float:
    """Forward + backward (3× forward) of every layer and the LM head, recompute excluded: for a GPT that is
    Korthikanti's 72·B·L·s·h²·(1 + s/(6h) + V/(12·h·L))."""
    per_token = w.layers * layer_forward_flops(w, padded=False) + 2 * w.hidden * w.vocab
    return 3 * per_token * w.tokens_per_step


def recompute_flops_per_token(w: Workload, recompute: str) -> float:
    """Extra forward work per layer and token: the whole layer (full) or the attention scores (selective)."""
    if recompute == "full":
        return layer_forward_flops(w, padded=True)
    if recompute == "selective" and not w.flash_attention:
        return 4 * w.seq_length * w.hidden
    return 0.0


@dataclass(frozen=True)
class MicroBatchWork:
    """One micro-batch on one device of one stage, seconds: its forward and backward (recompute included), and
    what of it the shape model says (for explanations); TP/EP/CP communication is kept apart."""

    forward: float
    backward: float
    tp_matmul: float = 0.0  # the matmuls TP's collectives feed (MC2 hides communication under these)
    attention: float = 0.0  # the attention core, forward and backward (ring attention hides CP traffic here)

    @property
    def total(self) -> float:
        return self.forward + self.backward


# The causal mask leaves half of the score matrix: FlashAttention (MindSpeed's and MindSpore's FlashAttentionScore,
# sparse_mode for the causal mask) skips the masked blocks. Its backward recomputes the scores and runs five matmuls
# to the forward's two: 2.5 × the forward (Dao et al. 2022).
CAUSAL_SHARE = 0.5
FLASH_BACKWARD = 2.5
# Vector-unit bytes per token and layer of the forward pass, in units of the 16-bit element (docs/planner.md):
# two RMS/layer norms (read + write h each), two residual adds (two reads, one write of h each), rotary on Q and K
# (read + write), the activation (SwiGLU reads 2f and writes f, GeLU reads and writes f), and without
# FlashAttention the softmax pass over the a·s scores (scale, mask and softmax fused: read + write, and the
# dropout mask). The backward pass moves twice the forward's bytes.
NORM_RESIDUAL_ELEMENTS = 2 * 2 + 2 * 3
SOFTMAX_PASSES = 3
BACKWARD_VECTOR = 2.0
# The loss, bytes per logit (V/t per token), counted from the vocab-parallel cross-entropy on fp32 logits that
# MindSpeed-LLM runs (Megatron-core's tensor_parallel cross-entropy after logits.float()): forward the cast (read 2,
# write 4), the max (read 4), the shifted copy (read 4, write 4), exp in place (read 4, write 4), the sum (read 4)
# and the normalisation in place (read 4, write 4); backward the softmax scaled by the loss gradient in place (read
# 4, write 4) and the cast back to 16 bits (read 4, write 2).
CROSS_ENTROPY_FORWARD_BYTES = 6 + 4 + 8 + 8 + 4 + 8
CROSS_ENTROPY_BACKWARD_BYTES = 8 + 6
# MoE token permutation, in passes over the device's routed rows of h (16-bit), counted from Megatron-core 0.6's
# all-gather dispatcher and sequential experts, which MindSpeed-LLM's MoE runs use (docs/planner.md): forward the
# gather of the local rows out of the gathered tokens and the gather into expert order (read + write each), the
# experts' output buffer (zero-filled, each expert's output copied in), the local un-permutation (zero-fill, scatter),
# the routing-probability scale (read + write) and the scatter-add into the gathered tokens (read the rows, read and
# write the destination): 15; backward the gathers and scatters swapped, the scale's two products and the output
# buffer's copy: 17. The gathered tokens' buffer is zero-filled once each way.
PERMUTE_FORWARD_PASSES = 2 + 2 + 3 + 3 + 2 + 3
PERMUTE_BACKWARD_PASSES = 2 + 4 + 2 + 2 + 4 + 3
GATHERED_BUFFER_PASSES = 1
# Ring attention (CP) merges each step's partial output into the running one: MindSpeed 4ea42a23 (the version
# MindSpeed-LLM d58c5688 installs), context_parallel/utils.py forward_update_without_fused, since no published
# script passes --use-fused-ring-attention-update. Bytes per element of the device's output (b·s/cp tokens × h/t):
# the previous and the current output scale each broadcast to the heads' width and made contiguous in fp32 (write
# 4, read 4, write 4), each partial output times its scale into fp32 (read 2 + 4, write 4), their sum (read 8,
# write 4) and the cast back (read 4, write 2). Backward, causal_grad_update adds each step's dQ (every local token)
# and dK, dV (half of them) into 16-bit accumulators (read 2 + 2, write 2). Each of the cp - 1 steps after the
# first has a rank whose queries are all updated, and the ring waits for it.
RING_MERGE_BYTES = 2 * (4 + 4 + 4) + 2 * (2 + 4 + 4) + (8 + 4) + (4 + 2)
RING_GRAD_ADD_BYTES = 2 + 2 + 2


def _vector_forward_bytes(w: Workload, s: Strategy) -> float:
    """Element-wise bytes per token and layer forward on one device: what sequence parallelism splits (norms,
    residuals) and what TP splits (rotary on the local heads, the local activation, the local scores)."""
    t, sp = s.tensor, s.sequence_split
    kv_width = w.head_dim * w.kv_heads
    elements = NORM_RESIDUAL_ELEMENTS * w.hidden / sp + 2 * (w.hidden + kv_width) / t
    ffn = w.ffn_hidden / t * (3 if w.ffn_type == "swiglu" else 2)
    if w.is_moe:
        ffn *= w.top_k * w.capacity_factor
    elements += ffn
    if not w.flash_attention:
        elements += SOFTMAX_PASSES * w.heads * w.seq_length / t
    return BYTES_16BIT * elements


def _permutation_rows(w: Workload, s: Strategy) -> tuple[float, float]:
    """(routed rows, gathered rows) per token of the micro-batch that one device permutes. The permutation runs
    where the experts are, on the tokens every rank of the TP group gathers whole (sequence parallelism does not
    split it): dataParallel EP gathers e DP ranks' tokens and keeps the routed copies for its E/e experts (topK ·
    capacity per token); intraNode EP keeps 1/e of the TP group's routed copies."""
    if not w.is_moe:
        return 0.0, 0.0
    routed = w.top_k * w.capacity_factor
    if s.expert_placement == "dataParallel":
        return routed, float(s.expert)
    return routed / s.expert, 1.0


def _layer_matmuls(w: Workload, s: Strategy, tokens: float) -> list[tuple[float, float, float]]:
    """(M, N, K) of each forward matmul of one layer on one device. Every one of them sits next to a TP collective
    (column-parallel after an all-gather, row-parallel before a reduce-scatter), so MC2 may hide TP traffic under
    any of them."""
    h, t = w.hidden, s.tensor
    kv_width = w.head_dim * w.kv_heads
    shapes = [(tokens, (h + 2 * kv_width) / t, h), (tokens, h, h / t)]
    if not w.is_moe:
        inner = (w.mlp_matrices - 1) * w.ffn_hidden / t
        return shapes + [(tokens, inner, h), (tokens, h, w.ffn_hidden / t)]
    # Each expert's tokens: topK·capacity copies of the micro-batch's tokens spread over E experts; the device runs
    # its E/e experts (dataParallel EP brings e DP ranks' tokens to them) with the FFN split as memory.py splits it.
    e = s.expert
    local = w.experts // e
    ffn_split = t if s.expert_placement == "dataParallel" else max(t // e, 1)
    gathered = tokens * (e if s.expert_placement == "dataParallel" else 1)
    per_expert = gathered * w.top_k * w.capacity_factor / w.experts
    inner = (w.mlp_matrices - 1) * w.ffn_hidden / ffn_split
    experts = [(per_expert, inner, h), (per_expert, h, w.ffn_hidden / ffn_split)] * local
    return shapes + [(tokens, w.experts, h)] + experts


def micro_batch_work(w: Workload, s: Strategy, hw: Hardware, layers: int, head: bool,
                     pad: bool = True) -> MicroBatchWork:
    """The work of one micro-batch reads only the splits of one device, not how many replicas or stages there
    are: the cache key keeps those (many strategies share one entry)."""
    device = Strategy(1, s.tensor, 1, s.expert, s.expert_placement, 1, 1, s.recompute, s.sequence_parallel, False,
                      s.micro_batch_size, 1, s.context)
    return _micro_batch_work(w, device, hw, layers, head, pad)


@lru_cache(maxsize=65536)
def _micro_batch_work(w: Workload, s: Strategy, hw: Hardware, layers: int, head: bool, pad: bool) -> MicroBatchWork:
    """Forward and backward seconds of one micro-batch through `layers` layers (and the LM head when `head`).

    A scalar hardware profile prices FLOPs at peak × computeEfficiency (Narayanan's eq. 3 for a GPT); a shape
    model prices each matmul at its own efficiency, the attention core at the FlashAttention kernel's, and the
    element-wise work at HBM bandwidth."""
    tokens = s.micro_batch_size * w.seq_length / s.context
    peak = hw.peak_tflops * 1e12
    if hw.compute is None:
        layer_forward = layer_forward_flops(w, padded=True)
        forward = tokens * (layers * layer_forward + (2 * w.hidden * w.vocab if head else 0)) / s.tensor
        extra = tokens * layers * recompute_flops_per_token(w, s.recompute) / s.tensor
        achieved = hw.achieved_flops
        return MicroBatchWork(forward / achieved, (2 * forward + extra) / achieved)
    model = hw.compute
    shapes = _layer_matmuls(w, s, tokens)
    dense = 2 if w.is_moe else len(shapes)  # an MoE layer: attention's two matmuls, then the router and experts
    matmul = (sum(model.matmul_seconds(peak, m, n, k, pad) for m, n, k in shapes[:dense])
              + sum(model.matmul_seconds(peak, m, n, k, pad) for m, n, k in shapes[dense:]) / model.expert_efficiency)
    # Attention core: the local heads' scores against the whole sequence (with CP a device holds s/cp queries).
    local_width = w.hidden / s.tensor
    if w.flash_attention:
        flops = 4 * tokens * w.attended_keys * local_width * CAUSAL_SHARE
        attention_forward = model.attention_seconds(peak, flops, w.head_dim)
        attention_backward = FLASH_BACKWARD * attention_forward
        if s.context > 1:
            steps, kv_width = s.context - 1, w.head_dim * w.kv_heads / s.tensor
            attention_forward += model.vector_seconds(steps * tokens * local_width * RING_MERGE_BYTES)
            attention_backward += model.vector_seconds(steps * tokens * (local_width + kv_width) * RING_GRAD_ADD_BYTES)
    else:
        heads = w.heads / s.tensor
        per_head = model.matmul_seconds(peak, w.seq_length, w.seq_length, w.head_dim, pad)
        attention_forward = 2 * heads * per_head * s.micro_batch_size / s.context
        attention_backward = 2 * attention_forward
    vector = model.vector_seconds(tokens * _vector_forward_bytes(w, s))
    routed, gathered = _permutation_rows(w, s)
    row_bytes = tokens * w.hidden * BYTES_16BIT
    permute_forward = model.vector_seconds(row_bytes * (PERMUTE_FORWARD_PASSES * routed
                                                        + GATHERED_BUFFER_PASSES * gathered))
    permute_backward = model.vector_seconds(row_bytes * (PERMUTE_BACKWARD_PASSES * routed
                                                         + GATHERED_BUFFER_PASSES * gathered))
    vector += permute_forward
    layer_forward = matmul + attention_forward + vector
    layer_backward = 2 * matmul + attention_backward + BACKWARD_VECTOR * (vector - permute_forward) + permute_backward
    recompute = 0.0
    if s.recompute == "full":
        recompute = layer_forward
    elif s.recompute == "selective" and not w.flash_attention:
        softmax = model.vector_seconds(tokens * BYTES_16BIT * SOFTMAX_PASSES * w.heads * w.seq_length / s.tensor)
        recompute = attention_forward + softmax
    forward, backward = layers * layer_forward, layers * (layer_backward + recompute)
    if head:
        logits = model.matmul_seconds(peak, tokens, w.vocab / s.tensor, w.hidden, pad)
        logits_per_device = tokens * w.vocab / s.tensor
        forward += logits + model.vector_seconds(logits_per_device * CROSS_ENTROPY_FORWARD_BYTES)
        backward += 2 * logits + model.vector_seconds(logits_per_device * CROSS_ENTROPY_BACKWARD_BYTES)
    return MicroBatchWork(forward, backward, layers * 3 * matmul,
                          layers * (attention_forward + attention_backward))


def misaligned_dimensions(w: Workload, s: Strategy) -> list[str]:
    """The split matmul dimensions one device multiplies that are not multiples of the Cube tile (seed §3.2),
    named by how they are made: hidden/tensor, ffnHidden/tensor, vocab/tensor, the key/value width, the head size."""
    t = s.tensor
    kv_width = w.head_dim * w.kv_heads
    ffn_split = t if not w.is_moe or s.expert_placement == "dataParallel" else max(t // s.expert, 1)
    named = [("hidden/tensor", w.hidden / t), ("(hidden + 2·kvHeads·headSize)/tensor", (w.hidden + 2 * kv_width) / t),
             (f"ffnHidden/{'tensor' if ffn_split == t else 'tensor·expert split'}", w.ffn_hidden / ffn_split),
             ("vocab/tensor", w.vocab / t), ("hidden/heads (head size)", w.head_dim)]
    out = []
    for name, value in named:
        if value != int(value) or int(value) % CUBE_TILE:
            out.append(f"{name}={value:g}")
    return out


def misalignment_seconds(w: Workload, s: Strategy, hw: Hardware) -> float:
    """What padding the misaligned dimensions to the Cube tile costs per step on the slowest stage (shape-model
    profiles; a scalar profile prices FLOPs only and sees no padding)."""
    if hw.compute is None:
        return 0.0
    split = s.layers_of(w.layers)
    worst = 0.0
    for stage, layers in enumerate(split):
        head = stage == s.pipeline - 1
        padded = micro_batch_work(w, s, hw, layers, head, True).total
        exact = micro_batch_work(w, s, hw, layers, head, False).total
        worst = max(worst, padded - exact)
    return s.micro_batches * worst
