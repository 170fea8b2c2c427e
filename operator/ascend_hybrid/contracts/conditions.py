"""metav1.Condition bookkeeping, job phases and RFC 3339 helpers (pure)."""

from __future__ import annotations

from datetime import UTC, datetime

CONDITION_TYPES = ("Created", "StrategyFits", "Admitted", "Placed", "RankTableReady", "Running", "Restarting", "Succeeded",
                   "Failed", "Suspended", "MetricsAvailable", "LoadImbalanced", "Straggling", "TrainingStalled")
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


# What moves while a gang's pods come up, and nothing acts on: the pod counts and the messages.
PROGRESS_KEYS = frozenset({"pods", "message", "conditions"})


def only_progress(old: dict, new: dict) -> bool:
    """Whether `new` differs from `old` in progress alone: the pod counts and messages (the status's, the
    conditions'), never the phase, a condition's status or reason, the placement, the attempt or the rank table."""
    changed = {key for key in set(old) | set(new) if old.get(key) != new.get(key)}
    if not changed or not changed <= PROGRESS_KEYS:
        return False

    def verdicts(status: dict) -> list[tuple]:
        return [(c.get("type"), c.get("status"), c.get("reason")) for c in status.get("conditions") or ()]
    return verdicts(old) == verdicts(new)


# What a gang's start moves between its placement and Running (the phase Placing → Starting, its conditions, the
# rank table "initializing", the pod template hash and start time): nothing else reads them meanwhile.
STARTING_KEYS = PROGRESS_KEYS | {"phase", "rankTable", "podTemplateHash", "startTime"}


def only_starting(old: dict, new: dict) -> bool:
    """Whether `new` is one more step of a gang's start after `old`, its placement: still Starting, the rank
    table not completed, nothing but STARTING_KEYS changed (a failure, a restart or Running is more)."""
    changed = {key for key in set(old) | set(new) if old.get(key) != new.get(key)}
    return (bool(changed) and changed <= STARTING_KEYS and new.get("phase") == "Starting"
            and old.get("phase") in ("Placing", "Starting") and (new.get("rankTable") or {}).get("status") != "completed")
