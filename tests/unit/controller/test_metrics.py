"""The operator's own metrics, counted from status changes."""

from __future__ import annotations

import threading
import time

import pytest

from ascend_hybrid.controller import metrics
from ascend_hybrid.controller.loop import Controller
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
