"""Degrees and training flags → MindSpore parallel context and per-layer shard strategies (design §9's table), as a
pure function.

No MindSpore import: the mapping is unit-tested on any machine, and the model only reads the plan.
Notation of the table: dp = data, mp = tensor, ep = expert; linear layers are `y = x·Wᵀ` (MatMul with
transpose_b), so a weight [out, in] split by rows of W is a column-parallel layer. Tokens are flattened to
[batch·seq, hidden], batch-major, so splitting that axis dp·mp ways cuts each data-parallel slice into mp
contiguous pieces of its sequence: that is sequence parallelism.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict, cast

from .config import ConfigError, ModelConfig, Parallelism, TrainingConfig

Strategy = tuple[tuple[int, ...], ...]

STAND_ALONE = "stand_alone"
DATA_PARALLEL = "data_parallel"
SEMI_AUTO_PARALLEL = "semi_auto_parallel"


@dataclass(frozen=True)
class ShardStrategies:
    """One strategy per sharded primitive, the same in every layer (only the pipeline stage differs per layer)."""

    qkv: Strategy               # column parallel: MatMul(x [tokens, h], W [kv·(groups+2)·d, h]), whole kv groups
    attention_output: Strategy  # row parallel: MatMul(ctx [tokens, h], W [h, h])
    ffn_in: Strategy            # column parallel (gelu's first linear; swiglu's up and gate projections)
    ffn_out: Strategy           # row parallel
    embedding: Strategy         # vocab-parallel Gather(table [vocab, h], ids [batch, seq])
    lm_head: Strategy           # vocab-parallel MatMul(x, table [vocab, h])
    expert_ffn_in: Strategy     # BatchMatMul(tokens [E, G·C, h], W1 [E, h, ffn])
    expert_ffn_out: Strategy    # BatchMatMul(hidden [E, G·C, ffn], W2 [E, ffn, h])
    router: Strategy            # MatMul(x, Wr [E, h]): tiny, replicated over mp
    layer_norm: Strategy        # LayerNorm(x, gamma, beta)
    attention_scores: Strategy  # BatchMatMul(q [b, kv, groups·s, d], kᵀ): kv heads split like the QKV columns
    attention_softmax: Strategy
    attention_context: Strategy
    activation: Strategy        # GeLU / SiLU on the column-parallel FFN output
    gate_multiply: Strategy     # swiglu: SiLU(gate) ⊙ up, both column parallel
    residual_add: Strategy
    cross_entropy: Strategy     # SoftmaxCrossEntropyWithLogits: vocab gathered first (its axis cannot be split)
    # flash_attention_score(q [b, heads, s, d], k, v [b, kv, s, d], causal mask [2048, 2048]) in BNSD layout
    flash_attention: Strategy
    # The output strategy of the row-parallel MatMuls: None = all-reduce over mp (the partial sums are added and
    # every rank keeps all tokens); with sequence parallelism ((dp·mp, 1),) = reduce-scatter along the tokens.
    row_parallel_output: Strategy | None = None
    ring_attention: bool = False  # context parallelism: FlashAttentionScore's enable_ring_attention

    @property
    def expert_weights(self) -> tuple[int, ...]:
        """The strategy of the expert weight tensor [experts, hidden, ffn] (the table's MoE rows)."""
        return self.expert_ffn_in[1]


@dataclass(frozen=True)
class ParallelPlan:
    mode: str
    context: dict                      # keyword arguments of mindspore.set_auto_parallel_context
    shards: ShardStrategies | None     # None unless semi_auto_parallel
    layer_stages: tuple[int, ...]      # pipeline stage of each transformer layer
    pipeline_stages: int
    micro_batches: int                 # pipeline micro-batches, or gradient-accumulation steps without a pipeline
    recompute: str                     # none | selective (the attention core of every layer) | full (every layer)
    # True when every rank feeds the whole global batch (semi-auto, full_batch); False when each DP rank feeds
    # its own contiguous slice of it (data_parallel).
    full_batch: bool
    micro_batch_size: int = 1          # samples one rank's forward pass sees: global batch / (data x micro-batches)
    virtual_stages: int = 1            # model chunks per pipeline stage (interleaved 1F1B)
    sequence_parallel: bool = False
    flash_attention: bool = False

    @property
    def uses_pipeline(self) -> bool:
        return self.pipeline_stages > 1

    @property
    def accumulates_gradients(self) -> bool:
        """microBatches > 1 without a pipeline: the step runs them one after the other and adds their gradients,
        so a rank holds the activations of one micro-batch at a time (the memory the planner predicts)."""
        return not self.uses_pipeline and self.micro_batches > 1


def layer_stages(layers: int, pipeline: int, virtual: int = 1,
                 explicit: tuple[int, ...] | None = None) -> tuple[int, ...]:
    """Layer i sits in stage i // (layers / pp): contiguous, equal blocks (layers % pp == 0 is validated). With v
    virtual stages (interleaved 1F1B) the layers form pp·v equal chunks and chunk c runs on stage c % pp, so each
    stage holds v chunks spread over the depth (Narayanan et al., SC'21, §2.2). An explicit split
    (parallelism.pipelineLayers, as MindSpeed's --num-layer-list) gives stage k the next explicit[k] layers: the
    stages stay contiguous, only their sizes differ (MindSpore reads each cell's pipeline_stage, so any contiguous
    assignment is a valid pipeline)."""
    if explicit:
        if len(explicit) != pipeline or sum(explicit) != layers or virtual > 1:
            raise ConfigError(f"parallelism.pipelineLayers={list(explicit)} must have parallelism.pipeline={pipeline} "
                              f"entries summing to model.layers={layers}, without virtualPipelineStages")
        return tuple(stage for stage, count in enumerate(explicit) for _ in range(count))
    chunks = pipeline * virtual
    if layers % chunks:
        raise ConfigError(f"model.layers={layers} must be divisible by parallelism.pipeline={pipeline}"
                          + (f" x virtualPipelineStages={virtual}" if virtual > 1 else ""))
    per_chunk = layers // chunks
    return tuple((index // per_chunk) % pipeline for index in range(layers))


def expert_weight_strategy(degrees: Parallelism) -> tuple[int, ...]:
    ep, mp = degrees.expert, degrees.tensor
    if degrees.expert_placement == "intraNode":
        # EP is carved out of the TP group: the ep expert shards and mp // ep ffn shards share the mp ranks.
        if mp % ep:
            raise ConfigError(
                f"parallelism.expert={ep} must divide parallelism.tensor={mp} for expertPlacement intraNode: the "
                f"expert weights are sharded (ep, 1, tensor // ep) inside one tensor-parallel group")
        return (ep, 1, mp // ep)
    return (ep, 1, mp)


def shard_strategies(degrees: Parallelism, sequence_parallel: bool = False) -> ShardStrategies:
    # Context parallelism: every op that splits the flattened [batch·seq] tokens (batch-major) splits them dp·cp
    # ways, so each DP slice is cut into cp contiguous parts of its sequence; the weights stay whole across CP.
    # Attention is the one op that needs the whole sequence: FlashAttentionScore splits its S axis cp ways and,
    # with enable_ring_attention, passes K and V around the CP ranks (MindSpore's ring attention; its own parallel
    # tests shard BNSD q, k, v as (dp, mp, cp, 1)).
    dp, mp, ep, cp = degrees.data * degrees.context, degrees.tensor, degrees.expert, degrees.context
    # Sequence parallelism (Korthikanti et al. 2022, §4.2.2): the layer norms and residual adds, which TP leaves
    # whole, work on 1/mp of the tokens; the row-parallel outputs reduce-scatter instead of all-reduce, and the
    # framework all-gathers the tokens again before the next column-parallel MatMul.
    tokens = dp * mp if sequence_parallel else dp
    weights = expert_weight_strategy(degrees)
    # The expert BatchMatMul's token operand: the expert axis takes ep, the rest of the stage's dp·mp ranks
    # split the tokens, so expert weights and tokens use every rank of the stage exactly once.
    token_split = dp // ep if degrees.expert_placement == "dataParallel" else dp
    batch = degrees.data  # the batch axis of the 4-D attention tensors; their sequence axis takes cp
    ffn_split = weights[2]
    return ShardStrategies(
        qkv=((dp, 1), (mp, 1)),
        attention_output=((dp, mp), (1, mp)),
        ffn_in=((dp, 1), (mp, 1)),
        ffn_out=((dp, mp), (1, mp)),
        embedding=((mp, 1), (batch, cp)),
        lm_head=((dp, 1), (mp, 1)),
        expert_ffn_in=((ep, token_split, 1), weights),
        expert_ffn_out=((ep, token_split, ffn_split), (ep, ffn_split, 1)),
        router=((dp, 1), (1, 1)),
        layer_norm=((tokens, 1), (1,), (1,)),
        attention_scores=((batch, mp, 1, 1), (batch, mp, 1, 1)),
        attention_softmax=((batch, mp, 1, 1),),
        attention_context=((batch, mp, 1, 1), (batch, mp, 1, 1)),
        activation=((dp, mp),),
        gate_multiply=((dp, mp), (dp, mp)),
        residual_add=((tokens, 1), (tokens, 1)),
        cross_entropy=((dp, 1), (dp, 1)),
        flash_attention=((batch, mp, cp, 1), (batch, mp, cp, 1), (batch, mp, cp, 1), (1, 1)),
        row_parallel_output=((dp * mp, 1),) if sequence_parallel else None,
        ring_attention=cp > 1,
    )


def check_shapes_divide(model: ModelConfig, degrees: Parallelism, training: TrainingConfig) -> None:
    """Semi-auto parallel cuts tensors into equal slices: each sharded axis must divide by its degree."""
    mp, ep = degrees.tensor, degrees.expert
    rules = [
        (model.vocab % mp, f"model.vocab={model.vocab} must be divisible by parallelism.tensor={mp} "
                           f"(vocab-parallel embedding and head)"),
        (model.ffn_hidden % mp, f"model.ffnHidden={model.ffn_hidden} must be divisible by parallelism.tensor={mp}"),
        (model.heads % mp, f"model.heads={model.heads} must be divisible by parallelism.tensor={mp}"),
        # ModelConfig.__post_init__ replaces a None kv_heads with heads
        (cast(int, model.kv_heads) % mp,
         f"model.kvHeads={model.kv_heads} must be divisible by parallelism.tensor={mp}"),
    ]
    if model.is_moe:
        rules.append((model.experts % ep, f"model.experts={model.experts} must be divisible by "
                                          f"parallelism.expert={ep}"))
    if degrees.context > 1:
        rules.append((training.seq_length % degrees.context, f"training.seqLength={training.seq_length} must be "
                                                             f"divisible by parallelism.context={degrees.context}"))
        rules.append((0 if training.flash_attention else 1, f"parallelism.context={degrees.context} needs "
                      "training.flashAttention: ring attention is a FlashAttentionScore feature"))
        rules.append((0 if model.sliding_window is None else 1, f"model.slidingWindow={model.sliding_window}: not "
                      f"with parallelism.context={degrees.context} (ring attention here runs the causal mask only)"))
    if training.sequence_parallel and mp > 1:
        rules.append((training.seq_length % mp, f"training.seqLength={training.seq_length} must be divisible by "
                                                f"parallelism.tensor={mp} for sequenceParallel"))
    problems = [message for remainder, message in rules if remainder]
    if problems:
        raise ConfigError("; ".join(problems))


def micro_batch_size(degrees: Parallelism, training: TrainingConfig) -> int:
    """Samples in one forward pass of one data-parallel rank (the planner's b)."""
    return training.global_batch_size // (degrees.data * degrees.micro_batches)


def gradient_fusion(training: TrainingConfig) -> dict:
    """training.gradientBucketMB → MindSpore's comm_fusion: the gradient all-reduces (and, with the parallel
    optimizer, the reduce-scatters) fused into buckets of that many MB, each sent when its gradients are ready."""
    if training.gradient_bucket_mb is None:
        return {}
    size = {"mode": "size", "config": training.gradient_bucket_mb}
    return {"comm_fusion": {"allreduce": size, "reducescatter": size}}


class _CommonPlanFields(TypedDict):
    """The ParallelPlan fields every mode sets alike."""

    recompute: str
    micro_batches: int
    micro_batch_size: int
    flash_attention: bool


def plan_parallel(degrees: Parallelism, model: ModelConfig, training: TrainingConfig) -> ParallelPlan:
    stages = layer_stages(model.layers, degrees.pipeline, degrees.virtual_pipeline_stages, degrees.pipeline_layers)
    common: _CommonPlanFields = {
        "recompute": training.recompute, "micro_batches": degrees.micro_batches,
        "micro_batch_size": micro_batch_size(degrees, training), "flash_attention": training.flash_attention}
    if degrees.world_size == 1 and degrees.only_data_parallel:
        return ParallelPlan(mode=STAND_ALONE, context={"parallel_mode": STAND_ALONE}, shards=None,
                            layer_stages=stages, pipeline_stages=1, full_batch=True, **common)
    if degrees.only_data_parallel:
        context = {"parallel_mode": DATA_PARALLEL, "device_num": degrees.data, "gradients_mean": True,
                   **gradient_fusion(training)}
        if training.optimizer_shard:
            context["enable_parallel_optimizer"] = True
        return ParallelPlan(mode=DATA_PARALLEL, context=context, shards=None, layer_stages=stages,
                            pipeline_stages=1, full_batch=False, **common)
    check_shapes_divide(model, degrees, training)
    # Sequence parallelism splits within the TP group: with tensor = 1 there is nothing to split.
    sequence_parallel = training.sequence_parallel and degrees.tensor > 1
    context = {
        "parallel_mode": SEMI_AUTO_PARALLEL,
        "device_num": degrees.world_size,
        "pipeline_stages": degrees.pipeline,
        "full_batch": True,
        "gradients_mean": True,
        "enable_parallel_optimizer": training.optimizer_shard,
        **gradient_fusion(training),
    }
    if degrees.virtual_pipeline_stages > 1:
        context["pipeline_config"] = {"pipeline_interleave": True, "pipeline_scheduler": "1f1b"}
    return ParallelPlan(mode=SEMI_AUTO_PARALLEL, context=context,
                        shards=shard_strategies(degrees, sequence_parallel), layer_stages=stages,
                        pipeline_stages=degrees.pipeline, full_batch=True,
                        virtual_stages=degrees.virtual_pipeline_stages, sequence_parallel=sequence_parallel,
                        **common)


CPU_LIMITS = ("MindSpore refuses semi_auto_parallel and pipeline parallel on the CPU backend (\"Invalid backend: "
              "CPU\") and has no CPU kernels for AlltoAll, ReduceScatter or Send/Receive")


def check_runnable(plan: ParallelPlan, degrees: Parallelism, device_target: str) -> None:
    """Refuse, never rewrite: a strategy the device cannot run is an error naming the setting, not a fallback."""
    if device_target != "CPU":
        return
    beyond_data = [f"{name}={value}" for name, value in
                   (("tensor", degrees.tensor), ("pipeline", degrees.pipeline), ("expert", degrees.expert),
                    ("context", degrees.context))
                   if value > 1]
    if beyond_data:
        raise ConfigError(
            f"parallelism {', '.join(beyond_data)}: the CPU backend can run only data parallel ({CPU_LIMITS}). "
            f"Run this job on Ascend NPUs, or set tensor, pipeline and expert to 1 to try it on CPU; the trainer "
            f"does not change the strategy by itself.")
    if plan.context.get("enable_parallel_optimizer"):
        raise ConfigError(
            "training.optimizerShard=true: the parallel optimizer needs ReduceScatter, which has no CPU kernel; "
            "set it to false on CPU")
    if plan.flash_attention:
        raise ConfigError(
            "training.flashAttention=true: flash_attention_score (FlashAttentionScore) has kernels for Ascend "
            "only, none for CPU; set it to false on CPU (the trainer does not change the strategy by itself)")


def validate_run(degrees: Parallelism, model: ModelConfig, training: TrainingConfig, world_size: int,
                 device_target: str, launch_mode: str) -> ParallelPlan:
    """Everything the launcher checks before starting a process and every worker checks again before training."""
    if degrees.world_size != world_size:
        raise ConfigError(f"parallelism data x tensor x pipeline = {degrees.world_size} but RANK_SIZE={world_size}: "
                          f"the degrees must use every rank")
    plan = plan_parallel(degrees, model, training)
    check_runnable(plan, degrees, device_target)
    if device_target == "CPU" and launch_mode == "ranktable":
        raise ConfigError("AHJ_LAUNCH_MODE=ranktable: the CPU backend ignores RANK_TABLE_FILE; use the dynamic "
                          "cluster launch (the default) on CPU")
    return plan
