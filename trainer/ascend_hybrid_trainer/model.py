"""GPT-style decoder with an optional MoE feed-forward, written with primitives that carry §9's shard strategies.

On CPU (stand-alone or data parallel) no strategy is set and the same cells run unsharded. Under Ascend
semi-auto parallel the plan's strategies are attached to the primitives and each layer gets its pipeline stage.
"""

from __future__ import annotations

import math

import mindspore as ms
from mindspore import Parameter, nn, ops
from mindspore.common.initializer import Normal, One, Zero, initializer

from .config import ModelConfig
from .strategy import ParallelPlan, ShardStrategies

INIT_STD = 0.02
MASK_VALUE = -1e4  # large enough to zero a softmax entry, small enough for float16 on Ascend


def _shard(primitive, strategy):
    """Attach a strategy only in semi-auto mode: stand-alone and data-parallel runs keep the primitive as is."""
    return primitive.shard(strategy) if strategy is not None else primitive


def _weight(shape, name, std=INIT_STD):
    return Parameter(initializer(Normal(sigma=std), shape, ms.float32), name=name)


def residual_std(layers: int) -> float:
    """GPT-2's scaled init of the projections that write into the residual stream: the stream's variance stays
    near that of one layer however deep the stack, which keeps the first Adam steps stable."""
    return INIT_STD / math.sqrt(2 * layers)


class Linear(nn.Cell):
    """y = x·Wᵀ with W [out, in]; the strategy decides column (split out) or row (split in) parallelism."""

    def __init__(self, in_features: int, out_features: int, strategy=None, std: float = INIT_STD):
        super().__init__()
        self.weight = _weight((out_features, in_features), "weight", std)
        self.matmul = _shard(ops.MatMul(transpose_b=True), strategy)

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


class Attention(nn.Cell):
    """Causal self-attention on tokens flattened to [batch·seq, hidden]."""

    def __init__(self, config: ModelConfig, seq_length: int, shards: ShardStrategies | None):
        super().__init__()
        self.heads, self.head_dim, self.seq = config.heads, config.hidden // config.heads, seq_length
        # QKV rows are ordered head by head ([heads, 3, head_dim]), so a column-parallel split of the 3·hidden
        # rows hands each tensor-parallel rank whole heads with their q, k and v together.
        self.qkv = Linear(config.hidden, 3 * config.hidden, shards and shards.qkv)
        self.output = Linear(config.hidden, config.hidden, shards and shards.attention_output,
                             residual_std(config.layers))
        self.split = ops.Split(axis=-1, output_num=3)
        self.transpose = ops.Transpose()
        self.scores = _shard(ops.BatchMatMul(transpose_b=True), shards and shards.attention_scores)
        self.softmax = _shard(ops.Softmax(axis=-1), shards and shards.attention_softmax)
        self.context = _shard(ops.BatchMatMul(), shards and shards.attention_context)
        self.causal_bias = ms.Tensor([[0.0 if key <= query else MASK_VALUE for key in range(seq_length)]
                                      for query in range(seq_length)], ms.float32)
        self.scale = 1.0 / math.sqrt(self.head_dim)

    def construct(self, x):
        tokens = x.shape[0]
        batch = tokens // self.seq
        qkv = self.qkv(x).reshape(batch, self.seq, self.heads, 3 * self.head_dim)
        query, key, value = self.split(self.transpose(qkv, (0, 2, 1, 3)))
        scores = self.scores(query, key) * self.scale + self.causal_bias
        context = self.context(self.softmax(scores), value)
        context = self.transpose(context, (0, 2, 1, 3)).reshape(tokens, self.heads * self.head_dim)
        return self.output(context)


class DenseFeedForward(nn.Cell):
    def __init__(self, config: ModelConfig, shards: ShardStrategies | None):
        super().__init__()
        self.ffn_in = Linear(config.hidden, config.ffn_hidden, shards and shards.ffn_in)
        self.ffn_out = Linear(config.ffn_hidden, config.hidden, shards and shards.ffn_out,
                              residual_std(config.layers))
        self.activation = _shard(ops.GeLU(), shards and shards.activation)

    def construct(self, x):
        return self.ffn_out(self.activation(self.ffn_in(x))), ops.zeros((), ms.float32)


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
        self.gather_tokens = ops.BatchMatMul(transpose_a=True)
        self.scatter_tokens = ops.BatchMatMul()
        self.activation = ops.GeLU()
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
        expert_outputs = self.expert_out(self.activation(self.expert_in(expert_inputs, self.w_in)), self.w_out)
        expert_outputs = expert_outputs.reshape(experts, groups, capacity, hidden).transpose(1, 0, 2, 3)
        expert_outputs = expert_outputs.reshape(groups, experts * capacity, hidden)
        output = self.scatter_tokens(combine.reshape(groups, tokens, experts * capacity), expert_outputs)
        # Switch Transformer balance loss: experts · Σ_e (share of first choices to e) · (mean router prob of e);
        # 1.0 when routing is uniform.
        balance = experts * (first_choice.mean(axis=1) * probs.mean(axis=1)).sum(axis=-1).mean()
        return output.reshape(groups * tokens, hidden), balance


class DecoderLayer(nn.Cell):
    def __init__(self, config: ModelConfig, seq_length: int, micro_batch: int, routing_groups: int,
                 shards: ShardStrategies | None):
        super().__init__()
        self.norm_attention = LayerNorm(config.hidden, shards and shards.layer_norm)
        self.attention = Attention(config, seq_length, shards)
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
        self.layers = nn.CellList([DecoderLayer(config, seq_length, micro_batch, routing_groups, plan.shards)
                                   for _ in range(config.layers)])
        self.loss_head = LossHead(config, plan.shards)
        self._place(plan)

    def _place(self, plan: ParallelPlan) -> None:
        """Pipeline stages (Ascend semi-auto only): embedding first, layer i in stage i // (layers / pp), the loss
        last. Recompute trades the layers' stored activations for a second forward pass in backward."""
        if plan.uses_pipeline:
            self.embedding.pipeline_stage = 0
            self.loss_head.pipeline_stage = plan.pipeline_stages - 1
        for layer, stage in zip(self.layers, plan.layer_stages):
            if plan.uses_pipeline:
                layer.pipeline_stage = stage
            if plan.recompute:
                layer.recompute()

    def construct(self, input_ids, labels):
        x = self.embedding(input_ids)
        balance_total = ops.zeros((), ms.float32)
        for layer in self.layers:
            x, balance = layer(x)
            balance_total = balance_total + balance
        return self.loss_head(x, labels, balance_total)
