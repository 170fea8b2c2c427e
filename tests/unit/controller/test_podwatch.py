"""The operator's own pod watch: list then watch from its resourceVersion, resumed after the apiserver ends it,
listed again on 410, retried with backoff on errors; the store keeps projections and reports real changes only."""

from __future__ import annotations

import threading

import pytest
from kubernetes.client.exceptions import ApiException

from ascend_hybrid.contracts import names
from ascend_hybrid.contracts.ascend import RESOURCE
from ascend_hybrid.controller.listwatch import ListWatch
from ascend_hybrid.controller.loop import Controller
from ascend_hybrid.controller.podwatch import PodStore, reaction
from support.builders import PodBuilder
from support.queues import drain


def pod(name: str, namespace: str = "ns", version: str = "1") -> PodBuilder:
    """A pod of job `job` asking for 8 NPUs, as the watch lists it (a resourceVersion, managedFields)."""
    return (PodBuilder.named(name, namespace=namespace).label(names.JOB_LABEL, "job")
            .metadata(resourceVersion=version, managedFields=[{"manager": "kwok"}])
            .container(image="trainer", resources={"limits": {RESOURCE: "8", "cpu": "2"}}))


def web(name: str, namespace: str = "ns") -> PodBuilder:
    """A pod of no job."""
    return pod(name, namespace).label(names.JOB_LABEL, None).label("app", "web")


class FakeKube:
    """Answers lists and watches from scripts; each watch script is a list of events or an exception."""

    def __init__(self, pages: list[list[dict]], watches: list, stop: threading.Event, version: str = "100"):
        self.pages, self.watches, self.stop, self.version = pages, list(watches), stop, version
        self.calls: list[tuple] = []

    def list_page(self, resource, namespace, limit, continue_token=None, label_selector=None):
        assert resource == "pods" and label_selector is None
        self.calls.append(("list", namespace, continue_token))
        number = int(continue_token or 0)
        last = number == len(self.pages) - 1
        return {"items": self.pages[number],
                "metadata": {"resourceVersion": self.version, **({} if last else {"continue": str(number + 1)})}}

    def watch(self, resource, namespace, resource_version, timeout_seconds, label_selector=None):
        self.calls.append(("watch", namespace, resource_version))
        if not self.watches:
            self.stop.set()
            return
        script = self.watches.pop(0)
        if isinstance(script, Exception):
            raise script
        yield from script


def run(pages, watches, store=None):
    stop = threading.Event()
    kube = FakeKube(pages, watches, stop)
    store = store if store is not None else PodStore()
    ListWatch(kube, store, None, stop=stop, backoff=(0.0,)).watch_forever()
    return kube, store


def test_lists_every_page_then_watches_from_the_lists_version_and_resumes_from_the_last_one_seen():
    changes = []
    store = PodStore(lambda old, new: changes.append((old and old["metadata"]["name"], new and new["status"]["phase"])))
    first_watch = [{"type": "ADDED", "object": pod("job-a1-2", version="101").build()},
                   {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "105"}}}]
    second_watch = [{"type": "MODIFIED", "object": pod("job-a1-2", version="106").phase("Running").build()},
                    {"type": "DELETED", "object": pod("job-a1-0", version="107").build()}]
    kube, store = run([[pod("job-a1-0").build(), web("web").container(resources={}).build()],
                       [pod("job-a1-1").build()]],
                      [first_watch, second_watch], store)
    assert kube.calls == [("list", None, None), ("list", None, "1"), ("watch", None, "100"), ("watch", None, "105"),
                          ("watch", None, "107")]
    assert sorted(p["metadata"]["name"] for p in store.job_pods(("ns", "job"))) == ["job-a1-1", "job-a1-2"]
    assert [p["status"]["phase"] for p in store.job_pods(("ns", "job")) if p["metadata"]["name"] == "job-a1-2"] \
        == ["Running"]
    assert changes == [(None, "Pending"), (None, "Pending"), (None, "Pending"), ("job-a1-2", "Running"),
                       ("job-a1-0", None)]
    assert store.size() == 2 and "managedFields" not in store.npu_pods()[0]["metadata"]


def test_gone_lists_again_and_what_the_new_list_lacks_is_deleted():
    changes = []
    store = PodStore(lambda old, new: changes.append((old and old["metadata"]["name"], new and new["metadata"]["name"])))
    stop = threading.Event()
    kube = FakeKube([[pod("job-a1-0").build(), pod("job-a1-1").build()]], [
        ApiException(status=410, reason="Gone"),
        [{"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old resource version"}}],
    ], stop)
    watch = ListWatch(kube, store, None, stop=stop, backoff=(0.0,))
    original = kube.list_page

    def shrinking(resource, namespace, limit, continue_token=None, label_selector=None):
        page = original(resource, namespace, limit, continue_token)
        kube.pages = [[pod("job-a1-1").build()]]  # job-a1-0 went while nobody watched
        return page
    kube.list_page = shrinking
    watch.watch_forever()
    assert [call[0] for call in kube.calls] == ["list", "watch", "list", "watch", "list", "watch"]
    assert [p["metadata"]["name"] for p in store.job_pods(("ns", "job"))] == ["job-a1-1"]
    assert ("job-a1-0", None) in changes


def test_an_error_is_retried_from_the_same_version_and_the_watch_goes_on():
    kube, store = run([[pod("job-a1-0").build()]], [ConnectionResetError("reset by peer"),
                                            ApiException(status=500, reason="Internal Server Error"),
                                            [{"type": "ADDED", "object": pod("job-a1-1", version="120").build()}]])
    assert kube.calls == [("list", None, None), ("watch", None, "100"), ("watch", None, "100"),
                          ("watch", None, "100"), ("watch", None, "120")]
    assert len(store.job_pods(("ns", "job"))) == 2


def test_an_unexpected_error_is_retried_too_rather_than_ending_the_watch_thread():
    kube, store = run([[pod("job-a1-0").build()]], [KeyError("metadata"),
                                            [{"type": "ADDED", "object": pod("job-a1-1", version="120").build()}]])
    assert kube.calls == [("list", None, None), ("watch", None, "100"), ("watch", None, "100"),
                          ("watch", None, "120")]
    assert len(store.job_pods(("ns", "job"))) == 2


def test_a_status_write_of_fields_nobody_reads_changes_nothing_and_wakes_nothing():
    changes = []
    store = PodStore(lambda old, new: changes.append(new))
    store.replace(None, [], "source")
    store.apply("ADDED", pod("job-a1-0", version="1").build())
    beat = pod("job-a1-0", version="2").build()
    beat["status"]["qosClass"] = "Burstable"
    beat["metadata"]["managedFields"].append({"manager": "kubelet"})
    store.apply("MODIFIED", beat)
    assert len(changes) == 1


def test_a_pod_that_loses_its_job_label_and_holds_no_npus_leaves_the_store():
    store = PodStore()
    store.replace(None, [], "source")
    store.apply("ADDED", pod("job-a1-0").container(resources={}).build())
    assert len(store.job_pods(("ns", "job"))) == 1 and store.npu_pods() == []
    store.apply("MODIFIED", web("job-a1-0").container(resources={}).build())
    assert store.job_pods(("ns", "job")) == [] and store.size() == 0


def test_a_pod_kueue_evicted_is_remembered_once_gone_and_other_deleted_pods_are_not():
    store = PodStore()
    target = {"type": "TerminationTarget", "status": "True", "reason": "WorkloadEvictedDueToPreempted",
              "message": "Preempted to accommodate a workload"}
    evicted, deleted = pod("job-a1-0").status(conditions=[target]).build(), pod("job-a1-1").build()
    store.replace(None, [PodStore.project(evicted), PodStore.project(deleted)], "all")
    assert store.evicted_pods(("ns", "job")) == []
    store.apply("DELETED", evicted)
    store.apply("DELETED", deleted)
    assert store.job_pods(("ns", "job")) == []
    (remembered,) = store.evicted_pods(("ns", "job"))
    assert remembered["metadata"]["name"] == "job-a1-0"
    assert remembered["status"]["conditions"][0]["reason"] == "WorkloadEvictedDueToPreempted"
    assert store.evicted_pods(("ns", "other")) == []


def test_readers_wait_for_every_scope_to_be_listed():
    store = PodStore(sources=2)
    store.replace("a", [], "watch-a")
    with pytest.raises(RuntimeError, match="not listed"):
        store.wait_synced(timeout=0.01)
    store.replace("b", [], "watch-b")
    store.wait_synced(timeout=0.01)
    assert store.npu_pods() == []


def test_a_namespace_list_replaces_only_that_namespace():
    store = PodStore(sources=2)
    store.replace("a", [pod("p", namespace="a").build()], "watch-a")
    store.replace("b", [pod("p", namespace="b").build()], "watch-b")
    store.replace("a", [], "watch-a")
    assert [p["metadata"]["namespace"] for p in store.npu_pods()] == ["b"]


@pytest.fixture
def controller():
    controller = Controller(kube=None)
    yield controller
    controller.queue.close()


def test_a_job_pods_change_queues_its_job_and_a_finished_npu_pod_wakes_the_waiting_jobs(controller):
    changed = reaction(controller)
    controller.record_of(("other", "waiting")).phase = "Pending"
    changed(None, pod("job-a1-0").build())
    assert drain(controller) == {("ns", "job")}
    running = web("db-0").phase("Running").build()
    changed(None, running)
    assert drain(controller) == set()  # one more NPU pod frees nothing
    finished = web("db-0").phase("Succeeded").build()
    changed(running, finished)
    assert drain(controller) == {("other", "waiting")}
    changed(finished, {**finished, "status": {"phase": "Succeeded", "reason": "Completed"}})
    assert drain(controller) == set()  # still finished: nothing new is free
    changed(finished, None)
    assert drain(controller) == {("other", "waiting")}


def test_a_job_pod_gone_makes_the_next_pass_read_the_job_again(controller):
    """The garbage collector deletes a deleted job's pods, maybe before the job's own event arrives: a pass that
    trusted its cached job would make them again."""
    changed = reaction(controller)
    controller.remember_job(("ns", "job"), {"metadata": {"name": "job", "namespace": "ns"}})
    running = pod("job-a1-0").phase("Running").build()
    changed(None, running)
    assert controller.jobs[("ns", "job")].job is not None, "a pod that came or changed says nothing of the job"
    changed(running, None)
    assert controller.jobs[("ns", "job")].job is None and drain(controller) == {("ns", "job")}
