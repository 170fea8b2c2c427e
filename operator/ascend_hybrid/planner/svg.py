"""Pictures of a strategy as SVG text (seed §1, docs/design.md §11, starts from a topology diagram): racks → nodes →
chips coloured by pipeline stage, TP groups outlined, DP replicas and EP groups labelled; for a plan also the 1F1B
timeline of one step per stage, bubbles visible, and the memory of each stage against usable HBM. Pure: returns a
string."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from xml.sax.saxutils import escape

from ascend_hybrid.gang.layout import Layout
from ascend_hybrid.planner.hardware import GIB
from ascend_hybrid.planner.memory import StageMemory

STAGE_COLOURS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7",
                 "#9c755f", "#86bcb6", "#d37295", "#a0cbe8")
CHIP, GAP, PAD, LABEL = 22, 4, 8, 14
MAX_NODES_DRAWN = 64
NODES_PER_COLUMN = 8
FORWARD, BACKWARD = 1, 2  # a backward pass takes about twice a forward pass


# Widths of sans-serif text per font-size unit, on the wide side of DejaVu Sans and Liberation Sans (digits are
# 0.64 em in DejaVu Sans, its widest common glyphs 0.7-0.8 em): a label laid out by this estimate fits when drawn.
EM_NORMAL, EM_BOLD = 0.64, 0.7


def text_width(text: str, size: float, weight: str = "normal") -> float:
    return len(text) * size * (EM_BOLD if weight == "bold" else EM_NORMAL)


def wrap(text: str, size: float, width: float, weight: str = "normal") -> list[str]:
    """`text` in lines no wider than `width`, broken after "; " or ", " (between words if need be)."""
    pieces: list[str] = []
    for part in re.split(r"(?<=[;,]) ", text):
        pieces += part.split(" ") if text_width(part, size, weight) > width else [part]
    lines: list[str] = []
    for piece in pieces:
        joined = f"{lines[-1]} {piece}" if lines else piece
        if lines and text_width(joined, size, weight) <= width:
            lines[-1] = joined
        else:
            lines.append(piece)
    return lines


def _colour(stage: int) -> str:
    return STAGE_COLOURS[stage % len(STAGE_COLOURS)]


def _text(x: float, y: float, text: str, size: float = 11, anchor: str = "start", weight: str = "normal") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size:g}" font-family="sans-serif" text-anchor="{anchor}" '
            f'font-weight="{weight}">{escape(text)}</text>')


def _rect(x: float, y: float, w: float, h: float, fill: str, stroke: str = "none", width: float = 1,
          extra: str = "", title: str = "") -> str:
    head = (f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0):.1f}" height="{max(h, 0):.1f}" fill="{fill}" '
            f'stroke="{stroke}" stroke-width="{width}"{extra}')
    return f"{head}><title>{escape(title)}</title></rect>" if title else f"{head}/>"


@dataclass(frozen=True)
class Cluster:
    """Where the pods are: `pod_nodes[p]` is pod p's node, `node_racks` each node's rack (None: unknown)."""

    pod_nodes: tuple[str, ...]
    node_racks: Mapping[str, str | None]

    @classmethod
    def packed(cls, layout: Layout, chips_per_node: int) -> Cluster:
        """A cluster that does not exist yet: pods packed onto nodes in order, racks unknown."""
        pods_per_node = max(chips_per_node // layout.per_pod, 1)
        nodes = tuple(f"node-{pod // pods_per_node}" for pod in range(layout.pod_count))
        return cls(nodes, {node: None for node in nodes})


def _node_label(layout: Layout, ranks: list[int]) -> str:
    stages = sorted({layout.coordinates(r).stage for r in ranks})
    replicas = sorted({layout.coordinates(r).data for r in ranks})
    stage = f"stage {stages[0]}" if len(stages) == 1 else f"stages {stages[0]}–{stages[-1]}"
    dp = f"DP {replicas[0]}" if len(replicas) == 1 else f"DP {replicas[0]}–{replicas[-1]}"
    return f"{stage} · {dp}"


def _cluster_body(layout: Layout, cluster: Cluster, top: float) -> tuple[list[str], float, float]:
    """The racks → nodes → chips drawing; returns (elements, width, height)."""
    node_ranks: dict[str, list[int]] = {}
    for pod in layout.pods:
        node_ranks.setdefault(cluster.pod_nodes[pod.index], []).extend(pod.ranks)
    racks: dict[str, list[str]] = {}
    for node in node_ranks:
        rack = cluster.node_racks.get(node)
        racks.setdefault(f"rack {rack}" if rack else "", []).append(node)
    if "" in racks:  # nodes without a known rack: columns of NODES_PER_COLUMN
        loose = racks.pop("")
        for start in range(0, len(loose), NODES_PER_COLUMN):
            chunk = loose[start:start + NODES_PER_COLUMN]
            racks[f"nodes {start}–{start + len(chunk) - 1}"] = chunk
    widest = max(len(ranks) for ranks in node_ranks.values())
    labels = [f"{node} · {_node_label(layout, ranks)}" for node, ranks in node_ranks.items()]
    node_w = 2 * PAD + max(widest * (CHIP + GAP), max(text_width(label, 10) for label in labels),
                           max(text_width(rack + " (first nodes)", 12, "bold") for rack in racks) - PAD)
    node_h = LABEL + 2 * PAD + CHIP + 10
    expert_group = ({rank: index for index, group in enumerate(layout.expert_groups()) for rank in group}
                    if layout.expert > 1 else {})
    out, x, height, drawn = [], float(PAD), 0.0, 0
    for rack, nodes in racks.items():
        shown = nodes[: MAX_NODES_DRAWN - drawn]
        if not shown:
            break
        drawn += len(shown)
        rack_h = LABEL + PAD + len(shown) * (node_h + GAP)
        out.append(_rect(x, top, node_w + 2 * PAD, rack_h, "#f4f4f4", "#999"))
        out.append(_text(x + PAD, top + LABEL - 2, rack + (" (first nodes)" if len(shown) < len(nodes) else ""),
                         12, weight="bold"))
        y = top + LABEL + PAD
        for node in shown:
            out += _node(layout, node, node_ranks[node], x + PAD, y, node_w, node_h, expert_group)
            y += node_h + GAP
        x += node_w + 3 * PAD
        height = max(height, rack_h)
    if drawn < len(node_ranks):  # a picture of thousands of nodes would be unreadable; the first ones show the pattern
        height += LABEL + PAD
        out.append(_text(PAD, top + height - 4, f"… {len(node_ranks) - drawn} more nodes, each like the ones above"))
    return out, x, height


def _node(layout: Layout, node: str, ranks: list[int], x: float, y: float, w: float, h: float,
          expert_group: Mapping[int, int]) -> list[str]:
    out = [_rect(x, y, w, h, "white", "#666"), _text(x + PAD, y + LABEL - 2, f"{node} · {_node_label(layout, ranks)}", 10)]
    chip_y = y + LABEL + PAD
    groups: dict[tuple, list[float]] = {}
    for i, rank in enumerate(ranks):
        c = layout.coordinates(rank)
        chip_x = x + PAD + i * (CHIP + GAP)
        out.append(_rect(chip_x, chip_y, CHIP, CHIP, _colour(c.stage),
                         title=f"rank {rank}: stage {c.stage}, DP {c.data}, TP {c.tensor}, EP {c.expert}"
                               + (f", CP {c.context}" if layout.context > 1 else "")))
        size = min(8.0, (CHIP - 2) / text_width(str(rank), 1))  # five-digit ranks shrink to fit their chip
        out.append(_text(chip_x + CHIP / 2, chip_y + CHIP / 2 + 3, str(rank), size, "middle"))
        groups.setdefault(("tp", rank // layout.tensor), []).append(chip_x)
        if layout.expert > 1:
            groups.setdefault(("ep", expert_group[rank]), []).append(chip_x)
    for (kind, index), xs in groups.items():
        left, right = min(xs) - 2, max(xs) + CHIP + 2
        if kind == "tp" and layout.tensor > 1:
            out.append(_rect(left, chip_y - 2, right - left, CHIP + 4, "none", "black", 1.5))
        if kind == "ep":
            shade = "#555" if index % 2 else "#aaa"
            out.append(_rect(left + 2, chip_y + CHIP + 3, right - left - 4, 3, shade))
            out.append(_text((left + right) / 2, chip_y + CHIP + 13, f"EP {index}", 7, "middle"))
    return out


def _legend(layout: Layout, x: float, y: float) -> list[str]:
    out = []
    for stage in range(min(layout.pipeline, len(STAGE_COLOURS))):
        out.append(_rect(x + stage * 70, y, 12, 12, _colour(stage)))
        out.append(_text(x + stage * 70 + 16, y + 10, f"stage {stage}", 10))
    out.append(_text(x, y + 28, "black outline: one TP group; bars: EP groups; labels: stage and DP replica", 10))
    return out


def one_f_one_b(pipeline: int, micro_batches: int) -> list[tuple[int, str, int, float, float]]:
    """(stage, F|B, micro-batch, start, end) of one 1F1B step: stage i warms up with p - i - 1 forwards, then
    alternates one forward and one backward, then drains."""
    orders = []
    for stage in range(pipeline):
        warm = min(pipeline - stage - 1, micro_batches)
        order = [("F", j) for j in range(warm)]
        for k in range(micro_batches - warm):
            order += [("F", warm + k), ("B", k)]
        order += [("B", j) for j in range(micro_batches - warm, micro_batches)]
        orders.append(order)
    done: dict[tuple[int, str, int], float] = {}
    free = [0.0] * pipeline
    position = [0] * pipeline
    ops = []
    while any(position[s] < len(orders[s]) for s in range(pipeline)):
        for stage in range(pipeline):
            while position[stage] < len(orders[stage]):
                kind, mb = orders[stage][position[stage]]
                before = ((stage - 1, "F", mb) if stage else None) if kind == "F" else (
                    (stage + 1, "B", mb) if stage < pipeline - 1 else (stage, "F", mb))
                if before is not None and before not in done:
                    break
                start = max(free[stage], done.get(before, 0.0) if before else 0.0)
                end = start + (FORWARD if kind == "F" else BACKWARD)
                done[(stage, kind, mb)] = free[stage] = end
                ops.append((stage, kind, mb, start, end))
                position[stage] += 1
    return ops


def _timeline(pipeline: int, micro_batches: int, virtual: int, bubble: float, top: float,
              width: float) -> tuple[list[str], float]:
    ops = one_f_one_b(pipeline, micro_batches)
    makespan = max(end for *_, end in ops)
    row, scale = 16, (width - 80) / makespan
    heading = (f"one step, 1F1B: {micro_batches} micro-batches on {pipeline} stages (F light, B dark, idle white); "
               f"idle share {100 * bubble:.1f} %"
               + (f" with {virtual} interleaved chunks (drawn without them)" if virtual > 1 else ""))
    lines = wrap(heading, 12, width - 2 * PAD, "bold")
    out = [_text(PAD, top + 12 + 15 * i, line, 12, weight="bold") for i, line in enumerate(lines)]
    top += 15 * (len(lines) - 1)
    y0 = top + 20
    for stage in range(pipeline):
        out.append(_text(PAD, y0 + stage * row + 12, f"stage {stage}", 10))
        out.append(_rect(70, y0 + stage * row, makespan * scale, row - 3, "white", "#ccc"))
    for stage, kind, _micro_batch, start, end in ops:
        opacity = "0.45" if kind == "F" else "1"
        out.append(_rect(70 + start * scale, y0 + stage * row, (end - start) * scale, row - 3, _colour(stage),
                         extra=f' fill-opacity="{opacity}"'))
    return out, 15 * (len(lines) - 1) + 20 + pipeline * row + PAD


def _memory_bars(stages: Sequence[StageMemory], usable: float, top: float, width: float) -> tuple[list[str], float]:
    parts = (("states", "#4e79a7"), ("activations", "#f28e2b"), ("moe_buffers", "#b07aa1"), ("other", "#bab0ac"))
    peak = max([usable, *(s.total for s in stages)]) * 1.05
    row, scale = 16, (width - 80) / peak
    out = [_text(PAD, top + 12, "memory per stage (GiB): states, activations, MoE buffers, other; red: usable HBM",
                 12, weight="bold")]
    y0 = top + 20
    for i, stage in enumerate(stages):
        x, y = 70.0, y0 + i * row
        out.append(_text(PAD, y + 12, f"stage {stage.stage}", 10))
        for name, colour in parts:
            value = getattr(stage, name)
            out.append(_rect(x, y, value * scale, row - 3, colour))
            x += value * scale
        out.append(_text(x + 4, y + 11, f"{stage.total / GIB:.1f}", 9))
    line_x = 70 + usable * scale
    out.append(f'<line x1="{line_x:.1f}" y1="{y0 - 2}" x2="{line_x:.1f}" y2="{y0 + len(stages) * row}" '
               f'stroke="red" stroke-dasharray="4 2" stroke-width="1.5"/>')
    label = f"{usable / GIB:.1f} usable"
    if line_x + 2 + text_width(label, 9) > width - PAD:  # near the right edge: the label ends at the line
        out.append(_text(line_x - 2, y0 - 4, label, 9, "end"))
    else:
        out.append(_text(line_x + 2, y0 - 4, label, 9))
    return out, 20 + len(stages) * row + PAD


@dataclass(frozen=True)
class PlanFigures:
    micro_batches: int
    virtual_stages: int
    bubble_fraction: float
    stages: tuple[StageMemory, ...]
    usable: float


MIN_WIDTH = 900.0
TITLE_SIZE, TITLE_LINE = 14, 18


def picture(layout: Layout, cluster: Cluster, title: str, plan: PlanFigures | None = None) -> str:
    """The whole picture; every label is laid out to fit (the title and headings wrap at the picture's width,
    which is at least MIN_WIDTH and as wide as the racks need)."""
    _, racks_width, _ = _cluster_body(layout, cluster, 0)
    width = max(racks_width, MIN_WIDTH)
    lines = wrap(title, TITLE_SIZE, width - 2 * PAD, "bold")
    top = 12 + TITLE_LINE * len(lines)
    body, _, height = _cluster_body(layout, cluster, top)
    y = top + height + 2 * PAD
    body += _legend(layout, PAD, y)
    y += 40
    if plan is not None:
        elements, used = _timeline(layout.pipeline, plan.micro_batches, plan.virtual_stages, plan.bubble_fraction,
                                   y, width)
        body += elements
        y += used
        elements, used = _memory_bars(plan.stages, plan.usable, y, width)
        body += elements
        y += used
    header = [_rect(0, 0, width, y + PAD, "white"),
              *(_text(PAD, 20 + TITLE_LINE * i, line, TITLE_SIZE, weight="bold") for i, line in enumerate(lines))]
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{y + PAD:.0f}" '
            f'viewBox="0 0 {width:.0f} {y + PAD:.0f}">\n' + "\n".join(header + body) + "\n</svg>\n")
