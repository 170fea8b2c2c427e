"""The operator's own metrics, counted from status changes."""

from __future__ import annotations

import threading
import time

import pytest

from ascend_hybrid.controller import metrics
from ascend_hybrid.controller.loop import POD_EVENT_DELAY, Controller
from ascend_hybrid.controller.settings import OperatorSettings


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
