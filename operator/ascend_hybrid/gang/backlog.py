"""Jobs waiting for chips, as placement sees them (pure): who goes first, and which chips are promised.

Order. Jobs that wait for free chips are placed oldest first — by (creationTimestamp, namespace, name) — per chip
type: a job is not placed while an older job of its chip type waits for chips (StrictFIFO, as Kueue calls it).
So a big gang is never starved by smaller ones that keep taking each node freed before it fits. An older job
blocks only while it could run on the cluster as it stands once others free their chips (`fits_when_free`:
placed on an inventory without pods); one that can never fit (more chips than there are) blocks nobody.

Promises. A gang's placement is written into the job's status before its pods are created. A process that starts
(a restart, or a standby taking the Lease) between the two knows the placement only from that status: the chips of
pods placed but not visible yet are counted as taken, so no other job is placed onto them meanwhile.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ascend_hybrid.contracts import names, volcano
from ascend_hybrid.contracts.chips import CHIPS

PASSIVE_PHASES = frozenset({"Succeeded", "Failed", "Suspended"})
QueueKey = tuple[str, str, str]  # (creationTimestamp, namespace, name)


@dataclass(frozen=True)
class Entry:
    """What placement needs to know of one job (the `ahj_jobs` index keeps these, not whole jobs)."""

    namespace: str
    name: str
    created: str
    chip: str
    per_pod: int
    phase: str
    attempt: int
    placed_attempt: int | None
    nodes: tuple[str, ...]
    queued: bool = False  # spec.scheduling.queue: Kueue orders it, not this queue

    @property
    def queue_key(self) -> QueueKey:
        return queue_key(self.created, self.namespace, self.name)


def queue_key(created: str | None, namespace: str, name: str) -> QueueKey:
    return (created or "", namespace, name)


def entry(body: Mapping) -> Entry:
    meta, spec, status = body.get("metadata") or {}, body.get("spec") or {}, body.get("status") or {}
    npu = spec.get("npu") or {}
    chip = str(npu.get("chip") or "910B")
    per_pod = npu.get("perPod") or (CHIPS[chip].chips_per_node if chip in CHIPS else 0)
    placement = status.get("placement") or {}
    return Entry(namespace=meta.get("namespace") or "", name=meta.get("name") or "",
                 created=meta.get("creationTimestamp") or "", chip=chip, per_pod=int(per_pod),
                 phase=status.get("phase") or "Pending", attempt=int(status.get("attempt") or 0),
                 placed_attempt=placement.get("attempt"), nodes=tuple(placement.get("nodes") or ()),
                 queued=in_a_schedulers_queue(spec.get("scheduling") or {}))


def in_a_schedulers_queue(scheduling: Mapping) -> bool:
    """A job Kueue admits or Volcano schedules waits in their queues' order, never in this one (a job that leaves
    the choice to the operator's --scheduler volcano is told apart at its first placement)."""
    return bool(scheduling.get("queue")) or scheduling.get("schedulerName") == volcano.SCHEDULER_NAME \
        or scheduling.get("volcano") is not None


def unseen_placements(entries: Iterable[Entry], visible: set[tuple[str, str]],
                      exclude: tuple[str, str] | None = None) -> dict[tuple[str, str], tuple[str, int]]:
    """(namespace, pod) → (node, chips) for every pod placed in a job's status and not visible yet."""
    promised: dict[tuple[str, str], tuple[str, int]] = {}
    for job in entries:
        if (job.namespace, job.name) == exclude or job.phase in PASSIVE_PHASES:
            continue
        if not job.attempt or job.placed_attempt != job.attempt:
            continue
        for index, node in enumerate(job.nodes):
            pod = (job.namespace, names.pod_name(job.name, job.attempt, index))
            if pod not in visible and node:  # under Volcano a pod not bound yet has no node of its own
                promised[pod] = (node, job.per_pod)
    return promised


@dataclass(frozen=True)
class Waiting:
    """A job this process has seen waiting for chips."""

    key: QueueKey
    chip: str


def oldest_waiting(known: Iterable[Waiting], entries: Iterable[Entry], tried: set[tuple[str, str]]) -> dict[str, QueueKey]:
    """The oldest job per chip type among those that wait for chips: those this process tried to place and found
    waiting (`known`), and every Pending job it has not tried yet (`entries` not in `tried`) — until its first try
    says whether it can fit, an older job keeps its place in the queue (else a burst of new jobs would be placed in
    whatever order their events arrive). One pass and no list: a burst of 1 000 jobs asks this at every placement."""
    oldest: dict[str, QueueKey] = {}
    for job in known:
        first = oldest.get(job.chip)
        if first is None or job.key < first:
            oldest[job.chip] = job.key
    for e in entries:
        if e.phase != "Pending" or e.placed_attempt is not None or e.queued or (e.namespace, e.name) in tried:
            continue
        key, first = e.queue_key, oldest.get(e.chip)
        if first is None or key < first:
            oldest[e.chip] = key
    return oldest


def ahead(me: QueueKey, chip: str, oldest: Mapping[str, QueueKey]) -> QueueKey | None:
    """The oldest job of the same chip type that waits and is older than `me`, or None: then `me` may be placed."""
    first = oldest.get(chip)
    return first if first is not None and first < me else None


def head(chip: str, oldest: Mapping[str, QueueKey]) -> QueueKey | None:
    """The oldest job of a chip type that waits: the one to try next once the job before it has been placed."""
    return oldest.get(chip)


def queued_message(blocker: QueueKey) -> str:
    _, namespace, name = blocker
    return f"queued: oldest first, {namespace}/{name} waits for chips before this job"
