"""The simulated Ascend cluster on the real control plane: nodes, scheduling, devices, outcomes, faults, down."""

from __future__ import annotations

import ipaddress
import json
import os
import time

import pytest
from kubernetes import client

from ascend_hybrid.devcluster import cluster
from ascend_hybrid.devcluster.deviceplugin.allocation import held_chips
from ascend_hybrid.devcluster.kube import processes
from ascend_hybrid.devcluster.kube.client import read_raw
from ascend_hybrid.devcluster.nodes import fleet
from ascend_hybrid.devcluster.nodes.manifests import RESOURCE, node_ip, unusable_chips
from ascend_hybrid.devcluster.testing.pods import device_configuration, outcome_annotations

POD_NETWORK = ipaddress.ip_network("127.16.0.0/16")


def is_running_with_devices(pod: dict) -> bool:
    return pod["status"].get("phase") == "Running" and device_configuration(pod) is not None


def container_state(pod: dict) -> dict:
    return pod["status"]["containerStatuses"][0]["state"]


def test_nodes_appear_ready_with_ascend_labels_allocatable_and_deviceinfo(dev_cluster):
    nodes = {n["metadata"]["name"]: n for n in fleet.simulated_nodes(dev_cluster.core)}
    assert {"node-001", "node-004", "node-005"} <= set(nodes)
    node = nodes["node-003"]
    labels = node["metadata"]["labels"]
    assert labels["accelerator"] == "huawei-Ascend910" and labels["accelerator-type"] == "module-910b-8"
    assert labels["huawei.com/topotree.rackid"] == "1" and "node.kubernetes.io/npu.chip.name" in labels
    assert node["status"]["allocatable"][RESOURCE] == "8" and node["status"]["capacity"][RESOURCE] == "8"
    assert not node["spec"].get("taints")
    assert fleet.ready_status(node) == "True"
    assert [a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP"] == ["127.15.0.3"]
    deviceinfo = dev_cluster.core.read_namespaced_config_map("mindx-dl-deviceinfo-node-003", "kube-system")
    assert deviceinfo.metadata.labels["mx-consumer-cim"] == "true"
    payload = json.loads(deviceinfo.data["DeviceInfoCfg"])
    assert payload["DeviceInfo"]["DeviceList"][RESOURCE].count("Ascend910-") == 8
    assert dev_cluster.nodes("910A") == ["node-005", "node-006"]
    # `kubectl logs` in the simulation needs kwok's Logs objects.
    client.ApiextensionsV1Api(dev_cluster.api).read_custom_resource_definition("logs.kwok.x-k8s.io")


def test_gated_pod_waits_then_binds_to_its_node_runs_with_a_loopback_ip_and_devices(dev_cluster, namespace,
                                                                                     create_pod):
    create_pod("gated", node="node-002", chips=2, gated=True)
    time.sleep(1.5)
    pod = dev_cluster.pod(namespace, "gated")
    assert not pod["spec"].get("nodeName")
    scheduled = [c for c in pod["status"].get("conditions") or [] if c["type"] == "PodScheduled"]
    assert scheduled and scheduled[0]["reason"] == "SchedulingGated"

    # A merge patch: a strategic merge patch with an empty list leaves schedulingGates (merge key `name`) as is.
    dev_cluster.core.patch_namespaced_pod("gated", namespace, {"spec": {"schedulingGates": None}},
                                          _content_type="application/merge-patch+json")
    pod = dev_cluster.wait_pod(namespace, "gated", is_running_with_devices, "to run with devices")
    assert pod["spec"]["nodeName"] == "node-002"
    assert ipaddress.ip_address(pod["status"]["podIP"]) in POD_NETWORK
    assert pod["status"]["hostIP"] == node_ip(2)
    configuration = device_configuration(pod)
    # the current device plugin's shape: server_id is the pod's UID, host_ip (and server_ip) the node's IP
    assert configuration["server_id"] == pod["metadata"]["uid"] and configuration["pod_name"] == "gated"
    assert configuration["host_ip"] == configuration["server_ip"] == node_ip(2)
    assert len(configuration["devices"]) == 2
    assert all(ipaddress.ip_address(d["device_ip"]).is_loopback for d in configuration["devices"])
    assert pod["metadata"]["annotations"]["huawei.com/AscendReal"] == ",".join(
        f"Ascend910-{d['device_id']}" for d in configuration["devices"])


def test_two_pods_sharing_a_910b_node_get_distinct_chips(dev_cluster, namespace, create_pod):
    for name in ("left", "right"):
        create_pod(name, node="node-001", chips=4)
    chips = [held_chips(dev_cluster.wait_pod(namespace, name, is_running_with_devices, "to run"))
             for name in ("left", "right")]
    assert len(chips[0]) == len(chips[1]) == 4 and not set(chips[0]) & set(chips[1])


def test_the_kubelet_starts_a_pod_then_the_plugin_annotates_it_on_its_period(dev_cluster, namespace, create_pod):
    """Kubelet mode: the pod runs once the kubelet allocated its chips; the configuration annotation follows on the
    device plugin's next listWatchPeriod tick (5 s here), and is never rewritten."""
    create_pod("late", node="node-003", chips=2)
    dev_cluster.wait_phase(namespace, "late", "Running")
    seen_running = time.monotonic()
    annotated = dev_cluster.wait_pod(namespace, "late", is_running_with_devices, "to be annotated", timeout=15)
    assert time.monotonic() - seen_running <= 5 + 2
    version = annotated["metadata"]["resourceVersion"]
    time.sleep(5.5)  # one more tick: nothing is written again
    assert dev_cluster.pod(namespace, "late")["metadata"]["resourceVersion"] == version


def test_a_node_forced_to_straddle_gives_a_4_chip_pod_both_hccs_rings(dev_cluster, namespace, create_pod):
    """The kubelet takes any free chips (the plugin answers GetPreferredAllocation "not support"); on 910A it can
    split a pod of up to 4 chips across the two rings. `fault --straddle-rings` makes it do so whenever it can."""
    try:
        fleet.set_straddle_rings(dev_cluster.core, "node-005", True)
        time.sleep(0.5)  # the device plugin watches the node
        create_pod("split", node="node-005", chips=4)
        chips = held_chips(dev_cluster.wait_pod(namespace, "split", is_running_with_devices, "to run", timeout=15))
        assert len(chips) == 4 and {chip // 4 for chip in chips} == {0, 1}, chips
    finally:
        fleet.set_straddle_rings(dev_cluster.core, "node-005", False)


def test_chips_are_freed_when_a_pod_ends(dev_cluster, namespace, create_pod):
    create_pod("first", node="node-006", chips=8, annotations=outcome_annotations("succeed", after_seconds=1))
    dev_cluster.wait_phase(namespace, "first", "Succeeded")
    create_pod("second", node="node-006", chips=8)
    assert held_chips(dev_cluster.wait_pod(namespace, "second", is_running_with_devices, "to run")) == tuple(range(8))


def test_pod_marked_to_fail_ends_failed_with_its_exit_code_after_the_delay(dev_cluster, namespace, create_pod):
    create_pod("doomed", chips=1, annotations=outcome_annotations("fail", exit_code=3, after_seconds=3))
    dev_cluster.wait_phase(namespace, "doomed", "Running")
    running_seen = time.monotonic()
    pod = dev_cluster.wait_phase(namespace, "doomed", "Failed")
    assert time.monotonic() - running_seen >= 2.0
    terminated = container_state(pod)["terminated"]
    assert terminated["exitCode"] == 3 and terminated["reason"] == "Error"


def test_pod_marked_to_succeed_later_ends_succeeded(dev_cluster, namespace, create_pod):
    create_pod("worker")  # default outcome: stays Running
    dev_cluster.wait_phase(namespace, "worker", "Running")
    time.sleep(1)
    assert dev_cluster.pod(namespace, "worker")["status"]["phase"] == "Running"
    dev_cluster.core.patch_namespaced_pod("worker", namespace,
                                          {"metadata": {"annotations": outcome_annotations("succeed")}})
    pod = dev_cluster.wait_phase(namespace, "worker", "Succeeded")
    assert container_state(pod)["terminated"]["exitCode"] == 0


def test_deleting_an_owner_garbage_collects_its_children(dev_cluster, namespace, create_pod, wait_until):
    owner = dev_cluster.core.create_namespaced_config_map(namespace, {"metadata": {"name": "owner"}})
    reference = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}
    create_pod("child", chips=1, owner=reference)
    dev_cluster.wait_phase(namespace, "child", "Running")
    dev_cluster.core.delete_namespaced_config_map("owner", namespace, propagation_policy="Background")
    wait_until(lambda: not dev_cluster.core.list_namespaced_pod(namespace).items, 30, "the child pod to be collected")


def test_node_marked_not_ready_shows_not_ready_and_recovers(dev_cluster):
    try:
        fleet.set_node_ready(dev_cluster.core, "node-004", ready=False, timeout=30)
        assert fleet.ready_status(read_raw(dev_cluster.core.read_node, "node-004")) == "False"
    finally:
        fleet.set_node_ready(dev_cluster.core, "node-004", ready=True, timeout=30)


def test_unhealthy_chip_is_listed_in_deviceinfo_and_never_allocated(dev_cluster, namespace, create_pod):
    try:
        unhealthy = fleet.set_chip_health(dev_cluster.core, "node-003", 0, healthy=False)
        assert unhealthy == {0}
        data = dev_cluster.core.read_namespaced_config_map("mindx-dl-deviceinfo-node-003", "kube-system").data
        assert unusable_chips(data) == {0}
        time.sleep(0.5)  # the device plugin watches the ConfigMap
        create_pod("avoids-zero", node="node-003", chips=7)  # every chip in service: all but chip 0
        chips = held_chips(dev_cluster.wait_pod(namespace, "avoids-zero", is_running_with_devices, "to run"))
        assert chips == tuple(range(1, 8))
    finally:
        fleet.set_chip_health(dev_cluster.core, "node-003", 0, healthy=True)


def _owned_cluster(dev_cluster):
    if dev_cluster.paths is None:
        pytest.fail("needs a cluster brought up by the tests or by `dev-cluster up` (its directory is unknown)")
    return dev_cluster.paths


def test_add_nodes_grows_the_running_cluster_with_a3_super_pod_nodes(dev_cluster, namespace, create_pod):
    paths = _owned_cluster(dev_cluster)
    added = cluster.add_nodes(paths.name, 1, chip="A3", log=lambda line: None)
    try:
        node = dev_cluster.core.read_node(added[0])
        assert node.status.allocatable[RESOURCE] == "16"
        assert "huawei.com/topotree.superpodid" in node.metadata.labels
        create_pod("a3", node=added[0], chips=16)
        devices = device_configuration(dev_cluster.wait_pod(namespace, "a3", is_running_with_devices, "to run"))
        assert len({d["super_device_id"] for d in devices["devices"]}) == 16
    finally:
        dev_cluster.core.delete_namespaced_pod("a3", namespace, grace_period_seconds=0)
        dev_cluster.core.delete_node(added[0])
        dev_cluster.core.delete_namespaced_config_map(f"mindx-dl-deviceinfo-{added[0]}", "kube-system")


def test_restarted_device_plugin_keeps_existing_allocations(dev_cluster, namespace, create_pod, wait_until):
    paths = _owned_cluster(dev_cluster)
    create_pod("before", node="node-002", chips=4)
    before = held_chips(dev_cluster.wait_pod(namespace, "before", is_running_with_devices, "to run"))
    plugin = cluster.device_plugin(paths)
    assert plugin.stop() and not plugin.running()
    plugin.wait_ready(cluster.ensure_device_plugin(paths), timeout=30)
    create_pod("after", node="node-002", chips=4)
    after = held_chips(dev_cluster.wait_pod(namespace, "after", is_running_with_devices, "to run"))
    assert not set(before) & set(after)


def test_down_stops_every_process_of_a_second_cluster_side_by_side(dev_cluster):
    name = "ahj-test-down" + os.environ.get("AHJ_CLUSTER_SUFFIX", "")
    try:
        paths = cluster.up(name, nodes=1, racks=1, log=lambda line: None)
        started = cluster.owned_processes(paths)
        assert set(started) == {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
                                "kwok-controller", "device-plugin", "process-runtime"}
        assert cluster.api_is_up(paths) and paths.kubeconfig != dev_cluster.kubeconfig
    finally:
        assert cluster.down(name, log=lambda line: None)
    survivors = {name: (pid, processes._proc_state(pid), processes.cmdline(pid)[:200])
                 for name, pid in started.items() if processes.is_alive(pid)}
    assert not survivors, f"alive after down (pid, state, command line): {survivors}"
    assert not paths.root.exists()
