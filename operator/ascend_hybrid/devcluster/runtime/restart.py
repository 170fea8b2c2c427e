"""When the runtime starts a pod's ended container again (pure): the pod's restartPolicy and the kubelet's
crash-loop back-off.

The kubelet restarts a container that exited when the pod's restartPolicy says so (Always: any exit; OnFailure:
a non-zero one; Never: none). The first restart is immediate; each further one waits twice as long as the one
before, from 10 s up to 5 min (CrashLoopBackOff while it waits); a container that ran for 10 min (twice the
cap) before it exited starts the back-off afresh. Only container-runtime pods restart: the process runtime runs
every pod as restartPolicy Never (docs/process-runtime.md), and keeps doing so.
"""

from __future__ import annotations

from ascend_hybrid.devcluster.runtime.container import is_container_pod

INITIAL_BACKOFF_SECONDS = 10.0
MAX_BACKOFF_SECONDS = 300.0
RESET_AFTER_SECONDS = 2 * MAX_BACKOFF_SECONDS
WAITING_REASON = "CrashLoopBackOff"


def restart_policy(pod: dict) -> str:
    """Always, OnFailure or Never, as the runtime applies it to this pod."""
    if not is_container_pod(pod):
        return "Never"
    return (pod.get("spec") or {}).get("restartPolicy") or "Always"


def restarts_after(policy: str, exit_code: int) -> bool:
    return policy == "Always" or (policy == "OnFailure" and exit_code != 0)


def backoff_seconds(streak: int) -> float:
    """The wait before a restart when `streak` restarts came before it without a long run between them."""
    if streak <= 0:
        return 0.0
    return min(INITIAL_BACKOFF_SECONDS * 2 ** (streak - 1), MAX_BACKOFF_SECONDS)


def next_streak(streak: int, ran_seconds: float) -> int:
    """The streak the back-off counts from, after a run of `ran_seconds`: a long run forgives the crashes."""
    return 0 if ran_seconds >= RESET_AFTER_SECONDS else streak


def restart_delay(pod: dict, exit_code: int, streak: int, ran_seconds: float) -> float | None:
    """Seconds until the ended container starts again, or None when the pod is done (Succeeded or Failed)."""
    if not restarts_after(restart_policy(pod), exit_code):
        return None
    return backoff_seconds(next_streak(streak, ran_seconds))
