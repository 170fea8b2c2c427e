"""A decision that tells the launchers a new rank generation records it in the job's status first: an operator
killed between the two writes leaves the status ahead of `<job>-recovery`, never the channel ahead of a status
that knows no incident (tests/faults/test_recovery_rungs.py kills it there)."""

from __future__ import annotations

import time

import pytest

from ascend_hybrid.controller import loop
from ascend_hybrid.controller.loop import Controller, Indexes
from ascend_hybrid.reconcile.actions import SignalLaunchers
from ascend_hybrid.reconcile.state import Decision
from support.builders import job_body


class Killed(Exception):
    """The operator's process ends here."""


class OrderKube:
    def __init__(self, job: dict, kill_at: str | None = None):
        self.job, self.kill_at, self.calls = job, kill_at, []

    def get_job(self, namespace, name):
        return self.job

    def patch_job_status(self, namespace, name, old, new):
        if old == new:  # as Kube: nothing to send, no call
            return None
        self.calls.append(("status", new.get("recovery", {}).get("generation")))
        if self.kill_at == "status":
            raise Killed
        self.job = {**self.job, "metadata": {**self.job["metadata"], "resourceVersion": "2"}, "status": new}
        return self.job

    def apply(self, manifest):
        self.calls.append(("apply", manifest["kind"], manifest["data"].get("generation")))
        if self.kill_at == "apply":
            raise Killed
        return manifest

    def create(self, manifest):  # the launchers' grant: fresh in these passes, so never called
        self.calls.append(("create", manifest["kind"]))

    def read_config_map(self, namespace, name):
        return None

    def read_launcher_channel(self, namespace, name):
        return None


def run_pass(kube: OrderKube, monkeypatch) -> None:
    status = {**kube.job["status"], "recovery": {"generation": 1, "rung": "RestartRanks"}}
    decisions = iter([Decision(actions=[SignalLaunchers(1, "default")], status=status)])
    monkeypatch.setattr(loop, "decide", lambda observed: next(decisions, Decision(status=status)))
    controller = Controller(kube=kube, bound_indexes=Indexes(nodes=list, npu_pods=list, job_pods=lambda key: [],
                                                           device_infos=list))
    controller.record_of(("ns", "job")).granted = ("u", time.monotonic())  # its grant was created before
    try:
        controller._reconcile(("ns", "job"), [])
    finally:
        controller.queue.close()


def a_job() -> dict:
    job = job_body({"parallelism": {"data": 2, "tensor": 8}, "npu": {"perPod": 8}})
    job["metadata"].update(namespace="ns", uid="u", resourceVersion="1")
    job["status"] = {"phase": "Running", "attempt": 1, "recovery": {"generation": 0}}
    return job


def test_the_new_generation_is_in_the_status_before_the_launchers_are_told(monkeypatch):
    kube = OrderKube(a_job())
    run_pass(kube, monkeypatch)
    assert kube.calls[:2] == [("status", 1), ("apply", "LauncherChannel", "1")]
    assert ("status", 1) not in kube.calls[2:]  # the pass's own write after it has nothing left to send


@pytest.mark.parametrize("kill_at", ["status", "apply"])
def test_a_kill_between_the_writes_never_leaves_the_configmap_ahead(kill_at, monkeypatch):
    kube = OrderKube(a_job(), kill_at)
    with pytest.raises(Killed):
        run_pass(kube, monkeypatch)
    told = [call for call in kube.calls if call[0] == "apply"]
    assert not told or kube.job["status"]["recovery"]["generation"] == 1


def test_a_decision_that_writes_the_rank_table_writes_it_before_the_status_that_names_it():
    from ascend_hybrid.controller.loop import intent_first
    from ascend_hybrid.reconcile.actions import WriteRankTable
    signal = SignalLaunchers(0, "default")
    assert intent_first(Decision(actions=[signal]))
    assert not intent_first(Decision(actions=[WriteRankTable({"status": "completed"}, 1), signal]))
