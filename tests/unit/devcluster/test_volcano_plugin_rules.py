"""The stand-in for Huawei's Ascend plugin for Volcano: its chip rules, checked exhaustively over the free sets of
a node against the plugin's tables, and the annotations it writes at bind."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ascend_hybrid.devcluster.nodes import manifests as nodes
from ascend_hybrid.devcluster.nodes.manifests import SimNode
from ascend_hybrid.devcluster.volcano import ascend_plugin as rules


def subsets(chips: int):
    for size in range(chips + 1):
        for combination in itertools.combinations(range(chips), size):
            yield frozenset(combination)


# --- 910A: HCCS rings -----------------------------------------------------------------------------------------

# The README's table (component/ascend-for-volcano/README.md:36), as people read it: for a pod of n chips, the
# ring free counts from best to worst.
README_PREFERENCE = {1: [1, 3, 2, 4], 2: [2, 4, 3], 4: [4]}


def rings(free):
    return sorted(c for c in free if c < 4), sorted(c for c in free if c >= 4)


@pytest.mark.parametrize("count", [1, 2, 4])
def test_a_910a_pod_of_up_to_four_chips_takes_the_ring_the_readme_table_prefers(count):
    for free in subsets(8):
        chosen = rules.choose_in_rings(free, count)
        left, right = rings(free)
        fitting = [ring for ring in (left, right) if len(ring) >= count]
        if not fitting:
            assert chosen is None, (free, count)
            continue
        assert chosen is not None, (free, count)
        assert len(chosen) == count and set(chosen) <= free
        ring = left if set(chosen) <= set(left) else right
        assert set(chosen) <= set(ring), f"{chosen} straddles the rings ({free})"
        rank = {wanted: position for position, wanted in enumerate(README_PREFERENCE[count])}
        assert rank[len(ring)] == min(rank[len(r)] for r in fitting), (free, count, chosen)
        if len(left) == len(right):
            assert ring is left, "at equal free counts the plugin checks ring 0-3 first"
        assert list(chosen) == ring[:count], "the lowest free ids of the ring"


def test_910a_examples_from_the_table():
    assert rules.choose_in_rings({0, 4, 5, 6}, 1) == (0,)  # a ring with 1 free beats one with 3
    assert rules.choose_in_rings({0, 1, 4, 5, 6}, 1) == (4,)  # 3 free beats 2
    assert rules.choose_in_rings({0, 1, 2, 4, 5, 6, 7}, 2) == (4, 5)  # 4 free beats 3
    assert rules.choose_in_rings({0, 1, 2, 4, 5}, 2) == (4, 5)  # 2 free beats 3
    assert rules.choose_in_rings({0, 1, 2, 4, 5, 6}, 4) is None  # a 4-chip pod needs a ring with exactly 4 free


def test_a_whole_910a_node_is_taken_only_when_all_eight_chips_are_free():
    for free in subsets(8):
        expected = tuple(range(8)) if len(free) == 8 else None
        assert rules.choose_in_rings(free, 8) == expected


def test_910a_counts_the_plugin_refuses():
    for count in range(0, 10):
        problem = rules.count_problem(rules.MODULE_910, count, npu_tasks=2)
        assert (problem is None) == (count in (1, 2, 4, 8)), count
    assert "1,2,4,8" in (rules.count_problem(rules.MODULE_910, 3, 1) or "")


# --- 910B: the lowest free chips ------------------------------------------------------------------------------

def test_a_910b_pod_takes_the_lowest_free_chips_in_any_pattern():
    for free in subsets(8):
        for count in range(1, 9):
            chosen = rules.choose_chips(rules.MODULE_910B_8, free, count)
            assert chosen == (tuple(sorted(free)[:count]) if len(free) >= count else None)
    assert all(rules.count_problem(rules.MODULE_910B_8, n, 4) is None for n in range(1, 9))
    assert rules.count_problem(rules.MODULE_910B_8, 9, 4) is not None


# --- A3: whole dies -------------------------------------------------------------------------------------------

def dies(free):
    grouped: dict[int, set[int]] = {}
    for chip in free:
        grouped.setdefault(chip // 2, set()).add(chip)
    return grouped


def check_whole_dies(free: frozenset[int], count: int) -> None:
    chosen = rules.choose_whole_dies(free, count)
    whole = [d for d, chips in dies(free).items() if len(chips) == 2]
    if count > 1:
        if len(whole) * 2 < count:
            assert chosen is None, (free, count)
            return
        assert chosen is not None and len(chosen) == count and set(chosen) <= free
        assert all({c, c ^ 1} <= set(chosen) for c in chosen), f"{chosen} splits a die"
        if len(free) > count:
            taken = sorted({c // 2 for c in chosen})
            assert taken == sorted(whole)[:count // 2], "whole dies, lowest first"
        return
    if not free:
        assert chosen is None
        return
    assert chosen is not None and len(chosen) == 1 and chosen[0] in free
    half_used = sorted(d for d, chips in dies(free).items() if len(chips) == 1)
    if len(free) > 1:
        assert chosen[0] // 2 == (half_used or sorted(whole))[0], "a half-used die first"


@pytest.mark.parametrize("count", [1, 2, 4, 6, 8])
def test_an_a3_pod_takes_whole_dies_or_one_chip_of_a_half_used_die(count):
    for free in subsets(8):  # the dies 0-3 of a node: every pattern
        check_whole_dies(free, count)


@given(st.frozensets(st.integers(0, 15)), st.sampled_from([1, 2, 4, 8, 10, 16]))
def test_whole_dies_over_sixteen_chips(free, count):
    check_whole_dies(free, count)


def test_a3_counts_the_plugin_refuses():
    handler = rules.MODULE_A3_16
    assert rules.count_problem(handler, 1, npu_tasks=1) is None
    assert "single" in (rules.count_problem(handler, 1, npu_tasks=2) or "")
    assert "even" in (rules.count_problem(handler, 3, npu_tasks=1) or "")
    assert rules.count_problem(handler, 16, npu_tasks=4) is None
    assert rules.count_problem(handler, 18, npu_tasks=4) is not None


# --- which handler, which chips are free ----------------------------------------------------------------------

def test_the_handler_follows_the_policy_then_sp_block_then_the_accelerator_type_selector():
    assert rules.handler_for({}, {}) is rules.MODULE_910  # no selector: the 910A module handler
    assert rules.handler_for({}, {"accelerator-type": "module-910b-8"}) is rules.MODULE_910B_8
    assert rules.handler_for({}, {"accelerator-type": "module-a3-16"}) is rules.MODULE_A3_16
    assert rules.handler_for({"huawei.com/schedule_policy": "chip8-node8"}, {"accelerator-type": "module"}) \
        is rules.MODULE_910B_8
    assert rules.handler_for({"sp-block": "32"}, {"accelerator-type": "module-a3-16"}) is rules.SUPER_POD_A3_16
    assert rules.handler_for({"huawei.com/schedule_policy": "no-such"}, {"accelerator-type": "module"}) \
        is rules.MODULE_910
    assert rules.handler_for({}, {"accelerator-type": "card-910b-2"}) == "huawei.com/Ascend910card"


def test_the_podgroups_annotations_win_over_a_pods():
    podgroup = {"huawei.com/schedule_policy": "chip8-node8", "other": "x"}
    pod = {"huawei.com/schedule_policy": "chip2-node16", "sp-block": "32", "unread": "y"}
    assert rules.job_annotations(podgroup, pod) == {"huawei.com/schedule_policy": "chip8-node8", "other": "x",
                                                    "sp-block": "32"}


def test_network_unhealthy_chips_are_left_out_only_for_a_distributed_job():
    infos = json.loads(nodes.device_plugin_node_annotations(SimNode(1, "910B", 0, 0))["baseDeviceInfos"])
    assert rules.free_chips(infos, {0}, {1}, {2}, distributed=False) == frozenset({2, 3, 4, 5, 6, 7})
    assert rules.free_chips(infos, {0}, {1}, {2}, distributed=True) == frozenset({3, 4, 5, 6, 7})
    assert rules.is_distributed(rules.MODULE_910B_8, 2, {}) and not rules.is_distributed(rules.MODULE_910B_8, 1, {})
    # the super-pod handler counts logical super-pods: 4 pods of 16 chips in blocks of 32 chips are 2 of them
    assert rules.is_distributed(rules.SUPER_POD_A3_16, 4, {"sp-block": "32"})
    assert not rules.is_distributed(rules.SUPER_POD_A3_16, 2, {"sp-block": "32"})


def test_used_chips_are_read_from_ascend_real_before_the_chip_list():
    assert rules.used_chips({"huawei.com/AscendReal": "Ascend910-3", "huawei.com/Ascend910": "Ascend910-1"}) == {3}
    assert rules.used_chips({"huawei.com/Ascend910": "Ascend910-1,Ascend910-2"}) == {1, 2}
    assert rules.used_chips({}) == frozenset()


# --- the annotations at bind ----------------------------------------------------------------------------------

def facts(node: SimNode) -> rules.NodeFacts:
    manifest = nodes.node_manifest(node)
    annotations = manifest["metadata"]["annotations"]
    return rules.NodeFacts(address=node.ip, allocatable=nodes.profile(node.chip).chips_per_node,
                           base_device_infos=annotations["baseDeviceInfos"], super_pod_id=-1, rack_id=node.rack,
                           server_index=annotations["serverIndex"])


def test_a_whole_node_pod_gets_the_configuration_in_the_plugins_key_order():
    node = SimNode(3, "910B", 1, 0)
    written = rules.bind_annotations("worker-0", "uid-0", {}, facts(node), range(8), now_ns=1_700_000_000_123456789)
    assert written["huawei.com/Ascend910"] == ",".join(f"Ascend910-{i}" for i in range(8))
    assert written["huawei.com/AscendReal"] == written["huawei.com/Ascend910"]
    assert written["predicate-time"] == "1700000000123456789"
    keys = list(json.loads(written[rules.CONFIG_ANNOTATION], object_pairs_hook=lambda pairs: pairs))
    assert [key for key, _ in keys] == ["pod_name", "server_id", "server_ip", "host_ip", "super_pod_id", "rack_id",
                                        "devices", "server_index"]
    config = json.loads(written[rules.CONFIG_ANNOTATION])
    assert config["server_id"] == "uid-0" and config["host_ip"] == config["server_ip"] == node.ip
    assert config["devices"][5] == {"device_id": "5", "device_ip": nodes.device_ip(3, 5), "super_device_id": "0"}
    assert (config["super_pod_id"], config["rack_id"], config["server_index"]) == (-1, 1, "-1")


def test_a_partial_pod_gets_the_configuration_only_with_the_operator_label():
    node = SimNode(3, "910A", 0, 0)
    bare = rules.bind_annotations("p", "u", {}, facts(node), (4, 5), now_ns=1)
    assert set(bare) == {"huawei.com/Ascend910", "predicate-time"} and bare["huawei.com/Ascend910"] == \
        "Ascend910-4,Ascend910-5"
    labelled = rules.bind_annotations("p", "u", {rules.OPERATOR_NAME_LABEL: "ascend-operator"}, facts(node), (4, 5),
                                      now_ns=1)
    assert [d["device_id"] for d in json.loads(labelled[rules.CONFIG_ANNOTATION])["devices"]] == ["4", "5"]
    assert labelled["huawei.com/AscendReal"] == "Ascend910-4,Ascend910-5"


def test_no_configuration_without_base_device_infos():
    node = facts(SimNode(3, "910B", 0, 0))
    bare = rules.NodeFacts(node.address, node.allocatable, None, -1, 0, "")
    written = rules.bind_annotations("p", "u", {rules.OPERATOR_NAME_LABEL: "x"}, bare, range(8), now_ns=1)
    assert rules.CONFIG_ANNOTATION not in written and rules.REAL_CHIPS_ANNOTATION not in written


def test_a3_nodes_carry_super_device_ids_and_their_super_pod_in_the_node_annotations():
    node = SimNode(5, "A3", 2, 1)
    annotations = nodes.node_manifest(node)["metadata"]["annotations"]
    infos = json.loads(annotations["baseDeviceInfos"])
    assert list(infos) == sorted(infos) and len(infos) == 16
    assert infos["Ascend910-3"] == {"IP": nodes.device_ip(5, 3), "SuperDeviceID": 16 + 3}
    assert (annotations["superPodID"], annotations["serverIndex"]) == ("2", "1")
