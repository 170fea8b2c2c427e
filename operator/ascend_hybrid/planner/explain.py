"""Words and documents for plans: each candidate's `why` and warnings, the JSON contract of docs/planner.md, the
table `ascend-hybrid plan` prints."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ascend_hybrid.planner.compute import misaligned_dimensions, misalignment_seconds
from ascend_hybrid.planner.hardware import GIB, Hardware
from ascend_hybrid.planner.search import Evaluation, Plan, Rejections
from ascend_hybrid.planner.timing import tier_of
from ascend_hybrid.planner.workload import MOE_IMBALANCE, Strategy, Workload, dropped_share

IDLE_WARNING = 0.25
DOCUMENTED_GROUPS = ("tensor", "pipeline", "data", "expert")  # and context, when there is context parallelism


def _gib(value: float) -> float:
    return round(value / GIB, 4)


def _exact(gib: float) -> str:
    """Up to 4 decimals without trailing zeros: Korthikanti's 59.25 and 9.5625 GiB print as the paper prints them."""
    return f"{gib:.4f}".rstrip("0").rstrip(".")


def _significant(value: float) -> float:
    """Seconds to 6 significant digits: tiny models take microseconds, which fixed decimals would round to 0."""
    return float(f"{value:.6g}")


def _percent(fraction: float) -> str:
    return f"{100 * fraction:.1f} %"


def _where(ev: Evaluation, kind: str, hw: Hardware) -> str:
    group = ev.layout[kind]
    if group.tier == "interNode":
        return f"across {group.nodes} nodes over {hw.inter_node.name}"
    if group.tier == "crossRing":
        return "inside one node across its HCCS rings (PCIe between them)"
    return f"inside one node over {hw.intra_node.name}"


COST_NAMES = {"compute": "compute", "bubble": "the pipeline bubble", "tensor": "TP all-reduces",
              "expert": "EP all-to-all", "pipeline": "pipeline sends", "data": "DP gradient reduction",
              "context": "CP ring attention sends"}


def costs(ev: Evaluation) -> dict[str, float]:
    t = ev.time
    return {"compute": t.compute, "bubble": t.bubble, "tensor": t.tensor, "expert": t.expert,
            "pipeline": t.pipeline, "data": t.data, "context": t.context}


def why(ev: Evaluation, hw: Hardware) -> str:
    s, step = ev.strategy, ev.time.step
    parts = [f"TP {s.tensor} {_where(ev, 'tensor', hw)}" if s.tensor > 1 else "no TP"]
    if s.context > 1:
        parts.append(f"CP {s.context} ring attention {_where(ev, 'context', hw)}")
    if s.pipeline > 1:
        chunks = f" × {s.virtual_stages} interleaved chunks" if s.virtual_stages > 1 else ""
        split = f" (stages of {'/'.join(map(str, s.stage_layers))} layers)" if s.stage_layers else ""
        parts.append(f"PP {s.pipeline}{chunks}{split} {_where(ev, 'pipeline', hw)}")
    if s.data > 1:
        parts.append(f"DP {s.data} {_where(ev, 'data', hw)}")
    if s.expert > 1:
        parts.append(f"EP {s.expert} ({s.expert_placement}) all-to-all {_where(ev, 'expert', hw)}")
    if s.pipeline > 1:
        parts.append(f"bubble {_percent(ev.time.bubble_fraction)} with {s.micro_batches} micro-batches")
    ranked = sorted(costs(ev).items(), key=lambda item: (-item[1], item[0]))
    (top, top_seconds), (second, second_seconds) = ranked[0], ranked[1]
    parts.append(f"dominant cost: {COST_NAMES[top]} {_percent(top_seconds / step)} of the step, then "
                 f"{COST_NAMES[second]} {_percent(second_seconds / step)}")
    total, usable = ev.memory.total / GIB, ev.usable / GIB
    if ev.fits:
        parts.append(f"fits at {total:.1f} of {usable:.1f} GiB")
    else:
        parts.append(f"needs {total:.1f} of {usable:.1f} GiB on stage {ev.memory.stage}")
    return "; ".join(parts)


def warnings(ev: Evaluation, hw: Hardware) -> list[str]:
    s, out = ev.strategy, []
    if ev.time.bubble_fraction > IDLE_WARNING:
        out.append(f"idle {_percent(ev.time.bubble_fraction)} of the step (> 25 %): use more micro-batches "
                   f"(≥ 4 × pipeline = {4 * s.pipeline}) or a shallower pipeline")
    tensor = ev.layout["tensor"]
    if tensor.tier == "interNode":
        out.append(f"TP {s.tensor} leaves the node: its all-reduces run over {hw.inter_node.name} at "
                   f"{hw.inter_node.gbps:g} GB/s")
    elif tensor.tier == "crossRing":
        out.append(f"TP {s.tensor} crosses the {hw.intra_node.ring_size}-chip HCCS rings: its all-reduces go over "
                   f"the link between rings ({tier_of(tensor, hw).gbps:g} GB/s)")
    if s.expert > 1 and ev.layout["expert"].tier == "interNode":  # seed §4.5: docs/design.md §11
        out.append(f"EP {s.expert} all-to-all crosses nodes: expertPlacement intraNode keeps it inside the node "
                   "(seed §4.5)")
    w = ev.workload
    if w is not None:
        out += _cube_and_routing(ev, w, hw)
    if not ev.fits:
        out.append(f"does not fit: {ev.memory.total / GIB:.1f} > {ev.usable / GIB:.1f} GiB on stage "
                   f"{ev.memory.stage}")
    return out


CUBE_WARNING = "Cube alignment"


def _cube_and_routing(ev: Evaluation, w: Workload, hw: Hardware) -> list[str]:
    out = []
    misaligned = misaligned_dimensions(w, ev.strategy)
    if misaligned:
        cost = misalignment_seconds(w, ev.strategy, hw)
        priced = (f"padding them costs {cost:.3g} s, {_percent(cost / ev.time.step)} of the step" if cost > 0 else
                  "a scalar hardware profile does not price the padding")
        out.append(f"{CUBE_WARNING}: {', '.join(misaligned)} not a multiple of 16 (seed §3.2); {priced}")
    if w.is_moe:
        dropped = dropped_share(w.capacity_factor)
        if dropped > 0:
            out.append(f"MoE capacityFactor {w.capacity_factor:g} below the busiest expert's assumed load "
                       f"({MOE_IMBALANCE:g}× the mean): ≈ {_percent(dropped)} of routed tokens dropped")
    return out


def _strategy_fields(s: Strategy, w: Workload) -> dict[str, Any]:
    return {"parallelism": s.parallelism(), "microBatchSize": s.micro_batch_size, "recompute": s.recompute,
            "sequenceParallel": s.sequence_parallel, "flashAttention": w.flash_attention,
            "optimizerShard": s.optimizer_shard}


def candidate_document(ev: Evaluation, w: Workload, hw: Hardware) -> dict[str, Any]:
    m, t = ev.memory, ev.time
    return {
        **_strategy_fields(ev.strategy, w),
        "fits": ev.fits,
        "memory": {"stage": m.stage, "parametersPerDevice": m.parameters, "statesGiB": _gib(m.states),
                   "activationsGiB": _gib(m.activations), "moeBuffersGiB": _gib(m.moe_buffers),
                   "otherGiB": _gib(m.other), "totalGiB": _gib(m.total), "usableGiB": _gib(ev.usable)},
        "time": {"stepSeconds": _significant(t.step), "computeSeconds": _significant(t.compute),
                 "bubbleSeconds": _significant(t.bubble), "bubbleFraction": round(t.bubble_fraction, 3),
                 "communicationSeconds": {kind: _significant(value) for kind, value in t.communication().items()}},
        "groups": {kind: {"size": group.size, "nodes": group.nodes, "tier": group.tier}
                   for kind, group in ev.layout.items() if kind in DOCUMENTED_GROUPS or
                   (kind == "context" and group.size > 1)},
        "tokensPerSecondPerDevice": round(ev.tokens_per_second_per_device, 2),
        "mfu": round(ev.mfu, 4),
        "why": why(ev, hw),
        "warnings": warnings(ev, hw),
    }


def rejected_document(rejected: Rejections, w: Workload) -> dict[str, Any]:
    return {"count": rejected.count,
            "byReason": dict(sorted(rejected.by_reason.items(), key=lambda item: (-item[1], item[0]))),
            "examples": [{**_strategy_fields(s, w), "reason": reason} for s, reason in rejected.example_list()]}


def plan_document(plan: Plan, top: int) -> dict[str, Any]:
    w, hw = plan.workload, plan.hardware
    return {"world": plan.world, "hardware": hw.summary(), "considered": plan.considered,
            "fitting": plan.fitting,
            "candidates": [candidate_document(ev, w, hw) for ev in plan.candidates[:top]],
            "rejected": rejected_document(plan.rejected, w)}


def evaluation_document(ev: Evaluation, w: Workload, hw: Hardware) -> dict[str, Any]:
    return {"world": ev.strategy.world, "hardware": hw.summary(), "considered": 1, "fitting": int(ev.fits),
            "candidates": [candidate_document(ev, w, hw)],
            "rejected": {"count": 0, "byReason": {}, "examples": []}}


COLUMNS = (("#", 3, ">"), ("DP", 4, ">"), ("TP", 3, ">"), ("PP", 3, ">"), ("EP", 14, "<"), ("m × b", 9, ">"),
           ("v", 3, ">"), ("recompute", 9, "<"), ("SP", 3, "<"), ("shard", 5, "<"), ("GiB used/usable", 15, "<"),
           ("idle", 7, ">"), ("step s", 9, ">"), ("tok/s/dev", 10, ">"), ("MFU", 7, ">"))


def _line(values: Iterable[object]) -> str:
    return " ".join(f"{value!s:{align}{width}}" for value, (_, width, align) in zip(values, COLUMNS)).rstrip()


HEADER = _line(name for name, _, _ in COLUMNS)


def _seconds(value: float) -> str:
    return f"{value:.2f}" if value >= 0.01 else f"{value:.2e}"


def table_row(rank: int | str, ev: Evaluation) -> str:
    s = ev.strategy
    return _line((rank, s.data, s.tensor, s.pipeline, f"{s.expert} {s.expert_placement}" if s.expert > 1 else "1",
                  f"{s.micro_batches} × {s.micro_batch_size}", s.virtual_stages, s.recompute,
                  "on" if s.sequence_parallel else "off", "on" if s.optimizer_shard else "off",
                  f"{ev.memory.total / GIB:.1f}/{ev.usable / GIB:.1f}", _percent(ev.time.bubble_fraction),
                  _seconds(ev.time.step), f"{ev.tokens_per_second_per_device:.0f}", _percent(ev.mfu)))


def candidate_lines(rank: int | str, ev: Evaluation, hw: Hardware) -> list[str]:
    return [table_row(rank, ev), f"     why: {why(ev, hw)}", *(f"     ! {text}" for text in warnings(ev, hw))]


def _count(parameters: float) -> str:
    return f"{parameters / 1e9:.1f} B" if parameters >= 1e9 else f"{parameters / 1e6:.1f} M"


def _window(w: Workload) -> str:
    if w.sliding_window is None:
        return ""
    costed = "" if w.flash_attention else ", every score computed without flashAttention"
    return f" (sliding window {w.sliding_window}{costed})"


def _summary(plan: Plan) -> str:
    w, hw = plan.workload, plan.hardware
    nodes = -(-plan.world // hw.chips_per_node)
    return (f"world {plan.world} on {hw.name} ({nodes} nodes × {hw.chips_per_node}), global batch {w.global_batch} "
            f"× {w.seq_length} tokens{_window(w)}, {_count(w.total_parameters)} parameters: {plan.considered} strategies, "
            f"{plan.fitting} fit, {plan.rejected.count} rejected")


def plan_table(plan: Plan, top: int) -> str:
    lines = [_summary(plan), HEADER]
    for rank, ev in enumerate(plan.candidates[:top], 1):
        lines += candidate_lines(rank, ev, plan.hardware)
    lines.append("rejected: " + ", ".join(f"{count} {reason}" for reason, count in
                                          sorted(plan.rejected.by_reason.items(), key=lambda i: (-i[1], i[0]))))
    return "\n".join(lines)


def evaluation_table(ev: Evaluation, hw: Hardware) -> str:
    s = ev.strategy
    lines = [f"evaluate: world {s.world} on {hw.name}: {'fits' if ev.fits else 'does not fit'}", HEADER,
             *candidate_lines("-", ev, hw)]
    m = ev.memory
    lines.append(f"     memory on stage {m.stage}: states {m.states / GIB:.2f} + activations {_exact(m.activations / GIB)}"
                 f" + MoE buffers {m.moe_buffers / GIB:.2f} + other {m.other / GIB:.2f} = {m.total / GIB:.2f} GiB "
                 f"({m.parameters / 1e9:.3f} B parameters per device)")
    return "\n".join(lines)
