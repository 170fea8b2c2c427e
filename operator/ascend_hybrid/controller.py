"""The reconcile shell: observes a job, asks `reconcile.decide`, executes the actions through `kube`.

Worker threads take job keys from a WorkQueue, so the blocking client never runs on kopf's event loop.
Placement is serialised by one lock over one inventory (kopf indexes plus chips promised to gangs whose pods
the watch has not shown yet), so two jobs never get the same chips.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable, Iterable

from . import metrics, names, render
from .conditions import parse_time
from .kube import PARALLEL_CALLS, Kube, rank_table_of, service_ip
from .placement import place
from .progress import Sample
from .planning import node_domains
from .reconcile import FAST_REQUEUE_SECONDS, SLOW_REQUEUE_SECONDS, Observed, decide, placement_result
from .rules import SpecError, parse
from .telemetry import TelemetrySource
from .topology import RESOURCE, build_inventory
from .workqueue import WorkQueue

log = logging.getLogger(__name__)
MAX_STEPS_PER_PASS = 6
ERROR_BACKOFF_SECONDS = (1, 2, 5, 10, 30, 60)
JobKey = tuple[str, str]


DEVICE_INFO_NAMESPACE, DEVICE_INFO_LABEL = "kube-system", "mx-consumer-cim"  # where MindCluster publishes health
IN_FLIGHT_SECONDS = 15.0  # how long a just-created or just-released pod may stay unseen by the watch


@dataclass
class ChildrenMemo:
    generation: int | None = None
    sched_ip: str | None = None
    rank_table: dict | None = None
    rank_table_read: bool = False
    in_flight: dict[str, float] = field(default_factory=dict)  # pod name → when this process created/released it

    def recent(self) -> frozenset[str]:
        horizon = time.monotonic() - IN_FLIGHT_SECONDS
        for name, since in list(self.in_flight.items()):
            if since < horizon:
                del self.in_flight[name]
        return frozenset(self.in_flight)

    def touched(self, pod_names) -> None:
        now = time.monotonic()
        self.in_flight.update((name, now) for name in pod_names)


@dataclass
class Snapshot:
    """What the kopf indexes hold right now, as plain lists (copied under retry: kopf writes them concurrently)."""
    nodes: Callable[[], list[dict]]
    npu_pods: Callable[[], list[dict]]
    job_pods: Callable[[JobKey], list[dict]]
    device_infos: Callable[[], list[dict]]


@dataclass
class Controller:
    kube: Kube
    snapshot: Snapshot
    node_grace_seconds: float = 30.0
    workers: int = 4
    queue: WorkQueue = field(default_factory=WorkQueue)
    placement_lock: threading.Lock = field(default_factory=threading.Lock)
    promised: dict[JobKey, dict[str, tuple[str, int]]] = field(default_factory=dict)  # job → pod name → (node, chips)
    memos: dict[JobKey, ChildrenMemo] = field(default_factory=dict)
    phases: dict[JobKey, str] = field(default_factory=dict)
    failures: dict[JobKey, int] = field(default_factory=dict)
    pending_reasons: dict[JobKey, str] = field(default_factory=dict)
    # False when kopf watches only some namespaces: its pod and ConfigMap indexes then miss the NPUs held
    # elsewhere and the kube-system health ConfigMaps, so placement lists those cluster-wide instead.
    indexes_see_cluster: bool = True
    telemetry: TelemetrySource | None = None
    telemetry_interval: float = 30.0
    samples: dict[JobKey, Sample] = field(default_factory=dict)
    attempts: dict[JobKey, int] = field(default_factory=dict)
    last_written: dict[JobKey, str | None] = field(default_factory=dict)  # resourceVersion of our last status patch
    _threads: list[threading.Thread] = field(default_factory=list)
    pool: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(PARALLEL_CALLS, "ahj-api"))

    # -- lifecycle --------------------------------------------------------------------------------------------
    def start(self) -> None:
        threading.Thread(target=self._publish_loop, name="ahj-metrics", daemon=True).start()
        if self.telemetry is not None:
            threading.Thread(target=self._telemetry_loop, name="ahj-telemetry", daemon=True).start()
        for number in range(self.workers):
            thread = threading.Thread(target=self._work, name=f"ahj-worker-{number}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self.queue.close()
        for thread in self._threads:
            thread.join(timeout=10)

    def enqueue(self, key: JobKey, delay: float = 0.2) -> None:
        self.queue.add(key, delay)

    def wrote_last(self, key: JobKey, resource_version: str | None) -> bool:
        """Whether this version of the job is the one this process's last status patch produced."""
        return resource_version is not None and self.last_written.get(key) == resource_version

    def wake_pending(self) -> None:
        """Capacity may have changed: let every job that waits for placement try again."""
        for key, phase in list(self.phases.items()):
            if phase == "Pending":
                self.queue.add(key, 0.5)

    def wake_all(self) -> None:
        """A node went NotReady: every job may have a pod there."""
        for key in list(self.phases):
            self.queue.add(key, 0.5)

    def _work(self) -> None:
        while True:
            key = self.queue.get()
            if key is None:
                return
            try:
                delay = self.reconcile(key)
                self.failures.pop(key, None)
            except Exception:  # noqa: BLE001 - one job's error must not stop the worker; it is logged and retried
                count = self.failures.get(key, 0)
                self.failures[key] = count + 1
                delay = ERROR_BACKOFF_SECONDS[min(count, len(ERROR_BACKOFF_SECONDS) - 1)]
                metrics.RECONCILE_ERRORS.labels(namespace=key[0]).inc()
                log.exception("reconcile %s/%s failed; retrying in %ss", key[0], key[1], delay)
            finally:
                self.queue.done(key)
            if delay is not None:
                self.queue.add(key, delay)

    # -- one pass ---------------------------------------------------------------------------------------------
    def reconcile(self, key: JobKey) -> float | None:
        namespace, name = key
        job = self.kube.get_job(namespace, name)
        if job is None or job["metadata"].get("deletionTimestamp"):
            self.forget(key)
            return None
        for _ in range(MAX_STEPS_PER_PASS):
            observed = self.observe(key, job)
            decision = decide(observed)
            old_status = job.get("status") or {}
            carry_on = self.execute(key, job, observed, decision)
            patched = self.kube.patch_job_status(namespace, name, old_status, decision.status)
            self.record(key, job, old_status, decision.status)
            if patched is not None:
                job = patched
                self.last_written[key] = patched["metadata"].get("resourceVersion")
            else:
                job = {**job, "status": decision.status}
            if carry_on == "deleted":
                self.forget(key)
                return None
            if not carry_on:
                return decision.requeue_after
        return FAST_REQUEUE_SECONDS

    def observe(self, key: JobKey, job: dict) -> Observed:
        try:
            effective, problems = parse(job), ()
        except SpecError as error:
            effective, problems = None, tuple(error.problems)
        memo = self.memos.setdefault(key, ChildrenMemo())
        if not memo.rank_table_read:
            memo.rank_table = rank_table_of(self.kube.read_config_map(key[0], names.rank_table_config_map(key[1])))
            memo.rank_table_read = True
        nodes = {node["metadata"]["name"]: node for node in self.snapshot.nodes()}
        return Observed(
            job=job, effective=effective, spec_problems=problems, pods=tuple(self.snapshot.job_pods(key)),
            rank_table=memo.rank_table, children_ready=memo.generation == job["metadata"].get("generation"),
            sched_ip=memo.sched_ip, nodes=nodes, now=datetime.now(timezone.utc),
            node_grace_seconds=self.node_grace_seconds, in_flight=memo.recent(), telemetry=self.samples.get(key),
        )

    def execute(self, key: JobKey, job: dict, observed: Observed, decision) -> bool | str:
        """Runs the actions; True when the pass should decide again at once (nothing it did needs the watch)."""
        namespace, name = key
        uid = job["metadata"]["uid"]
        again = False
        for action in decision.actions:
            if action.kind not in ("event",):
                log.info("%s/%s: %s%s", namespace, name, action.kind, f" ×{len(action.pods)}" if action.pods else "")
            if action.kind == "event":
                self.kube.post_event(job, action.event_type, action.reason, action.message)
            elif action.kind == "ensure_children":
                self.ensure_children(key, job, observed)
                again = True
            elif action.kind == "place":
                again = self.place(key, job, observed, decision, action.request)
            elif action.kind == "create_pods":
                self.promise(key, action.pods, observed)
                self.each(self.kube.create_pod, action.pods)
                metrics.PODS_CREATED.inc(len(action.pods))
                self.memos[key].touched(manifest["metadata"]["name"] for manifest in action.pods)
            elif action.kind == "remove_gates":
                self.each(lambda pod: self.kube.remove_gate(namespace, *pod), action.pods)
                self.memos[key].touched(pod_name for pod_name, _ in action.pods)
            elif action.kind == "delete_pods":
                self.each(lambda pod_name: self.kube.delete_pod(namespace, pod_name), action.pods)
            elif action.kind == "write_rank_table":
                self.kube.write_rank_table(namespace, name, uid, action.table)
                self.memos[key].rank_table = action.table
            elif action.kind == "delete_job":
                self.kube.delete_job(namespace, name)
                return "deleted"
        return again

    def each(self, call: Callable, items) -> None:
        """One API call per item, PARALLEL_CALLS at a time: a 128-pod gang is created and released in a burst.
        Every call is made (and retried) before the first error, if any, is raised."""
        results = list(self.pool.map(lambda item: _outcome(call, item), items))
        for error in results:
            if error is not None:
                raise error

    def ensure_children(self, key: JobKey, job: dict, observed: Observed) -> None:
        namespace, name = key
        uid = job["metadata"]["uid"]
        memo = self.memos[key]
        manifests = render.services(name, namespace, uid)
        if observed.effective is not None:
            manifests.append(render.job_config_map(observed.effective, namespace, uid))
        if memo.rank_table is None:
            manifests.append(render.rank_table_config_map(name, namespace, uid))
        live: dict[str, dict] = {}
        self.each(lambda manifest: live.__setitem__(manifest["metadata"]["name"], self.kube.apply(manifest)), manifests)
        if memo.rank_table is None:
            memo.rank_table = {"status": "initializing"}
        memo.sched_ip = service_ip(live[names.sched_service(name)])
        memo.generation = job["metadata"].get("generation")

    def place(self, key: JobKey, job: dict, observed: Observed, decision, request) -> bool:
        effective = observed.effective
        with self.placement_lock:
            started = time.perf_counter()
            npu_pods, device_infos = self.cluster_holdings()
            inventory = build_inventory(self.snapshot.nodes(), npu_pods, device_infos,
                                        reserved=self.reserved(npu_pods, exclude=key))
            placement = place(request, inventory)
            metrics.PLACEMENT_SECONDS.observe(time.perf_counter() - started)
            tier = request.tier_labels[0] if request.tier_labels else ""
            events = placement_result(decision.status, effective, placement, observed.now,
                                      job["metadata"].get("generation"), node_domains(inventory, tier))
            if placement.ok:
                attempt = decision.status["attempt"]
                self.promised[key] = {names.pod_name(key[1], attempt, index): (node, effective.per_pod)
                                      for index, node in enumerate(placement.nodes)}
            else:
                self.promised.pop(key, None)
        for event in events:
            self.kube.post_event(job, event.event_type, event.reason, event.message)
        decision.requeue_after = FAST_REQUEUE_SECONDS if placement.ok else SLOW_REQUEUE_SECONDS
        return placement.ok

    def promise(self, key: JobKey, manifests: Iterable[dict], observed: Observed) -> None:
        """Keeps the chips of pods about to be created counted until the watch shows them."""
        promised = self.promised.setdefault(key, {})
        for manifest in manifests:
            node = manifest["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
                "nodeSelectorTerms"][0]["matchExpressions"][0]["values"][0]
            promised[manifest["metadata"]["name"]] = (node, observed.effective.per_pod)

    def cluster_holdings(self) -> tuple[list[dict], list[dict]]:
        """(NPU pods, device health ConfigMaps) of the whole cluster."""
        if self.indexes_see_cluster:
            return self.snapshot.npu_pods(), self.snapshot.device_infos()
        return (self.kube.list_npu_pods(RESOURCE),
                self.kube.list_device_infos(DEVICE_INFO_NAMESPACE, f"{DEVICE_INFO_LABEL}=true"))

    def reserved(self, npu_pods: list[dict], exclude: JobKey) -> dict[str, int]:
        visible = {(pod["metadata"].get("namespace"), pod["metadata"]["name"]) for pod in npu_pods}
        totals: dict[str, int] = {}
        for key, pods in list(self.promised.items()):
            if key == exclude:
                continue
            for pod_name, (node, chips) in list(pods.items()):
                if (key[0], pod_name) in visible:
                    del pods[pod_name]
                else:
                    totals[node] = totals.get(node, 0) + chips
        return totals

    def record(self, key: JobKey, job: dict, old: dict, new: dict) -> None:
        """Metrics and bookkeeping on phase transitions."""
        before, after = old.get("phase"), new.get("phase")
        self.phases[key] = after or "Pending"
        if new.get("attempt") != self.attempts.get(key):
            self.samples.pop(key, None)  # a reading of the previous attempt's pods says nothing of this one
        self.attempts[key] = int(new.get("attempt") or 1)
        placed = next((c for c in new.get("conditions", []) if c["type"] == "Placed"), None)
        if after == "Pending":
            self.pending_reasons[key] = placed["reason"] if placed and placed["status"] == "False" else "Waiting"
        if after in ("Succeeded", "Failed", "Suspended", "Restarting"):
            self.promised.pop(key, None)
        if after == before:
            return
        if after == "Running":
            now = datetime.now(timezone.utc)
            created = parse_time(job["metadata"].get("creationTimestamp"))
            if created and int(new.get("attempt") or 1) == 1:
                metrics.TIME_TO_RUNNING.observe((now - created).total_seconds())
            released = parse_time(placed.get("lastTransitionTime")) if placed else None
            if released:
                metrics.RANK_TABLE_SECONDS.observe((now - released).total_seconds())
        if after == "Restarting":
            reason = next((c["reason"] for c in new.get("conditions", []) if c["type"] == "Restarting"), "Unknown")
            metrics.RESTARTS.labels(namespace=key[0], reason=reason).inc()

    def forget(self, key: JobKey) -> None:
        for table in (self.promised, self.memos, self.phases, self.failures, self.pending_reasons, self.samples,
                      self.attempts, self.last_written):
            table.pop(key, None)

    def _telemetry_loop(self) -> None:
        """Reads every running job's progress off the event loop and the workers; the next pass writes it."""
        while not self.queue.closed:
            for key, phase in list(self.phases.items()):
                if phase != "Running" or key not in self.attempts:
                    continue
                attempt = self.attempts[key]
                pods = [pod for pod in self.snapshot.job_pods(key)
                        if (pod["metadata"].get("labels") or {}).get(names.ATTEMPT_LABEL) == str(attempt)]
                self.samples[key] = self.telemetry.sample(key[0], key[1], attempt, pods)
                self.queue.add(key, 0.0)
            time.sleep(self.telemetry_interval)

    def _publish_loop(self) -> None:
        while not self.queue.closed:
            self.publish_job_metrics()
            time.sleep(5)

    def publish_job_metrics(self) -> None:
        counts: dict[tuple[str, str], int] = {}
        for (namespace, _), phase in list(self.phases.items()):
            counts[(namespace, phase)] = counts.get((namespace, phase), 0) + 1
        metrics.JOBS.clear()
        for (namespace, phase), count in counts.items():
            metrics.JOBS.labels(namespace=namespace, phase=phase).set(count)
        pending: dict[str, int] = {}
        for key, reason in list(self.pending_reasons.items()):
            if self.phases.get(key) == "Pending":
                pending[reason] = pending.get(reason, 0) + 1
        metrics.JOBS_PENDING.clear()
        for reason, count in pending.items():
            metrics.JOBS_PENDING.labels(reason=reason).set(count)


def _outcome(call: Callable, item) -> BaseException | None:
    try:
        call(item)
        return None
    except Exception as error:  # noqa: BLE001 - collected, then re-raised by `each`
        return error
