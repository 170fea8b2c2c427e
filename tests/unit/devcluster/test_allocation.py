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


def test_910a_pods_of_up_to_four_chips_stay_in_one_ring_best_fit():
    chip = PROFILES["910A"]
    assert allocation.choose_chips(chip, set(range(8)), 2) == (0, 1)
    # Ring 0 has 2 free, ring 1 has 4: a 2-chip pod takes ring 0 and keeps ring 1 whole.
    assert allocation.choose_chips(chip, {2, 3, 4, 5, 6, 7}, 2) == (2, 3)
    # 3 chips do not fit in ring 0's two, so they go to ring 1 even though 0..3 has lower ids.
    assert allocation.choose_chips(chip, {2, 3, 4, 5, 6, 7}, 3) == (4, 5, 6)
    assert allocation.choose_chips(chip, {2, 3, 6, 7}, 4) is None  # 4 free, but no whole ring
    assert allocation.choose_chips(chip, set(range(8)), 8) == tuple(range(8))


@given(st.sets(st.integers(0, 7)), st.integers(1, 4))
def test_910a_choice_is_free_distinct_and_inside_one_ring(free, count):
    chips = allocation.choose_chips(PROFILES["910A"], free, count)
    if chips is None:
        assert all(len([i for i in free if i // 4 == ring]) < count for ring in (0, 1))
    else:
        assert len(set(chips)) == count and set(chips) <= free and len({i // 4 for i in chips}) == 1


@given(st.sets(st.integers(0, 15)), st.integers(1, 16))
def test_a3_choice_takes_the_lowest_free_chips(free, count):
    chips = allocation.choose_chips(PROFILES["A3"], free, count)
    assert chips == (tuple(sorted(free)[:count]) if count <= len(free) else None)


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
    assert annotations["huawei.com/Ascend910"] == "Ascend910-2,Ascend910-3"


def test_a3_device_annotations_carry_super_device_ids():
    node = SimNode(index=7, chip="A3", rack=1, server_index=2)
    devices = json.loads(allocation.device_annotations("p", "u", node, (0, 15))[allocation.CONFIG_ANNOTATION])["devices"]
    assert [d["super_device_id"] for d in devices] == ["32", "47"]
    configuration = json.loads(allocation.device_annotations("p", "u", node, (0,))[allocation.CONFIG_ANNOTATION])
    assert (configuration["super_pod_id"], configuration["rack_id"], configuration["server_index"]) == (1, 1, "2")


def test_held_chips_come_from_the_configuration_or_the_chip_names():
    node = SimNode(index=1, chip="910B", rack=0, server_index=0)
    two = pod().chips(2, requests=False)
    assert allocation.held_chips(two.build()) is None
    assert allocation.held_chips(two.annotations(allocation.device_annotations("p", "u", node, (5, 6))).build()) == (
        5, 6)
    named = {"huawei.com/Ascend910": "Ascend910-4,Ascend910-1"}
    assert allocation.held_chips(pod().chips(2, requests=False).annotations(named).build()) == (1, 4)
    garbled = {"huawei.com/Ascend910": "garbage"}
    assert allocation.held_chips(pod().chips(2, requests=False).annotations(garbled).build()) is None


def test_ledger_gives_distinct_chips_skips_unusable_ones_and_frees_on_release():
    ledger = ChipLedger(nodes={"node-001": SimNode(1, "910B", 0, 0)}, unusable={"node-001": frozenset({0})})
    first = ledger.allocate("a", "node-001", 3)
    second = ledger.allocate("b", "node-001", 3)
    assert first == (1, 2, 3) and second == (4, 5, 6)
    assert ledger.allocate("c", "node-001", 2) is None  # only chip 7 is left
    assert ledger.allocate("a", "node-001", 3) == first  # idempotent per pod
    ledger.release("a")
    assert ledger.allocate("c", "node-001", 2) == (1, 2)
    assert ledger.allocate("d", "unknown-node", 1) is None


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
