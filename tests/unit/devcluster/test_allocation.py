"""Chip choice and device annotations of the simulated device plugin."""

import json

from hypothesis import given
from hypothesis import strategies as st

from ascend_hybrid.devcluster.deviceplugin import allocation
from ascend_hybrid.devcluster.deviceplugin.allocation import ChipLedger
from ascend_hybrid.devcluster.nodes.manifests import (
    PROFILES,
    UNREADABLE_IPS_ANNOTATION,
    SimNode,
    device_ip,
    sim_node_from_manifest,
)
from support.builders import PodBuilder


def pod() -> PodBuilder:
    """A bound pod whose one container asks for nothing yet."""
    return PodBuilder.named("p", namespace="ns").uid("u1").node("node-001").container(name="c", resources={})


def test_requested_chips_reads_limits_or_requests_and_init_containers():
    assert allocation.requested_chips(pod().chips(2, requests=False).build()) == 2
    assert allocation.requested_chips(pod().chips(3, limits=False).build()) == 3
    assert allocation.requested_chips(pod().build()) == 0
    init = {"name": "c", "resources": {"limits": {"huawei.com/Ascend910": "4"}}}
    assert allocation.requested_chips(pod().chips(1, requests=False).spec(initContainers=[init]).build()) == 4


def test_the_kubelets_choice_is_any_free_chips_reproducible_by_seed():
    chip = PROFILES["910A"]
    free = set(range(8))
    chosen = {allocation.kubelet_choice(chip, free, 4, allocation.pod_rng(0, f"uid-{i}")) for i in range(40)}
    assert len(chosen) > 10, "many different sets: the kubelet follows no ring rule"
    assert any(allocation.straddles_rings(chip, chips) for chips in chosen)
    again = allocation.kubelet_choice(chip, free, 4, allocation.pod_rng(0, "uid-7"))
    assert again == allocation.kubelet_choice(chip, free, 4, allocation.pod_rng(0, "uid-7"))
    assert allocation.kubelet_choice(chip, {1, 2}, 3, allocation.pod_rng(0, "u")) is None


@given(st.sets(st.integers(0, 7)), st.integers(1, 8), st.booleans(), st.integers(0, 1000))
def test_the_kubelets_choice_is_free_and_distinct_and_straddles_when_forced(free, count, straddle, seed):
    chip = PROFILES["910A"]
    chips = allocation.kubelet_choice(chip, free, count, allocation.pod_rng(seed, "u"), straddle=straddle)
    if count > len(free):
        assert chips is None
        return
    assert chips is not None and len(set(chips)) == count and set(chips) <= free
    in_both_rings = any(i < 4 for i in free) and any(i >= 4 for i in free)
    if straddle and in_both_rings and 2 <= count <= 4:
        assert allocation.straddles_rings(chip, chips)


def test_straddling_is_a_split_of_a_pod_that_one_ring_could_hold():
    chip = PROFILES["910A"]
    assert allocation.straddles_rings(chip, (3, 4))
    assert not allocation.straddles_rings(chip, (4, 5, 6, 7))
    assert not allocation.straddles_rings(chip, range(8))  # a whole node is no split
    assert not allocation.straddles_rings(PROFILES["910B"], (3, 4))


def pending(uid: str, chips: int, node: str = "node-001") -> PodBuilder:
    return PodBuilder.named(f"pod-{uid}", namespace="ns").uid(uid).node(node).chips(chips, requests=False)


def test_volcano_mounts_the_oldest_pod_that_names_as_many_chips():
    young = pending("young", 2).annotations({"huawei.com/Ascend910": "Ascend910-0,Ascend910-1",
                                             "predicate-time": "200"}).build()
    old = pending("old", 2).annotations({"huawei.com/Ascend910": "Ascend910-4,Ascend910-5",
                                         "predicate-time": "100"}).build()
    four = pending("four", 4).annotations({"huawei.com/Ascend910": "Ascend910-0,Ascend910-1,Ascend910-2,Ascend910-3",
                                           "predicate-time": "1"}).build()
    mounted = pending("mounted", 2).annotations({"huawei.com/Ascend910": "Ascend910-6,Ascend910-7",
                                                 "predicate-time": allocation.MOUNTED}).build()
    bare = pending("bare", 2).build()
    assert allocation.volcano_candidate([young, old, four, mounted, bare], 2) is old
    assert allocation.volcano_candidate([young, four, mounted, bare], 2) is young
    assert allocation.volcano_candidate([bare, mounted], 2) is None
    refused = pending("refused", 2).annotations({"huawei.com/Ascend910": "Ascend910-0,Ascend910-1"}).status(
        phase="Failed", reason="UnexpectedAdmissionError").build()
    assert allocation.volcano_candidate([refused], 2) is None
    # no predicate-time counts as the latest of all, yet still counts
    untimed = pending("untimed", 2).annotations({"huawei.com/Ascend910": "Ascend910-0,Ascend910-1"}).build()
    assert allocation.volcano_candidate([untimed], 2) is untimed


def test_the_annotations_are_written_once_and_not_for_a_volcano_whole_node_pod():
    chip = PROFILES["910B"]
    recorded = {allocation.KUBELET_DEVICES_ANNOTATION: "0,1"}
    assert not allocation.needs_annotation(pending("a", 2).build(), "kubelet", chip)  # not allocated yet
    assert allocation.needs_annotation(pending("a", 2).annotations(recorded).build(), "kubelet", chip)
    written = {**recorded, "huawei.com/AscendReal": "Ascend910-0,Ascend910-1"}
    assert not allocation.needs_annotation(pending("a", 2).annotations(written).build(), "kubelet", chip)
    whole = {allocation.KUBELET_DEVICES_ANNOTATION: "0,1,2,3,4,5,6,7"}
    assert allocation.needs_annotation(pending("w", 8).annotations(whole).build(), "kubelet", chip)
    assert not allocation.needs_annotation(pending("w", 8).annotations(whole).build(), "volcano", chip)
    assert allocation.needs_annotation(pending("v", 2).annotations(recorded).build(), "volcano", chip)


def test_device_annotations_name_server_chips_and_loopback_device_ips():
    node = SimNode(index=2, chip="910B", rack=0, server_index=1)
    annotations = allocation.device_annotations("job-a1-0", "3f2a-uid", node, (2, 3))
    raw = annotations[allocation.CONFIG_ANNOTATION]
    configuration = json.loads(raw)
    # the current plugin's fields, in the order its json.Marshal writes them (pkg/common/proto.go Instance)
    assert list(configuration) == ["pod_name", "server_id", "host_ip", "super_pod_id", "devices", "rack_id",
                                   "server_index", "server_ip"]
    assert configuration["pod_name"] == "job-a1-0"
    assert configuration["server_id"] == "3f2a-uid"  # the pod's UID, not the node's IP
    assert configuration["host_ip"] == configuration["server_ip"] == "127.15.0.2"
    assert (configuration["super_pod_id"], configuration["rack_id"], configuration["server_index"]) == (-1, 0, "-1")
    assert " " not in raw  # compact, as json.Marshal
    assert [d["device_id"] for d in configuration["devices"]] == ["2", "3"]
    assert all(d["device_ip"].startswith("127.64.") for d in configuration["devices"])
    assert "super_device_id" not in configuration["devices"][0]
    assert annotations["huawei.com/AscendReal"] == annotations["huawei.com/kltDev"] == "Ascend910-2,Ascend910-3"
    assert "huawei.com/Ascend910" not in annotations  # Volcano's plugin writes that one, not the device plugin


def test_a3_device_annotations_carry_super_device_ids():
    node = SimNode(index=7, chip="A3", rack=1, server_index=2)
    devices = json.loads(allocation.device_annotations("p", "u", node, (0, 15))[allocation.CONFIG_ANNOTATION])["devices"]
    assert [d["super_device_id"] for d in devices] == ["32", "47"]
    configuration = json.loads(allocation.device_annotations("p", "u", node, (0,))[allocation.CONFIG_ANNOTATION])
    assert (configuration["super_pod_id"], configuration["rack_id"], configuration["server_index"]) == (1, 1, "2")


def test_held_chips_come_from_the_kubelets_record_else_the_plugins_annotations():
    node = SimNode(index=1, chip="910B", rack=0, server_index=0)
    two = pod().chips(2, requests=False)
    assert allocation.held_chips(two.build()) is None
    assert allocation.held_chips(two.annotations(allocation.device_annotations("p", "u", node, (5, 6))).build()) == (
        5, 6)
    recorded = {allocation.KUBELET_DEVICES_ANNOTATION: "7,3"}
    assert allocation.held_chips(pod().chips(2, requests=False).annotations(recorded).build()) == (3, 7)
    real = {"huawei.com/AscendReal": "Ascend910-4,Ascend910-1"}
    assert allocation.held_chips(pod().chips(2, requests=False).annotations(real).build()) == (1, 4)
    # the scheduler's choice is not a holding: Allocate has not mounted it yet
    named = {"huawei.com/Ascend910": "Ascend910-4,Ascend910-1"}
    assert allocation.held_chips(pod().chips(2, requests=False).annotations(named).build()) is None
    assert allocation.scheduler_chips(pod().annotations(named).build()) == (1, 4)
    garbled = {allocation.KUBELET_DEVICES_ANNOTATION: "garbage"}
    assert allocation.held_chips(pod().chips(2, requests=False).annotations(garbled).build()) is None


def test_the_ledger_admits_by_count_and_frees_on_release():
    ledger = ChipLedger(nodes={"node-001": SimNode(1, "910B", 0, 0)}, unusable={"node-001": frozenset({0})})
    ledger.hold("a", "node-001", (1, 2, 3))
    assert ledger.fits("node-001", 4) and not ledger.fits("node-001", 5)
    assert ledger.free("node-001") == {4, 5, 6, 7}
    ledger.release("a")
    assert ledger.fits("node-001", 7) and not ledger.fits("node-001", 8)
    assert not ledger.fits("unknown-node", 1)


def test_the_list_watch_period_is_refused_outside_the_plugins_range():
    import argparse

    import pytest

    assert allocation.list_watch_period("3") == 3.0 and allocation.list_watch_period("1800") == 1800.0
    for bad in ("2", "1801"):
        with pytest.raises(argparse.ArgumentTypeError, match=r"outside \[3, 1800\]"):
            allocation.list_watch_period(bad)


def test_a_chip_whose_ip_the_plugin_cannot_read_is_annotated_minus_one():
    """The real plugin writes "-1" (ascend-common DeviceIPErrorCodeStr) when it fails to read a chip's IP."""
    node = SimNode(index=3, chip="910A", rack=2, server_index=0, unreadable_ips=frozenset({5}))
    devices = json.loads(allocation.device_annotations("p", "u", node, (4, 5))[allocation.CONFIG_ANNOTATION])["devices"]
    assert [(d["device_id"], d["device_ip"]) for d in devices] == [("4", device_ip(3, 4)), ("5", "-1")]


def test_the_unreadable_chips_come_from_the_nodes_annotation():
    from ascend_hybrid.devcluster.nodes.manifests import node_manifest

    manifest = node_manifest(SimNode(index=3, chip="910A", rack=2, server_index=0))
    assert sim_node_from_manifest(manifest).unreadable_ips == frozenset()
    manifest["metadata"]["annotations"][UNREADABLE_IPS_ANNOTATION] = "5,1"
    assert sim_node_from_manifest(manifest).unreadable_ips == frozenset({1, 5})
