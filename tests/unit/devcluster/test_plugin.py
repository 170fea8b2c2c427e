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

    def patch_namespaced_pod_status(self, name, namespace, body, _content_type=None, _preload_content=True):
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
        if body["metadata"]["uid"] == uid and "annotations" in body["metadata"]:
            assert content_type == "application/merge-patch+json"
            config = json.loads(body["metadata"]["annotations"][allocation.CONFIG_ANNOTATION])
            return tuple(int(d["device_id"]) for d in config["devices"])
    return None


def rejection(plugin, uid):
    statuses = [body["status"] for _, _, body, _ in plugin.core.patches
                if body["metadata"]["uid"] == uid and "status" in body]
    assert len(statuses) <= 1, "a pod is refused once"
    return statuses[0] if statuses else None


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


def test_a_pod_bound_to_a_full_node_is_refused_as_a_kubelet_refuses_it(plugin):
    """Two pods bound to one node's last chips (two schedulers raced): the first gets them, the second is Failed
    before it runs, with the kubelet's admission reason and message, once, and never gets chips after."""
    plugin.pod_event("ADDED", npu_pod("big", 6, node="node-002").build())
    plugin.pod_event("ADDED", npu_pod("next", 4, node="node-002").build())
    plugin.pod_event("MODIFIED", npu_pod("next", 4, node="node-002").build())
    settle(plugin)
    assert patched_chips(plugin, "big") == tuple(range(6))
    assert patched_chips(plugin, "next") is None and "next" not in plugin.waiting
    assert rejection(plugin, "next") == {
        "phase": "Failed", "reason": "OutOfhuawei.com/Ascend910",
        "message": "Pod was rejected: Node didn't have enough resource: huawei.com/Ascend910, requested: 4, "
                   "used: 6, capacity: 8"}
    # the chips come free before the refusal shows in the watch: the refused pod gets none of them
    plugin.pod_event("MODIFIED", npu_pod("big", 6, node="node-002").phase("Succeeded").build())
    plugin.pod_event("MODIFIED", npu_pod("next", 4, node="node-002").build())
    plugin.pod_event("MODIFIED", npu_pod("next", 4, node="node-002").phase("Failed").build())
    settle(plugin)
    assert patched_chips(plugin, "next") is None and plugin.ledger.free("node-002") == set(range(8))


def test_chips_out_of_service_leave_less_capacity_to_admit(plugin):
    configmap = nodes.deviceinfo_configmap(SimNode(2, "910B", 0, 1), unhealthy=frozenset({0, 1}))
    plugin.health_event("MODIFIED", configmap)
    plugin.pod_event("ADDED", npu_pod("a", 8, node="node-002").build())
    settle(plugin)
    assert rejection(plugin, "a")["message"].endswith("requested: 8, used: 0, capacity: 6")


def test_a_restarted_plugin_judges_new_pods_against_the_chips_already_held(plugin):
    """The list comes in any order: the holders' chips are known before a pod that still needs some is judged."""
    held = allocation.device_annotations("pod-old", "uid-old", SimNode(2, "910B", 0, 1), tuple(range(8)))
    plugin.sync_pods([npu_pod("new", 2, node="node-002").build(),
                      npu_pod("old", 8, node="node-002").annotations(held).phase("Running").build()])
    settle(plugin)
    assert patched_chips(plugin, "old") is None and rejection(plugin, "old") is None
    assert rejection(plugin, "new")["reason"] == "OutOfhuawei.com/Ascend910"


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


def test_pods_found_together_are_admitted_oldest_first_as_a_kubelet_does(plugin):
    """Two pods bound to the last 8 chips while the plugin was down: the older is admitted, the newer refused,
    whatever order the list gives them in."""
    newer = npu_pod("newer", 8, node="node-002").metadata(creationTimestamp="2026-12-03T10:00:02Z").build()
    older = npu_pod("older", 8, node="node-002").metadata(creationTimestamp="2026-12-03T10:00:01Z").build()
    plugin.sync_pods([newer, older])
    settle(plugin)
    assert patched_chips(plugin, "older") == tuple(range(8)) and rejection(plugin, "older") is None
    assert patched_chips(plugin, "newer") is None and rejection(plugin, "newer")["phase"] == "Failed"
