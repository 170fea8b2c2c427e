"""The MindCluster / device-plugin wire contract: one parser per object, and the super-pod id rank table and
inventory agree on."""

from __future__ import annotations

import json

import pytest

from ascend_hybrid.contracts.ascend import (
    DEVICE_ANNOTATION,
    SUPERPOD_LABEL,
    DeviceInfo,
    NodeSelection,
    device_infos_by_node,
    device_plugins,
    parse_deviceinfo,
    plugin_daemonset,
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


# --- the device plugin's mode, from its DaemonSets -----------------------------------------------------------------

def plugin_daemonset_manifest(args: str, node_selector=None, affinity_terms=None, name="ascend-device-plugin-daemonset"):
    """A DaemonSet shaped as MindCluster's build/ascendplugin*.yaml: the plugin's flags in one shell argument."""
    spec = {"nodeSelector": node_selector if node_selector is not None else {"workerselector": "dls-worker-node"},
            "containers": [{"name": "device-plugin-01", "image": "ascend-k8sdeviceplugin:v7.3.0",
                            "command": ["/bin/bash", "-c", "--"], "args": [args]}]}
    if affinity_terms is not None:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": affinity_terms}}}
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": "kube-system"},
            "spec": {"template": {"spec": spec}}}


NOT_SOC = [{"matchExpressions": [{"key": "servertype", "operator": "NotIn", "values": ["soc"]}]}]
WORKER = {"workerselector": "dls-worker-node"}


def test_the_plugin_mode_is_read_from_the_daemonsets_volcano_type_flag():
    volcano = plugin_daemonset_manifest("device-plugin -volcanoType=true -presetVirtualDevice=true "
                                        "-logFile=/var/log/mindx-dl/devicePlugin/devicePlugin.log -logLevel=0",
                                        affinity_terms=NOT_SOC)
    plain = plugin_daemonset_manifest("device-plugin -logFile=/var/log/mindx-dl/devicePlugin/devicePlugin.log")
    assert plugin_daemonset(volcano).mode == "volcano" and plugin_daemonset(plain).mode == "kubelet"
    for args, mode in (("device-plugin -volcanoType", "volcano"), ("device-plugin --volcanoType=1", "volcano"),
                       ("device-plugin -volcanoType=false", "kubelet"),
                       ("device-plugin -volcanoType=true -volcanoType=F", "kubelet"),  # Go's flags: the last wins
                       ("/usr/local/bin/device-plugin -volcanoType=True", "volcano")):
        assert plugin_daemonset(plugin_daemonset_manifest(args)).mode == mode, args
    other = plugin_daemonset_manifest("npu-exporter -volcanoType=true", name="npu-exporter")
    assert plugin_daemonset(other) is None


def test_each_node_gets_the_mode_of_the_plugin_that_runs_on_it():
    volcano = plugin_daemonset_manifest("device-plugin -volcanoType=true", node_selector=dict(WORKER, pool="a"),
                                        affinity_terms=NOT_SOC, name="volcano-pool")
    plain = plugin_daemonset_manifest("device-plugin", node_selector=dict(WORKER, pool="b"), name="plain-pool")
    plugins = device_plugins([volcano, plain, {"metadata": {"name": "kube-proxy"}, "spec": {}}])
    assert [ds.name for ds in plugins.daemonsets] == ["plain-pool", "volcano-pool"]
    assert plugins.mode_of(dict(WORKER, pool="a")) == "volcano"
    assert plugins.mode_of(dict(WORKER, pool="a", servertype="soc")) == "kubelet"  # the affinity keeps it off
    assert plugins.mode_of(dict(WORKER, pool="b")) == "kubelet"
    assert plugins.mode_of({"pool": "a"}) == "kubelet"  # no plugin of theirs there: the plugin's default
    assert device_plugins([volcano], forced="kubelet").mode_of(dict(WORKER, pool="a")) == "kubelet"
    assert "volcano-pool (volcano)" in plugins.source()


@pytest.mark.parametrize(("operator", "values", "labels", "holds"), [
    ("In", ["x"], {"k": "x"}, True), ("In", ["x"], {}, False), ("NotIn", ["x"], {}, True),
    ("NotIn", ["x"], {"k": "x"}, False), ("Exists", [], {"k": ""}, True), ("DoesNotExist", [], {"k": ""}, False),
    ("Gt", ["3"], {"k": "4"}, True), ("Gt", ["3"], {"k": "3"}, False), ("Lt", ["3"], {"k": "2"}, True),
    ("Lt", ["3"], {"k": "x"}, False), ("Bogus", [], {"k": "x"}, False),
])
def test_node_affinity_expressions_hold_as_the_scheduler_reads_them(operator, values, labels, holds):
    selection = NodeSelection(terms=((("k", operator, tuple(values)),),))
    assert selection.matches(labels) is holds
