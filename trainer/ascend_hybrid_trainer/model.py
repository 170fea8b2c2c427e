"""GPT-style decoder, written with primitives that carry §9's shard strategies: grouped-query attention (kvHeads),
a GeLU or SwiGLU feed-forward (ffnType), optionally top-k MoE experts.

On CPU (stand-alone or data parallel) no strategy is set and the same cells run unsharded. Under Ascend
semi-auto parallel the plan's strategies are attached to the primitives and each layer gets its pipeline stage.
parameters.parameter_count counts exactly what this module builds (tests/contract/test_parameter_count.py).
"""

from __future__ import annotations

import math
from typing import cast

import mindspore as ms
from mindspore import Parameter, nn, ops
from mindspore.common.initializer import Normal, One, Zero, initializer
from mindspore.ops.auto_generate import SiLU

from .config import ModelConfig
from .strategy import ParallelPlan, ShardStrategies

INIT_STD = 0.02
MASK_VALUE = -1e4  # large enough to zero a softmax entry, small enough for float16 on Ascend


def _shard(primitive, strategy, out_strategy=None):
    """Attach a strategy only in semi-auto mode: stand-alone and data-parallel runs keep the primitive as is."""
    if strategy is None:
        return primitive
    if out_strategy is not None:
        return primitive.shard(in_strategy=strategy, out_strategy=out_strategy)
    return primitive.shard(strategy)


def _weight(shape, name, std=INIT_STD):
    return Parameter(initializer(Normal(sigma=std), shape, ms.float32), name=name)


def residual_std(layers: int) -> float:
    """GPT-2's scaled init of the projections that write into the residual stream: the stream's variance stays
    near that of one layer however deep the stack, which keeps the first Adam steps stable."""
    return INIT_STD / math.sqrt(2 * layers)


class Linear(nn.Cell):
    """y = x·Wᵀ with W [out, in]; the strategy decides column (split out) or row (split in) parallelism."""

    def __init__(self, in_features: int, out_features: int, strategy=None, std: float = INIT_STD,
                 out_strategy=None):
        super().__init__()
        self.weight = _weight((out_features, in_features), "weight", std)
        self.matmul = _shard(ops.MatMul(transpose_b=True), strategy, out_strategy)

    def construct(self, x):
        return self.matmul(x, self.weight)


class LayerNorm(nn.Cell):
    def __init__(self, hidden: int, strategy=None):
        super().__init__()
        self.gamma = Parameter(initializer(One(), (hidden,), ms.float32), name="gamma")
        self.beta = Parameter(initializer(Zero(), (hidden,), ms.float32), name="beta")
        self.norm = _shard(ops.LayerNorm(begin_norm_axis=-1, begin_params_axis=-1, epsilon=1e-5), strategy)

    def construct(self, x):
        return self.norm(x, self.gamma, self.beta)[0]


def attends(query: int, key: int, window: int | None) -> bool:
    """Causal attention, within the sliding window (the key among the query's `window` latest tokens) if any."""
    return key <= query and (window is None or query - key < window)


class AttentionCore(nn.Cell):
    """softmax(q·kᵀ/√d + causal) · v for query heads grouped by their key/value head: q [b, kv, groups·s, d],
    k and v [b, kv, s, d] → [b, kv, groups·s, d]. One cell, so selective recompute can recompute exactly this
    part (the scores and probabilities, the largest activations: 2·b·heads·s² per layer) in the backward pass.
    A sliding window masks more of the same scores: every one is still computed."""

    def __init__(self, config: ModelConfig, seq_length: int, shards: ShardStrategies | None):
        super().__init__()
        self.scores = _shard(ops.BatchMatMul(transpose_b=True), shards and shards.attention_scores)
        self.softmax = _shard(ops.Softmax(axis=-1), shards and shards.attention_softmax)
        self.context = _shard(ops.BatchMatMul(), shards and shards.attention_context)
        window = config.sliding_window
        causal = [[0.0 if attends(query, key, window) else MASK_VALUE for key in range(seq_length)]
                  for query in range(seq_length)]
        # every query head of a group sees the same causal mask: the rows repeat once per head of the group
        self.causal_bias = ms.Tensor(causal * config.query_groups, ms.float32)
        self.scale = 1.0 / math.sqrt(config.head_dim)

    def construct(self, query, key, value):
        scores = self.scores(query, key) * self.scale + self.causal_bias
        return self.context(self.softmax(scores), value)


class FlashAttentionCore(nn.Cell):
    """The same attention as AttentionCore through flash_attention_score (Ascend only: FlashAttentionScore has no CPU
    kernel; check_runnable refuses it there). The scores are computed block by block and never stored, so no
    recompute is needed for them. BNSD layout, query heads in (kv, group) order, which is the grouping the
    operator expects (query head i uses key/value head i // groups); causal by the 2048x2048 compressed mask of
    sparse_mode 2 (leftUpCausal), or with a sliding window sparse_mode 4 (band: the query's pre_tokens earlier keys
    and none later) with the same mask, where the kernel skips the blocks outside the band. float16 inside, as the
    kernel requires."""

    COMPRESSED_MASK = 2048

    def __init__(self, config: ModelConfig, seq_length: int, shards: ShardStrategies | None):
        super().__init__()
        from mindspore.ops.operations.nn_ops import FlashAttentionScore

        self.heads, self.kv_heads, self.groups, self.seq = (config.heads, config.kv_heads, config.query_groups,
                                                            seq_length)
        self.head_dim = config.head_dim
        window = config.sliding_window
        band = {"pre_tokens": window - 1, "sparse_mode": 4} if window else {"pre_tokens": 2147483647, "sparse_mode": 2}
        self.flash = _shard(FlashAttentionScore(head_num=config.heads, keep_prob=1.0,
                                                scale_value=1.0 / math.sqrt(config.head_dim), next_tokens=0,
                                                input_layout="BNSD", **band),
                            shards and shards.flash_attention)
        if shards is not None and shards.ring_attention:
            # context parallelism: the S axis is split cp ways and K, V travel around the CP ranks
            self.flash.add_prim_attr("enable_ring_attention", True)
        size = self.COMPRESSED_MASK
        self.mask = ms.Tensor([[1 if key > query else 0 for key in range(size)] for query in range(size)], ms.uint8)

    def construct(self, query, key, value):
        batch = query.shape[0]
        # [b, kv, groups·s, d] → [b, heads, s, d]
        query = query.reshape(batch, self.heads, self.seq, self.head_dim)
        half = ms.float16
        output = self.flash(query.astype(half), key.astype(half), value.astype(half), None, None, None, self.mask)[3]
        return output.astype(ms.float32).reshape(batch, self.kv_heads, self.groups * self.seq, self.head_dim)


class Attention(nn.Cell):
    """Causal self-attention on tokens flattened to [batch·seq, hidden], with kvHeads key/value heads each shared by
    heads / kvHeads query heads (grouped-query attention; kvHeads = heads is multi-head attention)."""

    def __init__(self, config: ModelConfig, seq_length: int, shards: ShardStrategies | None,
                 flash_attention: bool = False):
        super().__init__()
        # ModelConfig.__post_init__ replaced a None kv_heads with heads
        self.heads, self.kv_heads, self.groups = config.heads, cast(int, config.kv_heads), config.query_groups
        self.head_dim, self.seq = config.head_dim, seq_length
        # The fused projection's rows are ordered by key/value group: [kv, (groups query heads, key, value), d].
        # With groups = 1 that is the per-head [q, k, v] layout of multi-head attention; a column-parallel split
        # of the rows hands each tensor-parallel rank whole groups (kvHeads % tensor == 0 is validated).
        width = self.kv_heads * (self.groups + 2) * self.head_dim
        self.qkv = Linear(config.hidden, width, shards and shards.qkv)
        self.output = Linear(config.hidden, config.hidden, shards and shards.attention_output,
                             residual_std(config.layers), shards and shards.row_parallel_output)
        self.transpose = ops.Transpose()
        self.core = (FlashAttentionCore if flash_attention else AttentionCore)(config, seq_length, shards)

    def construct(self, x):
        tokens = x.shape[0]
        batch = tokens // self.seq
        kv, groups, d, seq = self.kv_heads, self.groups, self.head_dim, self.seq
        qkv = self.transpose(self.qkv(x).reshape(batch, seq, kv, (groups + 2) * d), (0, 2, 1, 3))
        query, key, value = qkv[:, :, :, :groups * d], qkv[:, :, :, groups * d:(groups + 1) * d], qkv[:, :, :,
                                                                                                   (groups + 1) * d:]
        if groups > 1:  # [b, kv, s, groups·d] → [b, kv, groups·s, d]: the heads of a group stacked along the rows
            query = self.transpose(query.reshape(batch, kv, seq, groups, d), (0, 1, 3, 2, 4))
            query = query.reshape(batch, kv, groups * seq, d)
        context = self.core(query, key, value)
        if groups > 1:  # back to [b, s, heads·d] with head index = kv head · groups + j
            context = self.transpose(context.reshape(batch, kv, groups, seq, d), (0, 3, 1, 2, 4))
        else:
            context = self.transpose(context, (0, 2, 1, 3))
        return self.output(context.reshape(tokens, self.heads * d))


class DenseFeedForward(nn.Cell):
    """gelu: W2·GeLU(W1·x); swiglu: W2·(SiLU(Wg·x) ⊙ W1·x) (Shazeer 2020, as in Llama): three matrices."""

    def __init__(self, config: ModelConfig, shards: ShardStrategies | None):
        super().__init__()
        self.swiglu = config.ffn_type == "swiglu"
        self.ffn_in = Linear(config.hidden, config.ffn_hidden, shards and shards.ffn_in)
        if self.swiglu:
            self.ffn_gate = Linear(config.hidden, config.ffn_hidden, shards and shards.ffn_in)
            self.multiply = _shard(ops.Mul(), shards and shards.gate_multiply)
        self.ffn_out = Linear(config.ffn_hidden, config.hidden, shards and shards.ffn_out,
                              residual_std(config.layers), shards and shards.row_parallel_output)
        self.activation = _shard(SiLU() if self.swiglu else ops.GeLU(), shards and shards.activation)

    def construct(self, x):
        if self.swiglu:
            hidden = self.multiply(self.activation(self.ffn_gate(x)), self.ffn_in(x))
        else:
            hidden = self.activation(self.ffn_in(x))
        return self.ffn_out(hidden), ops.zeros((), ms.float32)


class MoEFeedForward(nn.Cell):
    """Top-k routed experts with a capacity limit and the Switch/GShard load-balancing loss.

    Tokens are routed within `groups` (one per data-parallel slice, so the capacity and the routing of a token do
    not depend on how many other slices exist); each expert takes at most
    capacity = ceil(capacityFactor · tokens_per_group · topK / experts) tokens per group, first choices first;
    overflowing tokens skip the experts and keep only the residual path.
    """

    def __init__(self, config: ModelConfig, tokens_per_group: int, groups: int, shards: ShardStrategies | None):
        super().__init__()
        self.experts, self.top_k, self.groups, self.tokens = config.experts, config.top_k, groups, tokens_per_group
        self.capacity = math.ceil(config.capacity_factor * tokens_per_group * config.top_k / config.experts)
        self.router = Linear(config.hidden, config.experts, shards and shards.router)
        self.w_in = _weight((config.experts, config.hidden, config.ffn_hidden), "expert_w_in")
        self.w_out = _weight((config.experts, config.ffn_hidden, config.hidden), "expert_w_out",
                             residual_std(config.layers))
        self.expert_in = _shard(ops.BatchMatMul(), shards and shards.expert_ffn_in)
        self.expert_out = _shard(ops.BatchMatMul(), shards and shards.expert_ffn_out)
        self.swiglu = config.ffn_type == "swiglu"
        if self.swiglu:  # every expert is a SwiGLU block: a gate matrix next to w_in
            self.w_gate = _weight((config.experts, config.hidden, config.ffn_hidden), "expert_w_gate")
            self.expert_gate = _shard(ops.BatchMatMul(), shards and shards.expert_ffn_in)
        self.gather_tokens = ops.BatchMatMul(transpose_a=True)
        self.scatter_tokens = ops.BatchMatMul()
        self.activation = SiLU() if self.swiglu else ops.GeLU()
        self.softmax = ops.Softmax(axis=-1)
        self.top_k_op = ops.TopK(sorted=True)
        self.one_hot = ops.OneHot()
        self.on, self.off = ms.Tensor(1.0, ms.float32), ms.Tensor(0.0, ms.float32)

    def route(self, probs):
        """probs [groups, tokens, experts] → dispatch and combine [groups, tokens, experts, capacity] (which slot
        of which expert each token goes to, and with what gate weight) and the first-choice mask."""
        groups, tokens, experts, capacity = self.groups, self.tokens, self.experts, self.capacity
        gate_values, gate_indices = self.top_k_op(probs, self.top_k)
        gate_values = gate_values / gate_values.sum(axis=-1, keepdims=True)
        dispatch = ops.zeros((groups, tokens, experts, capacity), ms.float32)
        combine = ops.zeros((groups, tokens, experts, capacity), ms.float32)
        taken = ops.zeros((groups, 1, experts), ms.float32)  # slots already filled in each expert
        first_choice = None
        for choice in range(self.top_k):  # static loop: top_k is a small constant
            mask = self.one_hot(gate_indices[:, :, choice], experts, self.on, self.off)
            if first_choice is None:
                first_choice = mask
            position = (ops.cumsum(mask, axis=1) + taken) * mask - 1.0  # slot of each routed token, -1 elsewhere
            taken = taken + mask.sum(axis=1, keepdims=True)
            # one_hot of a position outside [0, capacity) is all zeros: dropped tokens and unrouted pairs vanish
            slots = self.one_hot(position.astype(ms.int32), capacity, self.on, self.off)
            dispatch = dispatch + slots
            combine = combine + slots * gate_values[:, :, choice].reshape(groups, tokens, 1, 1)
        return dispatch, combine, first_choice

    def construct(self, x):
        hidden = x.shape[-1]
        groups, tokens, experts, capacity = self.groups, self.tokens, self.experts, self.capacity
        probs = self.softmax(self.router(x)).reshape(groups, tokens, experts)
        dispatch, combine, first_choice = self.route(probs)
        grouped = x.reshape(groups, tokens, hidden)
        expert_inputs = self.gather_tokens(dispatch.reshape(groups, tokens, experts * capacity), grouped)
        expert_inputs = expert_inputs.reshape(groups, experts, capacity, hidden).transpose(1, 0, 2, 3)
        expert_inputs = expert_inputs.reshape(experts, groups * capacity, hidden)
        if self.swiglu:
            inner = self.activation(self.expert_gate(expert_inputs, self.w_gate)) * self.expert_in(expert_inputs,
                                                                                                     self.w_in)
        else:
            inner = self.activation(self.expert_in(expert_inputs, self.w_in))
        expert_outputs = self.expert_out(inner, self.w_out)
        expert_outputs = expert_outputs.reshape(experts, groups, capacity, hidden).transpose(1, 0, 2, 3)
        expert_outputs = expert_outputs.reshape(groups, experts * capacity, hidden)
        output = self.scatter_tokens(combine.reshape(groups, tokens, experts * capacity), expert_outputs)
        # Switch Transformer balance loss: experts · Σ_e (share of first choices to e) · (mean router prob of e);
        # 1.0 when routing is uniform.
        balance = experts * (first_choice.mean(axis=1) * probs.mean(axis=1)).sum(axis=-1).mean()
        return output.reshape(groups * tokens, hidden), balance


class DecoderLayer(nn.Cell):
    def __init__(self, config: ModelConfig, seq_length: int, micro_batch: int, routing_groups: int,
                 shards: ShardStrategies | None, flash_attention: bool = False):
        super().__init__()
        self.norm_attention = LayerNorm(config.hidden, shards and shards.layer_norm)
        self.attention = Attention(config, seq_length, shards, flash_attention)
        self.norm_ffn = LayerNorm(config.hidden, shards and shards.layer_norm)
        if config.is_moe:
            tokens_per_group = micro_batch * seq_length // routing_groups
            self.ffn = MoEFeedForward(config, tokens_per_group, routing_groups, shards)
        else:
            self.ffn = DenseFeedForward(config, shards)
        self.add_attention = _shard(ops.Add(), shards and shards.residual_add)
        self.add_ffn = _shard(ops.Add(), shards and shards.residual_add)

    def construct(self, x):
        x = self.add_attention(x, self.attention(self.norm_attention(x)))
        ffn_output, balance = self.ffn(self.norm_ffn(x))
        return self.add_ffn(x, ffn_output), balance


class Embedding(nn.Cell):
    """Vocab-parallel token embedding plus learned positions; the first pipeline stage."""

    def __init__(self, config: ModelConfig, seq_length: int, shards: ShardStrategies | None):
        super().__init__()
        self.hidden, self.seq = config.hidden, seq_length
        self.table = _weight((config.vocab, config.hidden), "table")
        self.position = _weight((seq_length, config.hidden), "position")
        self.gather = _shard(ops.Gather(), shards and shards.embedding)

    def construct(self, input_ids):
        x = self.gather(self.table, input_ids, 0) + self.position
        return x.reshape(input_ids.shape[0] * self.seq, self.hidden)


class LossHead(nn.Cell):
    """Final norm, vocab-parallel LM head, cross entropy and the MoE balance term; the last pipeline stage."""

    def __init__(self, config: ModelConfig, shards: ShardStrategies | None):
        super().__init__()
        self.vocab = config.vocab
        self.final_norm = LayerNorm(config.hidden, shards and shards.layer_norm)
        self.head = Linear(config.hidden, config.vocab, shards and shards.lm_head)
        self.one_hot = ops.OneHot()
        self.cross_entropy = _shard(ops.SoftmaxCrossEntropyWithLogits(), shards and shards.cross_entropy)
        self.on, self.off = ms.Tensor(1.0, ms.float32), ms.Tensor(0.0, ms.float32)
        # the balance loss is summed over layers; averaging keeps its weight independent of depth
        self.balance_weight = config.aux_loss_weight / config.layers if config.is_moe else 0.0

    def construct(self, x, labels, balance_total):
        logits = self.head(self.final_norm(x))
        targets = self.one_hot(labels.reshape(-1), self.vocab, self.on, self.off)
        loss = self.cross_entropy(logits, targets)[0].mean()
        return loss + self.balance_weight * balance_total


class GPTWithLoss(nn.Cell):
    """tokens [batch, seq] and next-token labels [batch, seq] → mean cross entropy (+ weighted MoE balance loss).

    `micro_batch` is the batch one forward pass sees on this rank (the slice of a DP rank, or the pipeline
    micro-batch of the full batch in semi-auto); `routing_groups` how many data-parallel slices it holds.
    """

    def __init__(self, config: ModelConfig, plan: ParallelPlan, seq_length: int, micro_batch: int,
                 routing_groups: int = 1):
        super().__init__()
        self.embedding = Embedding(config, seq_length, plan.shards)
        self.layers = nn.CellList([DecoderLayer(config, seq_length, micro_batch, routing_groups, plan.shards,
                                                plan.flash_attention)
                                   for _ in range(config.layers)])
        self.loss_head = LossHead(config, plan.shards)
        self._place(plan)

    def _place(self, plan: ParallelPlan) -> None:
        """Pipeline stages (Ascend semi-auto only): embedding first, each layer in the stage of plan.layer_stages
        (contiguous blocks, or chunks dealt round-robin when interleaved), the loss last. Recompute trades stored
        activations for a second forward pass in backward: full = each whole layer from its input, selective =
        the attention core only (Korthikanti et al. 2022, §5)."""
        if plan.uses_pipeline:
            self.embedding.pipeline_stage = 0
            self.loss_head.pipeline_stage = plan.pipeline_stages - 1
        for layer, stage in zip(self.layers, plan.layer_stages):
            if plan.uses_pipeline:
                layer.pipeline_stage = stage
            if plan.recompute == "full":
                layer.recompute()
            elif plan.recompute == "selective" and not plan.flash_attention:  # flash attention stores no scores
                layer.attention.core.recompute()

    def construct(self, input_ids, labels):
        x = self.embedding(input_ids)
        balance_total = ops.zeros((), ms.float32)
        for layer in self.layers:
            x, balance = layer(x)
            balance_total = balance_total + balance
        return self.loss_head(x, labels, balance_total)
