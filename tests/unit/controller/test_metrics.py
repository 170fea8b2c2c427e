"""The operator's own metrics, counted from status changes."""

from __future__ import annotations

from ascend_hybrid.controller import metrics


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
