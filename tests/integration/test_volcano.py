"""A real Volcano in the simulated cluster (`dev-cluster up --volcano`): Volcano v1.14.1's scheduler and controller
manager built from its module bind PodGroups' pods; the stand-in for Huawei's Ascend plugin writes the chips
inside the node and the plugin's bind annotations.

The module brings up its own cluster (two 910B nodes in one rack and one 910A node) and takes it down at the end;
its tests share it one after another, each in its own namespace whose pods are gone before the next test starts.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import cast

import pytest
from kubernetes import client

from ascend_hybrid.devcluster import cluster
from ascend_hybrid.devcluster.controlplane import toolchain
from ascend_hybrid.devcluster.kube.client import api_client, raw_list, read_raw
from ascend_hybrid.devcluster.kube.waiting import wait_until
from ascend_hybrid.devcluster.nodes import fleet
from ascend_hybrid.devcluster.nodes.manifests import ACCELERATOR_TYPE_LABEL, PROFILES
from ascend_hybrid.devcluster.paths import ClusterPaths
from ascend_hybrid.devcluster.testing.pods import pod_manifest
from ascend_hybrid.devcluster.volcano import ascend_plugin as rules
from ascend_hybrid.devcluster.volcano import manager as volcano_manager
from ascend_hybrid.devcluster.volcano import manifests as volcano
from ascend_hybrid.devcluster.volcano.stand_in import REASON
from support.namespaces import namespace_name, scratch_namespace

pytestmark = pytest.mark.integration

CLUSTER = "ahj-volcano" + os.environ.get("AHJ_CLUSTER_SUFFIX", "")
BIND_TIMEOUT = 30.0


@dataclass
class VolcanoCluster:
    paths: ClusterPaths
    api: client.ApiClient
    core: client.CoreV1Api
    custom: client.CustomObjectsApi

    def nodes(self, chip: str) -> list[str]:
        wanted = PROFILES[chip].accelerator_type
        return sorted(n["metadata"]["name"] for n in fleet.simulated_nodes(self.core)
                      if n["metadata"]["labels"].get(ACCELERATOR_TYPE_LABEL) == wanted)

    def pods(self, namespace: str) -> list[dict]:
        return raw_list(self.core.list_namespaced_pod, namespace=namespace)["items"]

    def podgroup(self, namespace: str, name: str) -> dict:
        # a custom object comes back as the JSON the apiserver sent
        return cast(dict, self.custom.get_namespaced_custom_object(volcano.GROUP, volcano.VERSION, namespace,
                                                                   volcano.PODGROUPS, name))

    def logs(self) -> str:
        """The tails of Volcano's and the stand-in's logs, for a failure message."""
        return "\n".join(f"--- {helper.name}\n{helper.log_tail(15)}" for helper in volcano_manager.helpers(self.paths))

    def events(self, namespace: str) -> list[dict]:
        return raw_list(self.core.list_namespaced_event, namespace=namespace)["items"]


@pytest.fixture(scope="module")
def volcano_cluster():
    missing = toolchain.missing(toolchain.REQUIRED + toolchain.VOLCANO)
    if missing:
        pytest.fail(f"the toolchain lacks {', '.join(missing)}: run `ascend-hybrid dev-cluster build --with-volcano`",
                    pytrace=False)
    cluster.down(CLUSTER, log=lambda line: None)
    paths = cluster.up(CLUSTER, nodes=2, chip="910B", racks=1, volcano=True, log=lambda line: None)
    try:
        cluster.add_nodes(CLUSTER, 1, chip="910A", log=lambda line: None)
        api = api_client(str(paths.kubeconfig))
        yield VolcanoCluster(paths, api, client.CoreV1Api(api), client.CustomObjectsApi(api))
    finally:
        cluster.down(CLUSTER, log=lambda line: None)


@pytest.fixture
def namespace(request, volcano_cluster):
    """The test's namespace; its pods are deleted and gone before the next test, so every test finds free nodes."""
    core = volcano_cluster.core
    with scratch_namespace(core, namespace_name("v", request.node.name, 30, 6)) as name:
        yield name
        core.delete_collection_namespaced_pod(name, grace_period_seconds=0, _preload_content=False)
        wait_until(lambda: not volcano_cluster.pods(name), 30, f"the pods of {name} to be gone")


def create_gang(dev: VolcanoCluster, namespace: str, group: str, pods: int, chips: int, accelerator_type: str,
                labels: dict | None = None) -> list[str]:
    """A PodGroup of minMember `pods` and its pods, each asking for `chips` chips of nodes of `accelerator_type`,
    scheduled by Volcano, as MindCluster's ascend-operator creates them."""
    dev.custom.create_namespaced_custom_object(volcano.GROUP, volcano.VERSION, namespace, volcano.PODGROUPS,
                                               volcano.podgroup_manifest(group, pods))
    names = [f"{group}-{index}" for index in range(pods)]
    for name in names:
        manifest = pod_manifest(name, chips=chips, labels=labels,
                                annotations={rules.GROUP_NAME_ANNOTATION: group, "volcano.sh/task-spec": "worker"})
        manifest["spec"].update(schedulerName=volcano.SCHEDULER_NAME,
                                nodeSelector={ACCELERATOR_TYPE_LABEL: accelerator_type})
        dev.core.create_namespaced_pod(namespace, manifest, _preload_content=False)
    return names


def bound_and_annotated(dev: VolcanoCluster, namespace: str, names: list[str]) -> list[dict]:
    def ready() -> list[dict] | None:
        pods = [read_raw(dev.core.read_namespaced_pod, name, namespace) for name in names]
        done = all(p["spec"].get("nodeName") and rules.CHIPS_ANNOTATION in (p["metadata"].get("annotations") or {})
                   for p in pods)
        return pods if done else None
    return wait_until(ready, BIND_TIMEOUT, f"Volcano to bind {names} and the stand-in to annotate them",
                      describe=dev.logs)


def chips_of(pod: dict) -> list[int]:
    return sorted(rules.chip_ids(pod["metadata"]["annotations"][rules.CHIPS_ANNOTATION]))


def test_a_podgroup_of_two_whole_node_pods_is_bound_by_volcano_with_the_plugins_annotations(volcano_cluster,
                                                                                           namespace):
    dev = volcano_cluster
    names = create_gang(dev, namespace, "gang", pods=2, chips=8, accelerator_type="module-910b-8")
    pods = bound_and_annotated(dev, namespace, names)
    assert sorted(p["spec"]["nodeName"] for p in pods) == dev.nodes("910B")
    for pod in pods:
        annotations = pod["metadata"]["annotations"]
        assert chips_of(pod) == list(range(8))
        assert annotations[rules.REAL_CHIPS_ANNOTATION] == annotations[rules.CHIPS_ANNOTATION]
        assert int(annotations[rules.PREDICATE_TIME_ANNOTATION]) > 1_700_000_000 * 10**9  # UnixNano
        node = read_raw(dev.core.read_node, pod["spec"]["nodeName"])
        infos = json.loads(node["metadata"]["annotations"][rules.BASE_DEVICE_INFOS_ANNOTATION])
        config = json.loads(annotations[rules.CONFIG_ANNOTATION])
        assert config["pod_name"] == pod["metadata"]["name"] and config["server_id"] == pod["metadata"]["uid"]
        assert [d["device_ip"] for d in config["devices"]] == [infos[f"Ascend910-{i}"]["IP"] for i in range(8)]
    scheduled = {e["involvedObject"]["name"] for e in dev.events(namespace)
                 if e["reason"] == "Scheduled" and "volcano" in ((e.get("source") or {}).get("component", "")
                                                                 + (e.get("reportingComponent") or ""))}
    assert scheduled == set(names), f"Scheduled events from volcano: {scheduled}"
    wait_until(lambda: (dev.podgroup(namespace, "gang").get("status") or {}).get("phase") == "Running", 15,
               "the PodGroup to be Running")


def test_a_gang_that_does_not_fit_leaves_no_pod_bound(volcano_cluster, namespace):
    dev = volcano_cluster
    names = create_gang(dev, namespace, "toobig", pods=3, chips=8, accelerator_type="module-910b-8")

    def unschedulable() -> bool:
        conditions = (dev.podgroup(namespace, "toobig").get("status") or {}).get("conditions") or []
        return any(c.get("type") == "Unschedulable" and c.get("status") == "True" for c in conditions)

    wait_until(unschedulable, BIND_TIMEOUT, "Volcano to find the gang unschedulable", describe=dev.logs)
    wait_until(lambda: len([e for e in dev.events(namespace) if e["involvedObject"]["name"] == "toobig"]) > 0, 10,
               "an event on the PodGroup")
    pods = {p["metadata"]["name"]: p for p in dev.pods(namespace)}
    assert sorted(pods) == names
    assert [name for name, pod in pods.items() if pod["spec"].get("nodeName")] == [], "part of the gang was bound"
    assert all(rules.CHIPS_ANNOTATION not in (p["metadata"].get("annotations") or {}) for p in pods.values())


def test_four_chip_pods_on_a_910a_node_land_inside_one_hccs_ring_each(volcano_cluster, namespace):
    dev = volcano_cluster
    names = create_gang(dev, namespace, "rings", pods=2, chips=4, accelerator_type="module",
                        labels={rules.OPERATOR_NAME_LABEL: "ascend-operator"})
    pods = bound_and_annotated(dev, namespace, names)
    assert {p["spec"]["nodeName"] for p in pods} == set(dev.nodes("910A"))
    assert sorted(chips_of(p) for p in pods) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    for pod in pods:  # the operator's label: the configuration is written for a part of the node too
        config = json.loads(pod["metadata"]["annotations"][rules.CONFIG_ANNOTATION])
        assert [int(d["device_id"]) for d in config["devices"]] == chips_of(pod)


def test_a_pod_bound_where_no_ring_fits_is_left_unannotated_with_a_warning(volcano_cluster, namespace):
    dev = volcano_cluster
    [node] = dev.nodes("910A")
    fleet.set_chip_health(dev.core, node, 0, healthy=False)
    fleet.set_chip_health(dev.core, node, 4, healthy=False)
    try:
        [name] = create_gang(dev, namespace, "split", pods=1, chips=4, accelerator_type="module")
        warned = wait_until(lambda: [e for e in dev.events(namespace)
                                     if e["involvedObject"]["name"] == name and e["reason"] == REASON],
                            BIND_TIMEOUT, "the stand-in's Warning event", describe=dev.logs)
        assert warned[0]["type"] == "Warning" and "would not have chosen this node" in warned[0]["message"]
        pod = read_raw(dev.core.read_namespaced_pod, name, namespace)
        assert pod["spec"]["nodeName"] == node, "Volcano bound it: the stand-in cannot steer its choice"
        assert rules.CHIPS_ANNOTATION not in (pod["metadata"].get("annotations") or {})
    finally:
        fleet.set_chip_health(dev.core, node, 0, healthy=True)
        fleet.set_chip_health(dev.core, node, 4, healthy=True)
