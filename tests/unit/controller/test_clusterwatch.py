"""Nodes and deviceinfo ConfigMaps from the operator's own watch: what the store keeps, and which changes wake
which jobs (heartbeats and health rewrites wake nothing)."""

from __future__ import annotations

import copy
import threading

import pytest

from ascend_hybrid.controller.clusterwatch import NamedStore, device_reaction, node_reaction
from ascend_hybrid.controller.listwatch import ListWatch
from ascend_hybrid.controller.loop import Controller
from support.builders import NodeBuilder, deviceinfo
from support.queues import drain


@pytest.fixture
def controller():
    controller = Controller(kube=None)
    controller.record_of(("ns", "pending")).phase = "Pending"
    controller.record_of(("ns", "running")).phase = "Running"
    yield controller
    controller.queue.close()


def ready_node(status: str = "True") -> dict:
    """Node n1 as the watch lists it (managedFields), Ready or not."""
    return (NodeBuilder("n1").metadata(managedFields=[{"manager": "kwok"}]).ready(status == "True")
            .status(allocatable={}).build())


def test_node_heartbeats_wake_nothing_but_a_ready_change_wakes_every_job(controller):
    store = NamedStore(node_reaction(controller))
    store.replace(None, [], "watch")
    store.apply("ADDED", ready_node())
    assert drain(controller) == {("ns", "pending")}
    beat = ready_node()
    beat["status"]["conditions"][0]["lastHeartbeatTime"] = "2026-12-01T10:00:00Z"
    store.apply("MODIFIED", beat)
    assert drain(controller) == set()
    store.apply("MODIFIED", ready_node("False"))
    assert drain(controller) == {("ns", "pending"), ("ns", "running")}
    assert "managedFields" not in store.values()[0]["metadata"]


def test_a_chip_turning_unhealthy_wakes_every_job_but_a_rewrite_with_the_same_health_does_not(controller):
    store = NamedStore(device_reaction(controller))
    healthy, broken = deviceinfo("node-1"), deviceinfo("node-1", unhealthy=[3])
    store.replace(None, [healthy], "watch")
    assert drain(controller) == {("ns", "pending")}  # capacity may have changed: the waiting job
    store.apply("MODIFIED", copy.deepcopy(healthy))  # rewritten, same health
    assert drain(controller) == set()
    store.apply("MODIFIED", broken)
    assert drain(controller) == {("ns", "pending"), ("ns", "running")}  # the running gang may hold chip 3
    store.apply("DELETED", broken)
    assert drain(controller) == {("ns", "pending")}


def test_a_store_with_nothing_to_watch_is_complete_and_a_relist_drops_what_went():
    assert NamedStore(sources=0).values() == []
    changes = []
    store = NamedStore(lambda name, old, new: changes.append((name, new is not None)))
    store.replace(None, [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}], "watch")
    store.replace(None, [{"metadata": {"name": "b"}}], "watch")
    assert [item["metadata"]["name"] for item in store.values()] == ["b"] and ("a", False) in changes


class NodesKube:
    def __init__(self, stop):
        self.stop, self.calls = stop, []

    def list_page(self, resource, namespace, limit, continue_token=None, label_selector=None):
        self.calls.append(("list", resource, namespace, label_selector))
        return {"items": [ready_node()], "metadata": {"resourceVersion": "7"}}

    def watch(self, resource, namespace, resource_version, timeout_seconds, label_selector=None):
        self.calls.append(("watch", resource, namespace, label_selector))
        self.stop.set()
        yield {"type": "DELETED", "object": ready_node()}


def test_the_list_watch_of_nodes_asks_for_nodes_with_the_selector_given():
    stop = threading.Event()
    kube, store = NodesKube(stop), NamedStore()
    ListWatch(kube, store, "kube-system", resource="configmaps", label_selector="mx-consumer-cim=true",
              stop=stop, backoff=(0.0,)).watch_forever()
    assert kube.calls == [("list", "configmaps", "kube-system", "mx-consumer-cim=true"),
                          ("watch", "configmaps", "kube-system", "mx-consumer-cim=true")]
    assert store.values() == []
