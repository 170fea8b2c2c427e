"""A slow node named from its ranks' compute (pure): the condition SlowNode.

In a synchronous job every rank's step takes as long as the slowest rank's, so the step time says the job is slow
(Straggling) but not where. What differs is the share: the slow rank computes longer and waits less in the
collectives, its peers compute as before and wait for it. The trainer times each rank's own compute apart from
the collectives' wait (ascend_trainer_rank_compute_seconds, its recent steps' mean); each telemetry sample scores
every rank against its peers — the other ranks of its pipeline stage, which do the same work:

    ratio = its compute / the median of its peers' compute

robust to jitter twice over: the median ignores a few odd peers, and with three peers or more the rank must also
stand more than OUTLIER_MADS median absolute deviations above them. A node whose ranks are above
spec.runPolicy.slowness.computeFactor is a suspect; a node suspect in confirmSamples samples in a row is
confirmed (SlowNode True, naming the node, its pods and ranks, the ratio and the job's slowdown against its
healthy pace); confirmSamples samples in a row without it turn the condition off. Everything is computed from
the samples' own times, so a pass that sees the same sample again changes nothing. Several nodes may be suspect at
once (each followed for MAX_SUSPECTS at most); the slowest of those found in confirmSamples samples in a row is
named, and the others listed.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ascend_hybrid.contracts.conditions import parse_time, timestamp
from ascend_hybrid.monitoring.progress import RankReading, Sample
from ascend_hybrid.spec.api import Slowness

SLOW_NODE = "SlowNode"
OUTLIER_MADS = 3.0
MAD_SCALE = 1.4826    # a MAD times this estimates the standard deviation of normal noise
MAD_FLOOR = 0.01      # the MAD is at least 1 % of the median: identical peers still allow a little noise
SHOWN_RANKS = 8
MAX_SUSPECTS = 16     # nodes followed at once (the slowest of a sample)


@dataclass(frozen=True)
class Suspect:
    node: str
    pods: tuple[str, ...]
    ranks: tuple[int, ...]
    ratio: float            # the median ratio of its ranks' compute to their peers'
    compute: float          # its ranks' median compute per step (seconds)
    peers: float            # their peers' median compute
    wait: float | None      # its ranks' median wait
    peers_wait: float | None

    def evidence(self) -> str:
        ranks = ", ".join(map(str, self.ranks[:SHOWN_RANKS])) + (" …" if len(self.ranks) > SHOWN_RANKS else "")
        text = (f"rank{'s' if len(self.ranks) > 1 else ''} {ranks} ({', '.join(self.pods)}) compute "
                f"{self.ratio:.2f}× their peers' median ({self.compute:.3g}s vs {self.peers:.3g}s per step")
        if self.wait is not None and self.peers_wait is not None:
            text += f"; they wait {self.wait:.3g}s in the collectives, their peers {self.peers_wait:.3g}s"
        return text + ")"


@dataclass(frozen=True)
class Change:
    on: bool
    reason: str
    message: str


def _outlier(value: float, peers: list[float], factor: float) -> float | None:
    """The ratio of `value` to its peers' median when it is slow enough to count, else None."""
    median = statistics.median(peers)
    if median <= 0:
        return None
    ratio = value / median
    if ratio < factor:
        return None
    if len(peers) >= 3:
        mad = max(statistics.median(abs(peer - median) for peer in peers), MAD_FLOOR * median)
        if value - median <= OUTLIER_MADS * MAD_SCALE * mad:
            return None
    return ratio


def suspects(readings: tuple[RankReading, ...], node_of_pod: Mapping[str, str], stage_of: Callable[[int], int],
             factor: float) -> list[Suspect]:
    """The nodes whose ranks compute slower than their peers (their stage's ranks on other nodes) by `factor`, the
    slowest first. Only ranks above PREFILTER of the whole stage's median are weighed against their exact peers, so
    a healthy sample of thousands of ranks costs one median per stage."""
    timed = [reading for reading in readings if reading.compute_seconds is not None and reading.compute_seconds > 0]
    stages: dict[int, list[RankReading]] = {}
    for reading in timed:
        stages.setdefault(stage_of(reading.rank), []).append(reading)
    flagged: dict[str, list[tuple[RankReading, float, list[RankReading]]]] = {}
    # the stage's median counts the rank itself: with two ranks it is their mean, so a rank f times its one peer
    # stands 2f/(1+f) above it; with more ranks the median moves less
    prefilter = 2 * factor / (1 + factor)
    for members in stages.values():
        median = statistics.median(float(m.compute_seconds or 0.0) for m in members)
        candidates = [m for m in members if float(m.compute_seconds or 0.0) >= prefilter * median]
        peers_of: dict[str, list[RankReading]] = {}
        for reading in candidates:
            node = node_of_pod.get(reading.pod)
            if not node:
                continue
            if node not in peers_of:
                peers_of[node] = [other for other in members if node_of_pod.get(other.pod) != node]
            peers = peers_of[node]
            if not peers:
                continue
            ratio = _outlier(float(reading.compute_seconds or 0.0), [float(p.compute_seconds or 0.0) for p in peers],
                             factor)
            if ratio is not None:
                flagged.setdefault(node, []).append((reading, ratio, peers))
    found = []
    for node, items in flagged.items():
        everyone = items[0][2]  # the node's peers: the same for each of its ranks of one stage
        waits = [r.wait_seconds for r, _, _ in items if r.wait_seconds is not None]
        peer_waits = [p.wait_seconds for p in everyone if p.wait_seconds is not None]
        found.append(Suspect(node, tuple(sorted({r.pod for r, _, _ in items})), tuple(sorted(r.rank for r, _, _ in items)),
                             statistics.median(ratio for _, ratio, _ in items),
                             statistics.median(float(r.compute_seconds or 0.0) for r, _, _ in items),
                             statistics.median(float(p.compute_seconds or 0.0) for p in everyone),
                             statistics.median(waits) if waits else None,
                             statistics.median(peer_waits) if peer_waits else None))
    return sorted(found, key=lambda suspect: (-suspect.ratio, suspect.node))


def job_step_seconds(readings: tuple[RankReading, ...]) -> float | None:
    """The job's recent step: the median of its ranks' (in a synchronous job they all take the slowest's)."""
    steps = [reading.step_seconds for reading in readings if reading.step_seconds > 0]
    return statistics.median(steps) if steps else None


def slowdown_text(step: float | None, healthy: float | None) -> tuple[float | None, str]:
    if step is None or not healthy:
        return None, ""
    slowdown = step / healthy
    return slowdown, f"; the job's steps take {slowdown:.2f}× its healthy pace ({step:.3g}s vs {healthy:.3g}s)"


def fold(previous: Mapping | None, sample: Sample, node_of_pod: Mapping[str, str], stage_of: Callable[[int], int],
         spec: Slowness, healthy_step_seconds: float | None) -> tuple[dict, Change | None] | None:
    """status.slowness after a sample and the change of SlowNode it makes (None: no change); None when the sample
    is not newer than the last one folded in or carries no rank's compute."""
    state = dict(previous or {})
    last = parse_time(state.get("sampledAt"))
    if (last is not None and sample.sampled_at <= last) or not any(
            reading.compute_seconds is not None for reading in sample.ranks):
        return None
    state["sampledAt"] = timestamp(sample.sampled_at)
    found = suspects(sample.ranks, node_of_pod, stage_of, spec.compute_factor)
    slowdown, slower = slowdown_text(job_step_seconds(sample.ranks), healthy_step_seconds)
    confirmed = state.get("confirmed")
    if confirmed:
        still = next((suspect for suspect in found if suspect.node == confirmed["node"]), None)
        if still is not None:
            state["clearSamples"] = 0
            state["confirmed"] = {**confirmed, **_facts(still, slowdown)}
            return state, None
        clear = int(state.get("clearSamples") or 0) + 1
        state["clearSamples"] = clear
        if clear < spec.confirm_samples:
            return state, None
        for key in ("confirmed", "clearSamples", "suspects"):
            state.pop(key, None)
        return state, Change(False, "OnPace", f"node {confirmed['node']} computes with its peers again"
                                              f" ({spec.confirm_samples} samples){slower}")
    previous_counts = state.get("suspects") or {}
    counts = {suspect.node: int(previous_counts.get(suspect.node) or 0) + 1 for suspect in found[:MAX_SUSPECTS]}
    state["suspects"] = counts
    ready = [suspect for suspect in found[:MAX_SUSPECTS] if counts[suspect.node] >= spec.confirm_samples]
    if not ready:
        return state, None
    top = ready[0]  # the slowest of those found in enough samples in a row
    state["confirmed"] = {"node": top.node, "since": timestamp(sample.sampled_at),
                          "atStep": int(sample.step) if sample.step is not None and sample.step == sample.step
                          else None, **_facts(top, slowdown)}
    others = f"; also above: {', '.join(s.node for s in found if s.node != top.node)[:200]}" if len(found) > 1 else ""
    return state, Change(True, "SlowCompute",
                         f"node {top.node} is slow: {top.evidence()} in {counts[top.node]} samples in a row, above "
                         f"spec.runPolicy.slowness.computeFactor={spec.compute_factor:g}{slower}{others}; check "
                         "its NPUs (npu-smi: temperature, power and clock throttling, other work, ECC errors)")


def _facts(suspect: Suspect, slowdown: float | None) -> dict:
    facts = {"pods": list(suspect.pods), "ranks": list(suspect.ranks[:64]), "ratio": round(suspect.ratio, 3),
             "evidence": suspect.evidence()}
    if slowdown is not None:
        facts["slowdown"] = round(slowdown, 3)
    return facts
