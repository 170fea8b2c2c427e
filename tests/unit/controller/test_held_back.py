"""A job held back behind an older one (placing._hold): its Queued status is written only when the wait is real —
behind a job a try found short of chips, or after `status_coalesce_seconds` of holding; a job held only behind one
not tried yet is placed a moment later, and in a burst of jobs that write would be one per job, overwritten."""

from __future__ import annotations

import time

from ascend_hybrid.controller import placing
from ascend_hybrid.controller.loop import Controller, JobRecord, Next
from ascend_hybrid.reconcile.state import SLOW_REQUEUE_SECONDS, Decision

OLDER = ("2026-12-01T00:00:00Z", "ns", "older")


def held(controller: Controller, record: JobRecord) -> Decision:
    decision = Decision(status={"phase": "Pending"}, requeue_after=SLOW_REQUEUE_SECONDS)
    placing._hold(controller, record, OLDER, decision)
    return decision


def test_behind_a_job_not_tried_yet_the_status_waits():
    controller = Controller(kube=None)
    decision = held(controller, JobRecord())
    assert decision.provisional and 0 < decision.requeue_after <= controller.settings.status_coalesce_seconds
    assert controller.defer_progress(("ns", "young"), Next.WAIT, {}, decision) == decision.requeue_after
    controller.queue.close()


def test_a_pass_that_posts_events_writes_its_status_even_when_held_back_for_a_moment():
    """An auto job's first pass posts StrategyChosen with the plan it writes: unwritten, the next pass would plan
    and post it again."""
    from ascend_hybrid.reconcile.actions import PostEvent

    controller = Controller(kube=None)
    decision = held(controller, JobRecord())
    controller.record_of(("ns", "young")).events.append(PostEvent("Normal", "StrategyChosen", "data 8"))
    assert decision.provisional and controller.defer_progress(("ns", "young"), Next.WAIT, {}, decision) is None
    controller.queue.close()


def test_behind_a_job_held_back_itself_the_status_waits():
    controller = Controller(kube=None)
    controller.jobs[("ns", "older")] = JobRecord(queue_key=OLDER, waiting=True, held_since=time.monotonic())
    assert held(controller, JobRecord()).provisional
    controller.queue.close()


def test_behind_a_job_short_of_chips_the_queued_status_is_written():
    controller = Controller(kube=None)
    controller.jobs[("ns", "older")] = JobRecord(queue_key=OLDER, waiting=True)
    decision = held(controller, JobRecord())
    assert not decision.provisional and decision.requeue_after == SLOW_REQUEUE_SECONDS
    assert controller.defer_progress(("ns", "young"), Next.WAIT, {}, decision) is None
    controller.queue.close()


def test_a_hold_longer_than_the_coalescing_window_is_written():
    controller = Controller(kube=None)
    record = JobRecord(held_since=time.monotonic() - controller.settings.status_coalesce_seconds - 1)
    assert not held(controller, record).provisional
    controller.queue.close()


def test_the_hold_counts_from_the_first_time_it_was_held_back():
    controller = Controller(kube=None)
    record = JobRecord()
    held(controller, record)
    first = record.held_since
    held(controller, record)
    assert record.held_since == first is not None
    controller.queue.close()
