"""Requests the apiserver refused, as an observation for the next `decision.decide` (pure).

The shell (`controller/kube.py`) turns an API error that no retry can fix into a `Refusal`: 400 (BadRequest) and
422 (Invalid) say the object itself is wrong — a pod template with an invalid env name, label or quantity — so the
job fails at once with the apiserver's own message instead of retrying a request that can never succeed; 403
(Forbidden: RBAC, a quota, Pod Security admission) may be fixed by an administrator, so the job says which verb on
which resource was refused, in the `Authorized` condition, and tries again every `RETRY_SECONDS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ascend_hybrid.spec.api import AscendHybridJobStatus
from ascend_hybrid.spec.conditions import condition, set_condition

INVALID_POD_TEMPLATE = "InvalidPodTemplate"
FORBIDDEN = "Forbidden"
AUTHORIZED = "Authorized"
PERMANENT_STATUSES = frozenset({400, 422})
REFUSED_STATUSES = PERMANENT_STATUSES | {403}
RETRY_SECONDS = 15.0


@dataclass(frozen=True)
class Refusal:
    verb: str        # create, apply, patch, delete
    resource: str    # pods, services, configmaps, …
    name: str        # the object refused ("" when the apiserver did not say)
    namespace: str
    status: int      # 400, 403 or 422
    message: str     # the apiserver's own words
    at: datetime

    @property
    def permanent(self) -> bool:
        return self.status in PERMANENT_STATUSES

    def describe(self) -> str:
        target = f"{self.resource} {self.name}" if self.name else self.resource
        if self.permanent:
            return f"the apiserver refused to {self.verb} {target} ({self.status}): {self.message}"
        return (f"the operator may not {self.verb} {self.resource} in namespace {self.namespace} "
                f"(403 Forbidden): {self.message}")

    def waited(self, now: datetime) -> float:
        return (now - self.at).total_seconds()


def forbid(status: AscendHybridJobStatus, refusal: Refusal, now: datetime, generation: int | None) -> bool:
    """Sets `Authorized=False` naming the verb and resource; True when it was not already so (post one event)."""
    previous = condition(status, AUTHORIZED)
    was = (previous.status, previous.message) if previous is not None else None  # read before set_condition edits it
    message = refusal.describe()
    set_condition(status, AUTHORIZED, False, FORBIDDEN, message, now, generation)
    return was != ("False", message)


def allow(status: AscendHybridJobStatus, now: datetime, generation: int | None) -> None:
    """A request refused with 403 went through since: the condition says so (it is never added otherwise)."""
    previous = condition(status, AUTHORIZED)
    if previous is not None and previous.status == "False":
        set_condition(status, AUTHORIZED, True, "Allowed", "the operator's requests are accepted again", now,
                      generation)
