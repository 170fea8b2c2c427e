"""The kopf handlers' own logic: what the indexes keep, the empty diff base, and which job events wake a pass."""

from __future__ import annotations

import logging

import kopf
import pytest

from ascend_hybrid.controller import handlers
from ascend_hybrid.controller.loop import Controller


def pod_with_managed_fields() -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "labels": {"a": "b"},
                         "managedFields": [{"manager": "kube-scheduler", "operation": "Update"}]},
            "spec": {"nodeName": "node-0"}, "status": {"phase": "Running", "podIP": "127.16.0.5"}}


def test_the_diff_base_stays_empty_since_no_changing_handler_reads_it():
    storage = handlers.EventHandlersOnlyDiffBase(prefix="hybrid.ascend.dev")
    assert storage.build(body=pod_with_managed_fields()) == {}


@pytest.fixture
def memo():
    memo = kopf.Memo(controller=Controller(kube=None))
    yield memo
    memo.controller.queue.close()


def job_event(memo, event_type: str, resource_version: str, body: dict | None = None) -> bool:
    """Whether the event queued a pass of the job."""
    body = body or {"metadata": {"name": "job", "namespace": "ns", "resourceVersion": resource_version}}
    handlers.job_changed(namespace="ns", name="job", type=event_type, meta={"resourceVersion": resource_version},
                         body=body, memo=memo)
    return memo.controller.queue.get(timeout=0.5) == ("ns", "job")


def test_a_jobs_first_event_is_its_first_pass_job_later_ones_mean_read_it_again(memo):
    """The first pass of a job this process has not seen decides on the event's body (no GET); a later
    event may be older than what our own last write returned, so it only drops the kept job."""
    controller = memo.controller
    first = {"metadata": {"name": "job", "namespace": "ns", "resourceVersion": "7"}, "spec": {"a": {"b": 1}}}
    assert job_event(memo, "ADDED", "7", first)
    controller.queue.done(("ns", "job"))
    kept = controller.current_job(("ns", "job"))  # Kube is None here: a read would fail
    assert kept == first and kept["spec"] is not first["spec"], "a copy: the watch's object is not the pass's"
    assert job_event(memo, "MODIFIED", "8", {**first, "metadata": {**first["metadata"], "resourceVersion": "8"}})
    assert controller.record_of(("ns", "job")).job is None


def test_the_echo_of_our_own_status_write_queues_no_pass_but_anything_newer_does(memo):
    memo.controller.record_of(("ns", "job")).last_written = "41"
    assert not job_event(memo, "MODIFIED", "41")
    assert job_event(memo, "MODIFIED", "42")


def test_startup_hands_the_job_index_and_the_watches_stores_to_the_controller(memo):
    from ascend_hybrid.controller.clusterwatch import NamedStore
    from ascend_hybrid.controller.podwatch import PodStore

    memo.pods, memo.nodes, memo.device_infos = PodStore(), NamedStore(), NamedStore(sources=0)
    memo.pods.replace(None, [{"metadata": {"name": "job-a1-0", "namespace": "ns",
                                           "labels": {handlers.names.JOB_LABEL: "job"}}}], "watch")
    memo.nodes.replace(None, [{"metadata": {"name": "n1"}}], "watch")
    jobs = {("ns", "job"): [handlers.backlog.entry({"metadata": {"name": "job", "namespace": "ns"}})]}
    handlers.bind_indexes(memo=memo, ahj_jobs=jobs)
    indexes = memo.controller.indexes
    assert [entry.name for entry in indexes.jobs()] == ["job"]
    assert indexes.nodes() == [{"metadata": {"name": "n1"}}] and indexes.npu_pods() == []
    assert indexes.device_infos() == []  # not watched in this scope: empty, and complete
    memo.nodes.apply("ADDED", {"metadata": {"name": "n2"}})
    assert len(indexes.nodes()) == 2
    assert [pod["metadata"]["name"] for pod in indexes.job_pods(("ns", "job"))] == ["job-a1-0"]
    assert indexes.job_pods(("ns", "other")) == []


def test_deletion_always_queues_a_pass(memo):
    controller = memo.controller
    controller.record_of(("ns", "job")).last_written = "41"
    assert job_event(memo, "DELETED", "41")
    assert not controller.wrote_last(("ns", "job"), None)


def test_in_a_pod_the_login_finds_the_apiserver_by_kubernetes_service_host_and_port(tmp_path, monkeypatch):
    """As client-go does, and as the operator's own client does: no cluster DNS needed (kubernetes.default.svc)."""
    from kubernetes.config import incluster_config

    token, ca = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text("the-pod-token")  # as the kubelet writes it: no newline
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    monkeypatch.setattr(handlers, "SERVICE_ACCOUNT_TOKEN", str(token))
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(token))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(ca))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "23456")
    info = handlers.login(logger=logging.getLogger("test"), settings=kopf.OperatorSettings())
    assert (info.server, info.token, info.ca_path) == ("https://127.0.0.1:23456", "the-pod-token", str(ca))


def test_a_capacity_change_wakes_the_head_of_each_queue_and_every_job_not_queued(memo):
    controller = memo.controller
    for index in range(20):
        record = controller.record_of(("ns", f"q{index:02d}"))
        record.phase, record.waiting, record.chip = "Pending", True, "910A" if index == 19 else "910B"
        record.queue_key = (f"2026-12-01T10:00:{index:02d}Z", "ns", f"q{index:02d}")
    controller.record_of(("ns", "fresh")).phase = "Pending"
    controller.record_of(("ns", "running")).phase = "Running"
    controller.wake_pending()
    woken = set()
    while (key := controller.queue.get(timeout=2)) is not None:
        woken.add(key[1])
        controller.queue.done(key)
    heads = {f"q{index:02d}" for index in range(controller.settings.workers * 2)}
    assert woken == heads | {"q19", "fresh"}


class CountingKube:
    def __init__(self):
        self.reads = 0

    def get_job(self, namespace, name):
        self.reads += 1
        return {"metadata": {"name": name, "namespace": namespace, "resourceVersion": f"r{self.reads}"}}


def test_a_pass_reuses_the_job_its_last_write_returned_until_anyone_else_changes_the_job():
    from ascend_hybrid.controller.settings import OperatorSettings

    kube = CountingKube()
    memo = kopf.Memo(controller=Controller(kube=kube))
    controller, key = memo.controller, ("ns", "job")
    try:
        assert controller.current_job(key)["metadata"]["resourceVersion"] == "r1"
        written = {"metadata": {"name": "job", "namespace": "ns", "resourceVersion": "41"}}
        controller.record_of(key).last_written = "41"
        controller.remember_job(key, written)
        assert controller.current_job(key) is written and kube.reads == 1  # a pod changed: no read
        handlers.job_changed(namespace="ns", name="job", type="MODIFIED", meta={"resourceVersion": "41"},
                             body=written, memo=memo)
        assert controller.current_job(key) is written and kube.reads == 1  # our own echo
        handlers.job_changed(namespace="ns", name="job", type="MODIFIED", meta={"resourceVersion": "42"},
                             body=written, memo=memo)
        assert controller.current_job(key)["metadata"]["resourceVersion"] == "r2"  # someone else wrote it
        handlers.job_changed(namespace="ns", name="job", type="DELETED", meta={"resourceVersion": "r2"},
                             body=written, memo=memo)
        controller.current_job(key)
        assert kube.reads == 3
    finally:
        controller.queue.close()
    stale = Controller(kube=kube, settings=OperatorSettings(job_cache_seconds=0))
    stale.remember_job(key, written)
    assert stale.current_job(key) is not written  # older than the cache's horizon: read again
    stale.queue.close()


def test_a_status_of_pod_counts_alone_waits_for_the_coalescing_window_but_a_real_change_does_not():
    import time

    from ascend_hybrid.controller.loop import Next
    from ascend_hybrid.reconcile.state import Decision

    controller, key = Controller(kube=None), ("ns", "job")
    old = {"phase": "Starting", "pods": {"running": 1}}
    counts, running = Decision(status={"phase": "Starting", "pods": {"running": 2}}, requeue_after=5.0), \
        Decision(status={"phase": "Running", "pods": {"running": 2}})
    controller.record_of(key).written_at = time.monotonic()
    wait = controller.defer_progress(key, Next.WAIT, old, counts)
    assert wait is not None and 0 < wait <= controller.settings.status_coalesce_seconds
    assert controller.defer_progress(key, Next.WAIT, old, running) is None
    assert controller.defer_progress(key, Next.DECIDE_AGAIN, old, counts) is None  # the pass goes on: written
    controller.record_of(key).written_at = time.monotonic() - 60
    assert controller.defer_progress(key, Next.WAIT, old, counts) is None
    controller.queue.close()


def test_the_node_and_deviceinfo_maps_are_built_once_until_their_store_changes():
    """Every pass reads every node; the maps are kept by the stores until an object changes."""
    from ascend_hybrid.controller.clusterwatch import NamedStore

    store, builds = NamedStore(), []

    def build(values):
        builds.append(len(values))
        return {node["metadata"]["name"]: node for node in values}
    store.replace(None, [{"metadata": {"name": "n1"}}], "watch")
    first = store.derived("by name", build)
    assert store.derived("by name", build) is first and builds == [1]
    store.apply("ADDED", {"metadata": {"name": "n2"}})
    assert set(store.derived("by name", build)) == {"n1", "n2"} and builds == [1, 2]
    store.apply("DELETED", {"metadata": {"name": "n1"}})
    assert set(store.derived("by name", build)) == {"n2"}
