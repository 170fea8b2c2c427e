"""The simulated device plugin's event handling, against a fake API (no cluster)."""

import json
import threading

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from ascend_hybrid.devcluster.deviceplugin import allocation
from ascend_hybrid.devcluster.deviceplugin.plugin import SimulatedDevicePlugin
from ascend_hybrid.devcluster.nodes import manifests as nodes
from ascend_hybrid.devcluster.nodes.manifests import SimNode
from support.builders import PodBuilder


class FakeCore:
    def __init__(self):
        self.patches = []
        self.fail_with = None
        self.lock = threading.Lock()

    def patch_namespaced_pod(self, name, namespace, body, _content_type=None, _preload_content=True):
        if self.fail_with:
            raise ApiException(status=self.fail_with, reason="fake")
        with self.lock:
            self.patches.append((namespace, name, body, _content_type))


@pytest.fixture
def plugin():
    plugin = SimulatedDevicePlugin(client.ApiClient(), patch_workers=1, log=lambda message: None)
    plugin.core = FakeCore()
    plugin.sync_nodes([nodes.node_manifest(SimNode(1, "910A", 0, 0)), nodes.node_manifest(SimNode(2, "910B", 0, 1))])
    plugin.sync_health([])
    yield plugin
    plugin.pool.shutdown(wait=True)


def npu_pod(uid: str, chips: int, node: str | None = "node-001") -> PodBuilder:
    """Pod `uid` asking for `chips` NPUs (in its limits), bound to `node`, Pending."""
    return PodBuilder.named(f"pod-{uid}", namespace="ns").uid(uid).node(node).chips(chips, requests=False)


def settle(plugin):
    plugin.pool.submit(lambda: None).result()  # one worker: everything submitted before has run


def patched_chips(plugin, uid):
    for _, _, body, content_type in plugin.core.patches:
        if body["metadata"]["uid"] == uid:
            assert content_type == "application/merge-patch+json"
            config = json.loads(body["metadata"]["annotations"][allocation.CONFIG_ANNOTATION])
            return tuple(int(d["device_id"]) for d in config["devices"])
    return None


def test_two_pods_on_one_node_get_distinct_chips_inside_one_ring(plugin):
    plugin.pod_event("ADDED", npu_pod("a", 2).build())
    plugin.pod_event("ADDED", npu_pod("b", 2).build())
    settle(plugin)
    first, second = patched_chips(plugin, "a"), patched_chips(plugin, "b")
    assert first == (0, 1) and second == (2, 3)


def test_pods_without_npus_or_unbound_are_ignored(plugin):
    plugin.pod_event("ADDED", npu_pod("a", 0).build())
    plugin.pod_event("ADDED", npu_pod("b", 2, node=None).build())
    settle(plugin)
    assert plugin.core.patches == []


def test_a_restarted_plugin_trusts_existing_annotations(plugin):
    held = allocation.device_annotations("pod-old", "uid-old", SimNode(2, "910B", 0, 1), (0, 1, 2))
    plugin.sync_pods([npu_pod("old", 3, node="node-002").annotations(held).phase("Running").build(),
                      npu_pod("new", 2, node="node-002").build()])
    settle(plugin)
    assert patched_chips(plugin, "old") is None
    assert patched_chips(plugin, "new") == (3, 4)


def test_chips_are_freed_when_a_pod_ends_and_a_waiting_pod_then_gets_them(plugin):
    plugin.pod_event("ADDED", npu_pod("big", 8, node="node-002").build())
    plugin.pod_event("ADDED", npu_pod("next", 8, node="node-002").build())
    settle(plugin)
    assert patched_chips(plugin, "next") is None and "next" in plugin.waiting
    finished = npu_pod("big", 8, node="node-002").phase("Succeeded").build()
    plugin.pod_event("MODIFIED", finished)
    settle(plugin)
    assert patched_chips(plugin, "next") == tuple(range(8))


def test_deleted_pod_frees_its_chips(plugin):
    plugin.pod_event("ADDED", npu_pod("a", 8, node="node-002").build())
    settle(plugin)
    plugin.pod_event("DELETED", npu_pod("a", 8, node="node-002").build())
    assert plugin.ledger.free("node-002") == set(range(8))


def test_unhealthy_chips_from_deviceinfo_are_never_handed_out(plugin):
    configmap = nodes.deviceinfo_configmap(SimNode(2, "910B", 0, 1), unhealthy=frozenset({0, 1}))
    plugin.health_event("MODIFIED", configmap)
    plugin.pod_event("ADDED", npu_pod("a", 2, node="node-002").build())
    settle(plugin)
    assert patched_chips(plugin, "a") == (2, 3)


def test_a_pod_on_an_unknown_node_waits_until_the_node_appears(plugin):
    plugin.pod_event("ADDED", npu_pod("a", 1, node="node-003").build())
    settle(plugin)
    assert "a" in plugin.waiting
    plugin.node_event("ADDED", nodes.node_manifest(SimNode(3, "A3", 1, 0)))
    settle(plugin)
    assert patched_chips(plugin, "a") == (0,)


def test_a_pod_gone_before_its_patch_lands_gives_its_chips_back(plugin):
    plugin.core.fail_with = 404
    plugin.pod_event("ADDED", npu_pod("a", 8, node="node-002").build())
    settle(plugin)
    assert plugin.ledger.free("node-002") == set(range(8))
    assert "a" not in plugin.waiting
