"""Step time: compute from FLOPs, the pipeline bubble, and each group's communication at its link tier's bandwidth.

What overlaps is stated where it is modelled: TP and EP collectives sit on the critical path of every
micro-batch; pipeline sends overlap the steady state and are exposed only while the pipeline fills and drains;
the gradient reduction of DP overlaps the backward pass of the last micro-batch (bucketed: seed §3.1 in
docs/design.md §11).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ascend_hybrid.planner.hardware import Hardware, Tier
from ascend_hybrid.planner.workload import Strategy, Workload

BYTES_16BIT = 2
GROUP_KINDS = ("tensor", "pipeline", "data", "expert")


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
    """Rank layout of design §4: TP adjacent, DP stride tensor, PP stride data·tensor, EP as its placement says."""
    return _groups(s.data, s.tensor, s.pipeline, s.expert, s.expert_placement, ranks_per_node(s, hw),
                   hw.intra_node.ring_size if hw.intra_node.topology == "rings" else 0)


@lru_cache(maxsize=65536)
def _groups(data: int, tensor: int, pipeline: int, expert: int, placement: str, per_node: int,
            ring: int) -> dict[str, Group]:
    expert_stride = 1 if placement == "intraNode" else tensor
    shapes = {"tensor": (tensor, 1), "data": (data, tensor), "pipeline": (pipeline, data * tensor),
              "expert": (expert, expert_stride)}
    return {kind: Group(kind, size, *_span(size, stride, per_node, ring)) for kind, (size, stride) in shapes.items()}


def tier_of(group: Group, hw: Hardware) -> Tier:
    if group.tier == "interNode":
        return hw.inter_node
    if group.tier == "crossRing":
        return Tier(hw.intra_node.cross_ring_gbps or hw.inter_node.gbps, latency_us=hw.intra_node.latency_us)
    return hw.intra_node


def _collective(group: Group, hw: Hardware, bytes_per_chip: float, steps: int) -> float:
    return tier_of(group, hw).transfer_seconds(group.size, bytes_per_chip, steps)


@lru_cache(maxsize=1024)
def layer_forward_flops(w: Workload, padded: bool) -> float:
    """Forward FLOPs of one layer per token: 2 per weight of each matmul, plus 4·s·h for attention scores and their
    product with V. An MoE layer runs topK experts per token (× capacity factor for what the device computes)."""
    mlp = 2 * w.mlp_parameters
    if w.is_moe:
        mlp = mlp * w.top_k * (w.capacity_factor if padded else 1) + 2 * w.hidden * w.experts
    return 2 * w.attention_parameters + 4 * w.seq_length * w.hidden + mlp


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
class StepTime:
    compute: float  # per step on the slowest stage, recompute included
    bubble: float
    tensor: float
    pipeline: float
    data: float
    expert: float
    bubble_fraction: float

    @property
    def step(self) -> float:
        return self.compute + self.bubble + self.tensor + self.pipeline + self.data + self.expert

    def communication(self) -> dict[str, float]:
        return {"tensor": self.tensor, "pipeline": self.pipeline, "data": self.data, "expert": self.expert}


def bubble_fraction(s: Strategy) -> float:
    """Idle share of a step: (p - 1)/(v·m + p - 1) — the seed §4.5 case (docs/design.md §11), p 8 and m 32,
    gives 7/39 ≈ 0.179."""
    p = s.pipeline
    return (p - 1) / (s.virtual_stages * s.micro_batches + p - 1)


def step_time(w: Workload, s: Strategy, hw: Hardware, parameters_per_device: int,
              gradient_bytes: float = BYTES_16BIT) -> StepTime:
    layout = groups(s, hw)
    tokens = s.micro_batch_size * w.seq_length
    layers = w.layers // s.pipeline
    layer_flops = 3 * layer_forward_flops(w, padded=True) + recompute_flops_per_token(w, s.recompute)
    head_flops = 3 * 2 * w.hidden * w.vocab  # the LM head on the last stage makes it the slowest one
    compute_mb = tokens * (layers * layer_flops + head_flops) / s.tensor / hw.achieved_flops
    backward_mb = tokens * (layers * 2 * layer_forward_flops(w, padded=True) + 2 * head_flops / 3) / (
        s.tensor * hw.achieved_flops)

    # TP: 2 all-reduces of b·s·h forward, 2 backward (the same bytes as all-gather + reduce-scatter with SP), 2 more
    # when full recompute repeats the forward; a ring all-reduce moves 2(t-1)/t of the data in 2(t-1) steps.
    t = s.tensor
    all_reduces = 4 + (2 if s.recompute == "full" else 0)
    tp_bytes = layers * all_reduces * 2 * (t - 1) / t * tokens * w.hidden * BYTES_16BIT
    tensor_mb = _collective(layout["tensor"], hw, tp_bytes, layers * all_reduces * 2 * (t - 1))

    # EP: dispatch + combine all-to-all of b·s·topK·h·(e-1)/e elements per MoE layer and pass.
    e, expert_mb = s.expert, 0.0
    if w.is_moe and e > 1:
        passes = 2 + (1 if s.recompute == "full" else 0)
        ep_bytes = layers * passes * 2 * tokens * w.top_k * w.hidden * (e - 1) / e * BYTES_16BIT
        expert_mb = _collective(layout["expert"], hw, ep_bytes, layers * passes * 2 * (e - 1))

    # PP: b·s·h per boundary (b·s·h/t with Megatron's scatter/gather when t > 1), each way; exposed on the fill and
    # drain only, where a chunk crosses v·(p - 1) boundaries in each direction.
    p, v = s.pipeline, s.virtual_stages
    hop = _collective(layout["pipeline"], hw, tokens * w.hidden * BYTES_16BIT / t, 1) if p > 1 else 0.0
    pipeline = 2 * v * (p - 1) * hop

    # DP: the device's gradients once per step, hierarchical on Ascend (seed §2.3, docs/design.md §11):
    # reduce-scatter inside the node, all-reduce across nodes, all-gather inside the node; it overlaps the last
    # micro-batch's backward. The parallel optimizer moves the same bytes (ZeRO §5) as a reduce-scatter of
    # gradients, which overlaps the same way, and an all-gather of the updated weights, which the next step's
    # forward must wait for.
    all_reduce = _data_parallel_seconds(layout["data"], hw, parameters_per_device * gradient_bytes)
    if s.optimizer_shard:
        data = max(0.0, all_reduce / 2 - backward_mb) + all_reduce / 2
    else:
        data = max(0.0, all_reduce - backward_mb)

    slot = compute_mb + tensor_mb + expert_mb
    return StepTime(compute=s.micro_batches * compute_mb, bubble=(p - 1) / v * slot,
                    tensor=s.micro_batches * tensor_mb, pipeline=pipeline, data=data,
                    expert=s.micro_batches * expert_mb, bubble_fraction=bubble_fraction(s))


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
