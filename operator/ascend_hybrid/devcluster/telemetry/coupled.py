"""A synchronous job's slowness, coupled across its ranks (pure): a slow node or link, as `dev-cluster fault NODE
--slow F` / `--slow-link PEER F` set them on the nodes, and what every rank of a job then measures.

In a synchronous data-parallel step every rank computes its share, then waits in the gradient all-reduce for the
slowest one; the all-reduce itself runs at the pace of the slowest link the job's ring crosses. So:

    step(rank) = COMPUTE_SHARE × max over the job's nodes of their compute factor
               + (1 − COMPUTE_SHARE) × the largest link factor between two of the job's nodes       (× base step)
    compute(rank) = COMPUTE_SHARE × its own node's factor                                            (× base step)
    wait(rank) = step − compute(rank)

Every rank's step slows; only the slow node's ranks compute longer, the others wait longer. A slow link slows every
rank's wait alike. Jitter: each rank's figures move by ±JITTER from window to window (WINDOW_SECONDS), fixed by a
hash of (job, rank, window), so two readers agree.

The faults are histories on the node, so the steps a job made are a function of time: each change is appended as
`factor@epoch` (the last HISTORY_KEPT kept), `1@epoch` clears it.
    sim.hybrid.ascend.dev/slow-compute   "1.5@1765000000.0;1@1765001800.0"
    sim.hybrid.ascend.dev/slow-links     "node-002=4@1765000000.0;node-002=1@1765000600.0"  (one node of the pair)
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping

SLOW_COMPUTE_ANNOTATION = "sim.hybrid.ascend.dev/slow-compute"
SLOW_LINKS_ANNOTATION = "sim.hybrid.ascend.dev/slow-links"
COMPUTE_SHARE = 0.8    # of a healthy step: the rest is the gradient all-reduce
JITTER = 0.03          # ± of each rank's figures from window to window
WINDOW_SECONDS = 5.0
HISTORY_KEPT = 16

History = tuple[tuple[float, float], ...]  # (since epoch, factor), oldest first


def _unit(*parts: object) -> float:
    digest = hashlib.sha256("\0".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2 ** 64


def parse_history(text: str | None) -> History:
    """`factor@epoch;…` → ((epoch, factor), …) sorted; unreadable items skipped, factors below 1 read as 1."""
    items = []
    for item in (text or "").split(";"):
        factor, _, since = item.strip().partition("@")
        try:
            value, moment = float(factor), float(since)
        except ValueError:
            continue
        if math.isfinite(value) and math.isfinite(moment):
            items.append((moment, max(value, 1.0)))
    return tuple(sorted(items))


def history_text(history: History) -> str:
    return ";".join(f"{factor:g}@{since:.3f}" for since, factor in history[-HISTORY_KEPT:])


def appended(text: str | None, factor: float, now: float) -> str:
    return history_text((*parse_history(text), (now, factor)))


def parse_links(text: str | None) -> dict[str, History]:
    """`peer=factor@epoch;…` → peer → its history."""
    found: dict[str, list[tuple[float, float]]] = {}
    for item in (text or "").split(";"):
        peer, _, rest = item.strip().partition("=")
        if peer and rest:
            found.setdefault(peer, []).extend(parse_history(rest))
    return {peer: tuple(sorted(history)) for peer, history in found.items()}


def links_text(links: Mapping[str, History]) -> str:
    return ";".join(f"{peer}={factor:g}@{since:.3f}" for peer, history in sorted(links.items())
                    for since, factor in history[-HISTORY_KEPT:])


def at(history: History, moment: float) -> float:
    """The factor in force at `moment` (1 before the first change)."""
    factor = 1.0
    for since, value in history:
        if since > moment:
            break
        factor = value
    return factor


def node_histories(annotations_by_node: Mapping[str, Mapping[str, str]]) -> tuple[dict[str, History],
                                                                                    dict[frozenset[str], History]]:
    """Each node's compute history and each linked pair's, from the nodes' annotations (a link set on either end)."""
    compute = {node: parse_history(faults.get(SLOW_COMPUTE_ANNOTATION)) for node, faults in annotations_by_node.items()}
    links: dict[frozenset[str], list[tuple[float, float]]] = {}
    for node, faults in annotations_by_node.items():
        for peer, history in parse_links(faults.get(SLOW_LINKS_ANNOTATION)).items():
            links.setdefault(frozenset((node, peer)), []).extend(history)
    return compute, {pair: tuple(sorted(history)) for pair, history in links.items()}


def step_factor(compute: float, link: float) -> float:
    return COMPUTE_SHARE * compute + (1 - COMPUTE_SHARE) * link


class Job:
    """The coupling of one job: its nodes, their compute histories, the links between them."""

    def __init__(self, nodes: Iterable[str], compute: Mapping[str, History], links: Mapping[frozenset[str], History]):
        self.nodes = frozenset(nodes)
        self.compute = {node: compute.get(node, ()) for node in self.nodes}
        self.links = {pair: history for pair, history in links.items() if pair <= self.nodes and len(pair) == 2}
        self.seen: dict[float, tuple[float, float]] = {}

    @property
    def healthy(self) -> bool:
        return not any(self.compute.values()) and not self.links

    def factors(self, moment: float) -> tuple[float, float]:
        """(the slowest node's compute factor, the slowest link's factor) at `moment`."""
        if moment not in self.seen:
            compute = max((at(history, moment) for history in self.compute.values() if history), default=1.0)
            link = max((at(history, moment) for history in self.links.values()), default=1.0)
            self.seen = {moment: (compute, link)}  # the ranks of one reading ask at one moment
        return self.seen[moment]

    def segments(self, start: float, end: float) -> list[tuple[float, float]]:
        """(seconds, step factor) pieces of [start, end], one per change of any factor."""
        changes = sorted({since for history in (*self.compute.values(), *self.links.values())
                          for since, _ in history if start < since < end})
        edges = [start, *changes, end]
        return [(b - a, step_factor(*self.factors(a))) for a, b in zip(edges, edges[1:]) if b > a]

    def rank(self, key: str, rank: int, node: str, base: float, moment: float) -> tuple[float, float, float]:
        """(step, compute, wait) of one rank's recent steps, each × base seconds, with its jitter."""
        window = int(moment // WINDOW_SECONDS)
        compute_factor, link = self.factors(moment)
        own = at(self.compute.get(node, ()), moment)
        jitter = 1 + JITTER * (2 * _unit(key, rank, window) - 1)
        step = base * step_factor(compute_factor, link) * (1 + JITTER * (2 * _unit(key, "step", window) - 1))
        compute = min(base * COMPUTE_SHARE * own * jitter, step)
        return step, compute, step - compute
