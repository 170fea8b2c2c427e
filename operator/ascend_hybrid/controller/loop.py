"""The reconcile shell: observes a job, asks `decision.decide`, executes the actions through `kube`.

Worker threads take job keys from a WorkQueue, so the blocking client never runs on kopf's event loop.
Placement is serialised by one lock over one inventory (kopf indexes plus chips promised to gangs whose pods
the watch has not shown yet), so two jobs never get the same chips. Everything the process remembers of one
job lives in its `JobRecord`, each field declared under the threads that write it (records.py).
"""

from __future__ import annotations

import copy
import enum
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol, cast

from ascend_hybrid.contracts import conditions, kueue, names, volcano
from ascend_hybrid.contracts.podview import attempt_of, only_progress, ready_for_table
from ascend_hybrid.controller import children, metrics, onepod, placing
from ascend_hybrid.controller.kube import Kube, collection_chunks
from ascend_hybrid.controller.logs import job_fields
from ascend_hybrid.controller.records import Indexes, JobKey, JobRecord, OfferedSample
from ascend_hybrid.controller.refused import Refused
from ascend_hybrid.controller.settings import OperatorSettings
from ascend_hybrid.controller.workqueue import WorkQueue
from ascend_hybrid.diagnosis import recovery
from ascend_hybrid.diagnosis.checkpointing import NodeFaults
from ascend_hybrid.gang import ranktable, render
from ascend_hybrid.monitoring.progress import Sample
from ascend_hybrid.planner.observed import Reading, reading_of
from ascend_hybrid.reconcile.actions import (
    AdoptPods,
    ApplyPodGroup,
    CreatePods,
    DeleteJob,
    DeletePodGroups,
    DeletePods,
    DeleteWorkloads,
    EnsureChildren,
    GrantLaunchers,
    PinAndRelease,
    Place,
    PlaceReplacement,
    PodToCreate,
    PostEvent,
    ProbeGrow,
    RemoveGates,
    SignalLaunchers,
    WriteRankTable,
)
from ascend_hybrid.reconcile.decision import decide
from ascend_hybrid.reconcile.state import FAST_REQUEUE_SECONDS, Decision, Observed
from ascend_hybrid.spec.resolved import ResolvedJob, SpecError
from ascend_hybrid.spec.rules import parse

log = logging.getLogger(__name__)
__all__ = ["Controller", "Indexes", "JobKey", "JobRecord", "Next"]

# a pod's change reaches its job's pass this late at least: the changes of a burst share one pass
POD_EVENT_DELAY = 0.2
# While a gang starts, a pod's change that only moves it on (created, bound, running) while another pod of the
# attempt is still not ready for the rank table reaches its job's pass this late at most: such a pass can only
# count pods and wait. The change that makes the last pod ready comes at once, any other after POD_EVENT_DELAY.
STARTING_PROGRESS_SECONDS = 1.0


class Leadership(Protocol):
    """What the workers ask of leader.LeaderElector (tests stand in their own)."""

    def leading(self) -> bool: ...

    def wait_leading(self, timeout: float | None = None) -> bool: ...

    def release(self) -> None: ...


def intent_first(decision: Decision) -> bool:
    """A decision that tells the launchers a rank generation records it in the status before it acts (see
    write_status) — unless it also writes the rank table: a status naming the table completed must not come
    before the table it names, and a start's generation is the one a status without it means anyway."""
    kinds = {type(action) for action in decision.actions}
    return SignalLaunchers in kinds and WriteRankTable not in kinds


class Progress(enum.Enum):
    """What a pod's change is to its starting gang (Controller.progress_of)."""

    COMPLETES = "the last pod ready"  # the rank table can be completed: the pass comes at once
    WAITS = "moves a pod on"          # other pods are not ready: the pass may wait
    OTHER = "other"


class Next(enum.Enum):
    """What a pass does after executing one decision."""

    DECIDE_AGAIN = "decide again"    # nothing it did needs the watch to show it
    WAIT = "wait"                    # requeue after the decision's delay (or the next event)
    FORGET = "forget"                # the job was deleted
    REFUSED = "refused"              # the apiserver refused a write: decide again before writing the status


@dataclass
class Controller:
    kube: Kube
    bound_indexes: Indexes | None = None  # bound by the kopf startup handler before any job is enqueued
    settings: OperatorSettings = field(default_factory=OperatorSettings)
    queue: WorkQueue = field(default_factory=WorkQueue)
    placement_lock: threading.Lock = field(default_factory=threading.Lock)
    progress_lock: threading.Lock = field(default_factory=threading.Lock)  # JobRecord.unready and ready_seen
    # workers add and drop records, kopf handlers add one on a job's first event, every other thread reads a
    # copy (`list(jobs.items())`): each dict operation is one step under the GIL
    jobs: dict[JobKey, JobRecord] = field(default_factory=dict)
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))  # jobs made before: an older one's too
    hardware_profiles: dict = field(default_factory=dict)  # planner profiles by name (--hardware-profiles)
    observed_efficiency: dict = field(default_factory=dict)  # profile → the cluster's factor (observed.py's loop)
    # namespaces where an older operator's namespace-wide launcher Role was deleted (children.delete_legacy_grant)
    legacy_grants_gone: set[str] = field(default_factory=set)
    node_faults: NodeFaults | None = None  # the node faults every job's ledger saw (observed.py's loop)
    marked_nodes: set[str] = field(default_factory=set)  # AscendSlowNode set by this process (--mark-slow-nodes)
    _threads: list[threading.Thread] = field(default_factory=list)
    pool: ThreadPoolExecutor | None = None
    # leader.LeaderElector under --leader-elect: workers take keys only while leading
    leadership: Leadership | None = None

    @property
    def indexes(self) -> Indexes:
        """The stores the watches fill; bound before any job is enqueued, so a pass never runs without them."""
        if self.bound_indexes is None:
            raise RuntimeError("the controller's indexes are not bound yet (the kopf startup handler binds them)")
        return self.bound_indexes

    @indexes.setter
    def indexes(self, stores: Indexes) -> None:
        self.bound_indexes = stores

    def __post_init__(self) -> None:
        if self.pool is None:
            self.pool = ThreadPoolExecutor(self.settings.parallel_calls, "ahj-api")

    # -- lifecycle --------------------------------------------------------------------------------------------
    def start(self, *loops: Callable[[], None]) -> None:
        """Starts the workers and any background loops (telemetry, metrics) handed in by main."""
        for loop in loops:
            threading.Thread(target=loop, name=f"ahj-{loop.__name__.strip('_')}", daemon=True).start()
        for number in range(self.settings.workers):
            thread = threading.Thread(target=self._work, name=f"ahj-worker-{number}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self.queue.close()
        for thread in self._threads:
            thread.join(timeout=10)
        if self.leadership is not None:
            self.leadership.release()  # after the last pass: a standby takes over within one retry

    def record_of(self, key: JobKey) -> JobRecord:
        record = self.jobs.get(key)
        if record is None:
            record = self.jobs.setdefault(key, JobRecord())
        return record

    def enqueue(self, key: JobKey, delay: float = POD_EVENT_DELAY) -> None:
        self.queue.add(key, delay)

    def pod_changed(self, key: JobKey, old: dict | None = None, new: dict | None = None) -> None:
        """A pod of the job changed: its next pass after POD_EVENT_DELAY, or after as much CPU as its last pass
        took. A pass reads every pod of the gang, and a 2 048-pod gang's pods change all the time while it starts:
        spaced so, one job's passes take at most about half a core. A change that only moves a starting gang on
        while other pods are not ready waits up to STARTING_PROGRESS_SECONDS (`unready`, written by the last pass);
        the change that makes its last pod ready is followed at once: the gang's start waits for nothing else."""
        record = self.jobs.get(key)
        delay = max(POD_EVENT_DELAY, record.pass_cpu if record is not None else 0.0)
        if record is not None and new is not None:
            progress = self.progress_of(record, old, new)
            if progress is Progress.WAITS:
                delay = max(delay, STARTING_PROGRESS_SECONDS)
            elif progress is Progress.COMPLETES:
                delay = 0.0
        self.queue.add(key, delay)

    def progress_of(self, record: JobRecord, old: dict | None, new: dict) -> Progress:
        """What this change is to a starting gang: the last of its pods ready (COMPLETES), one that only moves a
        pod on while others are not ready (WAITS), or anything else. A pod that becomes ready is remembered, so
        that a pass which read it before it was cannot put it back."""
        with self.progress_lock:
            if ready_for_table(new):
                name = new["metadata"]["name"]
                record.ready_seen.add(name)
                if record.unready == {name}:
                    record.unready = frozenset()
                    return Progress.COMPLETES
                record.unready = record.unready - {name}
            return Progress.WAITS if record.unready and only_progress(old, new) else Progress.OTHER

    def wait_for(self, key: JobKey, unready: frozenset[str]) -> None:
        """What a pass leaves to wait for (unready_pods), less the pods that became ready since it read them."""
        record = self.record_of(key)
        with self.progress_lock:
            record.unready = unready - record.ready_seen
            if not unready:
                record.ready_seen = set()

    def wrote_last(self, key: JobKey, resource_version: str | None) -> bool:
        """Whether this version of the job is the one this process's last status patch produced."""
        record = self.jobs.get(key)
        return resource_version is not None and record is not None and record.last_written == resource_version

    def job_changed(self, key: JobKey, resource_version: str | None, deleted: bool,
                    body: Mapping | None = None) -> None:
        """A watch event of the job. The echo of our own status write changes nothing (the pass that wrote it
        decided after it); anything else, from anyone, means the job must be read again, now. A job this process
        has no record of yet (a new job, or every job after a start) is what its event says: the first pass
        decides on `body` instead of reading it once more (a read less per job). Later events cannot
        be used so: one may be older than the version our own last write returned."""
        if not deleted and self.wrote_last(key, resource_version):
            return
        record = self.jobs.get(key)
        if record is None and body is not None and not deleted:
            self.remember_job(key, copy.deepcopy(dict(body)))
        elif record is not None:
            record.read_again(None if deleted else resource_version)
        self.enqueue(key, delay=0.0)

    def current_job(self, key: JobKey) -> dict | None:
        """The job for a pass: as our last status write returned it while no other change of it was seen (pods
        changing do not change the job: a 128-pod gang's start is dozens of passes), else read."""
        record = self.jobs.get(key)
        cached = None if record is None else record.fresh_job(self.settings.job_cache_seconds)
        if cached is not None:
            return cached
        changes_before = self.record_of(key).changes_seen
        job = self.kube.get_job(*key)
        if job is not None:
            self.remember_job(key, job, changes_before)
        return job

    def read_job_again(self, key: JobKey) -> None:
        """A child or pod of the job went: the garbage collector deletes a deleted job's, maybe before the job's own
        event reaches this process, so the next pass reads the job rather than repair what belonged to a job no
        longer there."""
        record = self.jobs.get(key)
        if record is not None:
            record.read_again()

    def remember_job(self, key: JobKey, job: dict, changes_before: int | None = None) -> None:
        """Caches the job for the next passes (JobRecord.remember)."""
        self.record_of(key).remember(job, changes_before)

    def wake_pending(self) -> None:
        """Capacity may have changed: let the jobs that wait for placement try again — those not queued yet, and of
        the queue (oldest first, backlog.py) only its head: the rest could only find it still there. Each head that
        leaves Pending wakes the next (`record`)."""
        pending = [(key, record) for key, record in list(self.jobs.items()) if record.phase == "Pending"]
        queued: dict[str, list] = {}
        for key, record in sorted(pending, key=lambda item: item[1].queue_key):
            if record.waiting:
                queued.setdefault(record.chip, []).append(key)
        heads = {key for keys in queued.values() for key in keys[:self.settings.workers * 2]}
        for key, record in pending:
            if not record.waiting or key in heads:
                self.queue.add(key, 0.5)

    def wake_all(self) -> None:
        """A node went NotReady: every job may have a pod there."""
        for key in list(self.jobs):
            self.queue.add(key, 0.5)

    def _work(self) -> None:
        backoff = self.settings.error_backoff_seconds
        while True:
            if self.leadership is not None and not self.leadership.leading():
                if self.queue.closed:
                    return
                self.leadership.wait_leading(1.0)  # a standby's keys wait in the queue, deduplicated
                continue
            queued = self.queue.get()
            if queued is None:
                return
            key = cast(JobKey, queued)  # the queue holds what enqueue() puts in it: job keys
            started, cpu, outcome = time.perf_counter(), time.thread_time(), "error"
            try:
                delay = self.reconcile(key)
                outcome = "requeued" if delay is not None else "forgotten"
                if key in self.jobs:
                    self.jobs[key].failures = 0
                    self.jobs[key].pass_cpu = time.thread_time() - cpu
            except Exception:
                record = self.record_of(key)
                delay = backoff[min(record.failures, len(backoff) - 1)]
                record.failures += 1
                metrics.RECONCILE_ERRORS.labels(namespace=key[0]).inc()
                log.exception("reconcile %s/%s failed; retrying in %ss", key[0], key[1], delay, extra=job_fields(key))
            finally:
                metrics.RECONCILE_SECONDS.labels(outcome=outcome).observe(time.perf_counter() - started)
                self.queue.done(key)
            if delay is not None:
                self.queue.add(key, delay)

    # -- one pass ---------------------------------------------------------------------------------------------
    def reconcile(self, key: JobKey) -> float | None:
        """One pass; its events are posted when it ends, each with its own reason (users and alerts select by it)."""
        seen: list[dict] = []  # the job as the pass read it (its events name it)
        try:
            return self._reconcile(key, seen)
        finally:
            record = self.jobs.get(key)
            if record is not None and record.events:
                events = record.events.drain()
                for event in events if seen else ():
                    self.post_now(seen[0], event.type, event.reason, event.message)

    def _reconcile(self, key: JobKey, seen: list[dict]) -> float | None:
        namespace, name = key
        job = self.current_job(key)
        seen += [job] if job is not None else []
        if job is None or job["metadata"].get("deletionTimestamp"):
            self.forget(key)
            return None
        written = job.get("status") or {}  # the status as the apiserver holds it
        one_pod = self.record_of(key).one_pod
        job = one_pod.resume(job)
        for _ in range(self.settings.max_steps_per_pass):
            observed = self.observe(key, job)
            decision = decide(observed)
            self.wait_for(key, unready_pods(observed, decision))
            old_status = job.get("status") or {}
            if intent_first(decision):
                job, written = self.write_status(key, job, written, decision.status)
            after = self.execute(key, job, observed, decision)
            if after is Next.REFUSED:
                continue
            placed_first = any(self.places_first(action) for action in decision.actions)
            if after is Next.DECIDE_AGAIN and all(isinstance(a, EnsureChildren | PostEvent) or self.places_first(a)
                                                  for a in decision.actions):
                # applied children need no record before the next step (a crash applies them again), nor does a
                # one-pod job's placement (onepod.py): its status goes with the next step's write
                self.record(key, job, old_status, decision.status)
                job = {**job, "status": decision.status}
                one_pod.keep(job, decision, placed_first)
                continue
            deferred = one_pod.defer(after is Next.WAIT, decision, self.settings.status_coalesce_seconds)
            if deferred is not None:
                self.record(key, job, old_status, decision.status)
                return deferred
            deferred = self.defer_progress(key, after, written, decision)
            if deferred is not None:
                return deferred
            job, written = self.write_status(key, job, written, decision.status)
            self.record(key, job, old_status, decision.status)
            if after is Next.FORGET:
                self.forget(key)
                return None
            if after is Next.WAIT:
                return decision.requeue_after
        return FAST_REQUEUE_SECONDS

    def write_status(self, key: JobKey, job: dict, written: dict, status: dict) -> tuple[dict, dict]:
        """The status patched from what the apiserver holds (`written`) to `status`; the job and its status as
        held now. A decision that tells the launchers a new rank generation writes it before it acts: a crash
        between the two then leaves the status ahead of `<job>-recovery`, which the next pass writes again
        (signal_launchers is level-based), never the channel ahead of a status that knows no incident."""
        record = self.record_of(key)
        changes_before = record.changes_seen
        patched = self.kube.patch_job_status(key[0], key[1], written, status)
        record.one_pod.written()
        if patched is None:
            job = {**job, "status": status}
        else:
            job = patched
            record.last_written, record.written_at = patched["metadata"].get("resourceVersion"), time.monotonic()
            self.remember_job(key, job, changes_before)
        return job, job.get("status") or {}

    def places_first(self, action) -> bool:
        """Whether `action` places a one-pod job whose placement status may wait (onepod.py)."""
        return isinstance(action, Place) and onepod.places_first(action, self.settings.status_coalesce_seconds,
                                                                 self.through_volcano(action.job))

    def through_volcano(self, job: ResolvedJob) -> bool:
        """Whether Volcano binds the job's pods (contracts/volcano.uses_volcano): its pod then says nothing of where
        it goes until Volcano binds it."""
        scheduling = job.spec.scheduling
        return volcano.uses_volcano(scheduling.scheduler_name, scheduling.volcano is not None, scheduling.queue,
                                    self.settings.default_scheduler)

    def defer_progress(self, key: JobKey, after: Next, old: dict, decision: Decision) -> float | None:
        """Seconds to wait instead of writing a status that only counts pods coming up or moves a gang's start
        on, when the last write was less than `status_coalesce_seconds` ago: a 128-pod gang's start is one write
        per pass otherwise. The job stays as last written, so the pass that ends the wait writes every deferred
        change; a real one (Running, a failure) is written at once. A provisional status is not written at all
        (Decision.provisional): the pass after it decides again from the status as written — unless this pass
        posts events, which a pass deciding again from that status would post a second time."""
        if after is not Next.WAIT:
            return None
        if decision.provisional and not self.record_of(key).events:
            return decision.requeue_after
        if not (conditions.only_progress(old, decision.status) or conditions.only_starting(old, decision.status)):
            return None
        wait = self.settings.status_coalesce_seconds - (time.monotonic() - self.record_of(key).written_at)
        if wait <= 0:
            return None
        return wait if decision.requeue_after is None else min(wait, decision.requeue_after)

    def observe(self, key: JobKey, job: dict) -> Observed:
        resolved: ResolvedJob | None
        problems: tuple[str, ...]
        try:
            resolved, problems = parse(job), ()
        except SpecError as error:
            resolved, problems = None, tuple(error.problems)
        record = self.record_of(key)
        if not record.rank_table_read:
            # A job whose status names no rank table has none worth reading: a ConfigMap a process made before
            # dying unrecorded is applied "initializing" again with the other children, as a missing one would be.
            if (job.get("status") or {}).get("rankTable"):
                config_map = self.kube.read_config_map(key[0], names.rank_table_config_map(key[1]))
                table = children.read_rank_table(self, key, config_map)
                with record.children_lock:
                    record.rank_table = table
                    record.rank_table_revision = ranktable.config_map_revision(config_map)
                # job.json as the pods read it, for the table's next write (None in one an older operator wrote)
                record.job_config = ((config_map or {}).get("data") or {}).get(names.JOB_CONFIG_KEY)
            record.rank_table_read = True
        channel = children.recovery_data(self, key, job)
        launcher_generation, launchers = recovery.read_channel(channel)
        nodes = self.indexes.nodes_by_name()
        pods = tuple(self.indexes.job_pods(key))
        podgroup_read, podgroup = self.podgroup(key, job, resolved)
        with record.children_lock:
            rank_table, rank_table_revision = record.rank_table, record.rank_table_revision
            children_generation = record.children_generation
        return Observed(
            job=job, resolved=resolved, spec_problems=problems, pods=pods, workload=self.workload(key, job, resolved, pods),
            evicted_pods=tuple(self.indexes.evicted_pods(key)),
            rank_table=rank_table, children_ready=children_generation == job["metadata"].get("generation"),
            children_data=record.children_data,
            sched_ip=record.sched_ip, nodes=nodes, now=datetime.now(UTC),
            node_grace_seconds=self.settings.node_grace_seconds,
            in_flight=record.recent(self.settings.in_flight_seconds), telemetry=record.sample(),
            device_infos=self.indexes.device_infos_by_node(), hardware_profiles=self.hardware_profiles,
            observed_efficiency=self.observed_efficiency,
            refusal=record.refusal, rank_table_revision=rank_table_revision,
            expander_image=self.settings.ranktable_expander_image,
            launcher_generation=launcher_generation, launchers=launchers,
            launcher_world=(channel or {}).get(names.RECOVERY_WORLD_KEY),
            default_scheduler=self.settings.default_scheduler, podgroup=podgroup, podgroup_read=podgroup_read,
            launcher_checkpoint=(channel or {}).get(names.RECOVERY_CHECKPOINT_KEY), node_faults=self.node_faults,
        )

    def podgroup(self, key: JobKey, job: dict, resolved: ResolvedJob | None) -> tuple[bool, dict | None]:
        """(read, the PodGroup) of a job Volcano schedules, read while its attempt, handed to Volcano, is not
        Running (one read per pass): Volcano's word on a gang it holds, and whether the group is there at all. A
        running gang's is not read. A read the apiserver refuses (an operator not granted PodGroups: the chart's
        volcano.enabled) is the job's refusal, as a refused write is (Authorized=False), not a failed pass."""
        if resolved is None or not self.through_volcano(resolved):
            return False, None
        status = job.get("status") or {}
        attempt = int(status.get("attempt") or 0)
        if not attempt or status.get("phase") in ("Running", *conditions.TERMINAL_JOB_PHASES) \
                or (status.get("placement") or {}).get("attempt") != attempt:
            return False, None
        try:
            return True, self.kube.get_podgroup(key[0], names.pod_group(key[1], attempt))
        except Refused as refused:
            self.record_of(key).refusal = refused.refusal(key[0])
            return False, None

    def workload(self, key: JobKey, job: dict, resolved, pods: tuple[dict, ...]) -> dict | None:
        """The Kueue Workload of a queued job's current attempt, once its pods exist or once it ran (one read per
        pass): a preempted gang's pods may all be gone before a pass sees them deleting, and then only the
        Workload still says Evicted — without it the eviction would read as pods deleted, a counted restart."""
        if resolved is None or not resolved.spec.scheduling.queue:
            return None
        status = job.get("status") or {}
        attempt = int(status.get("attempt") or 1)
        started = (status.get("placement") or {}).get("attempt") == attempt
        if not started and not any(attempt_of(pod) == attempt for pod in pods):
            return None
        return self.kube.get_workload(key[0], kueue.group_name(key[1], attempt))

    def execute(self, key: JobKey, job: dict, observed: Observed, decision: Decision) -> Next:
        """Runs the actions in order. A write the apiserver refuses (400/403/422) ends the run: the refusal is the
        next decide()'s observation (a Failed or Authorized condition), made in this same pass."""
        record = self.record_of(key)
        try:
            after = self._execute(key, job, observed, decision)
        except Refused as refused:
            log.warning("%s/%s: %s", key[0], key[1], refused, extra=job_fields(key))
            record.refusal = refused.refusal(key[0])
            return Next.REFUSED
        if any(not isinstance(action, PostEvent) for action in decision.actions):
            record.refusal = None
        return after

    def post_event(self, job: dict, event_type: str, reason: str, message: str) -> None:
        """Kept for the end of the pass (`reconcile`)."""
        self.record_of(job_key(job)).events.append(PostEvent(event_type, reason, message))

    def post_now(self, job: dict, event_type: str, reason: str, message: str) -> None:
        """Events are best effort: one the apiserver refuses is logged, never a reason to stop reconciling."""
        try:
            self.kube.post_event(job, event_type, reason, message)
        except Refused as refused:
            log.warning("event %s not posted: %s", reason, refused, extra=job_fields(job_key(job)))

    def _execute(self, key: JobKey, job: dict, observed: Observed, decision: Decision) -> Next:
        namespace, name = key
        record = self.record_of(key)
        after = Next.WAIT
        for action in decision.actions:
            if not isinstance(action, PostEvent):
                log.info("%s/%s: %s", namespace, name, _describe(action), extra=job_fields(key))
            match action:
                case PostEvent():
                    self.post_event(job, action.type, action.reason, action.message)
                case EnsureChildren():
                    self.ensure_children(key, job, action.job)
                    after = Next.DECIDE_AGAIN
                case Place():
                    if self.place(key, job, observed, decision, action):
                        after = Next.DECIDE_AGAIN
                case (CreatePods() | RemoveGates() | PinAndRelease() | AdoptPods() | DeleteWorkloads() | DeletePods()
                      | ApplyPodGroup() | DeletePodGroups()):
                    self._pod_calls(key, record, action)
                case PlaceReplacement():
                    if placing.place_replacement(self, key, job, observed, decision, action):
                        after = Next.DECIDE_AGAIN
                case ProbeGrow():
                    placing.probe_grow(self, key, job, observed, decision, action)
                case WriteRankTable():
                    children.write_dns_records(self, key, action.dns_slices)  # first: the table's records
                    job_json = record.job_config or render.job_config_text(cast(ResolvedJob, observed.resolved))
                    self.kube.apply(render.rank_table_config_map(name, namespace, job["metadata"]["uid"], job_json,
                                                                 action.table, action.revision))
                    with record.children_lock:
                        record.rank_table, record.rank_table_revision = action.table, action.revision
                case GrantLaunchers():
                    children.grant_launchers(self, key, job, action.service_account)
                case SignalLaunchers():
                    self.signal_launchers(key, job, action)
                case DeleteJob():
                    self.kube.delete_job(namespace, name)
                    return Next.FORGET
        return after

    def _pod_calls(self, key: JobKey, record: JobRecord,
                   action: CreatePods | RemoveGates | PinAndRelease | AdoptPods | DeleteWorkloads | DeletePods
                   | ApplyPodGroup | DeletePodGroups) -> None:
        """The actions that are one API call per pod (or Workload, or PodGroup), made `parallel_calls` at a time."""
        namespace = key[0]
        match action:
            case ApplyPodGroup():
                self.kube.apply_podgroup(action.manifest)
            case DeletePodGroups():
                self.each(lambda group: self.kube.delete_podgroup(namespace, group), action.names)
            case CreatePods():
                self.promise(key, action.pods)
                self.each(self.kube.create_pod, [pod.manifest for pod in action.pods])
                metrics.PODS_CREATED.inc(len(action.pods))
                record.touched(pod.manifest["metadata"]["name"] for pod in action.pods)
            case RemoveGates():
                self.each(lambda pod: self.kube.remove_gate(namespace, *pod), action.pods)
                record.touched(pod_name for pod_name, _ in action.pods)
            case PinAndRelease() | AdoptPods():
                self.each(lambda pod: self.kube.patch_pod(namespace, pod[0], list(pod[1])), action.pods)
                record.touched(pod_name for pod_name, _ in action.pods)
            case DeleteWorkloads():
                self.each(lambda workload: self.kube.delete_workload(namespace, workload), action.names)
            case DeletePods(attempt=int(attempt)):
                self.each(lambda indexes: self.kube.delete_attempt_pods(namespace, key[1], attempt, indexes,
                                                                        force=action.force),
                          collection_chunks(action.indexes, self.settings.parallel_calls))
            case DeletePods():
                self.each(functools.partial(self.kube.delete_pod, namespace, force=action.force), action.names)

    def signal_launchers(self, key: JobKey, job: dict, action: SignalLaunchers) -> None:
        children.signal_launchers(self, key, job, action)

    def each(self, call: Callable, items) -> None:
        """One API call per item, `parallel_calls` at a time: a 128-pod gang is created and released in a burst.
        Every call is made (and retried) before the first error, if any, is raised."""
        pool = cast(ThreadPoolExecutor, self.pool)  # __post_init__ made one when none was given
        results = list(pool.map(lambda item: _outcome(call, item), items))
        for error in results:
            if error is not None:
                raise error

    def ensure_children(self, key: JobKey, job: dict, resolved: ResolvedJob) -> None:
        children.ensure_children(self, key, job, resolved)

    def child_changed(self, key: JobKey, kind: str, name: str, event_type: str, body: dict) -> None:
        """A kopf handler saw a labelled Service, ConfigMap or LauncherChannel change or go (children.py)."""
        children.child_changed(self, key, kind, name, event_type, body)

    def place(self, key: JobKey, job: dict, observed: Observed, decision: Decision, action: Place) -> bool:
        """Places the gang under the one lock (placing.py); the core records the outcome."""
        return placing.place(self, key, job, observed, decision, action)

    def reserved(self, npu_pods: list[dict], exclude: JobKey) -> dict[str, int]:
        return placing.reserved(self, npu_pods, self.indexes.jobs(), exclude)

    def promise(self, key: JobKey, pods: Iterable[PodToCreate]) -> None:
        """Keeps the chips of pods about to be created counted until the watch shows them."""
        record = self.record_of(key)
        with self.placement_lock:  # another job's placement forgets the promises its inventory shows
            for pod in pods:
                if pod.node is not None:  # a queued job's pods hold no chips before they are placed
                    record.promised[pod.manifest["metadata"]["name"]] = (pod.node, pod.chips)

    def record(self, key: JobKey, job: dict, old: dict, new: dict) -> None:
        """Bookkeeping and metrics after a status change."""
        record = self.record_of(key)
        was_pending, record.phase = record.phase == "Pending", new.get("phase") or "Pending"
        if was_pending and record.phase != "Pending":
            record.waiting = False
            self.wake_pending()  # the queue moved: the jobs behind it try again
        record.attempt = int(new.get("attempt") or 1)  # a reading of another attempt's pods is not used (sample)
        record.step_time_ratio = (new.get("plan") or {}).get("stepTimeRatio")
        record.reading = reading_of(key[0], key[1], new)
        record.goodput = new.get("goodput")
        record.goodput_seconds = (new.get("goodputAccount") or {}).get("seconds")
        record.slow_node = (new.get("slowness") or {}).get("confirmed")
        placed = next((c for c in new.get("conditions", []) if c["type"] == "Placed"), None)
        admitted = next((c for c in new.get("conditions", []) if c["type"] == "Admitted"), None)
        if record.phase == "Pending":
            record.pending_reason = placed["reason"] if placed and placed["status"] == "False" else "Waiting"
            if admitted and admitted["status"] == "False":
                record.pending_reason = admitted["reason"]  # WaitingForQuota, Preempted: Kueue holds the job
        if record.phase in ("Succeeded", "Failed", "Suspended", "Restarting"):
            with self.placement_lock:
                record.promised = {}
        metrics.record_transition(key[0], job, old, new)

    def forget(self, key: JobKey) -> None:
        record = self.jobs.pop(key, None)
        if record is not None and record.waiting:
            self.wake_pending()

    def running_jobs(self) -> list[tuple[JobKey, int]]:
        return [(key, record.attempt) for key, record in list(self.jobs.items()) if record.phase == "Running"]

    def readings(self) -> list[Reading]:
        """Each job's latest reading of its steady step against the prediction (planner/observed.py)."""
        return [record.reading for record in list(self.jobs.values()) if record.reading is not None]

    def offer_sample(self, key: JobKey, attempt: int, sample: Sample) -> None:
        """A telemetry reading of one attempt; the next pass writes it into the status if the attempt is still the
        job's (JobRecord.sample: the attempt may change between this check and the pass)."""
        record = self.jobs.get(key)
        if record is not None and record.attempt == attempt:
            record.offered = OfferedSample(attempt, sample)
            self.queue.add(key, 0.0)


def unready_pods(observed: Observed, decision: Decision) -> frozenset[str]:
    """The pods of a starting attempt that are not yet ready for its rank table (empty in any other phase): while
    some are, a pod's progress need not be followed at once (Controller.pod_changed)."""
    if decision.status.get("phase") != "Starting" or observed.resolved is None:
        return frozenset()
    job, attempt = observed.job["metadata"]["name"], int(decision.status.get("attempt") or 1)
    ready = {pod["metadata"]["name"] for pod in observed.pods if ready_for_table(pod)}
    return frozenset(names.pod_name(job, attempt, index) for index in range(observed.resolved.pod_count)) - ready


def job_key(job: dict) -> JobKey:
    return job["metadata"]["namespace"], job["metadata"]["name"]


def _describe(action) -> str:
    count = len(getattr(action, "pods", None) or getattr(action, "names", None) or ())
    return type(action).__name__ + (f" ×{count}" if count else "")


def _outcome(call: Callable, item) -> BaseException | None:
    try:
        call(item)
        return None
    except Exception as error:  # noqa: BLE001 - collected, then re-raised by `each`
        return error
