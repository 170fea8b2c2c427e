"""Step time: compute from FLOPs, the pipeline bubble, and each group's communication at its link tier's bandwidth.

What overlaps is stated where it is modelled: TP and EP collectives sit on the critical path of every
micro-batch; pipeline sends overlap the steady state and are exposed only while the pipeline fills and drains;
the gradient reduction of DP overlaps the backward pass of the last micro-batch (bucketed: seed §3.1 in
docs/design.md §11).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ascend_hybrid.planner.compute import (  # noqa: F401 - the time model's surface: FLOPs and per-micro-batch work live in compute.py
    BYTES_16BIT,
    MicroBatchWork,
    layer_forward_flops,
    micro_batch_work,
    misaligned_dimensions,
    misalignment_seconds,
    model_flops_per_step,
    recompute_flops_per_token,
)
from ascend_hybrid.planner.hardware import Hardware, Tier
from ascend_hybrid.planner.workload import Strategy, Workload

GROUP_KINDS = ("tensor", "pipeline", "data", "expert", "context")


@dataclass(frozen=True)
class Group:
    """Where one parallel group of a kind communicates: `nodes` spanned, `rings` spanned inside a node (910A)."""

    kind: str
    size: int
    nodes: int
    per_node: int
    crosses_rings: bool

    @property
    def tier(self) -> str:
        if self.size <= 1:
            return "none"
        if self.nodes > 1:
            return "interNode"
        return "crossRing" if self.crosses_rings else "intraNode"


@lru_cache(maxsize=65536)
def _span(size: int, stride: int, ranks_per_node: int, ring_size: int) -> tuple[int, int, bool]:
    """(nodes, members per node, crosses rings) of the group {0, stride, …, (size-1)·stride}; groups of one kind
    are translates of it by whole blocks, so the first one speaks for all."""
    ranks = range(0, size * stride, stride)
    nodes = len({rank // ranks_per_node for rank in ranks})
    rings = len({rank // ring_size for rank in ranks}) if ring_size else nodes
    return nodes, size // nodes, nodes == 1 and rings > 1


def ranks_per_node(s: Strategy, hw: Hardware) -> int:
    """Pods of `per_pod` ranks, packed whole onto nodes of `chips_per_node` chips, as the placement packs them."""
    return (hw.chips_per_node // s.per_pod) * s.per_pod


def groups(s: Strategy, hw: Hardware) -> dict[str, Group]:
    """Rank layout of design §4 (layout.py): TP adjacent, CP stride tensor, DP stride tensor·context, PP stride
    data·tensor·context, EP as its placement says. The densest traffic gets the nearest ranks: TP every layer's
    matmuls, CP every layer's attention, DP once per step, PP once per micro-batch boundary."""
    return _groups(s.data, s.tensor, s.pipeline, s.expert, s.expert_placement, ranks_per_node(s, hw),
                   hw.intra_node.ring_size if hw.intra_node.topology == "rings" else 0, s.context)


@lru_cache(maxsize=65536)
def _groups(data: int, tensor: int, pipeline: int, expert: int, placement: str, per_node: int,
            ring: int, context: int = 1) -> dict[str, Group]:
    expert_stride = 1 if placement == "intraNode" else tensor * context
    shapes = {"tensor": (tensor, 1), "data": (data, tensor * context), "pipeline": (pipeline, data * tensor * context),
              "expert": (expert, expert_stride), "context": (context, tensor),
              # gradients are reduced over every replica of a weight: the DP ranks and the CP ranks among them
              "gradients": (data * context, tensor)}
    return {kind: Group(kind, size, *_span(size, stride, per_node, ring)) for kind, (size, stride) in shapes.items()}


def tier_of(group: Group, hw: Hardware) -> Tier:
    if group.tier == "interNode":
        return hw.inter_node
    if group.tier == "crossRing":
        return Tier(hw.intra_node.cross_ring_gbps or hw.inter_node.gbps, latency_us=hw.intra_node.latency_us)
    return hw.intra_node


def _collective(group: Group, hw: Hardware, bytes_per_chip: float, steps: int) -> float:
    return tier_of(group, hw).transfer_seconds(group.size, bytes_per_chip, steps)


def _point_to_point(group: Group, hw: Hardware, bytes_per_chip: float, steps: int) -> float:
    """Sends to one neighbour at a time (a ring's hops): one link of the tier, whatever its topology."""
    if group.size <= 1 or bytes_per_chip <= 0:
        return 0.0
    tier = tier_of(group, hw)
    return steps * tier.latency_us * 1e-6 + bytes_per_chip / (tier.gbps * 1e9 * tier.efficiency)


@dataclass(frozen=True)
class StepTime:
    compute: float  # per step on the slowest stage, recompute included
    bubble: float
    tensor: float
    pipeline: float
    data: float
    expert: float
    bubble_fraction: float
    context: float = 0.0  # ring attention's exposed send/receive

    @property
    def step(self) -> float:
        return self.compute + self.bubble + self.tensor + self.pipeline + self.data + self.expert + self.context

    def communication(self) -> dict[str, float]:
        out = {"tensor": self.tensor, "pipeline": self.pipeline, "data": self.data, "expert": self.expert}
        if self.context:
            out["context"] = self.context
        return out


def bubble_fraction(s: Strategy) -> float:
    """Idle share of a step: (p - 1)/(v·m + p - 1) — the seed §4.5 case (docs/design.md §11), p 8 and m 32,
    gives 7/39 ≈ 0.179."""
    p = s.pipeline
    return (p - 1) / (s.virtual_stages * s.micro_batches + p - 1)


@dataclass(frozen=True)
class StageSlot:
    """One stage's time per micro-batch: compute, and the TP, EP and CP communication it exposes."""

    compute: MicroBatchWork
    tensor: float
    expert: float
    context: float

    @property
    def total(self) -> float:
        return self.compute.total + self.tensor + self.expert + self.context


def _stage_slot(w: Workload, s: Strategy, hw: Hardware, layout: dict[str, Group], layers: int,
                head: bool) -> StageSlot:
    """One stage's slot; cached on what it reads (one device's splits and where its groups communicate)."""
    device = (s.tensor, s.expert, s.expert_placement, s.recompute, s.sequence_parallel, s.micro_batch_size, s.context)
    return _cached_slot(w, device, hw, (layout["tensor"], layout["expert"], layout["context"]), layers, head)


@lru_cache(maxsize=65536)
def _cached_slot(w: Workload, device: tuple, hw: Hardware, tiers: tuple[Group, Group, Group], layers: int,
                 head: bool) -> StageSlot:
    tensor, expert, placement, recompute, sequence_parallel, micro_batch_size, context = device
    s = Strategy(1, tensor, 1, expert, placement, 1, 1, recompute, sequence_parallel, False, micro_batch_size, 1,
                 context)
    layout = dict(zip(("tensor", "expert", "context"), tiers))
    work = micro_batch_work(w, s, hw, layers, head)
    tokens = s.micro_batch_size * w.seq_length / s.context

    # TP: 2 all-reduces of b·s·h forward, 2 backward (the same bytes as all-gather + reduce-scatter with SP), 2 more
    # when full recompute repeats the forward; a ring all-reduce moves 2(t-1)/t of the data in 2(t-1) steps. MC2
    # (CANN's fused AllGather-Matmul and Matmul-ReduceScatter, MindSpeed's --use-mc2, MindSpore's MatMul-collective
    # fusion on Atlas A2) cuts the collective into tiles and hides it under the matmul it feeds, up to
    # `tensor_overlap` of it and never more than that matmul lasts.
    t = s.tensor
    all_reduces = 4 + (2 if s.recompute == "full" else 0)
    tp_bytes = layers * all_reduces * 2 * (t - 1) / t * tokens * w.hidden * BYTES_16BIT
    tensor = _collective(layout["tensor"], hw, tp_bytes, layers * all_reduces * 2 * (t - 1))
    hidden = min(tensor * hw.tensor_overlap, work.tp_matmul)
    tensor -= hidden

    # EP: dispatch + combine all-to-all of b·s·topK·capacity·h·(e-1)/e elements per MoE layer and pass (the
    # buffers are padded to capacity). Each device sends the tokens it holds: with sequence parallelism the TP
    # group's ranks hold s/t each and dispatch only those (MindSpeed/Megatron dispatch the SP shard and gather
    # over TP after the exchange; a hierarchical all-gather dispatcher moves the same bytes across the EP links).
    e, expert = s.expert, 0.0
    if w.is_moe and e > 1:
        passes = 2 + (1 if s.recompute == "full" else 0)
        ep_bytes = (layers * passes * 2 * tokens / s.sequence_split * w.top_k * w.capacity_factor * w.hidden
                    * (e - 1) / e * BYTES_16BIT)
        expert = _collective(layout["expert"], hw, ep_bytes, layers * passes * 2 * (e - 1))

    # CP: ring attention passes each rank's K and V (2·tokens·kv_width/t) around the ring, cp - 1 hops forward
    # and K, V and their gradients backward (3× the forward bytes in all); the sends overlap the attention blocks
    # they feed, so only what outlasts the attention core is exposed.
    c, context = s.context, 0.0
    if c > 1:
        kv_bytes = 2 * tokens * w.head_dim * w.kv_heads / t * BYTES_16BIT
        ring = _point_to_point(layout["context"], hw, 3 * layers * (c - 1) * kv_bytes, 3 * layers * (c - 1))
        context = max(0.0, ring - work.attention)
    return StageSlot(work, tensor, expert, context)


def step_time(w: Workload, s: Strategy, hw: Hardware, parameters_per_device: int,
              gradient_bytes: float = BYTES_16BIT) -> StepTime:
    layout = groups(s, hw)
    p, v, m = s.pipeline, s.virtual_stages, s.micro_batches
    split = s.layers_of(w.layers)
    distinct = {(layers, stage == p - 1) for stage, layers in enumerate(split)}
    slot_of = {key: _stage_slot(w, s, hw, layout, *key) for key in distinct}
    slots = [slot_of[(layers, stage == p - 1)] for stage, layers in enumerate(split)]
    embedding = _embedding_seconds(w, s, hw)
    if embedding:
        first = slots[0]
        slots[0] = StageSlot(MicroBatchWork(first.compute.forward + embedding / 3,
                                            first.compute.backward + 2 * embedding / 3, first.compute.tp_matmul,
                                            first.compute.attention), first.tensor, first.expert, first.context)
    slowest = max(slots, key=lambda slot: slot.total)

    # 1F1B: the slowest stage sets the pace of the m micro-batches; filling and draining the pipeline passes one
    # micro-batch through every other stage (for even stages (p - 1) slots, the (p - 1)/(m + p - 1) idle share);
    # interleaving cuts the fill and drain v ways.
    fill = (sum(slot.total for slot in slots) - slowest.total) / v

    # PP: b·s·h per boundary (b·s·h/t with Megatron's scatter/gather when t > 1), each way; exposed on the fill and
    # drain only, where a chunk crosses v·(p - 1) boundaries in each direction.
    tokens = s.micro_batch_size * w.seq_length / s.context
    hop = _collective(layout["pipeline"], hw, tokens * w.hidden * BYTES_16BIT / s.tensor, 1) if p > 1 else 0.0
    pipeline = 2 * v * (p - 1) * hop

    # DP: the device's gradients once per step, hierarchical on Ascend (seed §2.3): reduce-scatter inside the node,
    # all-reduce across nodes, all-gather inside the node; it overlaps the last micro-batch's backward. The parallel
    # optimizer moves the same bytes (ZeRO §5) as a reduce-scatter of gradients, which overlaps the same way, and an
    # all-gather of the updated weights, which the next step's forward must wait for.
    data = _exposed_gradient_reduction(layout["gradients"], hw, parameters_per_device * gradient_bytes,
                                       slowest.compute.backward, s.optimizer_shard, w.gradient_bucket_mb)

    k = hw.step_scale  # 1 unless the cluster's own measurements scale the prediction (observed.py)
    return StepTime(compute=k * m * slowest.compute.total, bubble=k * fill, tensor=k * m * slowest.tensor,
                    pipeline=k * pipeline, data=k * data, expert=k * m * slowest.expert,
                    bubble_fraction=bubble_fraction(s), context=k * m * slowest.context)


def _exposed_gradient_reduction(group: Group, hw: Hardware, gradient_bytes: float, backward: float,
                                sharded: bool, bucket_mb: int | None) -> float:
    """What the DP gradient reduction adds to the step. It overlaps the last micro-batch's backward pass; with
    buckets (training.gradientBucketMB, seed §3.1) each bucket goes as soon as its gradients are ready, so the
    last bucket is always exposed, and every bucket pays the tier's per-step latency (small buckets, many
    launches; large buckets, a long exposed tail). The parallel optimizer's weight all-gather (half the bytes)
    waits for the optimizer step and is exposed."""
    if bucket_mb is None:
        total, last = _data_parallel_seconds(group, hw, gradient_bytes), 0.0
    else:
        bucket = bucket_mb * 1e6
        full, rest = divmod(gradient_bytes, bucket)
        one = _data_parallel_seconds(group, hw, bucket)
        total = full * one + _data_parallel_seconds(group, hw, rest)
        last = one if full else total
    if sharded:
        return max(last / 2, total / 2 - backward) + total / 2
    return max(last, total - backward)


def _data_parallel_seconds(group: Group, hw: Hardware, gradient_bytes: float) -> float:
    d = group.size
    if d <= 1:
        return 0.0
    if group.nodes == 1:
        return _collective(group, hw, 2 * (d - 1) / d * gradient_bytes, 2 * (d - 1))
    local, nodes = group.per_node, group.nodes
    inside = hw.intra_node.transfer_seconds(local, (local - 1) / local * gradient_bytes, local - 1)
    across = hw.inter_node.transfer_seconds(nodes, 2 * (nodes - 1) / nodes * gradient_bytes / local, 2 * (nodes - 1))
    return 2 * inside + across


def near_even_split(layers: int, pipeline: int) -> tuple[int, ...]:
    """layers cut into pipeline contiguous blocks differing by at most one layer, the larger ones first."""
    base, extra = divmod(layers, pipeline)
    return tuple(base + (1 if stage < extra else 0) for stage in range(pipeline))


def balanced_split(w: Workload, s: Strategy, hw: Hardware) -> tuple[int, ...]:
    """A split of the layers over the stages whose slowest stage is faster than the even split's, when there is
    one (seed §3.3: stages of near-equal work; the LM head and loss weigh on the last stage, the embedding on the
    first). Each stage's time per micro-batch is its layers' slot plus its extra; starting from the (near-)even
    split, a layer moves from the slowest stage to the fastest while that stage stays below the slowest. Never
    slower than the even split: when no move helps, the even (or near-even) split is returned."""
    p, layers = s.pipeline, w.layers
    even = near_even_split(layers, p)
    if p == 1 or layers < p:
        return even
    layout = groups(s, hw)
    per_layer = _stage_slot(w, s, hw, layout, 1, False).total
    if per_layer <= 0:
        return even
    extras = [stage_extra(w, s, hw, layout, stage) for stage in range(p)]
    counts = list(even)
    times = [count * per_layer + extra for count, extra in zip(counts, extras)]
    for _ in range(layers):
        slowest = max(range(p), key=lambda i: (times[i], i))
        fastest = min(range(p), key=lambda i: (times[i], -i))
        if counts[slowest] <= 1 or times[fastest] + per_layer >= times[slowest]:
            break
        counts[slowest] -= 1
        counts[fastest] += 1
        times[slowest] -= per_layer
        times[fastest] += per_layer
    split = tuple(counts)
    worst = max(times)
    even_worst = max(count * per_layer + extra for count, extra in zip(even, extras))
    return split if worst < even_worst else even


def stage_extra(w: Workload, s: Strategy, hw: Hardware, layout: dict[str, Group], stage: int) -> float:
    """What a stage runs besides its layers per micro-batch: the LM head and loss on the last stage, the embedding
    lookup (a gather forward, a scatter-add backward: vector work) on the first."""
    extra = 0.0
    if stage == s.pipeline - 1:
        extra += _stage_slot(w, s, hw, layout, 0, True).total
    if stage == 0:
        extra += _embedding_seconds(w, s, hw)
    return extra


def _embedding_seconds(w: Workload, s: Strategy, hw: Hardware) -> float:
    """The embedding lookup per micro-batch: a gather of the tokens' rows forward (read + write), a scatter-add of
    their gradients backward (twice that); vector work, so only a shape-model profile prices it."""
    if hw.compute is None:
        return 0.0
    tokens = s.micro_batch_size * w.seq_length / s.context
    return hw.compute.vector_seconds(3 * 2 * tokens * w.hidden * BYTES_16BIT)
