"""The reconcile steps of a running job's telemetry (pure): progress and utilization into status, the planner's
prediction against what is measured, and the anomaly conditions (LoadImbalanced, Straggling, TrainingStalled).

Each step is a function of the pass (state.Pass): it reads `p.o`, writes `p.s` (the status) and `p.d`.
"""

from __future__ import annotations

from typing import cast

from ascend_hybrid.diagnosis.hints import prediction
from ascend_hybrid.monitoring import anomalies
from ascend_hybrid.monitoring.progress import Sample, training_status, utilization_status
from ascend_hybrid.reconcile import strategy
from ascend_hybrid.reconcile.state import Pass


def record_telemetry(p: Pass) -> None:
    """Progress and utilization from the latest reading; a failed reading leaves the old figures (their
    sampledAt tells their age) and says why, once, in a condition and an event."""
    sample = p.o.telemetry
    if sample is None:
        return
    if sample.ok:
        p.s.training = training_status(sample, p.resolved.spec.training.steps)
        p.s.utilization = utilization_status(sample)
        if p.s.plan is not None:
            p.s.plan = strategy.measured(p.s.plan, p.s.training, p.s.utilization,
                                         (sample.step_seconds_sum, sample.step_count))
        record_rejections(p, sample)
        record_anomalies(p, sample)
        return
    error = cast(str, sample.error)  # not None: Sample.ok is `error is None`
    if sample.no_data_yet and p.s.training is None:
        p.cond("MetricsAvailable", False, "NoDataYet", error)  # the first scrape has not happened
        return
    previous = p.condition("MetricsAvailable")
    if previous is None or previous.status == "True" or previous.reason == "NoDataYet":
        p.d.emit("Warning", "MetricsUnavailable", f"{error}; training and utilization figures go stale")
    p.cond("MetricsAvailable", False, "SourceUnreachable", error)


def record_rejections(p: Pass, sample: Sample) -> None:
    """MetricsAvailable, saying when lines or pages of the source were refused (skipped, the rest read): one
    Warning event when that begins. Pods whose endpoints did not answer are named (PartlyRead), without an event:
    a busy or throttled node's endpoint misses a reading now and then, and the next one is a few seconds away."""
    if not sample.rejected:
        if sample.unread:
            p.cond("MetricsAvailable", True, "PartlyRead", f"read from {sample.source}; not from "
                                                           f"{'; '.join(sample.unread)}"[:1024])
            return
        p.cond("MetricsAvailable", True, "Sampled", f"read from {sample.source}")
        return
    message = (f"read from {sample.source}, {sample.rejected_lines or len(sample.rejected)} lines or pages "
               f"refused and skipped: {'; '.join(sample.rejected)}")
    previous = p.condition("MetricsAvailable")
    if (previous.reason if previous is not None else None) != "PartlyRefused":
        p.d.emit("Warning", "MetricsRefused", message)
    p.cond("MetricsAvailable", True, "PartlyRefused", message)


def record_anomalies(p: Pass, sample: Sample) -> None:
    """LoadImbalanced, Straggling, TrainingStalled from this sample and the attempt's history in
    status.monitoring; one Warning event when one turns on."""
    e = p.resolved
    evaluation = prediction(e)
    folded = anomalies.fold(p.s.monitoring, sample, e.spec.monitoring,
                            evaluation.time.step if evaluation is not None else None)
    if folded is None:
        return  # this sample was folded in by an earlier pass
    p.s.monitoring, changes = folded
    for change in changes:
        if change.on and not p.holds(change.kind):
            p.d.emit("Warning", change.kind, change.message)
        p.cond(change.kind, change.on, change.reason, change.message)
