"""The simulated device plugin's event handling, against a fake API (no cluster)."""

import json
import threading

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from ascend_hybrid.devcluster.deviceplugin import allocation
from ascend_hybrid.devcluster.deviceplugin.plugin import SimulatedDevicePlugin
from ascend_hybrid.devcluster.nodes import manifests as nodes
from ascend_hybrid.devcluster.nodes.manifests import PROFILES, SimNode
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
    yield from make_plugin("kubelet")


@pytest.fixture
def volcano():
    yield from make_plugin("volcano")


def make_plugin(mode: str):
    plugin = SimulatedDevicePlugin(client.ApiClient(), mode=mode, patch_workers=1, log=lambda message: None,
                                   sleep=lambda seconds: None)
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


def annotations_patched(plugin, uid):
    """Every annotation patch of the pod, merged in order."""
    merged = {}
    for _, _, body, content_type in plugin.core.patches:
        if body["metadata"]["uid"] == uid and "annotations" in body["metadata"]:
            assert content_type == "application/merge-patch+json"
            merged.update(body["metadata"]["annotations"])
    return merged


def recorded_chips(plugin, uid):
    """The chips the simulated kubelet recorded for the pod, or None."""
    record = annotations_patched(plugin, uid).get(allocation.KUBELET_DEVICES_ANNOTATION)
    return None if record is None else tuple(int(i) for i in record.split(","))


def configured_chips(plugin, uid):
    raw = annotations_patched(plugin, uid).get(allocation.CONFIG_ANNOTATION)
    return None if raw is None else tuple(int(d["device_id"]) for d in json.loads(raw)["devices"])


def with_record(plugin, builder: PodBuilder) -> dict:
    """The pod as the watch shows it once the kubelet's record landed."""
    uid = builder.build()["metadata"]["uid"]
    return builder.annotations({**annotations_patched(plugin, uid)}).phase("Running").build()


def rejection(plugin, uid):
    statuses = [body["status"] for _, _, body, _ in plugin.core.patches
                if body["metadata"]["uid"] == uid and "status" in body]
    assert len(statuses) <= 1, "a pod is refused once"
    return statuses[0] if statuses else None


# kubelet mode ---------------------------------------------------------------------------------------------------

def test_the_kubelet_gives_distinct_free_chips_then_the_plugin_annotates_on_its_period(plugin):
    plugin.pod_event("ADDED", npu_pod("a", 4).build())
    plugin.pod_event("ADDED", npu_pod("b", 4).build())
    settle(plugin)
    first, second = recorded_chips(plugin, "a"), recorded_chips(plugin, "b")
    assert len(first) == len(second) == 4 and set(first).isdisjoint(second)
    assert configured_chips(plugin, "a") is None, "no configuration before the plugin's next tick"
    assert plugin.annotate_allocated() == 0, "the watch has not shown the record yet: nothing the plugin can see"
    for uid in ("a", "b"):
        plugin.pod_event("MODIFIED", with_record(plugin, npu_pod(uid, 4)))
    assert plugin.annotate_allocated() == 2
    assert configured_chips(plugin, "a") == first and configured_chips(plugin, "b") == second
    written = annotations_patched(plugin, "a")
    assert written["huawei.com/AscendReal"] == ",".join(f"Ascend910-{i}" for i in first)
    before = len(plugin.core.patches)
    plugin.pod_event("MODIFIED", with_record(plugin, npu_pod("a", 4)))
    assert plugin.annotate_allocated() == 0 and len(plugin.core.patches) == before, "never rewritten"


def test_the_same_seed_gives_the_same_chips(plugin):
    plugin.pod_event("ADDED", npu_pod("a", 3, node="node-002").build())
    settle(plugin)
    assert recorded_chips(plugin, "a") == allocation.kubelet_choice(
        PROFILES["910B"], set(range(8)), 3, allocation.pod_rng(0, "a"))


def test_a_node_forced_to_straddle_gives_a_4_chip_pod_both_rings(plugin):
    manifest = nodes.node_manifest(SimNode(1, "910A", 0, 0))
    manifest["metadata"]["labels"][nodes.STRADDLE_RINGS_LABEL] = "true"
    plugin.node_event("MODIFIED", manifest)
    plugin.pod_event("ADDED", npu_pod("a", 4).build())
    settle(plugin)
    assert allocation.straddles_rings(PROFILES["910A"], recorded_chips(plugin, "a"))


def test_pods_without_npus_or_unbound_are_ignored(plugin):
    plugin.pod_event("ADDED", npu_pod("a", 0).build())
    plugin.pod_event("ADDED", npu_pod("b", 2, node=None).build())
    settle(plugin)
    assert plugin.core.patches == []


def test_a_restarted_plugin_trusts_the_kubelets_records(plugin):
    held = {allocation.KUBELET_DEVICES_ANNOTATION: "0,1,2"}
    plugin.sync_pods([npu_pod("old", 3, node="node-002").annotations(held).phase("Running").build(),
                      npu_pod("new", 5, node="node-002").build()])
    settle(plugin)
    assert recorded_chips(plugin, "old") is None, "nothing written for the pod that held its chips"
    assert recorded_chips(plugin, "new") == (3, 4, 5, 6, 7)


def test_a_pod_bound_to_a_full_node_is_refused_as_a_kubelet_refuses_it(plugin):
    """Two pods bound to one node's last chips (two schedulers raced): the first gets them, the second is Failed
    before it runs, with the kubelet's admission reason and message, once, and never gets chips after."""
    plugin.pod_event("ADDED", npu_pod("big", 6, node="node-002").build())
    plugin.pod_event("ADDED", npu_pod("next", 4, node="node-002").build())
    plugin.pod_event("MODIFIED", npu_pod("next", 4, node="node-002").build())
    settle(plugin)
    assert len(recorded_chips(plugin, "big")) == 6
    assert recorded_chips(plugin, "next") is None and "next" not in plugin.waiting
    assert rejection(plugin, "next") == {
        "phase": "Failed", "reason": "OutOfhuawei.com/Ascend910",
        "message": "Pod was rejected: Node didn't have enough resource: huawei.com/Ascend910, requested: 4, "
                   "used: 6, capacity: 8"}
    # the chips come free before the refusal shows in the watch: the refused pod gets none of them
    plugin.pod_event("MODIFIED", npu_pod("big", 6, node="node-002").phase("Succeeded").build())
    plugin.pod_event("MODIFIED", npu_pod("next", 4, node="node-002").build())
    plugin.pod_event("MODIFIED", npu_pod("next", 4, node="node-002").phase("Failed").build())
    settle(plugin)
    assert recorded_chips(plugin, "next") is None and plugin.ledger.free("node-002") == set(range(8))


def test_chips_out_of_service_leave_less_capacity_to_admit(plugin):
    configmap = nodes.deviceinfo_configmap(SimNode(2, "910B", 0, 1), unhealthy=frozenset({0, 1}))
    plugin.health_event("MODIFIED", configmap)
    plugin.pod_event("ADDED", npu_pod("a", 8, node="node-002").build())
    settle(plugin)
    assert rejection(plugin, "a")["message"].endswith("requested: 8, used: 0, capacity: 6")


def test_a_restarted_plugin_judges_new_pods_against_the_chips_already_held(plugin):
    """The list comes in any order: the holders' chips are known before a pod that still needs some is judged."""
    held = {allocation.KUBELET_DEVICES_ANNOTATION: "0,1,2,3,4,5,6,7"}
    plugin.sync_pods([npu_pod("new", 2, node="node-002").build(),
                      npu_pod("old", 8, node="node-002").annotations(held).phase("Running").build()])
    settle(plugin)
    assert recorded_chips(plugin, "old") is None and rejection(plugin, "old") is None
    assert rejection(plugin, "new")["reason"] == "OutOfhuawei.com/Ascend910"


def test_deleted_pod_frees_its_chips(plugin):
    plugin.pod_event("ADDED", npu_pod("a", 8, node="node-002").build())
    settle(plugin)
    plugin.pod_event("DELETED", npu_pod("a", 8, node="node-002").build())
    assert plugin.ledger.free("node-002") == set(range(8))


def test_unhealthy_chips_from_deviceinfo_are_never_handed_out(plugin):
    configmap = nodes.deviceinfo_configmap(SimNode(2, "910B", 0, 1), unhealthy=frozenset({0, 1}))
    plugin.health_event("MODIFIED", configmap)
    plugin.pod_event("ADDED", npu_pod("a", 6, node="node-002").build())
    settle(plugin)
    assert recorded_chips(plugin, "a") == (2, 3, 4, 5, 6, 7)


def test_a_pod_on_an_unknown_node_waits_until_the_node_appears(plugin):
    plugin.pod_event("ADDED", npu_pod("a", 1, node="node-003").build())
    settle(plugin)
    assert "a" in plugin.waiting
    plugin.node_event("ADDED", nodes.node_manifest(SimNode(3, "A3", 1, 0)))
    settle(plugin)
    assert len(recorded_chips(plugin, "a")) == 1


def test_a_pod_gone_before_its_record_lands_gives_its_chips_back(plugin):
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
    assert recorded_chips(plugin, "older") == tuple(range(8)) and rejection(plugin, "older") is None
    assert recorded_chips(plugin, "newer") is None and rejection(plugin, "newer")["phase"] == "Failed"


# Volcano mode ---------------------------------------------------------------------------------------------------

def volcano_pod(uid: str, chips: tuple[int, ...], predicate_time: int, node: str = "node-002") -> PodBuilder:
    """A pod Volcano bound and its Ascend plugin annotated with its chips and its bind time."""
    names = ",".join(f"Ascend910-{i}" for i in chips)
    return npu_pod(uid, len(chips), node=node).annotations(
        {"huawei.com/Ascend910": names, "predicate-time": str(predicate_time)})


def test_volcano_mode_refuses_a_pod_bound_without_the_schedulers_annotation(volcano):
    """The negative control of a pod bound by spec.nodeName: no pod on the node names its chips, so Allocate fails
    after its tries and the kubelet fails the pod with UnexpectedAdmissionError, in the plugin's words."""
    slept = []
    volcano.sleep = slept.append
    volcano.pod_event("ADDED", npu_pod("ours", 4, node="node-002").build())
    settle(volcano)
    assert rejection(volcano, "ours") == {
        "phase": "Failed", "reason": "UnexpectedAdmissionError",
        "message": "Allocate failed due to not get valid pod, which is unexpected"}
    assert slept == [1.0, 1.0], "three looks, a second apart"
    assert recorded_chips(volcano, "ours") is None and volcano.ledger.free("node-002") == set(range(8))


def test_volcano_mode_mounts_the_chips_the_scheduler_named_and_marks_the_pod_taken(volcano):
    volcano.pod_event("ADDED", volcano_pod("v", (2, 3), 100).build())
    settle(volcano)
    assert recorded_chips(volcano, "v") == (2, 3)
    assert annotations_patched(volcano, "v")["predicate-time"] == allocation.MOUNTED
    volcano.pod_event("MODIFIED", with_record(volcano, volcano_pod("v", (2, 3), 100)))
    assert volcano.annotate_allocated() == 1 and configured_chips(volcano, "v") == (2, 3)


def test_a_nodename_pod_takes_a_waiting_volcano_pods_chips_and_that_pod_fails(volcano):
    """Allocate carries no pod identity: our pod, admitted while a Volcano pod of the same size waits on the node,
    gets that pod's chips; the Volcano pod then finds no candidate and fails (research §1.2, "Mismatch case")."""
    victim = volcano_pod("victim", (4, 5), 100)
    with volcano.lock:  # both on the node before either is admitted, ours first
        volcano.pods["victim"] = victim.build()
        volcano.pods["ours"] = npu_pod("ours", 2, node="node-002").build()
        volcano._observe(volcano.pods["ours"])
        volcano.admitting.add("victim")
    settle(volcano)
    assert recorded_chips(volcano, "ours") == (4, 5)
    assert annotations_patched(volcano, "victim") == {"predicate-time": allocation.MOUNTED}
    volcano.admitting.discard("victim")
    volcano.pod_event("MODIFIED", victim.annotations({"predicate-time": allocation.MOUNTED}).build())
    settle(volcano)
    assert rejection(volcano, "victim")["reason"] == "UnexpectedAdmissionError"


def test_volcano_mode_admits_a_whole_node_pod_without_annotation_and_never_annotates_it(volcano):
    volcano.pod_event("ADDED", npu_pod("whole", 8, node="node-002").build())
    settle(volcano)
    assert recorded_chips(volcano, "whole") == tuple(range(8)) and rejection(volcano, "whole") is None
    volcano.pod_event("MODIFIED", with_record(volcano, npu_pod("whole", 8, node="node-002")))
    assert volcano.annotate_allocated() == 0 and configured_chips(volcano, "whole") is None


def test_volcano_mode_leaves_the_annotations_volcano_wrote_at_bind(volcano):
    bound = volcano_pod("v", (0, 1), 100).annotations({"huawei.com/AscendReal": "Ascend910-0,Ascend910-1"})
    volcano.pod_event("ADDED", bound.build())
    settle(volcano)
    volcano.pod_event("MODIFIED", with_record(volcano, bound))
    assert volcano.annotate_allocated() == 0 and configured_chips(volcano, "v") is None


def test_the_simulated_plugins_daemonset_tells_the_operator_the_clusters_mode():
    """The oracle and the reader agree: the DaemonSet `dev-cluster up` applies, read as the operator reads a real
    one, gives every simulated node the mode the plugin process runs in."""
    from ascend_hybrid.contracts.ascend import device_plugins
    from ascend_hybrid.devcluster.deviceplugin.daemonset import daemonset_manifest

    labels = nodes.node_manifest(SimNode(1, "910A", 0, 0))["metadata"]["labels"]
    for mode in ("kubelet", "volcano"):
        assert device_plugins([daemonset_manifest(mode, 5)]).mode_of(labels) == mode
