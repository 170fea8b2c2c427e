import json
import random

import pytest

from ascend_hybrid.contracts.ascend import RACK_LABEL, RESOURCE, SUPERPOD_LABEL, chip_type_of, pod_chip_ids
from ascend_hybrid.contracts.podview import npu_request
from ascend_hybrid.gang.inventory import blocking_taints, build_inventory, tolerates
from support.builders import NodeBuilder, PodBuilder, deviceinfo


def node(name: str) -> NodeBuilder:
    """A Ready 910B node with its 8 NPUs."""
    return NodeBuilder(name).chip("910B")


def pod(name: str, chips: int = 8) -> PodBuilder:
    """A Running pod asking for `chips` NPUs, not yet bound."""
    return PodBuilder.named(name).chips(chips).phase("Running")


def labelled(**labels: str) -> dict:
    node = NodeBuilder("n")
    for key, value in labels.items():
        node.label(key, value)
    return node.build()


@pytest.mark.parametrize(
    "labels, expected",
    [
        ({"accelerator-type": "module"}, "910A"),
        ({"accelerator-type": "half"}, "910A"),
        ({"accelerator-type": "module-910b-8"}, "910B"),
        ({"accelerator-type": "card-910b-2"}, "910B"),
        ({"accelerator-type": "module-a3-16"}, "A3"),
        ({"accelerator-type": "module-a3-16-super-pod"}, "A3"),
        # the accelerator type wins over the chip name
        ({"accelerator-type": "module", "node.kubernetes.io/npu.chip.name": "910B3"}, "910A"),
        ({"node.kubernetes.io/npu.chip.name": "910A"}, "910A"),
        ({"node.kubernetes.io/npu.chip.name": "910ProA"}, "910A"),
        ({"node.kubernetes.io/npu.chip.name": "910ProB"}, "910A"),
        ({"node.kubernetes.io/npu.chip.name": "910PremiumA"}, "910A"),
        ({"node.kubernetes.io/npu.chip.name": "910B"}, "910B"),
        ({"node.kubernetes.io/npu.chip.name": "910B4"}, "910B"),
        ({"node.kubernetes.io/npu.chip.name": "910_9391"}, "A3"),
        ({"node.kubernetes.io/npu.chip.name": "Ascend910_9382"}, "A3"),
        ({"accelerator-type": "card"}, None),
        ({"node.kubernetes.io/npu.chip.name": "310P3"}, None),
        ({}, None),
    ],
)
def test_chip_type_of(labels, expected):
    assert chip_type_of(labelled(**labels)) == expected


def test_chip_type_of_node_without_labels():
    assert chip_type_of({"metadata": {"name": "bare"}}) is None


def one(nodes, pods=(), infos=(), **kw):
    inventory = build_inventory(nodes, pods, infos, **kw)
    assert len(inventory) == 1
    return inventory.nodes[0]


def test_node_fields():
    n = one([node("a").rack("r1").super_pod("7").label("zone", "z").build()])
    assert (n.name, n.chip, n.allocatable, n.capacity, n.free) == ("a", "910B", 8, 8, 8)
    assert n.ready and not n.unschedulable and n.taints == ()
    assert (n.rack, n.super_pod, n.tier("zone"), n.tier("missing")) == ("r1", "7", "z", None)
    assert n.free_ids == frozenset(range(8)) and n.used == frozenset() and n.unknown_used == 0


def test_not_ready_cordon_taints_and_missing_ready_condition():
    taint = {"key": "k", "value": "v", "effect": "NoSchedule"}
    n = one([node("a").not_ready().cordoned().taint(**taint).build()])
    assert not n.ready and n.unschedulable and dict(n.taints[0]) == taint
    bare = node("b").build()
    bare["status"]["conditions"] = []
    assert not one([bare]).ready


@pytest.mark.parametrize("annotation", ["config", "real", "plain"])
def test_used_chips_from_annotations(annotation):
    held = pod("p", 2).node("a")
    if annotation == "config":
        held.devices([3, 4])
    else:
        held.chip_names([3, 4], annotation="huawei.com/AscendReal" if annotation == "real" else RESOURCE)
    p = held.build()
    n = one([node("a").build()], [p])
    assert n.used == {3, 4} and n.free == 6 and n.free_ids == {0, 1, 2, 5, 6, 7}


def test_config_annotation_preferred_and_broken_one_falls_back():
    p = pod("p", 1).node("a").devices([5]).build()
    p["metadata"]["annotations"]["huawei.com/AscendReal"] = "Ascend910-6"
    assert pod_chip_ids(p) == {5}
    p["metadata"]["annotations"]["ascend.kubectl.kubernetes.io/ascend-910-configuration"] = "{not json"
    assert pod_chip_ids(p) == {6}


def test_pod_without_annotation_holds_unknown_chips():
    n = one([node("a").build()], [pod("p", 3).node("a").build()])
    assert n.free == 5 and n.unknown_used == 3 and n.free_ids is None
    assert n.candidate_ids == frozenset(range(8)) and n.unknown_held == 3


@pytest.mark.parametrize("phase, counted", [("Pending", True), ("Running", True), ("Unknown", True),
                                            ("Succeeded", False), ("Failed", False)])
def test_terminal_pods_do_not_count(phase, counted):
    assert one([node("a").build()], [pod("p").node("a").phase(phase).build()]).free == (0 if counted else 8)


def test_pod_being_deleted_still_counts():
    p = pod("p", 4).node("a").build()
    p["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert one([node("a").build()], [p]).free == 4


@pytest.mark.parametrize("pin_by", ["hostname", "field"])
def test_unbound_pod_pinned_by_affinity_counts(pin_by):
    pinned = pod("p").phase("Pending").pinned("a", by=pin_by).build()
    inventory = build_inventory([node("a").build(), node("b").build()], [pinned])
    assert (inventory["a"].free, inventory["b"].free) == (0, 8)


def test_pin_by_hostname_label_that_differs_from_node_name():
    n = node("node-a").label("kubernetes.io/hostname", "host-a").build()
    assert one([n], [pod("p", 2).phase("Pending").pinned("host-a").build()]).free == 6


def test_unbound_pods_that_are_not_pinned_do_not_count():
    loose = pod("p").phase("Pending").build()
    two_values = pod("q").phase("Pending").pinned("a").build()
    expr = two_values["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    expr["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] = ["a", "b"]
    or_terms = pod("r").phase("Pending").pinned("a").build()
    terms = or_terms["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    terms["nodeSelectorTerms"].append({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z"]}]})
    elsewhere = pod("s").node("not-in-inventory").build()
    assert one([node("a").build()], [loose, two_values, or_terms, elsewhere]).free == 8


def test_requests_limits_and_init_containers():
    assert npu_request(PodBuilder.named("p").phase("Running").chips(4, requests=False).build()) == 4
    p = pod("p", 2).build()
    p["spec"]["containers"].append({"name": "side", "resources": {"requests": {"huawei.com/Ascend910": "1"}}})
    p["spec"]["initContainers"] = [{"name": "init", "resources": {"limits": {"huawei.com/Ascend910": "5"}}}]
    assert npu_request(p) == 5
    p["spec"]["initContainers"] = [{"name": "init", "resources": {"limits": {"huawei.com/Ascend910": "2"}}}]
    assert npu_request(p) == 3
    assert npu_request({"spec": {"containers": [{"name": "cpu"}]}}) == 0


def test_ignore_pods_and_reserved():
    mine = pod("mine", 4).node("a").build()
    mine["metadata"]["labels"] = {"hybrid.ascend.dev/job": "j"}
    other = pod("other", 2).node("a").devices([6, 7]).build()
    n = one([node("a").build()], [mine, other], reserved={"a": 1, "ghost": 8},
            ignore_pods=lambda p: (p["metadata"].get("labels") or {}).get("hybrid.ascend.dev/job") == "j")
    assert (n.free, n.reserved, n.free_ids) == (5, 1, None)  # reserved chips have no ids
    assert n.candidate_ids == frozenset(range(6))


def test_deviceinfo_health():
    info = deviceinfo("a", unhealthy=[1], network_unhealthy=[2], separated=[6], super_pod=3, rack=9)
    n = one([node("a").build()], [], [info])
    assert n.unhealthy == {1, 2, 6} and n.free == 5 and n.free_ids == {0, 3, 4, 5, 7}
    assert (n.super_pod, n.rack, n.lost_to_health) == ("3", "9", 3)


def test_labels_win_over_deviceinfo_domains():
    n = one([node("a").rack("label-rack").super_pod("label-sp").build()], [], [deviceinfo("a", super_pod=3, rack=9)])
    assert (n.rack, n.super_pod, n.tier(RACK_LABEL), n.tier(SUPERPOD_LABEL)) == ("label-rack", "label-sp") * 2


def test_chips_kubelet_already_withheld_are_not_subtracted_twice():
    # a real kubelet drops the unhealthy device from allocatable: 8 capacity, 7 allocatable
    n = one([node("a").npus(7, capacity=8).build()], [], [deviceinfo("a", unhealthy=[3])])
    assert n.free == 7 and n.free_ids == {0, 1, 2, 4, 5, 6, 7} and n.lost_to_health == 0


def test_unhealthy_chip_held_by_a_pod_is_not_lost_twice():
    n = one([node("a").build()], [pod("p", 1).node("a").devices([3]).build()], [deviceinfo("a", unhealthy=[3])])
    assert n.free == 7 and n.free_ids == {0, 1, 2, 4, 5, 6, 7}


@pytest.mark.parametrize("data", [
    {},
    {"DeviceInfoCfg": "{broken"},
    {"DeviceInfoCfg": "[]"},
    {"DeviceInfoCfg": json.dumps({"DeviceInfo": "nope"})},
    {"DeviceInfoCfg": json.dumps({"DeviceInfo": {"DeviceList": None}}), "ManuallySeparateNPU": "garbage,,"},
])
def test_unreadable_deviceinfo_means_no_extra_information(data):
    cm = {"metadata": {"name": "mindx-dl-deviceinfo-a", "namespace": "kube-system"}, "data": data}
    n = one([node("a").build()], [], [cm])
    assert n.free == 8 and n.unhealthy == frozenset()


def test_deviceinfo_of_other_namespaces_and_names_is_ignored():
    info = deviceinfo("a", unhealthy=[0])
    info["metadata"]["namespace"] = "default"
    other = deviceinfo("a", unhealthy=[1])
    other["metadata"]["name"] = "something-else"
    assert one([node("a").build()], [], [info, other]).free == 8


def test_910a_rings_with_unknown_holders():
    n = one([node("a").chip("910A").build()], [pod("p", 2).node("a").devices([0, 1]).build(),
                                       pod("q", 1).node("a").build()])
    # ids 2..7 are candidates, one of them is held by q: either ring may be the one that lost a chip
    assert (n.free, n.ring_free(0), n.ring_free(1)) == (5, 1, 3)


def test_junk_quantities_and_non_npu_nodes():
    cpu = NodeBuilder("cpu").npus(0).build()
    cpu["status"]["allocatable"].pop("huawei.com/Ascend910")
    cpu["status"]["capacity"].pop("huawei.com/Ascend910")
    odd = node("odd").build()
    odd["status"]["allocatable"]["huawei.com/Ascend910"] = "lots"
    inventory = build_inventory([cpu, odd], [])
    assert (inventory["cpu"].chip, inventory["cpu"].free, inventory["odd"].free) == (None, 0, 0)


def test_inventory_sorted_and_independent_of_input_order():
    nodes = [node(f"n{i}").rack(f"r{i % 3}").build() for i in range(10)]
    pods = [pod(f"p{i}", 1 + i % 3).node(f"n{i % 10}").build() if i % 2 else
            pod(f"p{i}", 1 + i % 3).node(f"n{i % 10}").devices([i % 8]).build() for i in range(25)]
    expected = build_inventory(nodes, pods)
    assert [n.name for n in expected] == sorted(n["metadata"]["name"] for n in nodes)
    rng = random.Random(4)
    for _ in range(5):
        rng.shuffle(nodes)
        rng.shuffle(pods)
        assert build_inventory(nodes, pods) == expected
    assert expected.get("nope") is None and expected["n3"].name == "n3"


@pytest.mark.parametrize(
    "toleration, taint, expected",
    [
        ({"operator": "Exists"}, {"key": "a", "effect": "NoSchedule"}, True),
        ({"key": "a", "operator": "Exists"}, {"key": "a", "value": "x", "effect": "NoExecute"}, True),
        ({"key": "a", "operator": "Exists", "effect": "NoExecute"}, {"key": "a", "effect": "NoSchedule"}, False),
        ({"key": "a", "value": "x"}, {"key": "a", "value": "x", "effect": "NoSchedule"}, True),
        ({"key": "a", "operator": "Equal", "value": "y"}, {"key": "a", "value": "x", "effect": "NoSchedule"}, False),
        ({"key": "a", "operator": "Equal"}, {"key": "a", "effect": "NoSchedule"}, True),
        ({"key": "b", "operator": "Exists"}, {"key": "a", "effect": "NoSchedule"}, False),
        ({"key": "", "operator": "Equal", "value": ""}, {"key": "a", "effect": "NoSchedule"}, False),
        ({"key": "a", "operator": "Gt", "value": "1"}, {"key": "a", "value": "2", "effect": "NoSchedule"}, False),
    ],
)
def test_tolerates(toleration, taint, expected):
    assert tolerates(toleration, taint) is expected


def test_blocking_taints_ignore_prefer_no_schedule():
    taints = [{"key": "soft", "effect": "PreferNoSchedule"}, {"key": "hard", "effect": "NoExecute"}]
    assert [t["key"] for t in blocking_taints(taints, ())] == ["hard"]
    assert blocking_taints(taints, [{"key": "hard", "operator": "Exists"}]) == ()


def test_a_nodes_facts_are_read_again_when_its_version_or_deviceinfo_changes_and_only_then():
    first = node("cached").rack("r1").metadata(uid="u-1", resourceVersion="10").build()
    assert one([first]).rack == "r1"
    same_version = node("cached").rack("r2").metadata(uid="u-1", resourceVersion="10").build()
    assert one([same_version]).rack == "r1", "one resourceVersion is one node: its facts are kept"
    newer = node("cached").rack("r2").not_ready().metadata(uid="u-1", resourceVersion="11").build()
    moved = one([newer])
    assert (moved.rack, moved.ready) == ("r2", False)
    sick = one([newer], [], [deviceinfo("cached", unhealthy=[3])])
    assert sick.unhealthy == {3} and sick.free == 7, "a deviceinfo change is read at the same node version"
    held = one([newer], [pod("p", 2).node("cached").devices([0, 1]).build()])
    assert held.used == {0, 1} and held.free == 6, "what runs on the node is never cached"
    for ids in ({}, {"resourceVersion": "10"}, {"uid": "u-2"}):
        unserved = node("unserved").rack("r1").metadata(**ids).build()
        assert one([unserved]).rack == "r1"
        unserved["metadata"]["labels"][RACK_LABEL] = "r9"
        assert one([unserved]).rack == "r9", f"a node without both ids ({ids}) is read each time"


def test_a_pod_read_before_is_read_again_when_it_changes_even_in_place():
    """Each pod's parse is kept with the dict it came from (the watch's store replaces a changed pod's dict); what
    of a pod can change in place (phase, node, device annotations) is compared, so no caller sees a stale one."""
    served = node("n1").metadata(uid="n-1", resourceVersion="1").build()
    p = pod("p", 2).node("n1").metadata(uid="p-1").build()
    assert one([served], [p]).free == 6 and one([served], [p]).unknown_used == 2
    devices = PodBuilder.named("x").devices([4, 5]).build()["metadata"]["annotations"]
    p["metadata"].setdefault("annotations", {}).update(devices)
    assert one([served], [p]).used == {4, 5}, "the device plugin's annotation, added in place"
    p["status"]["phase"] = "Succeeded"
    assert one([served], [p]).free == 8, "a finished pod holds nothing"
    replaced = pod("p", 4).node("n1").metadata(uid="p-1").build()
    assert one([served], [replaced]).free == 4, "a new dict for the same pod is parsed anew"


def test_kept_node_inventories_are_those_a_fresh_build_gives():
    """Random clusters built twice, the second time after pods moved, with kept inventories and without: equal."""
    from ascend_hybrid.gang import inventory as module
    rng = random.Random(7)
    nodes = [node(f"n{i}").rack(f"r{i % 3}").metadata(uid=f"u{i}", resourceVersion="1").build() for i in range(12)]
    for _ in range(30):
        pods = [pod(f"p{j}", rng.choice([1, 2, 4, 8])).node(f"n{rng.randrange(12)}").metadata(uid=f"p{j}")
                .build() for j in range(rng.randrange(10))]
        reserved = {f"n{rng.randrange(12)}": rng.randrange(1, 4)}
        kept = build_inventory(nodes, pods, reserved=reserved)
        module._INVENTORIES.clear()
        module._HOLDINGS.clear()
        assert build_inventory(nodes, pods, reserved=reserved) == kept
        again = build_inventory(nodes, pods, reserved=reserved)
        assert all(a is b for a, b in zip(again, build_inventory(nodes, pods, reserved=reserved))), "kept as is"
        build_inventory(nodes, [])  # a failed placement asks whether the job fits an empty cluster
        assert all(a is b for a, b in zip(again, build_inventory(nodes, pods, reserved=reserved))), "still kept"
