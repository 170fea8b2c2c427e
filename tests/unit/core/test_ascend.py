"""The MindCluster / device-plugin wire contract: one parser per object, and the super-pod id rank table and
inventory agree on."""

from __future__ import annotations

import json

from ascend_hybrid.contracts.ascend import (
    DEVICE_ANNOTATION,
    SUPERPOD_LABEL,
    DeviceInfo,
    device_infos_by_node,
    parse_deviceinfo,
    pod_chip_ids,
    pod_devices,
    super_pod_id,
)
from ascend_hybrid.gang import ranktable
from ascend_hybrid.gang.inventory import build_inventory
from support.builders import NodeBuilder, PodBuilder, deviceinfo


def test_deviceinfo_counts_unhealthy_network_unhealthy_recovering_and_separated_chips_unusable():
    configmap = deviceinfo("n1", unhealthy=[1], network_unhealthy=[2], separated=[3], super_pod=4, rack=2)
    cfg = json.loads(configmap["data"]["DeviceInfoCfg"])
    cfg["DeviceInfo"]["DeviceList"]["huawei.com/Ascend910-Recovering"] = "Ascend910-5"
    configmap["data"]["DeviceInfoCfg"] = json.dumps(cfg)
    info = parse_deviceinfo(configmap)
    assert info == DeviceInfo("n1", unusable=frozenset({1, 2, 3, 5}), listed=frozenset({0, 2, 3, 4, 5, 6, 7}),
                              super_pod="4", rack="2")


def test_other_and_broken_configmaps_give_no_health_information_and_never_raise():
    assert parse_deviceinfo({"metadata": {"name": "kube-root-ca.crt", "namespace": "kube-system"}}) is None
    broken = {"metadata": {"name": "mindx-dl-deviceinfo-n1", "namespace": "kube-system"},
              "data": {"DeviceInfoCfg": "{not json"}}
    assert parse_deviceinfo(broken) == DeviceInfo("n1")
    negative = deviceinfo("n2")  # SuperPodID/RackID -1: not part of one
    assert parse_deviceinfo(negative).super_pod is None and parse_deviceinfo(negative).rack is None


def test_the_super_pod_id_is_the_label_else_deviceinfo():
    labelled = NodeBuilder("a3-0").chip("A3").super_pod("3").build()
    unlabelled = NodeBuilder("a3-1").chip("A3").build()
    info = parse_deviceinfo(deviceinfo("a3-1", chips=16, super_pod=7))
    assert super_pod_id(labelled, info) == "3"
    assert super_pod_id(unlabelled, info) == "7"
    assert super_pod_id(unlabelled, None) is None


def test_an_a3_node_without_the_label_gets_its_deviceinfo_super_pod_in_the_rank_table_and_the_inventory():
    nodes = [NodeBuilder("a3-0").chip("A3").build(), NodeBuilder("a3-1").chip("A3").build()]
    assert all(SUPERPOD_LABEL not in n["metadata"]["labels"] for n in nodes)
    infos = [deviceinfo("a3-0", chips=16, super_pod=5), deviceinfo("a3-1", chips=16, super_pod=6)]
    pods = [PodBuilder("a3", index).running(node=f"a3-{index}").devices(range(16), super_ids=range(16)).build()
            for index in range(2)]
    by_name = {n["metadata"]["name"]: n for n in nodes}
    super_pods = ranktable.node_super_pods(["a3-0", "a3-1"], by_name, device_infos_by_node(infos))
    table = ranktable.build_rank_table(pods, 16, super_pods, pod_count=2)
    assert table["version"] == "1.2"
    assert [entry["super_pod_id"] for entry in table["super_pod_list"]] == ["5", "6"]
    inventory = build_inventory(nodes, [], infos)
    assert [inventory[name].super_pod for name in ("a3-0", "a3-1")] == ["5", "6"]


def test_pod_chips_come_from_the_device_annotation_else_the_chip_name_annotations():
    annotated = PodBuilder("j", 0).running().devices([6, 3]).build()
    assert [device["device_id"] for device in pod_devices(annotated)] == ["3", "6"]
    assert pod_chip_ids(annotated) == {3, 6}
    named = {"metadata": {"annotations": {DEVICE_ANNOTATION: "{broken", "huawei.com/AscendReal": "Ascend910-1"}}}
    assert pod_devices(named) is None and pod_chip_ids(named) == {1}
    assert pod_chip_ids({"metadata": {}}) is None
