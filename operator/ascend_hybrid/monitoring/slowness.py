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
healthy pace); confirmSamples samples in a row without it turn the condition off. A sample without a followed
node's figures (its pod's endpoint did not answer, as a throttled node's may not: `MetricsAvailable` reason
PartlyRead names it) holds that node's counts, for confirmSamples such samples in a row at most. Each node's usual
ratio (its baseline, for a node always a little slower) is learned over the job's first samples and then follows
only the samples that look usual: not a suspect's, not one more than halfway to the threshold, not one without the
node's figures.
Everything is computed from the samples' own times, so a pass that sees the same sample again changes nothing.
The state is the status model (SlownessStatus): `fold` returns a new one and leaves the one it was given as it was.
Several nodes may be suspect at once (each followed for MAX_SUSPECTS at most); the slowest of those found in
confirmSamples samples in a row is named, and the others listed.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ascend_hybrid.contracts.conditions import parse_time, timestamp
from ascend_hybrid.monitoring.progress import RankReading, Sample
from ascend_hybrid.spec.api import Slowness, SlownessStatus, SlowNodeFinding, SlowNodeRecord

SLOW_NODE = "SlowNode"
OUTLIER_MADS = 3.0
MAD_SCALE = 1.4826    # a MAD times this estimates the standard deviation of normal noise
MAD_FLOOR = 0.01      # the MAD is at least 1 % of the median: identical peers still allow a little noise
SHOWN_RANKS = 8
SMALL_STAGE_NODES = 4  # stages of at most this many nodes weigh each node against exactly the others
BASELINE_FLOOR = 1.05  # a node's usual ratio to its peers is kept when above this (a heterogeneous node)
BASELINE_WEIGHT = 0.1  # how fast it follows, once the first samples set it
MAX_SUSPECTS = 16     # nodes followed at once (the slowest of a sample)
LEARNED_SHARE = 0.5   # past the first samples, a ratio more than this share of the way to computeFactor (times the
                      # node's usual) does not move its usual ratio


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


@dataclass(frozen=True)
class NodeScore:
    node: str
    ranks: tuple[RankReading, ...]
    ratio: float        # the median of its ranks' compute over their peers' median
    compute: float
    peers: float
    outlier: bool       # its median rank stands more than OUTLIER_MADS MADs above its peers (or has under 3)
    peers_wait: float | None


def _stats(values: list[float]) -> tuple[float, float]:
    median = statistics.median(values)
    return median, max(statistics.median(abs(value - median) for value in values), MAD_FLOOR * median)


def scores(readings: tuple[RankReading, ...], node_of_pod: Mapping[str, str],
           stage_of: Callable[[int], int]) -> dict[str, NodeScore]:
    """Each node's ranks scored against their peers: the ranks of their pipeline stage on other nodes. In a stage
    of more than SMALL_STAGE_NODES nodes the stage's own median and MAD stand for any node's peers (one node's
    ranks move them little), so a sample of thousands of ranks costs one median per stage; in a smaller stage each
    node is weighed against exactly the others."""
    stages: dict[int, list[RankReading]] = {}
    for reading in readings:
        if reading.compute_seconds is not None and reading.compute_seconds > 0 and node_of_pod.get(reading.pod):
            stages.setdefault(stage_of(reading.rank), []).append(reading)
    by_node: dict[str, list[tuple[RankReading, float, float, float, int, float | None]]] = {}
    for members in stages.values():
        nodes = {node_of_pod[m.pod] for m in members}
        shared = _stats([float(m.compute_seconds or 0.0) for m in members]) if len(nodes) > SMALL_STAGE_NODES \
            else None
        shared_wait = statistics.median(m.wait_seconds for m in members if m.wait_seconds is not None) \
            if shared is not None and any(m.wait_seconds is not None for m in members) else None
        for node in nodes:
            own = [m for m in members if node_of_pod[m.pod] == node]
            if shared is not None:
                (median, mad), count, wait = shared, len(members), shared_wait
            else:
                peers = [m for m in members if node_of_pod[m.pod] != node]
                if not peers:
                    continue
                median, mad = _stats([float(p.compute_seconds or 0.0) for p in peers])
                count = len(peers)
                waits = [p.wait_seconds for p in peers if p.wait_seconds is not None]
                wait = statistics.median(waits) if waits else None
            if median <= 0:
                continue
            by_node.setdefault(node, []).extend(
                (m, float(m.compute_seconds or 0.0) / median, median, mad, count, wait) for m in own)
    found = {}
    for node, items in by_node.items():
        ranks = tuple(sorted((item[0] for item in items), key=lambda r: r.rank))
        compute = statistics.median(float(r.compute_seconds or 0.0) for r in ranks)
        median, mad, count = items[0][2], items[0][3], items[0][4]
        outlier = count < 3 or compute - median > OUTLIER_MADS * MAD_SCALE * mad
        found[node] = NodeScore(node, ranks, statistics.median(item[1] for item in items), compute, median, outlier,
                                items[0][5])
    return found


def suspects(readings: tuple[RankReading, ...], node_of_pod: Mapping[str, str], stage_of: Callable[[int], int],
             factor: float, baselines: Mapping[str, float] | None = None) -> list[Suspect]:
    """The nodes whose ranks compute slower than their peers by `factor` times their own usual ratio (its baseline:
    1 unless the node was always slower, a heterogeneous node), the slowest first."""
    found = []
    for score in scores(readings, node_of_pod, stage_of).values():
        usual = max(1.0, (baselines or {}).get(score.node, 1.0))
        if score.ratio < factor * usual or not score.outlier:
            continue
        waits = [r.wait_seconds for r in score.ranks if r.wait_seconds is not None]
        found.append(Suspect(score.node, tuple(sorted({r.pod for r in score.ranks})),
                             tuple(r.rank for r in score.ranks), score.ratio, score.compute, score.peers,
                             statistics.median(waits) if waits else None, score.peers_wait))
    return sorted(found, key=lambda suspect: (-suspect.ratio, suspect.node))


def updated_baselines(previous: Mapping[str, float], ranked: Mapping[str, NodeScore], followed: set[str],
                      scored: int, members: set[str] | None = None,
                      learned_below: float | None = None) -> dict[str, float]:
    """Each node's usual ratio to its peers: averaged over the first samples, then moving by BASELINE_WEIGHT each
    sample; kept only above BASELINE_FLOOR (1 is implied). A sample does not move it for a node that is suspect
    (`followed`), nor for one of the job's nodes (`members`) it has no figures of, nor — past the first samples —
    for one whose ratio is above `learned_below` times its usual: a slowdown comes in over several samples (the
    trainer's figures are means over a window of steps), and a baseline that followed it would raise the threshold
    as fast as the node slowed. A node no longer in the job drifts back to 1."""
    weight = max(BASELINE_WEIGHT, 1 / max(scored, 1))
    baselines = {}
    for node in set(previous) | set(ranked):
        before = float(previous.get(node, 1.0))
        score = ranked.get(node)
        unread = score is None and members is not None and node in members
        rising = score is not None and learned_below is not None and score.ratio > before * learned_below
        if node in followed or unread or rising:
            value = before
        else:
            value = before + weight * ((score.ratio if score is not None else 1.0) - before)
        if value >= BASELINE_FLOOR:
            baselines[node] = round(value, 4)
    return baselines


def job_step_seconds(readings: tuple[RankReading, ...]) -> float | None:
    """The job's recent step: the median of its ranks' (in a synchronous job they all take the slowest's)."""
    steps = [reading.step_seconds for reading in readings if reading.step_seconds > 0]
    return statistics.median(steps) if steps else None


def slowdown_text(step: float | None, healthy: float | None) -> tuple[float | None, str]:
    if step is None or not healthy:
        return None, ""
    slowdown = step / healthy
    return slowdown, f"; the job's steps take {slowdown:.2f}× its healthy pace ({step:.3g}s vs {healthy:.3g}s)"


def fold(previous: SlownessStatus | None, sample: Sample, node_of_pod: Mapping[str, str],
         stage_of: Callable[[int], int], spec: Slowness, healthy_step_seconds: float | None,
         recent_step_seconds: float | None = None, epoch: str = "") -> tuple[SlownessStatus, Change | None] | None:
    """status.slowness after a sample and the change of SlowNode it makes (None: no change); None when the sample
    is not newer than the last one folded in or carries no rank's compute. The job's slowdown is its recent wall
    time per step (`recent_step_seconds`, else its ranks' step) over its healthy pace (the goodput account's).
    A new `epoch` (rank generation: new trainer processes) learns again for its first samples, as a job's start
    does; the nodes' usual ratios are kept."""
    last = parse_time(previous.sampled_at) if previous is not None else None
    if (last is not None and sample.sampled_at <= last) or not any(
            reading.compute_seconds is not None for reading in sample.ranks):
        return None
    state = previous.model_copy(deep=True) if previous is not None else SlownessStatus()
    state.sampled_at = timestamp(sample.sampled_at)
    if state.epoch != epoch:
        state.epoch, state.epoch_scored, state.suspects = epoch, 0, {}
        _clear(state, "unread")
    scored, in_epoch = (state.scored or 0) + 1, (state.epoch_scored or 0) + 1
    state.scored, state.epoch_scored = scored, in_epoch
    ranked = scores(sample.ranks, node_of_pod, stage_of)
    learning = scored <= spec.confirm_samples        # the job's first samples learn each node's usual ratio
    settling = not learning and in_epoch <= spec.confirm_samples  # new processes warm up: neither learn nor judge
    found = [] if learning or settling else suspects(sample.ranks, node_of_pod, stage_of, spec.compute_factor,
                                                     state.baselines)
    followed = {suspect.node for suspect in found} | {state.confirmed.node if state.confirmed else ""}
    if not settling:
        learned_below = None if learning else 1 + (spec.compute_factor - 1) * LEARNED_SHARE
        state.baselines = updated_baselines(state.baselines, ranked, followed, scored, set(node_of_pod.values()),
                                            learned_below)
    if learning or settling:
        return state, None  # nothing is judged: a confirmed node stays so, until samples can say otherwise
    slowdown, slower = slowdown_text(recent_step_seconds or job_step_seconds(sample.ranks), healthy_step_seconds)
    held = hold_unread(state, set(node_of_pod.values()) - set(ranked), spec.confirm_samples)
    if state.confirmed is not None:
        return judged_again(state, state.confirmed, found, held, spec, slowdown, slower)
    previous_counts = state.suspects
    counts = {node: count for node, count in previous_counts.items() if node in held}
    counts.update({suspect.node: previous_counts.get(suspect.node, 0) + 1 for suspect in found[:MAX_SUSPECTS]})
    state.suspects = counts
    ready = [suspect for suspect in found[:MAX_SUSPECTS] if counts[suspect.node] >= spec.confirm_samples]
    if not ready:
        return state, None
    top = ready[0]  # the slowest of those found in enough samples in a row
    state.confirmed = confirmed = SlowNodeFinding(
        node=top.node, since=timestamp(sample.sampled_at),
        at_step=int(sample.step) if sample.step is not None and sample.step == sample.step else None)
    with_facts(confirmed, top, slowdown)
    if sample.checkpoint_count is not None and sample.checkpoint_count == sample.checkpoint_count:
        confirmed.saves_at = int(sample.checkpoint_count)
    others = f"; also above: {', '.join(s.node for s in found if s.node != top.node)[:200]}" if len(found) > 1 else ""
    return state, Change(True, "SlowCompute",
                         f"node {top.node} is slow: {top.evidence()} in {counts[top.node]} samples in a row, above "
                         f"spec.runPolicy.slowness.computeFactor={spec.compute_factor:g}{slower}{others}; check "
                         "its NPUs (npu-smi: temperature, power and clock throttling, other work, ECC errors)")


def judged_again(state: SlownessStatus, confirmed: SlowNodeFinding, found: list[Suspect], held: set[str],
                 spec: Slowness, slowdown: float | None, slower: str) -> tuple[SlownessStatus, Change | None]:
    """A confirmed node in a new sample: its facts refreshed while it is still found, held while it is unread,
    cleared (SlowNode off) after confirmSamples samples in a row without it."""
    still = next((suspect for suspect in found if suspect.node == confirmed.node), None)
    if still is not None:
        state.clear_samples = 0
        with_facts(confirmed, still, slowdown)
        return state, None
    if confirmed.node in held:
        return state, None
    clear = (state.clear_samples or 0) + 1
    state.clear_samples = clear
    if clear < spec.confirm_samples:
        return state, None
    _clear(state, "confirmed", "clear_samples", "suspects", "unread")
    return state, Change(False, "OnPace", f"node {confirmed.node} computes with its peers again"
                                          f" ({spec.confirm_samples} samples){slower}")


def hold_unread(state: SlownessStatus, unread: set[str], limit: int) -> set[str]:
    """The followed nodes (suspects, the confirmed one) this sample has no figures of, for at most `limit` samples
    in a row: their counts are held, neither advanced, broken nor cleared. A throttled node's endpoint may miss the
    read now and then; one that stays silent longer is judged as not found. Updates state.unread."""
    followed = set(state.suspects) | {state.confirmed.node if state.confirmed else ""}
    counts = {node: state.unread.get(node, 0) + 1 for node in followed & unread if node}  # "": a pod not bound yet
    if counts:
        state.unread = counts
    else:
        _clear(state, "unread")
    return {node for node, count in counts.items() if count <= limit}


def with_facts(confirmed: SlowNodeFinding, suspect: Suspect, slowdown: float | None) -> None:
    """The confirmed node's facts as this sample shows them (a slowdown not known now keeps the last one)."""
    confirmed.pods, confirmed.ranks = list(suspect.pods), list(suspect.ranks[:64])
    confirmed.ratio, confirmed.evidence = round(suspect.ratio, 3), suspect.evidence()
    if slowdown is not None:
        confirmed.slowdown = round(slowdown, 3)


def _clear(state: SlownessStatus, *names: str) -> None:
    """The fields back to their defaults and unset: gone from the published state, as if never written."""
    for name in names:
        setattr(state, name, SlownessStatus.model_fields[name].get_default(call_default_factory=True))
        state.model_fields_set.discard(name)


NODE_CONDITION = "AscendSlowNode"  # what `--mark-slow-nodes` sets on a node for the administrator


def nodes_to_mark(jobs: Mapping[str, list[SlowNodeRecord]]) -> dict[str, str]:
    """The nodes found slow (status.slowNodes) in two jobs, or twice in one: node → why, naming the jobs and their
    figures. `jobs`: namespace/name → its status.slowNodes."""
    found: dict[str, list[str]] = {}
    for job, entries in sorted(jobs.items()):
        for entry in entries:
            if entry.node:
                found.setdefault(entry.node, []).append(
                    f"{job} at {entry.since or entry.at} ({entry.ratio}× its peers' compute)")
    return {node: f"found slow {len(seen)} times: " + "; ".join(seen[-4:])
            for node, seen in sorted(found.items()) if len(seen) >= 2}
