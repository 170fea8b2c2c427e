"""The stand-in helper's event handling against a fake API (no cluster), Volcano's command lines and
configuration, and the device plugin leaving Volcano's pods to it."""

from __future__ import annotations

import json
import threading

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from ascend_hybrid.devcluster.nodes import manifests as nodes
from ascend_hybrid.devcluster.nodes.manifests import SimNode
from ascend_hybrid.devcluster.volcano import ascend_plugin as rules
from ascend_hybrid.devcluster.volcano import manifests
from ascend_hybrid.devcluster.volcano.stand_in import REASON, StandIn
from support.builders import PodBuilder


class FakeCore:
    def __init__(self):
        self.patches: list[tuple[str, str, dict]] = []
        self.events: list[dict] = []
        self.fail_with: int | None = None
        self.lock = threading.Lock()

    def patch_namespaced_pod(self, name, namespace, body, _content_type=None, _preload_content=True):
        if self.fail_with:
            raise ApiException(status=self.fail_with, reason="fake")
        assert _content_type == "application/merge-patch+json"
        with self.lock:
            self.patches.append((namespace, name, body))

    def create_namespaced_event(self, namespace, body, _preload_content=True):
        with self.lock:
            self.events.append(body)


@pytest.fixture
def stand_in():
    helper = StandIn(client.ApiClient(), log=lambda message: None, clock=lambda: 42, patch_workers=1)
    helper.core = FakeCore()
    helper.sync_nodes([nodes.node_manifest(SimNode(1, "910A", 0, 0)), nodes.node_manifest(SimNode(2, "910B", 0, 1))])
    helper.sync_health([])
    helper.sync_groups([])
    yield helper
    helper.pool.shutdown(wait=True)


def volcano_pod(uid: str, chips: int, node: str | None = "node-001", group: str = "pg") -> PodBuilder:
    return (PodBuilder.named(f"pod-{uid}", namespace="ns").uid(uid).node(node).chips(chips, requests=False)
            .spec(schedulerName="volcano").annotation(rules.GROUP_NAME_ANNOTATION, group))


def settle(helper):
    helper.pool.submit(lambda: None).result()


def chosen(helper, uid) -> tuple[int, ...] | None:
    for _, _, body in helper.core.patches:
        if body["metadata"]["uid"] == uid:
            return tuple(sorted(rules.chip_ids(body["metadata"]["annotations"][rules.CHIPS_ANNOTATION])))
    return None


def test_two_four_chip_pods_of_a_910a_node_get_one_ring_each(stand_in):
    stand_in.pod_event("ADDED", volcano_pod("a", 4).build())
    stand_in.pod_event("ADDED", volcano_pod("b", 4).build())
    settle(stand_in)
    assert chosen(stand_in, "a") == (0, 1, 2, 3) and chosen(stand_in, "b") == (4, 5, 6, 7)
    annotations = stand_in.core.patches[0][2]["metadata"]["annotations"]
    assert annotations[rules.PREDICATE_TIME_ANNOTATION] == "42"


def test_chips_other_pods_hold_are_not_free_whoever_annotated_them(stand_in):
    # a pod of another scheduler, annotated by the device plugin, holds chips 0 and 1 of the 910A node
    other = PodBuilder.named("other", namespace="ns").uid("o").node("node-001").chips(2, requests=False) \
        .annotation(rules.CHIPS_ANNOTATION, "Ascend910-0,Ascend910-1").phase("Running")
    stand_in.sync_pods([other.build()])
    stand_in.pod_event("ADDED", volcano_pod("a", 1).build())
    settle(stand_in)
    assert chosen(stand_in, "a") == (2,)  # the ring with 2 free (0-3) beats the one with 4 free (4-7)


def test_only_bound_volcano_pods_that_ask_for_chips_and_carry_none_are_decided(stand_in):
    stand_in.pod_event("ADDED", volcano_pod("unbound", 2, node=None).build())
    stand_in.pod_event("ADDED", volcano_pod("none", 0).build())
    stand_in.pod_event("ADDED", volcano_pod("done", 2).annotation(rules.CHIPS_ANNOTATION, "Ascend910-0").build())
    stand_in.pod_event("ADDED", PodBuilder.named("other", namespace="ns").uid("x").node("node-001")
                       .chips(2, requests=False).build())
    settle(stand_in)
    assert stand_in.core.patches == [] and stand_in.core.events == []


def test_a_pod_on_a_node_without_a_fitting_chip_set_gets_a_warning_and_no_annotations(stand_in):
    stand_in.health_event("ADDED", nodes.deviceinfo_configmap(SimNode(1, "910A", 0, 0), frozenset({0, 4})))
    stand_in.pod_event("ADDED", volcano_pod("a", 4).build())
    settle(stand_in)
    assert stand_in.core.patches == []
    [event] = stand_in.core.events
    assert event["type"] == "Warning" and event["reason"] == REASON
    assert event["involvedObject"]["uid"] == "a" and "would not have chosen this node" in event["message"]
    stand_in.pod_event("MODIFIED", volcano_pod("a", 4).build())
    settle(stand_in)
    assert len(stand_in.core.events) == 1, "warned once"


def test_a_pod_on_a_node_not_known_yet_is_decided_once_it_appears(stand_in):
    stand_in.pod_event("ADDED", volcano_pod("a", 8, node="node-003").build())
    settle(stand_in)
    assert stand_in.core.patches == []
    stand_in.node_event("ADDED", nodes.node_manifest(SimNode(3, "910B", 1, 0)))
    settle(stand_in)
    assert chosen(stand_in, "a") == tuple(range(8))
    config = json.loads(stand_in.core.patches[0][2]["metadata"]["annotations"][rules.CONFIG_ANNOTATION])
    assert config["pod_name"] == "pod-a" and config["rack_id"] == 0  # no deviceinfo yet: Go's zero value


def test_the_podgroups_policy_chooses_the_handler(stand_in):
    stand_in.group_event("ADDED", {"metadata": {"name": "pg", "namespace": "ns",
                                                "annotations": {"huawei.com/schedule_policy": "chip8-node8"}}})
    stand_in.pod_event("ADDED", volcano_pod("a", 3).build())  # 3 chips: refused by the 910A rules, fine on 910B's
    settle(stand_in)
    assert chosen(stand_in, "a") == (0, 1, 2)


def test_a_failed_patch_frees_the_choice_and_is_retried(stand_in):
    stand_in.core.fail_with = 403
    stand_in.pod_event("ADDED", volcano_pod("a", 2).build())
    settle(stand_in)
    assert stand_in.state.chosen == {} and "a" not in stand_in.state.settled
    stand_in.core.fail_with = None
    stand_in.retry()
    settle(stand_in)
    assert chosen(stand_in, "a") == (0, 1)


def test_a_relist_forgets_choices_for_pods_that_are_gone(stand_in):
    stand_in.state.chosen["gone"] = ("node-001", (0, 1, 2))  # its patch was on its way when it was deleted
    stand_in.sync_pods([volcano_pod("a", 1).build()])
    settle(stand_in)
    assert chosen(stand_in, "a") == (0,), "chips 0-2 are free again: ring 0-3 has 4 free, as ring 4-7"


# --- Volcano's configuration and command lines ----------------------------------------------------------------

def test_the_scheduler_configuration_is_mindclusters_less_huaweis_plugin():
    conf = yaml.safe_load(manifests.SCHEDULER_CONF)
    assert conf["actions"] == "enqueue, allocate, backfill"
    assert [[plugin["name"] for plugin in tier["plugins"]] for tier in conf["tiers"]] == [
        ["gang", "priority", "conformance"], ["drf", "predicates", "proportion", "nodeorder", "binpack"]]
    assert "configurations" not in conf


def test_every_volcano_listener_is_on_loopback():
    ports = {name: 10000 + i for i, name in enumerate(manifests.PORT_NAMES)}
    scheduler = manifests.scheduler_command("vc-scheduler", "kc", "conf", ports, "dump")
    controllers = manifests.controllers_command("vc-controller-manager", "kc", ports)
    for command in (scheduler, controllers):
        addresses = [arg.split("=", 1)[1] for arg in command if arg.split("=")[0].endswith("-address")]
        assert len(addresses) == 2 and all(address.startswith("127.0.0.1:") for address in addresses)
        assert "--leader-elect=false" in command
    assert "--controllers=queue-controller,pg-controller,gc-controller" in controllers


def test_queue_summary_counts_podgroups_by_phase():
    queues = [{"metadata": {"name": "default"}, "status": {"state": "Open"}}]
    groups = [{"spec": {"queue": "default"}, "status": {"phase": "Running"}}, {"spec": {}, "status": {}}]
    assert manifests.queue_summary(queues, groups) == ["  volcano queue default: Open; 1 Pending, 1 Running"]


def test_a_cluster_queues_with_kueue_or_volcano_not_both(tmp_path, monkeypatch):
    from ascend_hybrid.devcluster import cluster
    from ascend_hybrid.devcluster.paths import CLUSTERS_ENV

    monkeypatch.setenv(CLUSTERS_ENV, str(tmp_path))
    with pytest.raises(ValueError, match="both Kueue and Volcano"):
        cluster.up("both", kueue=True, volcano=True, log=lambda line: None)
    (tmp_path / "kueued" / "kueue").mkdir(parents=True)
    (tmp_path / "kueued" / "kueue" / "ports.json").write_text('{"health": 1, "metrics": 2, "webhook": 3}')
    with pytest.raises(ValueError, match="both Kueue and Volcano"):
        cluster.up("kueued", volcano=True, log=lambda line: None)
    assert not (tmp_path / "both").exists()
