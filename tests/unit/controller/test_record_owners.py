"""A JobRecord's fields written by more than one thread: each handed over whole or under its lock, so that no
thread acts on half of another's write (records.py)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import pytest

from ascend_hybrid.controller import observed
from ascend_hybrid.controller.loop import Controller, JobRecord
from ascend_hybrid.controller.records import CachedJob, OfferedSample
from ascend_hybrid.diagnosis import checkpointing
from ascend_hybrid.monitoring.progress import Sample
from ascend_hybrid.reconcile.actions import PodToCreate

KEY = ("ns", "job")


def job(version: str) -> dict:
    return {"metadata": {"name": "job", "namespace": "ns", "resourceVersion": version}, "status": {"phase": "Running"}}


class OvertakenKube:
    """Someone else changes the job while the pass reads or writes it: its watch event comes before the answer."""

    def __init__(self):
        self.controller: Controller | None = None
        self.reads = 0

    def changed_meanwhile(self) -> None:
        assert self.controller is not None
        self.controller.job_changed(KEY, "99", deleted=False)

    def get_job(self, namespace, name):
        self.reads += 1
        self.changed_meanwhile()
        return job(str(self.reads))

    def patch_job_status(self, namespace, name, old, new):
        self.changed_meanwhile()
        return {**job("50"), "status": new}


@pytest.fixture
def overtaken():
    kube = OvertakenKube()
    controller = Controller(kube=kube)  # type: ignore[arg-type]
    kube.controller = controller
    yield controller, kube
    controller.queue.close()


def test_a_read_of_the_job_that_a_change_overtook_is_not_kept_for_the_next_pass(overtaken):
    controller, kube = overtaken
    assert controller.current_job(KEY) is not None
    controller.current_job(KEY)
    assert kube.reads == 2, "the change's pass reads the job again"


def test_a_status_write_that_a_change_overtook_is_not_kept_for_the_next_pass(overtaken):
    controller, _ = overtaken
    controller.write_status(KEY, job("1"), {}, {"phase": "Running"})
    assert controller.record_of(KEY).job is None


class DroppedOnFirstRead(JobRecord):
    """A record whose cached job a watch drops right after a thread first reads it."""

    @property  # type: ignore[override]
    def cached(self) -> CachedJob | None:
        held, self._held = self.__dict__.get("_held"), None
        return held

    @cached.setter
    def cached(self, value: CachedJob | None) -> None:
        self._held = value


def dropped_record(body: dict) -> DroppedOnFirstRead:
    record = DroppedOnFirstRead()
    record.cached = CachedJob(body, float("inf"))  # "since" in the future: fresh for any horizon
    return record


def test_a_pass_finds_the_cached_job_even_if_a_watch_drops_it_as_it_reads():
    """Dropped between two reads, the job would read as deleted and the pass would forget the job."""
    controller = Controller(kube=None)  # type: ignore[arg-type]
    body = job("7")
    controller.jobs[KEY] = dropped_record(body)
    assert controller.current_job(KEY) is body
    controller.queue.close()


def test_the_observed_loop_reads_each_cached_job_once():
    """The observed-efficiency loop must not end because a job's cache was dropped under it."""
    controller = Controller(kube=None)  # type: ignore[arg-type]
    body = job("7")
    slow = {"node": "n1", "since": "2026-12-08T00:10:00Z", "ratio": 1.5}
    body["status"] |= {"startTime": "2026-12-08T00:00:00Z", "slowNodes": [slow, {"node": 7, "futureKey": 1}],
                       "recoveries": [{"cause": "NodeNotReady", "node": "n1", "futureKey": 1,
                                       "detected": "2026-12-08T00:05:00Z"}]}
    controller.jobs[KEY] = dropped_record(body)
    [(key, status)] = observed.job_statuses(controller)
    assert key == KEY and status.start_time == "2026-12-08T00:00:00Z" and status.phase is None  # what the folds read
    assert [entry.model_dump(exclude_none=True) for entry in status.slow_nodes] == [slow]  # the odd entry skipped
    assert [(record.cause, record.node) for record in status.recoveries] == [("NodeNotReady", "n1")]
    controller.queue.close()


def test_times_the_folds_cannot_read_leave_the_job_out_and_the_loop_goes_on():
    """startTime and an incident's detected are strings to the schema: one another version or a hand wrote wrong
    must not end the observed-efficiency thread."""
    controller = Controller(kube=None)  # type: ignore[arg-type]
    body = job("7")
    body["status"] |= {"startTime": "yesterday", "placement": {"nodes": ["n1"]},
                       "recoveries": [{"cause": "NodeNotReady", "node": "n1", "detected": "2026-12-08T00:00:00"}]}
    controller.jobs[KEY] = dropped_record(body)
    [(_, status)] = observed.job_statuses(controller)
    assert status.start_time is None and status.recoveries == []
    observed.fold_cluster(controller)
    assert controller.node_faults == checkpointing.NodeFaults(0.0, 0.0)
    controller.queue.close()


def test_a_reading_offered_for_an_attempt_the_job_left_is_not_used():
    """The telemetry thread checks the attempt, then offers; a pass may move the job to its next attempt in between:
    the offer carries its attempt, so the new attempt never reads the old pods' figures."""
    sample = Sample("trainer", datetime.now(UTC))
    record = JobRecord(attempt=1)
    record.offered = OfferedSample(1, sample)
    assert record.sample() is sample
    record.attempt = 2
    assert record.sample() is None


def test_promises_are_written_under_the_placement_lock():
    """Another job's placement forgets, under the lock, the promises its inventory shows (placing.reserved)."""
    controller = Controller(kube=None)  # type: ignore[arg-type]
    pod = PodToCreate({"metadata": {"name": "job-a1-0"}}, "node-001", 8)
    with controller.placement_lock:
        writer = threading.Thread(target=controller.promise, args=(KEY, [pod]))
        writer.start()
        writer.join(0.2)
        assert writer.is_alive() and controller.record_of(KEY).promised == {}
    writer.join(5)
    assert controller.record_of(KEY).promised == {"job-a1-0": ("node-001", 8)}
    controller.queue.close()


def test_a_child_deleted_while_a_pass_records_its_children_applied_waits_for_it():
    """The pass checks that no deletion came while it applied, then records the generation applied: a deletion
    seen between the check and the record would be lost, and the child never made again."""
    controller = Controller(kube=None)  # type: ignore[arg-type]
    record = controller.record_of(KEY)
    record.children_generation = 1
    with record.children_lock:
        deleted = threading.Thread(target=controller.child_changed,
                                   args=(KEY, "Service", "job", "DELETED", {"metadata": {"name": "job"}}))
        deleted.start()
        deleted.join(0.2)
        assert deleted.is_alive() and record.children_epoch == 0
    deleted.join(5)
    assert record.children_epoch == 1 and record.children_generation is None
    controller.queue.close()


class EchoFirstKube:
    """The echo of our own status write comes before the write's answer."""

    def __init__(self):
        self.controller: Controller | None = None

    def patch_job_status(self, namespace, name, old, new):
        assert self.controller is not None
        self.controller.job_changed(KEY, "50", deleted=False)
        return {**job("50"), "status": new}


def test_the_echo_of_our_own_write_before_its_answer_keeps_the_written_job():
    kube = EchoFirstKube()
    controller = Controller(kube=kube)  # type: ignore[arg-type]
    kube.controller = controller
    written, _ = controller.write_status(KEY, job("1"), {}, {"phase": "Running"})
    assert controller.record_of(KEY).job is written, "no read for the pass our own echo queued"
    controller.queue.close()
