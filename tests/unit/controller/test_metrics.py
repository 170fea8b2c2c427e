"""The operator's own metrics, counted from status changes."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

import pytest

from ascend_hybrid.controller import metrics
from ascend_hybrid.controller.loop import POD_EVENT_DELAY, STARTING_PROGRESS_SECONDS, Controller, unready_pods
from ascend_hybrid.controller.settings import OperatorSettings
from ascend_hybrid.reconcile.state import Decision, Observed
from ascend_hybrid.spec.rules import parse
from support.builders import JobBuilder, PodBuilder


def failures(namespace: str, cause: str) -> float:
    return metrics.FAILURES.labels(namespace=namespace, cause=cause)._value.get()


def test_each_new_last_failure_counts_once_by_cause():
    job = {"metadata": {"name": "j", "creationTimestamp": "2026-11-29T12:00:00Z"}}
    first = {"phase": "Restarting", "lastFailure": {"cause": "HCCLExecTimeout", "attempt": 1, "time": "t1"}}
    before = failures("metrics-ns", "HCCLExecTimeout")
    metrics.record_transition("metrics-ns", job, {"phase": "Running"}, first)
    metrics.record_transition("metrics-ns", job, first, {**first, "phase": "Pending"})  # the same failure
    assert failures("metrics-ns", "HCCLExecTimeout") == before + 1
    second = {"phase": "Failed", "lastFailure": {"cause": "NumericalDivergence", "attempt": 2, "time": "t2"}}
    metrics.record_transition("metrics-ns", job, {"phase": "Running", **first}, second)
    assert failures("metrics-ns", "NumericalDivergence") == 1
    assert failures("metrics-ns", "HCCLExecTimeout") == before + 1


def test_a_cause_outside_the_known_ones_is_counted_as_unknown():
    """A trainer may write any CamelCase cause into its termination record: the metric's label set stays closed."""
    from prometheus_client import REGISTRY

    job = {"metadata": {"name": "j", "creationTimestamp": "2026-11-29T12:00:00Z"}}
    before = failures("odd-ns", "Unknown")
    metrics.record_transition("odd-ns", job, {"phase": "Running"},
                              {"phase": "Restarting", "lastFailure": {"cause": "MadeUpByThePod", "attempt": 1}})
    assert failures("odd-ns", "Unknown") == before + 1
    assert REGISTRY.get_sample_value("ascend_hybrid_job_failures_total",
                                     {"namespace": "odd-ns", "cause": "MadeUpByThePod"}) is None


def recovery_count(rung: str, cause: str) -> tuple[float, float]:
    metrics.RECOVERY_SECONDS.labels(rung=rung, cause=cause)
    samples = {sample.name: sample.value for sample in metrics.RECOVERY_SECONDS.collect()[0].samples
               if sample.labels.get("rung") == rung and sample.labels.get("cause") == cause}
    return samples["ascend_hybrid_recovery_seconds_count"], samples["ascend_hybrid_recovery_seconds_sum"]


def test_each_recovery_is_observed_once_by_rung_and_cause():
    job = {"metadata": {"name": "j", "creationTimestamp": "2026-11-29T12:00:00Z"}}
    recovering = {"cause": "PeerFailed", "detected": "2026-11-29T12:01:00Z", "rungs": ["RestartRanks"],
                  "outcome": "Recovering"}
    done = {**recovering, "outcome": "Recovered", "recoveredBy": "RestartRanks", "seconds": 17.5}
    count, total = recovery_count("RestartRanks", "PeerFailed")
    old, new = {"recoveries": [recovering]}, {"recoveries": [done]}
    metrics.record_transition("metrics-ns", job, old, new)
    metrics.record_transition("metrics-ns", job, new, {"recoveries": [done], "goodput": 0.9})  # seen already
    assert recovery_count("RestartRanks", "PeerFailed") == (count + 1, total + 17.5)


def test_goodput_is_published_for_running_jobs():
    from ascend_hybrid.controller.records import JobRecord

    running, finished = JobRecord(phase="Running", goodput=0.75), JobRecord(phase="Succeeded", goodput=0.5)
    metrics.publish_job_gauges([(("ns", "a"), running), (("ns", "b"), finished)])
    published = {sample.labels["job"]: sample.value for sample in metrics.GOODPUT_RATIO.collect()[0].samples}
    assert published == {"a": 0.75}


def test_the_goodput_buckets_are_published_for_running_jobs():
    from ascend_hybrid.controller.records import JobRecord

    buckets = {"productive": 700.0, "slowSteps": 120.5, "redoneSteps": 30.0, "checkpointSaves": 20.0,
               "startsAndRestarts": 100.0, "waitingForPlacement": 29.5}
    running = JobRecord(phase="Running", goodput=0.7, goodput_seconds=buckets)
    finished = JobRecord(phase="Succeeded", goodput=0.5, goodput_seconds=buckets)
    metrics.publish_job_gauges([(("ns", "a"), running), (("ns", "b"), finished)])
    published = {(sample.labels["job"], sample.labels["bucket"]): sample.value
                 for sample in metrics.GOODPUT_SECONDS.collect()[0].samples}
    assert published == {("a", bucket): seconds for bucket, seconds in buckets.items()}


def test_the_slow_node_a_job_names_is_published_with_its_compute_ratio():
    from ascend_hybrid.controller.records import JobRecord

    slow = JobRecord(phase="Running", slow_node={"node": "node-7", "ratio": 1.52})
    metrics.publish_job_gauges([(("ns", "a"), slow), (("ns", "b"), JobRecord(phase="Running"))])
    published = {(s.labels["job"], s.labels["node"]): s.value for s in metrics.SLOW_NODE.collect()[0].samples}
    assert published == {("a", "node-7"): 1.52}


def observed_passes(outcome: str) -> float:
    metrics.RECONCILE_SECONDS.labels(outcome=outcome)  # the series exists before its first pass
    return next(sample.value for sample in metrics.RECONCILE_SECONDS.collect()[0].samples
                if sample.name.endswith("_count") and sample.labels == {"outcome": outcome})


class JobGoneKube:
    """A job deleted before its pass: the pass forgets it; `broken` makes the read itself fail."""

    def __init__(self, broken: bool = False):
        self.broken = broken

    def get_job(self, namespace, name):
        if self.broken:
            raise ConnectionError("apiserver unreachable")
        return None


@pytest.mark.parametrize(("broken", "outcome"), [(False, "forgotten"), (True, "error")])
def test_every_reconcile_pass_is_timed_by_its_outcome(broken, outcome):
    controller = Controller(kube=JobGoneKube(broken), settings=OperatorSettings(workers=1))
    before = observed_passes(outcome)
    controller.enqueue(("ns", "job"), delay=0.0)
    worker = threading.Thread(target=controller._work, daemon=True)
    worker.start()
    deadline = time.monotonic() + 10
    while observed_passes(outcome) == before and time.monotonic() < deadline:
        time.sleep(0.01)
    controller.queue.close()
    worker.join(timeout=10)
    assert observed_passes(outcome) == before + 1


class RecordingQueue:
    def __init__(self):
        self.added: list[tuple[tuple[str, str], float]] = []

    def add(self, key, delay=0.0, *, first=False):
        self.added.append((key, delay))


def test_a_pods_change_waits_for_as_much_cpu_as_its_jobs_last_pass_took():
    """A 2 048-pod gang's pass reads every pod: its pod changes are not answered back to back."""
    controller = Controller(kube=JobGoneKube(), settings=OperatorSettings(workers=1))
    controller.queue = RecordingQueue()
    controller.pod_changed(("ns", "new"))
    controller.record_of(("ns", "small")).pass_cpu = 0.01
    controller.pod_changed(("ns", "small"))
    controller.record_of(("ns", "big")).pass_cpu = 0.6
    controller.pod_changed(("ns", "big"))
    assert controller.queue.added == [(("ns", "new"), POD_EVENT_DELAY), (("ns", "small"), POD_EVENT_DELAY),
                                      (("ns", "big"), 0.6)]


def test_a_starting_gangs_progress_waits_until_its_last_pod_is_ready_for_the_rank_table():
    """While other pods of the attempt are not ready, a pod created, bound or started changes nothing a pass could
    act on: its pass waits; a failure or a deletion is followed after POD_EVENT_DELAY, the change that makes the
    last pod ready at once."""
    controller = Controller(kube=JobGoneKube(), settings=OperatorSettings(workers=1))
    controller.queue = RecordingQueue()
    key = ("ns", "job")
    controller.record_of(key).unready = frozenset({"job-a1-0", "job-a1-1"})
    created = PodBuilder("job", 0, namespace="ns").build()
    started = PodBuilder("job", 0, namespace="ns").running().devices(range(8)).build()
    failed = PodBuilder("job", 1, namespace="ns").running().exited(1).build()
    controller.pod_changed(key, None, created)
    controller.pod_changed(key, created, started)  # job-a1-1 is not ready yet
    controller.pod_changed(key, None, failed)
    controller.pod_changed(key, started, None)
    last = PodBuilder("job", 1, namespace="ns").running().devices(range(8)).build()
    controller.pod_changed(key, None, last)
    assert [delay for _, delay in controller.queue.added] == [STARTING_PROGRESS_SECONDS, STARTING_PROGRESS_SECONDS,
                                                              POD_EVENT_DELAY, POD_EVENT_DELAY, 0.0]
    assert controller.record_of(key).unready == frozenset()
    controller.pod_changed(key, last, last)  # ready again, nothing left to wait for: not followed at once again
    assert controller.queue.added[-1][1] == POD_EVENT_DELAY


def test_a_pod_ready_after_a_pass_read_it_is_not_waited_for_again():
    """The pass read job-a1-1 before it became ready, and records what it waits for after the change came: the
    change is remembered, or the last pod's change would wait for a pod that is ready."""
    controller = Controller(kube=JobGoneKube(), settings=OperatorSettings(workers=1))
    controller.queue = RecordingQueue()
    key = ("ns", "job")
    controller.wait_for(key, frozenset({"job-a1-0", "job-a1-1", "job-a1-2"}))
    ready = [PodBuilder("job", index, namespace="ns").running().devices(range(8)).build() for index in range(3)]
    controller.pod_changed(key, None, ready[1])
    controller.wait_for(key, frozenset({"job-a1-0", "job-a1-1", "job-a1-2"}))  # read before ready[1]'s change
    controller.pod_changed(key, None, ready[0])
    controller.pod_changed(key, None, ready[2])
    assert [delay for _, delay in controller.queue.added] == [STARTING_PROGRESS_SECONDS, STARTING_PROGRESS_SECONDS,
                                                              0.0]
    controller.wait_for(key, frozenset())
    assert controller.record_of(key).ready_seen == set()


def test_only_a_starting_pass_leaves_pods_to_wait_for():
    job = JobBuilder("job", namespace="ns").parallelism(data=2, tensor=8).per_pod(8).build()
    pods = (PodBuilder("job", 0, namespace="ns").running().devices(range(8)).build(),
            PodBuilder("job", 1, namespace="ns").build())
    observed = Observed(job=job, resolved=parse(job), spec_problems=(), pods=pods, rank_table=None,
                        children_ready=True, sched_ip=None, nodes={}, now=datetime(2026, 12, 4, tzinfo=UTC))
    assert unready_pods(observed, Decision(status={"phase": "Starting", "attempt": 1})) == {"job-a1-1"}
    assert unready_pods(observed, Decision(status={"phase": "Starting", "attempt": 2})) == {"job-a2-0", "job-a2-1"}
    assert unready_pods(observed, Decision(status={"phase": "Running", "attempt": 1})) == frozenset()


def test_a_pass_records_the_cpu_it_took():
    controller = Controller(kube=JobGoneKube(), settings=OperatorSettings(workers=1))
    key = ("ns", "job")
    controller.record_of(key)

    def busy(_key):
        deadline = time.thread_time() + 0.05
        while time.thread_time() < deadline:
            pass
        return None
    controller.reconcile = busy  # type: ignore[method-assign]
    controller.enqueue(key, delay=0.0)
    worker = threading.Thread(target=controller._work, daemon=True)
    worker.start()
    deadline = time.monotonic() + 10
    while controller.jobs[key].pass_cpu == 0.0 and time.monotonic() < deadline:
        time.sleep(0.01)
    controller.queue.close()
    worker.join(timeout=10)
    assert controller.jobs[key].pass_cpu >= 0.05
