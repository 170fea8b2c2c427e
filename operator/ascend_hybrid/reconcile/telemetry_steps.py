"""The reconcile steps of a running job's telemetry (pure): progress and utilization into status, the planner's
prediction against what is measured, and the anomaly conditions (LoadImbalanced, Straggling, TrainingStalled).

reconcile._Pass mixes TelemetrySteps in: the steps use its helpers (cond, d.emit) and its observation `o`.
"""

from __future__ import annotations

from ascend_hybrid.contracts.conditions import condition
from ascend_hybrid.diagnosis.hints import prediction
from ascend_hybrid.monitoring import anomalies
from ascend_hybrid.monitoring.progress import Sample, training_status, utilization_status
from ascend_hybrid.reconcile import strategy


class TelemetrySteps:
    """Steps fed by the latest telemetry Sample; the attributes and helpers come from reconcile._Pass."""

    def record_telemetry(self) -> None:
        """Progress and utilization from the latest reading; a failed reading leaves the old figures (their
        sampledAt tells their age) and says why, once, in a condition and an event."""
        sample = self.o.telemetry
        if sample is None:
            return
        if sample.ok:
            self.status["training"] = training_status(sample, self.o.effective.spec.training.steps)
            self.status["utilization"] = utilization_status(sample)
            if self.status.get("plan"):
                self.status["plan"] = strategy.measured(self.status["plan"], self.status["training"],
                                                        self.status["utilization"])
            self.cond("MetricsAvailable", True, "Sampled", f"read from {sample.source}")
            self.record_anomalies(sample)
            return
        if sample.no_data_yet and "training" not in self.status:
            self.cond("MetricsAvailable", False, "NoDataYet", sample.error)  # the first scrape has not happened
            return
        previous = condition(self.status, "MetricsAvailable")
        if previous is None or previous["status"] == "True" or previous["reason"] == "NoDataYet":
            self.d.emit("Warning", "MetricsUnavailable", f"{sample.error}; training and utilization figures go stale")
        self.cond("MetricsAvailable", False, "SourceUnreachable", sample.error)

    def record_anomalies(self, sample: Sample) -> None:
        """LoadImbalanced, Straggling, TrainingStalled from this sample and the attempt's history in
        status.monitoring; one Warning event when one turns on."""
        e = self.o.effective
        evaluation = prediction(e)
        folded = anomalies.fold(self.status.get("monitoring"), sample, e.spec.monitoring,
                                evaluation.time.step if evaluation is not None else None)
        if folded is None:
            return  # this sample was folded in by an earlier pass
        self.status["monitoring"], changes = folded
        for change in changes:
            if change.on and (condition(self.status, change.kind) or {}).get("status") != "True":
                self.d.emit("Warning", change.kind, change.message)
            self.cond(change.kind, change.on, change.reason, change.message)
