"""Pure manifests of the simulated Ascend nodes and their deviceinfo ConfigMaps."""

import ipaddress
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ascend_hybrid.devcluster.nodes import manifests as nodes
from ascend_hybrid.devcluster.nodes.manifests import SimNode


def test_node_manifest_carries_the_ascend_labels_capacity_and_a_loopback_address():
    manifest = nodes.node_manifest(SimNode(index=3, chip="910B", rack=1, server_index=0))
    labels = manifest["metadata"]["labels"]
    assert manifest["metadata"]["name"] == "node-003"
    assert labels["kubernetes.io/hostname"] == "node-003"
    assert labels["accelerator"] == "huawei-Ascend910"
    assert labels["accelerator-type"] == "module-910b-8"
    assert labels["node.kubernetes.io/npu.chip.name"].startswith("910B")
    assert labels["huawei.com/topotree.rackid"] == "1"
    assert "huawei.com/topotree.superpodid" not in labels
    assert manifest["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
    assert manifest["spec"] == {}  # no taints
    assert manifest["status"]["capacity"]["huawei.com/Ascend910"] == "8"
    assert manifest["status"]["allocatable"]["huawei.com/Ascend910"] == "8"
    assert manifest["status"]["addresses"][0] == {"type": "InternalIP", "address": "127.15.0.3"}


@pytest.mark.parametrize("chip, accelerator_type, chips", [("910A", "module", 8), ("910B", "module-910b-8", 8),
                                                           ("A3", "module-a3-16", 16)])
def test_each_chip_has_its_accelerator_type_and_chip_count(chip, accelerator_type, chips):
    manifest = nodes.node_manifest(SimNode(index=1, chip=chip, rack=0, server_index=0))
    assert manifest["metadata"]["labels"]["accelerator-type"] == accelerator_type
    assert manifest["status"]["allocatable"]["huawei.com/Ascend910"] == str(chips)
    assert nodes.profile_of_node(manifest).chip == chip


def test_a3_nodes_name_their_super_pod():
    manifest = nodes.node_manifest(SimNode(index=5, chip="A3", rack=2, server_index=1))
    assert manifest["metadata"]["labels"]["huawei.com/topotree.superpodid"] == "2"


def test_unknown_chip_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="910A, 910B, A3"):
        nodes.profile("310P")


@given(st.integers(1, nodes.MAX_NODE_INDEX), st.integers(0, 15))
def test_every_invented_address_is_loopback(index, chip_id):
    assert ipaddress.IPv4Address(nodes.node_ip(index)).is_loopback
    assert ipaddress.IPv4Address(nodes.device_ip(index, chip_id)).is_loopback


def test_addresses_are_unique_per_node_and_chip():
    node_ips = {nodes.node_ip(i) for i in range(1, 2000)}
    device_ips = {nodes.device_ip(i, c) for i in range(1, 300) for c in range(16)}
    assert len(node_ips) == 1999
    assert len(device_ips) == 299 * 16
    assert node_ips.isdisjoint(device_ips)


def test_node_index_outside_the_range_is_refused():
    with pytest.raises(ValueError):
        nodes.node_ip(0)
    with pytest.raises(ValueError):
        nodes.device_ip(1, 16)


def test_plan_fills_racks_in_index_order_and_continues_after_existing_nodes():
    per_rack = nodes.nodes_per_rack(4, 2)
    planned = nodes.plan_nodes(1, 4, "910B", per_rack)
    assert [(n.name, n.rack, n.server_index) for n in planned] == [
        ("node-001", 0, 0), ("node-002", 0, 1), ("node-003", 1, 0), ("node-004", 1, 1)]
    more = nodes.plan_nodes(5, 3, "910A", per_rack)
    assert [(n.index, n.rack, n.server_index, n.chip) for n in more] == [
        (5, 2, 0, "910A"), (6, 2, 1, "910A"), (7, 3, 0, "910A")]


def test_nodes_per_rack_rounds_up():
    assert nodes.nodes_per_rack(256, 2) == 128
    assert nodes.nodes_per_rack(5, 2) == 3
    assert nodes.nodes_per_rack(1, 4) == 1


def test_sim_node_round_trips_through_its_manifest():
    node = SimNode(index=42, chip="A3", rack=3, server_index=5)
    assert nodes.sim_node_from_manifest(nodes.node_manifest(node)) == node
    assert nodes.sim_node_from_manifest({"metadata": {"name": "real-node", "labels": {}}}) is None


def test_deviceinfo_configmap_follows_the_mindcluster_format():
    node = SimNode(index=2, chip="910B", rack=1, server_index=0)
    configmap = nodes.deviceinfo_configmap(node, now=1700000000)
    assert configmap["metadata"]["name"] == "mindx-dl-deviceinfo-node-002"
    assert configmap["metadata"]["namespace"] == "kube-system"
    assert configmap["metadata"]["labels"]["mx-consumer-cim"] == "true"
    payload = json.loads(configmap["data"]["DeviceInfoCfg"])
    device_list = payload["DeviceInfo"]["DeviceList"]
    assert device_list["huawei.com/Ascend910"] == ",".join(f"Ascend910-{i}" for i in range(8))
    assert device_list["huawei.com/Ascend910-Unhealthy"] == ""
    assert device_list["huawei.com/Ascend910-NetworkUnhealthy"] == ""
    assert device_list["huawei.com/Ascend910-Recovering"] == ""
    assert json.loads(device_list["huawei.com/Ascend910-Fault"]) == []
    assert payload["DeviceInfo"]["UpdateTime"] == 1700000000
    assert payload["RackID"] == 1 and payload["ServerIndex"] == 0 and payload["SuperPodID"] == -1
    assert len(payload["CheckCode"]) == 64
    assert configmap["data"]["ManuallySeparateNPU"] == ""


def test_unhealthy_chips_leave_the_healthy_list_and_are_reported_back():
    node = SimNode(index=1, chip="910B", rack=0, server_index=0)
    data = nodes.deviceinfo_data(node, frozenset({3, 5}), now=1)
    device_list = json.loads(data["DeviceInfoCfg"])["DeviceInfo"]["DeviceList"]
    assert "Ascend910-3" not in device_list["huawei.com/Ascend910"].split(",")
    assert device_list["huawei.com/Ascend910-Unhealthy"] == "Ascend910-3,Ascend910-5"
    assert [f["npu_name"] for f in json.loads(device_list["huawei.com/Ascend910-Fault"])] == [
        "Ascend910-3", "Ascend910-5"]
    assert nodes.reported_unhealthy(data) == {3, 5}
    assert nodes.unusable_chips(data) == {3, 5}


def test_manually_separated_and_network_unhealthy_chips_are_unusable_too():
    payload = {"DeviceInfo": {"DeviceList": {"huawei.com/Ascend910-NetworkUnhealthy": "Ascend910-1"}}}
    data = {"DeviceInfoCfg": json.dumps(payload), "ManuallySeparateNPU": "Ascend910-6"}
    assert nodes.unusable_chips(data) == {1, 6}


@pytest.mark.parametrize("data", [None, {}, {"DeviceInfoCfg": "not json"}, {"DeviceInfoCfg": "[]"},
                                  {"DeviceInfoCfg": json.dumps({"DeviceInfo": {"DeviceList": "x"}})}])
def test_missing_or_broken_deviceinfo_means_no_extra_health_information(data):
    assert nodes.unusable_chips(data) == frozenset()
    assert nodes.reported_unhealthy(data) == frozenset()
