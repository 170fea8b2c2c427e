"""The kopf handlers' own logic: what the indexes keep, the empty diff base, and which job events wake a pass."""

from __future__ import annotations

import copy

import pytest

from ascend_hybrid import handlers
from ascend_hybrid.controller import Controller

INDEXES = {name: {} for name in ("ahj_nodes", "ahj_npu_pods", "ahj_job_pods", "ahj_device_infos")}


def pod_with_managed_fields() -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "labels": {"a": "b"},
                         "managedFields": [{"manager": "kube-scheduler", "operation": "Update"}]},
            "spec": {"nodeName": "node-0"}, "status": {"phase": "Running", "podIP": "127.16.0.5"}}


def test_indexes_keep_everything_but_managed_fields_and_leave_the_event_as_it_was():
    body = pod_with_managed_fields()
    original = copy.deepcopy(body)
    indexed = handlers._indexed(body)
    assert "managedFields" not in indexed["metadata"]
    assert {**indexed, "metadata": {**indexed["metadata"], "managedFields": original["metadata"]["managedFields"]}} \
        == original
    assert body == original


def test_an_object_without_managed_fields_is_indexed_as_it_is():
    body = {"metadata": {"name": "n"}, "status": {}}
    assert handlers._indexed(body) == body


def test_the_diff_base_stays_empty_since_no_changing_handler_reads_it():
    storage = handlers.EventHandlersOnlyDiffBase(prefix="hybrid.ascend.dev")
    assert storage.build(body=pod_with_managed_fields()) == {}


@pytest.fixture
def controller(monkeypatch):
    controller = Controller(kube=None, snapshot=None)
    monkeypatch.setattr(handlers, "CONTROLLER", controller)
    yield controller
    controller.queue.close()


def job_event(controller, event_type: str, resource_version: str) -> bool:
    """Whether the event queued a pass of the job."""
    handlers.job_changed(namespace="ns", name="job", type=event_type, meta={"resourceVersion": resource_version},
                         **INDEXES)
    return controller.queue.get(timeout=0.5) == ("ns", "job")


def test_the_echo_of_our_own_status_write_queues_no_pass_but_anything_newer_does(controller):
    controller.last_written[("ns", "job")] = "41"
    assert not job_event(controller, "MODIFIED", "41")
    assert job_event(controller, "MODIFIED", "42")


def test_deletion_always_queues_a_pass(controller):
    controller.last_written[("ns", "job")] = "41"
    assert job_event(controller, "DELETED", "41")
    assert not controller.wrote_last(("ns", "job"), None)
