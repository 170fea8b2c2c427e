"""The operator's own store of pods: a ListWatch (listwatch.py) keeps in it only the projection of each pod
(`podview.project_pod`) of the jobs' pods and of the pods holding NPUs.

kopf watched pods before: it turned every event into its own body, causes and handler calls, which was the
operator's largest cost while a gang started. Here an event is one `json.loads` and one projection; the full pod
is dropped at once. A watch the apiserver ends is resumed from the last resourceVersion it showed (bookmarks keep
that recent); "410 Gone" (too old) lists again; any other error is logged, counted and retried with backoff.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from ascend_hybrid.contracts import kueue, names
from ascend_hybrid.contracts.podview import holds_npus, is_finished, labels_of, project_pod
from ascend_hybrid.controller.listwatch import SYNC_TIMEOUT_SECONDS
from ascend_hybrid.controller.records import JobKey
from ascend_hybrid.controller.roles import PodListener

log = logging.getLogger(__name__)
PodKey = tuple[str, str]
Change = Callable[[dict | None, dict | None], None]
# How long a pod Kueue evicted is remembered after it is gone: the Workload that also says so is garbage-collected
# with the last pod, so a pass that comes after both are gone learns of the eviction only from this memory.
EVICTED_MEMORY_SECONDS = 600.0


def _key(pod: dict) -> PodKey:
    return pod["metadata"].get("namespace") or "", pod["metadata"]["name"]


def job_of(pod: dict) -> JobKey | None:
    job = labels_of(pod).get(names.JOB_LABEL)
    return None if job is None else (pod["metadata"].get("namespace") or "", job)


def kept(pod: dict) -> bool:
    """A job's pod, or one holding NPUs (the inventory's input): the only pods the operator reads."""
    return job_of(pod) is not None or holds_npus(pod.get("spec") or {})


class PodStore:
    """The kept pods' projections by job and by NPU, filled by one ListWatch per scope (a namespace, or all).

    `on_change(old, new)` is called (outside the lock) for each pod whose projection changed; status writes of
    fields nobody here reads (kwok's heartbeats, managedFields) change nothing and call nothing."""

    def __init__(self, on_change: Change | None = None, sources: int = 1):
        self.on_change = on_change
        self._lock = threading.Lock()
        self._pods: dict[PodKey, dict] = {}
        self._by_job: dict[JobKey, dict[str, dict]] = {}
        self._npu: dict[PodKey, dict] = {}
        self._evicted: dict[JobKey, dict[str, tuple[float, dict]]] = {}
        self._sources = sources
        self._listed: set[object] = set()  # the sources that have listed
        self._synced = threading.Event()

    # -- readers (worker threads) -----------------------------------------------------------------------------
    def wait_synced(self, timeout: float = SYNC_TIMEOUT_SECONDS) -> None:
        if not self._synced.wait(timeout):
            raise RuntimeError(f"the pods are not listed after {timeout:g} s (see the pod watch's errors)")

    def job_pods(self, key: JobKey) -> list[dict]:
        self.wait_synced()
        with self._lock:
            return list(self._by_job.get(key, {}).values())

    def npu_pods(self) -> list[dict]:
        self.wait_synced()
        with self._lock:
            return list(self._npu.values())

    def evicted_pods(self, key: JobKey) -> list[dict]:
        """The job's pods Kueue evicted (TerminationTarget) that are gone now, as last seen."""
        with self._lock:
            return [pod for _, pod in self._evicted.get(key, {}).values()]

    def size(self) -> int:
        return len(self._pods)

    @staticmethod
    def project(pod: dict) -> dict | None:
        projected = project_pod(pod)
        return projected if kept(projected) else None

    # -- writers (the watch threads) --------------------------------------------------------------------------
    def apply(self, event_type: str, pod: dict) -> None:
        """One watch event (ADDED, MODIFIED, DELETED) of a full pod."""
        projected = project_pod(pod)
        new = projected if event_type != "DELETED" and kept(projected) else None
        with self._lock:
            old = self._put(_key(projected), new)
        self._notify([(old, new)])

    def replace(self, scope: str | None, projections: Iterable[dict], source: object) -> None:
        """A fresh list of one scope (None: every namespace), projected: what it lacks is gone, the rest is as
        listed. The store is synced once each of its sources has listed."""
        fresh = {_key(pod): pod for pod in projections if kept(pod)}
        with self._lock:
            changes: list[tuple[dict | None, dict | None]] = [
                (self._put(key, None), None) for key in list(self._pods)
                if (scope is None or key[0] == scope) and key not in fresh]
            changes += [(self._put(key, pod), pod) for key, pod in fresh.items()]
            self._listed.add(source)
            if len(self._listed) >= self._sources:
                self._synced.set()
        self._notify(changes)

    def _put(self, key: PodKey, pod: dict | None) -> dict | None:
        old = self._pods.pop(key, None)
        if old is not None:
            job = job_of(old)
            if job is not None:
                members = self._by_job.get(job, {})
                members.pop(key[1], None)
                if not members:
                    self._by_job.pop(job, None)
            self._npu.pop(key, None)
            if pod is None:
                self._remember_evicted(old)
        if pod is not None:
            self._pods[key] = pod
            job = job_of(pod)
            if job is not None:
                self._by_job.setdefault(job, {})[key[1]] = pod
            if holds_npus(pod.get("spec") or {}):
                self._npu[key] = pod
        return old

    def _remember_evicted(self, gone: dict) -> None:
        job = job_of(gone)
        if job is None or kueue.eviction([gone], None) is None:
            return
        now = time.monotonic()
        for remembered in list(self._evicted):  # evictions are rare: a full sweep on each one costs nothing
            fresh = {name: entry for name, entry in self._evicted[remembered].items()
                     if now - entry[0] < EVICTED_MEMORY_SECONDS}
            if fresh:
                self._evicted[remembered] = fresh
            else:
                del self._evicted[remembered]
        self._evicted.setdefault(job, {})[gone["metadata"]["name"]] = (now, gone)

    def _notify(self, changes: list[tuple[dict | None, dict | None]]) -> None:
        if self.on_change is None:
            return
        for old, new in changes:
            if old != new:
                self.on_change(old, new)


def reaction(controller: PodListener) -> Change:
    """What a changed pod means to the controller: its job's next pass, and free chips for the waiting jobs
    when a pod holding NPUs went or finished."""
    def changed(old: dict | None, new: dict | None) -> None:
        for key in {job_of(pod) for pod in (old, new) if pod is not None}:
            if key is not None:
                if new is None:
                    controller.read_job_again(key)
                controller.pod_changed(key, old, new)
        held = any(holds_npus(pod.get("spec") or {}) for pod in (old, new) if pod is not None)
        if held and (new is None or (is_finished(new) and not (old is not None and is_finished(old)))):
            controller.wake_pending()
    return changed
