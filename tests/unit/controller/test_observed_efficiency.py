"""The observed-efficiency book in the shell: each Running job's reading kept by its JobRecord, folded by the leader
into the operator's ConfigMap (server-side apply, only when it changed), read back when a replica starts leading,
and handed to the next passes."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

from ascend_hybrid.contracts import names
from ascend_hybrid.controller import observed as controller_observed
from ascend_hybrid.controller.loop import Controller, Indexes
from ascend_hybrid.monitoring.progress import Sample, training_status, utilization_status
from ascend_hybrid.planner import observed
from ascend_hybrid.reconcile import status_edge
from ascend_hybrid.reconcile.strategy import measured
from ascend_hybrid.spec.api import AscendHybridJobStatus, PlanStatus


class BookKube:
    def __init__(self, data: dict | None = None):
        self.data, self.reads, self.applied = data, 0, []

    def read_config_map(self, namespace, name):
        assert (namespace, name) == ("ops", names.OBSERVED_EFFICIENCY_CONFIG_MAP)
        self.reads += 1
        return None if self.data is None else {"data": self.data}

    def apply(self, manifest):
        self.applied.append(manifest)
        self.data = manifest["data"]
        return manifest


def running(steady: float, at: str = "2026-12-01T12:00:00Z", profile: str = "910B") -> dict:
    return {"phase": "Running", "utilization": {"sampledAt": at},
            "plan": {"hardware": profile, "time": {"stepSeconds": 2.0},
                     "measured": {"steadySteps": 30, "steadyStepSeconds": steady}}}


def controller(kube) -> Controller:
    return Controller(kube=kube, bound_indexes=Indexes(nodes=list, npu_pods=list, job_pods=lambda key: [],
                                                       device_infos=list))


def test_records_keep_each_jobs_reading_and_the_book_is_applied_only_when_it_changes():
    kube = BookKube()
    shell = controller(kube)
    try:
        shell.record(("ns", "a"), {}, {"phase": "Running"}, running(2.4))
        shell.record(("ns", "b"), {}, {"phase": "Running"}, running(2.0))
        shell.record(("ns", "warming"), {}, {"phase": "Running"}, {**running(9.0), "plan": {"hardware": "910B"}})
        assert sorted(r.job for r in shell.readings()) == ["ns/a", "ns/b"]
        book = controller_observed.EfficiencyBook(kube, "ops")
        assert book.fold(shell.readings()) and kube.reads == 1
        manifest = kube.applied[-1]
        assert manifest["metadata"] == {"name": names.OBSERVED_EFFICIENCY_CONFIG_MAP, "namespace": "ops",
                                        "labels": dict(names.MANAGED_BY)}
        assert observed.from_data(manifest["data"])["910B"] == {"ns/a": (1.2, "2026-12-01T12:00:00Z"),
                                                              "ns/b": (1.0, "2026-12-01T12:00:00Z")}
        assert not book.fold(shell.readings()) and len(kube.applied) == 1  # nothing new: no write
        assert book.factors()["910B"].factor == 1.1
    finally:
        shell.queue.close()


def test_a_new_leader_continues_the_book_the_config_map_holds():
    before = observed.fold({}, [observed.Reading("2026-12-01T11:00:00Z", "ns/old", "910B", 1.4)])
    kube = BookKube(observed.to_data(before))
    book = controller_observed.EfficiencyBook(kube, "ops")
    assert book.fold([observed.Reading("2026-12-01T12:00:00Z", "ns/new", "910B", 1.0)])
    assert set(observed.from_data(kube.data)["910B"]) == {"ns/old", "ns/new"}
    unreadable = BookKube({observed.DATA_KEY: "{"})
    book = controller_observed.EfficiencyBook(unreadable, "ops")
    assert book.fold([observed.Reading("2026-12-01T12:00:00Z", "ns/new", "910B", 1.0)])  # a new book replaces it
    assert set(observed.from_data(unreadable.data)["910B"]) == {"ns/new"}


class Leadership:
    def __init__(self, leading: bool):
        self.now = leading

    def leading(self) -> bool:
        return self.now


def test_the_loop_writes_only_while_leading_and_hands_the_factors_to_the_passes(monkeypatch):
    kube = BookKube()
    shell = controller(kube)
    shell.leadership = Leadership(False)
    shell.record(("ns", "a"), {}, {"phase": "Running"}, running(3.0))
    book = controller_observed.EfficiencyBook(kube, "ops")
    turns = []

    def sleep(seconds):
        turns.append(seconds)
        if len(turns) == 1:
            shell.leadership.now = True
        else:
            shell.queue.close()
    monkeypatch.setattr(controller_observed.time, "sleep", sleep)
    thread = threading.Thread(target=controller_observed.folding_loop(shell, book, 7.0))
    thread.start()
    thread.join(5)
    assert turns == [7.0, 7.0] and len(kube.applied) == 1  # the standby's turn wrote nothing
    assert shell.observed_efficiency["910B"].factor == 1.5
    seen = shell.observe(("ns", "a"), {"metadata": {"namespace": "ns", "name": "a", "generation": 1}, "spec": {}})
    assert seen.observed_efficiency["910B"].factor == 1.5


def test_simulated_steps_at_the_prediction_read_near_one():
    """What the demo's simulated jobs report (figures.py: predicted × 1 ± 5 %), turned into status as a pass
    does (progress.py, strategy.measured), folds to a factor near 1."""
    status = AscendHybridJobStatus(phase="Running", plan=PlanStatus(hardware="910B", time={"stepSeconds": 100.0}))
    for minute, (count, total) in enumerate(((20, 2000.0), (40, 4100.0))):
        sample = Sample("trainer", datetime(2026, 12, 1, 12, minute, tzinfo=UTC), step=count,
                        step_seconds=total / count, step_seconds_sum=total, step_count=count)
        status.training, status.utilization = training_status(sample, 1000), utilization_status(sample)
        assert status.plan is not None
        status.plan = measured(status.plan, status.training, status.utilization,
                               (sample.step_seconds_sum, sample.step_count))
    written = status_edge.dump(status_edge.Parsed(status))  # the status the shell reads back from the job
    reading = observed.reading_of("ns", "sim", written)
    assert reading == observed.Reading("2026-12-01T12:01:00Z", "ns/sim", "910B", 1.05)
    assert written["plan"]["stepTimeRatio"] == 1.05
