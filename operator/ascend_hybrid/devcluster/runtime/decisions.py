"""The process runtime's decisions (pure): from the process pods the API shows and the processes it runs, what
to do now. The shell (service.py) calls decide() on every change and every tick, and carries the actions out.

A kubelet's rules, for one container per pod with restartPolicy Never:
- a bound, Pending pod with its IP (kwok gives it one once the device plugin annotated it) starts, oldest
  first, while the runtime guard has room; the first one that does not fit holds the later ones back (a gang
  must not be overtaken forever), except one that can never fit, which only waits itself;
- a process that ended is reported once (Succeeded or Failed with its exit code); a container-runtime pod's
  container that ended is restarted instead when its restartPolicy says so, after the kubelet's back-off
  (restart.py);
- a pod being deleted gets SIGTERM, SIGKILL once its grace period is over, and is removed from the API only
  once its process group is gone (so kwok cannot hand its IP to a new pod while the old process holds it);
  one that carries finalizers gets its terminal phase written first, since whoever holds a finalizer (Kueue)
  may wait for that phase before letting it go;
- a pod that the API shows Running but that has no process here was started by a runtime that stopped: lost.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import cast

from ascend_hybrid.devcluster.runtime.guard import WAITING_REASON, admit, requested_workers
from ascend_hybrid.devcluster.runtime.launch import NotRunnable, grace_seconds, runtime_container
from ascend_hybrid.devcluster.runtime.restart import restart_delay


@dataclass(frozen=True)
class Tracked:
    """A process this runtime started for a pod."""

    pid: int
    workers: int
    grace: float
    exit_code: int | None = None    # None while it runs
    stop_deadline: float | None = None  # when SIGKILL is due, once SIGTERM went out
    announced: bool = False         # the pod's status says Running
    reported: bool = False          # its end is in the pod's status
    restarts: int = 0               # the container's restartCount (container runtime)
    streak: int = 0                 # restarts since the back-off last started afresh
    started_at: float = 0.0         # monotonic, when this run started
    finished_at: float | None = None
    restart_at: float | None = None  # when the ended container starts again (it restarts, after its back-off)

    @property
    def running(self) -> bool:
        return self.exit_code is None

    @property
    def holds_workers(self) -> bool:
        """Running, or ended and about to restart: its workers stay counted."""
        return self.running or self.restart_at is not None

    @property
    def ran_seconds(self) -> float:
        return (self.finished_at - self.started_at) if self.finished_at is not None else 0.0

    def stopping(self, deadline: float) -> Tracked:
        return replace(self, stop_deadline=deadline)


@dataclass(frozen=True)
class Start:
    uid: str


@dataclass(frozen=True)
class Wait:
    uid: str
    reason: str
    message: str


@dataclass(frozen=True)
class Announce:
    """Write Running into the pod's status (again: the first write at the start failed)."""
    uid: str


@dataclass(frozen=True)
class SyncVolumes:
    uid: str


@dataclass(frozen=True)
class Stop:
    uid: str
    grace: float


@dataclass(frozen=True)
class Kill:
    uid: str


@dataclass(frozen=True)
class ReportExit:
    """The container ended: report it (restart_in None), or note that it starts again in restart_in seconds."""
    uid: str
    restart_in: float | None = None


@dataclass(frozen=True)
class Restart:
    """Start the pod's ended container again (restartCount + 1)."""
    uid: str


@dataclass(frozen=True)
class ReportLost:
    uid: str


@dataclass(frozen=True)
class ReportStopped:
    """A pod deleted before its process started here, held by finalizers: write its terminal phase."""
    uid: str


@dataclass(frozen=True)
class Remove:
    """Delete the pod from the API (grace 0): its process group is gone."""
    uid: str


@dataclass(frozen=True)
class Forget:
    """The pod left the API and its process ended: drop the record and the pod's directory."""
    uid: str


Action = (Start | Wait | Announce | SyncVolumes | Stop | Kill | ReportExit | Restart | ReportLost | ReportStopped | Remove
          | Forget)


def _deleting(pod: dict) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


def _phase(pod: dict) -> str:
    return (pod.get("status") or {}).get("phase") or "Pending"


def _end_before_removal(uid: str, pod: dict, process: Tracked | None) -> list[Action]:
    """A finalizer may wait for the terminal phase (Kueue's does): a kubelet writes it before the pod goes."""
    if not pod["metadata"].get("finalizers") or _phase(pod) in ("Succeeded", "Failed"):
        return []
    if process is None:
        return [ReportStopped(uid)]
    return [] if process.reported else [ReportExit(uid)]


def _ready_to_start(pod: dict) -> bool:
    return _phase(pod) == "Pending" and bool((pod.get("status") or {}).get("podIP"))


def _stop_or_kill(uid: str, process: Tracked, grace: float, now: float) -> list[Action]:
    if process.stop_deadline is None:
        return [Stop(uid, grace)]
    return [Kill(uid)] if now >= process.stop_deadline else []


def _workers(pod: dict) -> int:
    try:
        return requested_workers(runtime_container(pod))
    except NotRunnable:
        return 1  # Start will find out and say why it cannot run


def decide(pods: dict[str, dict], tracked: dict[str, Tracked], capacity: int, now: float) -> list[Action]:
    """pods: uid → the process pods bound to a node, as the API shows them now; tracked: uid → processes."""
    actions: list[Action] = []
    process: Tracked | None  # each loop below binds it: a Tracked, then maybe None
    for uid, process in tracked.items():
        if uid not in pods:  # gone from the API (a forced delete, or our Remove went through)
            actions += _stop_or_kill(uid, process, process.grace, now) if process.running else [Forget(uid)]
    candidates: list[dict] = []
    for uid, pod in pods.items():
        process = tracked.get(uid)
        if _deleting(pod):
            if process is not None and process.running:
                actions += _stop_or_kill(uid, process, grace_seconds(pod), now)
            else:
                actions += [*_end_before_removal(uid, pod, process), Remove(uid)]
        elif process is not None:
            if process.running:
                actions += [SyncVolumes(uid)] if process.announced else [Announce(uid), SyncVolumes(uid)]
            elif not process.reported:
                # not running, so it has exited: exit_code is set
                actions.append(ReportExit(uid, restart_delay(pod, cast(int, process.exit_code), process.streak,
                                                             process.ran_seconds)))
            elif process.restart_at is not None and now >= process.restart_at:
                actions.append(Restart(uid))
        elif _phase(pod) == "Running":
            actions.append(ReportLost(uid))
        elif _ready_to_start(pod):
            candidates.append(pod)
    return actions + _admit_in_order(candidates, tracked, capacity)


def _admit_in_order(candidates: list[dict], tracked: dict[str, Tracked], capacity: int) -> list[Action]:
    in_use = sum(process.workers for process in tracked.values() if process.holds_workers)
    candidates.sort(key=lambda pod: (pod["metadata"].get("creationTimestamp") or "", pod["metadata"]["namespace"],
                                     pod["metadata"]["name"]))
    actions: list[Action] = []
    blocked_by: str | None = None
    for pod in candidates:
        uid, needed = pod["metadata"]["uid"], _workers(pod)
        admission = admit(needed, in_use, capacity)
        if needed > capacity:
            actions.append(Wait(uid, WAITING_REASON, admission.message))
        elif blocked_by is not None:
            actions.append(Wait(uid, WAITING_REASON, f"waits for its turn behind {blocked_by} ({in_use} of "
                                                     f"{capacity} trainer workers busy)"))
        elif admission.admitted:
            actions.append(Start(uid))
            in_use += needed
        else:
            actions.append(Wait(uid, WAITING_REASON, admission.message))
            blocked_by = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
    return actions
