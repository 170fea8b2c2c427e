"""The job's conditions on its typed status (pure): one set as metav1.Condition wants — lastTransitionTime moves only
when its status flips — kept in CONDITION_TYPES' order, and one read by type."""

from __future__ import annotations

from datetime import datetime

from ascend_hybrid.contracts.conditions import CONDITION_TYPES, timestamp
from ascend_hybrid.spec.api import AscendHybridJobStatus, Condition


def rank(found: Condition) -> int:
    """Where a condition sorts: CONDITION_TYPES' order, any other type after them."""
    return CONDITION_TYPES.index(found.type) if found.type in CONDITION_TYPES else len(CONDITION_TYPES)


def condition(status: AscendHybridJobStatus, kind: str) -> Condition | None:
    """The condition of type `kind`, None when the status has none."""
    return next((found for found in status.conditions if found.type == kind), None)


def holds(status: AscendHybridJobStatus, kind: str) -> bool:
    """Whether condition `kind` is True."""
    found = condition(status, kind)
    return found is not None and found.status == "True"


def set_condition(status: AscendHybridJobStatus, kind: str, value: bool, reason: str, message: str, now: datetime,
                  generation: int | None) -> None:
    """Condition `kind` set to `value` with its reason and message, as of `now` and the spec's `generation`."""
    wanted = "True" if value else "False"
    found = condition(status, kind)
    if found is None:
        found = Condition(type=kind, status=wanted, reason=reason, last_transition_time=timestamp(now))
        status.conditions = [*status.conditions, found]
    elif found.status != wanted:
        found.last_transition_time = timestamp(now)
    found.status, found.reason, found.message, found.observed_generation = wanted, reason, message, generation
    status.conditions = sorted(status.conditions, key=rank)
