"""What the operator reads off observed Pods and Nodes (pure helpers of the reconcile pass)."""

from __future__ import annotations

from datetime import datetime

from . import names
from .conditions import parse_time


def labels_of(pod: dict) -> dict:
    return pod.get("metadata", {}).get("labels") or {}


def attempt_of(pod: dict) -> int:
    value = labels_of(pod).get(names.ATTEMPT_LABEL, "0")
    return int(value) if value.isdigit() else 0


def phase_of(pod: dict) -> str:
    return (pod.get("status") or {}).get("phase") or "Pending"


def exit_code(pod: dict) -> int | None:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated")
        if terminated is not None:
            return terminated.get("exitCode")
    return None


def node_not_ready_since(node: dict | None) -> datetime | None:
    if node is None:
        return None
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready" and cond.get("status") != "True":
            return parse_time(cond.get("lastTransitionTime"))
    return None


def is_gated(pod: dict) -> bool:
    return any(gate.get("name") == names.GANG_GATE for gate in (pod.get("spec") or {}).get("schedulingGates") or [])


def is_deleting(pod: dict) -> bool:
    return bool(pod.get("metadata", {}).get("deletionTimestamp"))


def live_names(pods) -> tuple[str, ...]:
    return tuple(pod["metadata"]["name"] for pod in pods if not is_deleting(pod))


def pod_counts(pods: list[dict], total: int) -> dict:
    phases = [phase_of(pod) for pod in pods]
    return {"total": total, "pending": total - sum(p in ("Running", "Succeeded", "Failed") for p in phases),
            "running": phases.count("Running"), "succeeded": phases.count("Succeeded"), "failed": phases.count("Failed")}
