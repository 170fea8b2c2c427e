"""What the controller keeps per job beyond the API objects (`JobRecord`), and the watched state it reads
(`Indexes`: kopf's indexes and the pod watch's store, as plain lists)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from ascend_hybrid.contracts.ascend import DeviceInfo, DevicePlugins, device_infos_by_node
from ascend_hybrid.controller.onepod import OnePodStart
from ascend_hybrid.diagnosis.refusals import Refusal
from ascend_hybrid.gang import backlog
from ascend_hybrid.monitoring.progress import Sample
from ascend_hybrid.planner.observed import Reading
from ascend_hybrid.reconcile.actions import PostEvent

JobKey = tuple[str, str]


@dataclass(frozen=True)
class CachedJob:
    """The job as a pass last read or wrote it, and when (monotonic): handed over as one reference."""

    body: dict
    since: float


@dataclass(frozen=True)
class OfferedSample:
    """A telemetry reading and the attempt whose pods it read: handed over as one reference, so that a pass never
    pairs one attempt's reading with another attempt."""

    attempt: int
    sample: Sample


class EventOutbox:
    """Events for the end of the job's pass: appended by the pass and by the kopf handlers that screen its
    children, drained by the pass (Controller.reconcile). Guarded by its own lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: list[PostEvent] = []

    def append(self, event: PostEvent) -> None:
        with self._lock:
            self._events.append(event)

    def drain(self) -> list[PostEvent]:
        with self._lock:
            events, self._events = self._events, []
        return events

    def __iter__(self) -> Iterator[PostEvent]:
        with self._lock:
            return iter(list(self._events))

    def __len__(self) -> int:
        return len(self._events)

    def __getitem__(self, index: int) -> PostEvent:
        return self._events[index]


@dataclass
class JobRecord:
    """What this process knows of one job beyond the API objects; dropped when the job goes.

    Each field is declared under the threads that write it. A job's passes run one at a time (the WorkQueue hands
    a key to one worker until `done`), so a field only its passes write needs no lock: other threads read it as one
    reference, which the GIL makes whole. A field written by more than one thread is guarded by the lock named
    beside it, or is one immutable object replaced by a single assignment."""

    # -- written by the job's passes only; read by other threads (metrics, telemetry, the watches, other jobs'
    #    passes under the placement lock) as single references
    phase: str = "Pending"
    attempt: int = 1
    step_time_ratio: float | None = None        # status.plan.stepTimeRatio, for the metric
    goodput: float | None = None                # status.goodput, for the metric
    goodput_seconds: dict | None = None         # status.goodputAccount.seconds: the buckets, for the metric
    slow_node: dict | None = None               # status.slowness.confirmed: the node SlowNode names, for the metric
    reading: Reading | None = None              # steady measured / predicted step (the observed-efficiency book)
    pending_reason: str = "Waiting"
    last_written: str | None = None             # resourceVersion of our last status patch (read by job_changed)
    sched_ip: str | None = None                 # read by child_changed, to create a deleted <job>-sched again
    recovery_read: bool = False                 # read by child_changed: screen reports only after a first read
    waiting: bool = False                       # Pending for chips that others hold: younger jobs wait behind it
    held_since: float | None = None             # held back behind an older job since (monotonic), none tried since
    pass_cpu: float = 0.0                       # CPU seconds its last pass took in its worker (thread time)
    chip: str = ""
    queue_key: backlog.QueueKey = ("", "", "")

    # -- written and read by the job's passes only
    failures: int = 0                           # consecutive passes that raised
    written_at: float = 0.0                     # when our last status patch was made (monotonic)
    children_data: int | None = None            # the data degree job.json was applied for (elastic jobs change it)
    rank_table_read: bool = False
    job_config: str | None = None               # job.json as last applied beside the table (rings-config-<job>)
    granted: tuple[str, float] | None = None    # (job uid, when) its launchers' grant was last created (children.py)
    old_slices_gone: bool = False               # Kubernetes' slices of a headless <job> that had a selector: deleted
    in_flight: dict[str, float] = field(default_factory=dict)  # pod name → when this process created/released it
    refusal: Refusal | None = None              # the apiserver's last refusal of a write, until one succeeds
    one_pod: OnePodStart = field(default_factory=OnePodStart)  # a one-pod job's placement not written yet

    # -- the job's passes cache the job; the job's watch event (kopf) and its pods' and children's watches drop it
    #    (`read_again`). Guarded by `job_lock`: a read that a change overtook is not cached (`cache_read`).
    job_lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    cached: CachedJob | None = None
    changes_seen: int = 0                       # counts `read_again`: a read begun before one is stale
    changed_to: str | None = None               # the resourceVersion the last change's event named, if any

    # -- the telemetry thread offers, the job's passes read: one reference (OfferedSample)
    offered: OfferedSample | None = None

    # -- the job's passes and the kopf handlers of its children (child_changed, up to one thread per child)
    #    write these: guarded by `children_lock`
    children_lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    children_generation: int | None = None      # generation whose Services and ConfigMaps are applied
    children_epoch: int = 0                     # counts children deleted; a pass that saw one applies again
    rank_table: dict | None = None
    rank_table_revision: int = 0                # the rank-table ConfigMap's `version` counter, as last seen
    recovery_data: dict | None = None           # data of LauncherChannel <job>-recovery (recovery.py)
    lost_sched_ip: str | None = None            # <job>-sched was deleted: create it again with this IP

    # -- the job's passes and the kopf child handlers append, the pass drains: the outbox's own lock
    events: EventOutbox = field(default_factory=EventOutbox, repr=False, compare=False)

    # -- the job's passes promise, the pass placing another job forgets those its inventory shows: written under
    #    the controller's placement lock
    promised: dict[str, tuple[str, int]] = field(default_factory=dict)  # pod name → (node, chips) not yet seen

    # -- the job's passes and the pod watch: guarded by the controller's progress lock (Controller.pod_changed)
    unready: frozenset[str] = frozenset()       # a starting attempt's pods not yet ready for the rank table
    ready_seen: set[str] = field(default_factory=set)  # pods seen ready since the last pass that waited for none

    @property
    def job(self) -> dict | None:
        """The cached job, read once (the reference may be dropped by another thread at any time)."""
        cached = self.cached
        return None if cached is None else cached.body

    def fresh_job(self, max_age: float) -> dict | None:
        cached = self.cached
        return cached.body if cached is not None and time.monotonic() - cached.since < max_age else None

    def remember(self, job: dict, changes_before: int | None = None) -> None:
        """Caches `job`, read or written when `changes_seen` was `changes_before`: unless a change was seen since
        (its event may come after the read and before this call: that job would hide the change) other than the
        one that made `job` itself (the echo of our own write may come before the write's answer)."""
        with self.job_lock:
            seen = 0 if changes_before is None else self.changes_seen - changes_before
            itself = seen == 1 and self.changed_to is not None \
                and self.changed_to == job["metadata"].get("resourceVersion")
            if seen == 0 or itself:
                self.cached = CachedJob(job, time.monotonic())

    def read_again(self, resource_version: str | None = None) -> None:
        """Drops the cached job: it changed (to `resource_version`, when its event says), or something it owns went."""
        with self.job_lock:
            self.changes_seen += 1
            self.changed_to = resource_version
            self.cached = None

    def sample(self) -> Sample | None:
        """The latest reading of the current attempt's pods."""
        offered = self.offered
        return offered.sample if offered is not None and offered.attempt == self.attempt else None

    def recent(self, horizon_seconds: float) -> frozenset[str]:
        horizon = time.monotonic() - horizon_seconds
        for name, since in list(self.in_flight.items()):
            if since < horizon:
                del self.in_flight[name]
        return frozenset(self.in_flight)

    def touched(self, pod_names: Iterable[str]) -> None:
        now = time.monotonic()
        self.in_flight.update((name, now) for name in pod_names)


@dataclass
class Indexes:
    """The kopf indexes as plain lists (copied: kopf writes them on its loop thread while workers read)."""

    nodes: Callable[[], list[dict]]
    npu_pods: Callable[[], list[dict]]
    job_pods: Callable[[JobKey], list[dict]]
    device_infos: Callable[[], list[dict]]
    jobs: Callable[[], list[backlog.Entry]] = list  # every job's placement as its status says (handlers.ahj_jobs)
    evicted_pods: Callable[[JobKey], list[dict]] = lambda key: []  # gone pods Kueue evicted (podwatch.PodStore)
    # node name → Node and → DeviceInfo, read by every pass: the stores keep them until they change
    # (handlers.bind_indexes); built anew each call where no store is bound (tests)
    node_map: Callable[[], Mapping[str, dict]] | None = None
    device_info_map: Callable[[], Mapping[str, DeviceInfo]] | None = None
    # each node's device-plugin mode (the DaemonSets' flags, or the operator's setting)
    device_plugins: Callable[[], DevicePlugins] = DevicePlugins

    def nodes_by_name(self) -> Mapping[str, dict]:
        return self.node_map() if self.node_map is not None else nodes_by_name(self.nodes())

    def device_infos_by_node(self) -> Mapping[str, DeviceInfo]:
        return self.device_info_map() if self.device_info_map is not None else \
            device_infos_by_node(self.device_infos())


def nodes_by_name(nodes: Iterable[dict]) -> dict[str, dict]:
    return {node["metadata"]["name"]: node for node in nodes}
