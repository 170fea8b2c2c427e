import random

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from ascend_hybrid.contracts.ascend import DevicePlugins, NodeSelection, PluginDaemonSet
from ascend_hybrid.contracts.chips import CHIPS
from ascend_hybrid.gang.inventory import build_inventory
from ascend_hybrid.gang.placement import GangRequest, place
from support.builders import NodeBuilder, PodBuilder, cluster, deviceinfo


def node(name: str) -> NodeBuilder:
    """A Ready 910B node with its 8 NPUs."""
    return NodeBuilder(name).chip("910B")


def pod(name: str, chips: int = 8) -> PodBuilder:
    """A Running pod asking for `chips` NPUs, not yet bound."""
    return PodBuilder.named(name).chips(chips).phase("Running")


def nodes_named(*names: str) -> list[dict]:
    return [node(name).build() for name in names]


def in_racks(**racks: tuple[str, ...]) -> list[dict]:
    """Nodes by rack: in_racks(A=("a1", "a2")) is a1 and a2 labelled rack A."""
    return [node(name).rack(rack).build() for rack, names in racks.items() for name in names]


def pairs(n: int) -> tuple[tuple[int, int], ...]:
    return tuple((2 * i, 2 * i + 1) for i in range(n // 2))


def test_seed_case_tp8_pp8_dp2():
    # 128 ranks, 8 per pod: 16 pods; a stage is 16 ranks = 2 pods
    inventory = build_inventory(cluster(16, per_rack=8), [])
    placement = place(GangRequest(16, 8, "910B", groups=pairs(16)), inventory)
    assert placement.ok and placement.reason == ""
    assert len(set(placement.nodes)) == 16
    assert placement.racks_per_group() == (1,) * 8 and placement.nodes_per_group() == (2,) * 8
    assert placement.chips == (tuple(range(8)),) * 16


def test_tp4_dp2_one_pod_on_one_node():
    placement = place(GangRequest(1, 8, "910B"), build_inventory(cluster(4, per_rack=2), []))
    assert placement.ok and placement.nodes == ("node-0000",)


def test_910a_four_chip_pods_go_only_where_the_kubelet_cannot_split_a_ring():
    """Kubelet mode: the kubelet picks any free chips. A 4-chip pod on an empty 910A node could straddle the HCCS
    rings; on a node whose ring 0 is taken by pods that say which chips they hold, ring 1 is all it can get."""
    used = [pod("u", 4).node("a").devices([0, 1, 2, 3]).build()]
    whole = [node("a").chip("910A").build(), node("b").chip("910A").build()]
    placement = place(GangRequest(1, 4, "910A"), build_inventory(whole, used))
    assert placement.ok and placement.nodes == ("a",) and placement.chips == ((4, 5, 6, 7),)
    failed = place(GangRequest(2, 4, "910A"), build_inventory(whole, used))
    assert not failed.ok and failed.cause == "KubeletMaySplitRings"
    assert "1 let the kubelet pick a pod's 4 chips from both HCCS rings" in failed.reason
    # a whole node, or one chip, is never split
    assert place(GangRequest(1, 8, "910A"), build_inventory(whole, used)).nodes == ("b",)
    assert place(GangRequest(3, 1, "910A"), build_inventory(whole, used)).ok


def test_910a_small_pods_share_the_ring_that_is_left():
    used = [pod("u", 4).node("a").devices([0, 1, 2, 3]).build()]
    placement = place(GangRequest(2, 2, "910A"), build_inventory([node("a").chip("910A").build()], used))
    assert placement.ok and placement.rings == (1, 1)
    assert placement.chips == (None, None)  # which 2 of the 4: the kubelet decides
    # chips 1 and 6 taken: free chips in both rings, so no 2-chip pod is safe there
    split = [pod("u", 2).node("a").devices([1, 6]).build()]
    assert not place(GangRequest(1, 2, "910A"), build_inventory([node("a").chip("910A").build()], split)).ok


def test_910a_unknown_holder_leaves_no_safe_ring():
    unknown = [pod("u", 4).node("a").build()]  # holds 4 chips without saying which (not annotated yet)
    assert not place(GangRequest(1, 2, "910A"), build_inventory([node("a").chip("910A").build()], unknown)).ok
    assert place(GangRequest(4, 1, "910A"), build_inventory([node("a").chip("910A").build()], unknown)).ok


def test_nodes_whose_device_plugin_runs_in_volcano_mode_are_never_bound_directly():
    plugins = DevicePlugins(daemonsets=(PluginDaemonSet("ds", "volcano", NodeSelection((("pool", "v"),))),))
    nodes = [node("a").label("pool", "v").build(), node("b").label("pool", "v").build(), node("c").build()]
    inventory = build_inventory(nodes, [], plugins=plugins)
    assert place(GangRequest(1, 8, "910B"), inventory).nodes == ("c",)
    held = place(GangRequest(2, 8, "910B"), inventory)
    assert not held.ok and held.cause == "DevicePluginVolcanoMode"
    assert "2 run the device plugin in Volcano mode (a, b: a pod bound by the operator gets no chips" in held.reason
    assert "run the job through Volcano, spec.scheduling.schedulerName: volcano" in held.reason
    assert place(GangRequest(2, 8, "910B"), build_inventory(nodes, [])).ok  # kubelet mode everywhere: fits


def test_several_pods_share_a_node_and_take_the_fewest_nodes():
    inventory = build_inventory(nodes_named("a", "b", "c"), [pod("x", 6).node("a").build()])
    placement = place(GangRequest(4, 2, "910B", groups=((0, 1, 2, 3),)), inventory)
    assert placement.nodes == ("b", "b", "b", "b")  # one node beats a partly used one plus another


def test_partly_used_nodes_before_empty_ones():
    pods = [pod("x", 4).node("c").build(), pod("y", 6).node("d").build()]
    inventory = build_inventory(nodes_named("a", "b", "c", "d"), pods)
    placement = place(GangRequest(2, 2, "910B"), inventory)
    assert placement.nodes == ("d", "c")  # best fit: the fullest node that still fits


def test_fewest_racks_before_bin_packing_and_names():
    nodes = in_racks(A=("a1", "a2", "a3"), B=("b1", "b2", "b3", "b4"))
    pods = [pod("x", 1).node("a1").build()]
    placement = place(GangRequest(4, 8, "910B", groups=((0, 1, 2, 3),)), build_inventory(nodes, pods))
    assert placement.nodes == ("b1", "b2", "b3", "b4") and placement.racks_per_group() == (1,)


def test_a_lone_replacement_joins_the_rack_of_its_peers_over_a_better_fit_elsewhere():
    nodes = in_racks(A=("a1", "a2"), B=("b1", "b2"))
    pods = [pod("peer", 8).node("b1").build(), pod("x", 4).node("a1").build()]
    inventory = build_inventory(nodes, pods)
    assert place(GangRequest(1, 4, "910B"), inventory).nodes == ("a1",)  # alone: best fit
    near = place(GangRequest(1, 4, "910B", near_nodes=frozenset({"b1"})), inventory)
    assert near.nodes == ("b2",)  # beside its peer on b1 (full): rack B
    # a peer on an unknown node or without a rack label changes nothing
    assert place(GangRequest(1, 4, "910B", near_nodes=frozenset({"gone"})), inventory).nodes == ("a1",)


def test_group_that_needs_two_racks_takes_the_roomiest():
    nodes = in_racks(A=("a1",), B=("b1", "b2"), C=("c1", "c2", "c3"))
    placement = place(GangRequest(5, 8, "910B", groups=((0, 1, 2, 3, 4),)), build_inventory(nodes, []))
    assert placement.ok and sorted(placement.nodes) == ["b1", "b2", "c1", "c2", "c3"]
    assert placement.racks_per_group() == (2,)


def test_earlier_groups_get_first_pick():
    nodes = in_racks(A=("a1", "a2"), B=("b1", "b2", "b3"))
    placement = place(GangRequest(5, 8, "910B", groups=((2, 3, 4), (0, 1))), build_inventory(nodes, []))
    assert placement.nodes == ("a1", "a2", "b1", "b2", "b3")


def test_overlapping_groups_join_nodes_the_group_already_holds():
    # the stage (0, 1, 2) lands on c; the DP group (3, 0) then puts pod 3 next to pod 0 on c, although
    # a is as full and comes first by name
    pods = [pod("x", 6).node("a").build(), pod("y", 4).node("b").build()]
    inventory = build_inventory([node("a").build(), node("b").build(), node("c").build()], pods)
    placement = place(GangRequest(4, 2, "910B", groups=((0, 1, 2), (3, 0))), inventory)
    assert placement.nodes == ("c", "c", "c", "c")
    assert place(GangRequest(4, 2, "910B", groups=((0, 1, 2),)), inventory).nodes[3] == "a"


def test_ungrouped_pods_are_packed():
    placement = place(GangRequest(3, 2, "910B", groups=((0,),)), build_inventory(cluster(3, per_rack=3), []))
    assert placement.nodes == ("node-0000",) * 3


def test_reserved_chips_and_other_gangs_pinned_pods_are_not_handed_out_again():
    gated = pod("other-gang-0").phase("Pending").pinned("a").build()
    inventory = build_inventory([node("a").build(), node("b").build(), node("c").build()], [gated], reserved={"b": 2})
    assert place(GangRequest(1, 8, "910B"), inventory).nodes == ("c",)
    assert place(GangRequest(4, 2, "910B"), inventory).nodes == ("b", "b", "b", "c")
    assert not place(GangRequest(2, 8, "910B"), inventory).ok


def test_chips_unknown_when_the_plugin_chooses_among_more_free_chips():
    placement = place(GangRequest(1, 4, "910B"), build_inventory([node("a").build()], []))
    assert placement.chips == (None,) and placement.rings == (None,)


def test_custom_tier_label_and_unlabeled_nodes_last():
    nodes = [node("a").super_pod("sp1").build(), node("b").super_pod("sp2").build(), node("c").super_pod("sp2").build(),
             node("d").build()]
    request = GangRequest(2, 8, "910B", groups=((0, 1),), tier_labels=("huawei.com/topotree.superpodid",))
    placement = place(request, build_inventory(nodes, []))
    assert placement.nodes == ("b", "c") and placement.racks == ("sp2", "sp2")
    alone = place(GangRequest(1, 8, "910B", tier_labels=("zone",)), build_inventory(nodes, []))
    assert alone.nodes == ("a",) and alone.racks == (None,)


def test_exclusions_are_all_named_in_the_reason():
    taint = {"key": "key", "value": "value", "effect": "NoSchedule"}
    nodes = cluster(12, per_rack=6) + [
        *(node(f"nr-{i}").not_ready().build() for i in range(1, 5)),
        node("cordon-1").cordoned().build(), node("cordon-2").cordoned().build(),
        node("taint-1").taint(**taint).build(),
        node("a-1").chip("910A").build(), NodeBuilder("cpu").npus(0).build(), node("sick").label("pool", "x").build(),
        node("banned").build(), node("selector").label("pool", "y").build(), node("busy").build(),
    ]
    for n in nodes:
        n["metadata"]["labels"].setdefault("pool", "x")
    pods = [pod("p", 1).node("busy").build()]
    request = GangRequest(16, 8, "910B", node_selector={"pool": "x"}, excluded_nodes=frozenset({"banned"}))
    placement = place(request, build_inventory(nodes, pods, [deviceinfo("sick", unhealthy=[0])]))
    assert not placement.ok and placement.nodes == () and placement.chips == ()
    assert placement.reason == (
        "needs 16 pods × 8 huawei.com/Ascend910 (910B); 12 of 25 nodes could host a pod: 1 no Ascend chips, "
        "1 chip type 910A, 1 excluded by job, 1 node selector, 4 NotReady, 2 cordoned, "
        "1 tainted (key=value:NoSchedule), 1 unhealthy chips, 1 too few free chips; "
        "gang needs 16 pod slots, found 12"
    )


def test_tolerated_taints_and_selected_nodes_are_used():
    taint = {"key": "dedicated", "value": "ai", "effect": "NoExecute"}
    nodes = [node("a").taint(**taint).label("pool", "ai").build(), node("b").label("pool", "ai").build(),
             node("c").build()]
    request = GangRequest(2, 8, "910B", tolerations=({"key": "dedicated", "operator": "Exists"},),
                          node_selector={"pool": "ai"})
    assert place(request, build_inventory(nodes, [])).nodes == ("a", "b")


@pytest.mark.parametrize("chip, k", [("910A", 3), ("910A", 6), ("910B", 9), ("A3", 3), ("A3", 18), ("910B", 0)])
def test_disallowed_chip_counts(chip, k):
    placement = place(GangRequest(1, k, chip), build_inventory(cluster(2, per_rack=2, chip=chip), []))
    assert not placement.ok and f"{k} chips per pod is not allowed on {chip}" in placement.reason


def test_unknown_chip_type_and_empty_gang():
    assert "unknown chip type" in place(GangRequest(1, 8, "910C"), build_inventory([], [])).reason
    assert place(GangRequest(0, 8, "910B"), build_inventory([], [])).ok


def test_group_index_out_of_range_is_a_programming_error():
    with pytest.raises(ValueError):
        GangRequest(2, 8, "910B", groups=((0, 2),))


def test_a3_sixteen_chip_nodes():
    nodes = [node(f"s{i}").chip("A3").super_pod("1").build() for i in range(2)]
    placement = place(GangRequest(4, 8, "A3", groups=((0, 1, 2, 3),)), build_inventory(nodes, []))
    assert placement.ok and placement.nodes == ("s0", "s0", "s1", "s1")


# --- properties ------------------------------------------------------------------------------------------

CHIP_TYPES = ("910A", "910B", "A3")


@st.composite
def scenarios(draw):
    rng = random.Random(draw(st.integers(0, 2**32)))
    chip = draw(st.sampled_from(CHIP_TYPES))
    k = draw(st.sampled_from(CHIPS[chip].allowed_per_pod))
    nodes, pods, infos, reserved = [], [], [], {}
    for i in range(draw(st.integers(0, 12))):
        name = f"n{i:02d}"
        node_chip = chip if rng.random() < 0.85 else rng.choice(CHIP_TYPES)
        taints = [{"key": "t", "value": "v", "effect": "NoSchedule"}] if rng.random() < 0.1 else None
        built = NodeBuilder(name).chip(node_chip)
        rack = rng.choice(["r0", "r1", "r2", None])
        if rack is not None:
            built.rack(rack)
        built.ready(rng.random() < 0.9)
        if rng.random() < 0.1:
            built.cordoned()
        for taint in taints or ():
            built.taint(**taint)
        if rng.random() < 0.1:
            built.label("plugin", "volcano")
        nodes.append(built.label("pool", rng.choice("xy")).build())
        size = 16 if node_chip == "A3" else 8
        free_ids = list(range(size))
        rng.shuffle(free_ids)
        for j in range(rng.randint(0, 3)):
            count = rng.randint(1, 3)
            ids, free_ids = free_ids[:count], free_ids[count:]
            known = ids if rng.random() < 0.7 else None
            held = pod(f"{name}-p{j}", len(ids)).node(name if rng.random() < 0.8 else None).pinned(name)
            if known is not None:
                held.devices(known)
            pods.append(held.phase(rng.choice(["Running", "Pending", "Succeeded"])).build())
        if rng.random() < 0.3 and free_ids:
            infos.append(deviceinfo(name, chips=size, unhealthy=free_ids[:1]))
        if rng.random() < 0.2:
            reserved[name] = rng.randint(1, 4)
    pod_count = draw(st.integers(1, 8))
    group_size = draw(st.integers(1, 4))
    groups = tuple(tuple(range(g, min(g + group_size, pod_count))) for g in range(0, pod_count, group_size))
    if draw(st.booleans()):  # DP-like groups across the stages, overlapping them
        groups += tuple(tuple(range(i, pod_count, group_size)) for i in range(group_size))
    request = GangRequest(pod_count, k, chip, groups=groups,
                          tolerations=({"key": "t", "operator": "Exists"},) if rng.random() < 0.5 else (),
                          node_selector={"pool": "x"} if rng.random() < 0.2 else {},
                          excluded_nodes=frozenset(n["metadata"]["name"] for n in nodes if rng.random() < 0.1))
    return nodes, pods, infos, reserved, request


VOLCANO_LABELLED = DevicePlugins(daemonsets=(PluginDaemonSet("ds", "volcano", NodeSelection((("plugin", "volcano"),))),))


def eligible(n, request):
    taints = n.taints and not request.tolerations
    return (n.chip == request.chip and n.ready and not n.unschedulable and not taints
            and n.labels.get("plugin") != "volcano"
            and n.name not in request.excluded_nodes
            and all(n.labels.get(key) == value for key, value in request.node_selector.items()))


def slots(n, k):
    """Independent restatement of a node's capacity for k-chip pods: the kubelet picks any free chips, so a pod of
    2-4 910A chips fits only where every free chip sits in one ring (and is known to be free)."""
    if CHIPS[n.chip].ring_bound(k) and (n.free_ids is None or len({i // 4 for i in n.free_ids}) > 1):
        return 0
    if CHIPS[n.chip].ring_bound(k):
        return min(n.free // k, sum(n.ring_free(r) // k for r in range(2)))
    return n.free // k


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_placement_properties(scenario):
    nodes, pods, infos, reserved, request = scenario
    inventory = build_inventory(nodes, pods, infos, reserved=reserved, plugins=VOLCANO_LABELLED)
    placement = place(request, inventory)
    k = request.chips_per_pod
    event(f"{request.chip} ok={placement.ok}")
    capacity = sum(slots(n, k) for n in inventory if eligible(n, request))
    assert placement.ok == (capacity >= request.pod_count)  # all or nothing, and never gives up needlessly
    if not placement.ok:
        assert placement.nodes == () and "gang needs" in placement.reason
        return
    assert len(placement.nodes) == request.pod_count
    for name in set(placement.nodes):
        n = inventory[name]
        here = [p for p, on in enumerate(placement.nodes) if on == name]
        assert eligible(n, request) and len(here) * k <= n.free
        # never oversubscribed against the raw objects either (allocatable − live pods − reserved)
        live = sum(int(p["spec"]["containers"][0]["resources"]["limits"]["huawei.com/Ascend910"]) for p in pods
                   if p["metadata"]["name"].startswith(name + "-") and p["status"]["phase"] != "Succeeded")
        assert len(here) * k <= n.allocatable - live - reserved.get(name, 0)
        if CHIPS[request.chip].ring_bound(k):
            for ring in range(2):
                in_ring = sum(1 for p in here if placement.rings[p] == ring)
                assert in_ring * k <= n.ring_free(ring)
    # the first group takes the fewest nodes any choice could, and one rack when one rack can do it
    first = request.groups[0]
    caps = sorted((slots(n, k) for n in inventory if eligible(n, request)), reverse=True)
    fewest = next(i + 1 for i in range(len(caps)) if sum(caps[: i + 1]) >= len(first))
    assert placement.nodes_per_group()[0] == fewest
    by_rack = {}
    for n in inventory:
        if eligible(n, request):
            by_rack.setdefault(n.rack, []).append(slots(n, k))
    if any(sum(sorted(c, reverse=True)[:fewest]) >= len(first) for c in by_rack.values()):
        assert placement.racks_per_group()[0] == 1
    # deterministic, whatever order the API listed things in
    rng = random.Random(len(nodes))
    rng.shuffle(nodes)
    rng.shuffle(pods)
    assert place(request, build_inventory(nodes, pods, infos, reserved=reserved, plugins=VOLCANO_LABELLED)) == placement


def test_kept_offers_place_as_a_fresh_placement_does():
    """Nodes keep their inventory entries and their offers to a request's shape between placements (placement
    _OFFERS); placements of varied shapes on a cluster whose pods change give what they give with nothing kept."""
    from ascend_hybrid.gang import placement as module
    rng = random.Random(11)
    nodes = []
    for i in range(24):
        builder = NodeBuilder(f"n{i:02d}").chip("910B").rack(f"r{i % 4}").metadata(uid=f"u{i}", resourceVersion="1")
        if i % 7 == 3:
            builder.taint("dedicated", "NoSchedule", "x")
        nodes.append(builder.build())
    shapes = [GangRequest(1, 8, "910B"), GangRequest(3, 4, "910B", groups=((0, 1, 2),)),
              GangRequest(2, 8, "910B", excluded_nodes=frozenset({"n01", "n05"})),
              GangRequest(1, 2, "910B", tolerations=({"key": "dedicated", "operator": "Exists"},)),
              GangRequest(30, 8, "910B"), GangRequest(1, 8, "910B", node_selector={"missing": "label"})]
    for round_ in range(40):
        pods = [PodBuilder.named(f"p{j}").chips(rng.choice([2, 4, 8])).phase("Running")
                .node(f"n{rng.randrange(24):02d}").metadata(uid=f"p{j}").build() for j in range(rng.randrange(16))]
        inventory = build_inventory(nodes, pods)
        request = rng.choice(shapes)
        kept = place(request, inventory)
        module._OFFERS.clear()
        assert place(request, inventory) == kept, (round_, request)
