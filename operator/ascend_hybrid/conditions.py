"""metav1.Condition bookkeeping, job phases and RFC 3339 helpers (pure)."""

from __future__ import annotations

from datetime import UTC, datetime

CONDITION_TYPES = ("Created", "Admitted", "Placed", "RankTableReady", "Running", "Restarting", "Succeeded", "Failed", "Suspended",
                   "MetricsAvailable")
JOB_PHASES = ("Pending", "Placing", "Starting", "Running", "Restarting", "Succeeded", "Failed", "Suspended")
TERMINAL_JOB_PHASES = frozenset({"Succeeded", "Failed"})


def timestamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value)  # Python 3.11 reads RFC 3339's "Z" itself


def set_condition(status: dict, kind: str, value: bool, reason: str, message: str, now: datetime,
                  generation: int | None) -> None:
    """Sets one condition; lastTransitionTime moves only when the status flips, as metav1.Condition wants."""
    conditions = status.setdefault("conditions", [])
    wanted = "True" if value else "False"
    for condition in conditions:
        if condition["type"] == kind:
            if condition["status"] != wanted:
                condition["lastTransitionTime"] = timestamp(now)
            condition.update(status=wanted, reason=reason, message=message, observedGeneration=generation)
            break
    else:
        conditions.append({"type": kind, "status": wanted, "reason": reason, "message": message,
                           "lastTransitionTime": timestamp(now), "observedGeneration": generation})
    conditions.sort(key=lambda c: CONDITION_TYPES.index(c["type"]) if c["type"] in CONDITION_TYPES else 99)


def condition(status: dict, kind: str) -> dict | None:
    return next((c for c in status.get("conditions", []) if c["type"] == kind), None)
