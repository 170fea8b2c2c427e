"""The one-pod start: a one-pod job on the direct path writes its placement with its start's next status write.

Its pod is created bound to its node, so the pod holds the chips and says where it is: the placement status may
wait for the next real change (Running, a failure) or `status_coalesce_seconds`, whichever comes first, and the
job's start is one status write instead of two. Meanwhile the job's passes decide from the status kept here; a
process that starts without it records the placement from the pod (decision.unrecorded_pods). A gang's placement
is written before its pods: a process stopped halfway through creating them would leave no record of where the
others go. A job whose pods Kueue admits or Volcano binds is created unbound: its status is its only record.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ascend_hybrid.contracts import conditions
from ascend_hybrid.reconcile.actions import Place
from ascend_hybrid.reconcile.state import Decision


def places_first(action: object, coalesce_seconds: float, through_volcano: bool) -> bool:
    """Whether `action` places a one-pod job on the direct path whose status may wait (`through_volcano`: whether
    Volcano binds the job's pods)."""
    return isinstance(action, Place) and not action.job.spec.scheduling.queue and action.job.pod_count == 1 \
        and not through_volcano and coalesce_seconds > 0


@dataclass
class OnePodStart:
    """A one-pod job's status decided since its placement and not written yet. Owned by the job's passes."""

    status: dict | None = None      # the status the passes decide from until it is written
    since: float = 0.0              # when it was placed (monotonic)
    uid: str | None = None          # the uid of the job it was decided for

    def resume(self, job: dict) -> dict:
        """`job` with the status kept for it — this job's, not one deleted and made again under its name before
        a pass saw it go."""
        if self.status is not None and self.uid != job["metadata"].get("uid"):
            self.status = None
        return job if self.status is None else {**job, "status": self.status}

    def keep(self, job: dict, decision: Decision, placed_first: bool) -> None:
        """The status of a step decided again without a write: kept from the placement on, so that a pass that
        fails before or after creating the pod finds the placement again, as it would have found it written."""
        if self.status is None and placed_first:
            self.since, self.uid = time.monotonic(), job["metadata"].get("uid")
            self.status = decision.status
        elif self.status is not None:
            self.status = decision.status

    def defer(self, waits: bool, decision: Decision, coalesce_seconds: float) -> float | None:
        """Seconds to wait instead of writing the status of a pass that ends waiting (`waits`), while it only
        moves the kept start on and the window is open; None: write it now."""
        if not waits or self.status is None:
            return None
        kept, status = self.status, decision.status
        if not (status == kept or conditions.only_progress(kept, status) or conditions.only_starting(kept, status)):
            return None
        left = coalesce_seconds - (time.monotonic() - self.since)
        if left <= 0:
            return None
        self.status = status
        return left if decision.requeue_after is None else min(left, decision.requeue_after)

    def written(self) -> None:
        self.status = None
