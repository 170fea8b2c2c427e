"""Rank layout of design §4, exhaustively by property and on the seed §4.5 case (DP2 TP8 PP8 EP4 intraNode; the
seed article: docs/design.md §11)."""

from __future__ import annotations

from math import gcd

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_hybrid.gang import layout as layouts
from ascend_hybrid.gang import summary
from ascend_hybrid.gang.layout import Layout
from ascend_hybrid.spec import rules


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@st.composite
def layouts_strategy(draw) -> Layout:
    per_pod = draw(st.sampled_from([1, 2, 3, 4, 6, 8, 16]))
    tensor = draw(st.sampled_from(divisors(per_pod)))
    pipeline = draw(st.integers(1, 6))
    step = per_pod // gcd(per_pod, tensor * pipeline)
    data = step * draw(st.integers(1, max(1, 8 // step)))
    placement = draw(st.sampled_from(["dataParallel", "intraNode"]))
    expert = draw(st.sampled_from(divisors(per_pod if placement == "intraNode" else data)))
    return Layout(data=data, tensor=tensor, pipeline=pipeline, per_pod=per_pod, expert=expert,
                  expert_placement=placement)


def partition(groups: list[list[int]], world: int) -> None:
    flat = [rank for group in groups for rank in group]
    assert sorted(flat) == list(range(world)), "every rank exactly once"
    assert len({len(group) for group in groups}) == 1, "groups of one size"


@settings(max_examples=200, deadline=None)
@given(layouts_strategy())
def test_groups_partition_the_world(lay):
    world = lay.data * lay.tensor * lay.pipeline
    assert lay.world_size == world and lay.stage_size == lay.data * lay.tensor
    groups = lay.groups()
    assert list(groups) == ["tensor", "data", "pipeline", "expert"] == list(layouts.GROUP_KINDS)
    for kind, size in (("tensor", lay.tensor), ("data", lay.data), ("pipeline", lay.pipeline),
                       ("expert", lay.expert)):
        partition(groups[kind], world)
        assert len(groups[kind][0]) == size, kind
        assert len(groups[kind]) == world // size, kind


@settings(max_examples=200, deadline=None)
@given(layouts_strategy())
def test_group_shapes(lay):
    t, s, k = lay.tensor, lay.stage_size, lay.per_pod
    for group in lay.tensor_groups():
        assert group == list(range(group[0], group[0] + t)), "TP groups are consecutive"
        assert group[0] % t == 0
        assert len({rank // k for rank in group}) == 1, "a TP group never crosses a pod"
        assert lay.tier_of(group) == "pod"
    for group in lay.data_groups():
        assert all(b - a == t for a, b in zip(group, group[1:])), "DP stride = tensor"
        assert len({rank // s for rank in group}) == 1, "a DP group stays in its stage"
        assert group[0] % s < t, "DP group starts at dp index 0"
    for group in lay.pipeline_groups():
        assert all(b - a == s for a, b in zip(group, group[1:])), "PP stride = stage size"
        assert group[0] < s
    dp_groups = [set(group) for group in lay.data_groups()]
    for group in lay.expert_groups():
        e = lay.expert
        if lay.expert_placement == "intraNode":
            assert group == list(range(group[0], group[0] + e)), "intraNode EP: consecutive ranks"
            assert group[0] % e == 0
            assert len({rank // k for rank in group}) == 1, "intraNode EP stays in one pod"
        else:
            assert all(b - a == t for a, b in zip(group, group[1:])), "dataParallel EP: stride tensor"
            assert any(set(group) <= dp for dp in dp_groups), "dataParallel EP inside one DP group"
            first_dp_index = (group[0] % s) // t
            assert first_dp_index % e == 0, "consecutive, aligned dp indices"


@settings(max_examples=200, deadline=None)
@given(layouts_strategy())
def test_pods_cover_ranks_contiguously(lay):
    k = lay.per_pod
    assert lay.pod_count == lay.world_size // k
    assert [pod.index for pod in lay.pods] == list(range(lay.pod_count))
    for pod in lay.pods:
        assert (pod.first, pod.last) == (pod.index * k, (pod.index + 1) * k - 1)
        assert list(pod.ranks) == list(range(pod.first, pod.last + 1))
    assert [rank for pod in lay.pods for rank in pod.ranks] == list(range(lay.world_size))


@settings(max_examples=150, deadline=None)
@given(layouts_strategy())
def test_coordinates_are_consistent_with_groups(lay):
    groups = lay.groups()
    position = {kind: {} for kind in groups}
    for kind, kind_groups in groups.items():
        for group in kind_groups:
            for place, rank in enumerate(group):
                position[kind][rank] = (place, tuple(group))
    for rank in range(lay.world_size):
        c = lay.coordinates(rank)
        assert c.rank == rank
        assert c.stage == rank // lay.stage_size == position["pipeline"][rank][0]
        assert c.tensor == position["tensor"][rank][0]
        assert c.data == position["data"][rank][0]
        assert c.expert == position["expert"][rank][0]
        assert (c.pod, c.local) == divmod(rank, lay.per_pod)
        assert rank in lay.pods[c.pod].ranks
        # design §4 formulas
        i = rank % lay.stage_size
        assert (c.tensor, c.data) == (i % lay.tensor, i // lay.tensor)
    for bad in (-1, lay.world_size):
        with pytest.raises(IndexError):
            lay.coordinates(bad)


@settings(max_examples=150, deadline=None)
@given(layouts_strategy())
def test_placement_groups(lay):
    stage_pods = [tuple(sorted({r // lay.per_pod for r in range(st * lay.stage_size, (st + 1) * lay.stage_size)}))
                  for st in range(lay.pipeline)]
    expected = list(dict.fromkeys(pods for pods in stage_pods if len(pods) > 1))
    found = lay.placement_groups()
    assert list(found[:len(expected)]) == expected, "stages first, in order"
    assert len(set(found)) == len(found)
    for pods in found:
        assert len(pods) > 1 and list(pods) == sorted(pods) and all(0 <= p < lay.pod_count for p in pods)
    extra = found[len(expected):]
    if lay.expert == 1 or lay.expert_placement == "intraNode":
        assert extra == ()
    else:
        ep_pods = {lay.pods_of(group) for group in lay.expert_groups()}
        assert set(extra) == {pods for pods in ep_pods if len(pods) > 1} - set(expected)


def test_seed_case():
    lay = Layout(data=2, tensor=8, pipeline=8, per_pod=8, expert=4, expert_placement="intraNode")
    assert (lay.world_size, lay.stage_size, lay.pod_count) == (128, 16, 16)
    assert lay.placement_groups() == tuple((2 * i, 2 * i + 1) for i in range(8))
    c = lay.coordinates(17)
    assert (c.rank, c.stage, c.data, c.tensor, c.expert, c.pod, c.local) == (17, 1, 0, 1, 1, 2, 1)
    groups = lay.groups()
    assert [16, 17, 18, 19, 20, 21, 22, 23] in groups["tensor"]
    assert [17, 25] in groups["data"]
    assert [1, 17, 33, 49, 65, 81, 97, 113] in groups["pipeline"]
    assert [16, 17, 18, 19] in groups["expert"]
    assert lay.pods[2] == layouts.PodRanks(2, 16, 23)
    tiers = summary.group_tiers(lay)
    assert tiers["tensor"] == {"count": 16, "size": 8, "tiers": {"pod": 16}}
    assert tiers["data"] == {"count": 64, "size": 2, "tiers": {"pods": 64}}
    assert tiers["pipeline"] == {"count": 16, "size": 8, "tiers": {"pods": 16}}
    assert tiers["expert"] == {"count": 32, "size": 4, "tiers": {"pod": 32}}


def test_seed_example_file_gives_the_seed_layout(examples):
    resolved = rules.parse(yaml.safe_load((examples / "seed-moe-128.yaml").read_text()))
    assert layouts.from_resolved(resolved) == Layout(2, 8, 8, 8, 4, "intraNode")


def test_data_parallel_experts():
    lay = Layout(data=4, tensor=2, pipeline=1, per_pod=4, expert=2)
    assert lay.expert_groups() == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert lay.placement_groups() == ((0, 1),)
    lay = Layout(data=8, tensor=2, pipeline=1, per_pod=2, expert=2)
    assert lay.placement_groups()[0] == tuple(range(8))
    assert lay.placement_groups()[1:] == ((0, 1), (2, 3), (4, 5), (6, 7))


def test_tiers_with_nodes_and_racks():
    lay = Layout(data=4, tensor=2, pipeline=1, per_pod=2)
    group = [0, 2, 4, 6]  # one DP group over all four pods
    assert lay.tier_of(group) == "pods"
    assert lay.tier_of(group, ("n0", "n0", "n0", "n0")) == "node"
    assert lay.tier_of(group, ("n0", "n0", "n1", "n1"), {"n0": "r0", "n1": "r0"}) == "rack"
    assert lay.tier_of(group, ("n0", "n0", "n1", "n1"), {"n0": "r0", "n1": "r1"}) == "cluster"
    assert lay.tier_of(group, ("n0", "n0", "n1", "n1"), {"n0": None, "n1": None}) == "cluster"
    assert lay.tier_of(group, ("n0", "n0", "n1", "n1")) == "cluster"
    assert lay.tier_of([0, 1], ("n0", "n1", "n2", "n3")) == "pod"
    assert layouts.tensor_groups_node_local(lay, ("n0", "n1", "n2", "n3")) == "4/4"
    assert summary.group_tiers(lay, ("n0", "n0", "n1", "n1"), {"n0": "r0", "n1": "r1"})["data"]["tiers"] == {
        "cluster": 2}


@pytest.mark.parametrize("kwargs", [
    dict(data=3, tensor=1, pipeline=1, per_pod=2),            # perPod does not divide world
    dict(data=4, tensor=4, pipeline=1, per_pod=2),            # tensor does not divide perPod
    dict(data=2, tensor=1, pipeline=1, per_pod=2, expert=4),  # expert does not divide data
    dict(data=8, tensor=1, pipeline=1, per_pod=2, expert=4, expert_placement="intraNode"),
])
def test_invalid_layouts_are_refused(kwargs):
    with pytest.raises(ValueError):
        Layout(**kwargs)


# --- context parallelism: CP ranks right after TP, DP beyond them -----------------------------------

@settings(max_examples=200, deadline=None)
@given(layouts_strategy(), st.sampled_from([2, 4]))
def test_context_groups_partition_the_world_and_sit_between_tensor_and_data(lay, context):
    lay = Layout(data=lay.data, tensor=lay.tensor, pipeline=lay.pipeline, per_pod=lay.per_pod,
                 expert=lay.expert, expert_placement=lay.expert_placement, context=context)
    world = lay.data * lay.tensor * lay.pipeline * context
    assert lay.world_size == world and lay.stage_size == lay.data * lay.tensor * context
    groups = lay.groups()
    assert list(groups) == ["tensor", "data", "pipeline", "expert", "context"]
    for kind, size in (("tensor", lay.tensor), ("data", lay.data), ("pipeline", lay.pipeline),
                       ("expert", lay.expert), ("context", context)):
        partition(groups[kind], world)
        assert len(groups[kind][0]) == size, kind
    for group in groups["context"]:
        assert [b - a for a, b in zip(group, group[1:])] == [lay.tensor] * (context - 1), "CP stride tensor"
    for group in groups["data"]:
        assert all(b - a == lay.tensor * context for a, b in zip(group, group[1:])), "DP stride tensor·context"
    for rank in range(world):
        c = lay.coordinates(rank)
        assert rank in groups["context"][[i for i, g in enumerate(groups["context"]) if rank in g][0]]
        assert rank == c.stage * lay.stage_size + c.data * lay.tensor * context + c.context * lay.tensor + c.tensor


def test_the_llama31_8b_128k_layout_keeps_tp_in_a_node_and_rings_cp_across_nodes():
    """MindSpeed's Llama 3.1 8B 128K run: TP 8 × CP 4 on 4 nodes; each CP ring visits the same TP rank of 4 nodes."""
    lay = Layout(data=1, tensor=8, pipeline=1, per_pod=8, context=4)
    assert lay.tensor_groups()[0] == list(range(8))
    assert lay.context_groups()[0] == [0, 8, 16, 24]
    assert lay.pods_of(lay.context_groups()[0]) == (0, 1, 2, 3)
