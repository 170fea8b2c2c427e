"""hccl.json of design §7: initializing until the whole gang is ready, then every rank once, all strings."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_hybrid.contracts.ascend import DEVICE_ANNOTATION, pod_devices
from ascend_hybrid.contracts.names import POD_INDEX_LABEL
from ascend_hybrid.contracts.podview import pod_index
from ascend_hybrid.gang import ranktable
from ascend_hybrid.gang.ranktable import INITIALIZING, build_rank_table, missing_for_completion
from support.builders import PodBuilder


def ready(index: int, per_pod: int) -> PodBuilder:
    """Pod `index` of job `job` as the rank table needs it: running, its IPs, `per_pod` chips annotated."""
    return PodBuilder("job", index).running().devices(count=per_pod)


def all_strings(value) -> bool:
    if isinstance(value, dict):
        return all(isinstance(key, str) and all_strings(item) for key, item in value.items())
    if isinstance(value, list):
        return all(all_strings(item) for item in value)
    return isinstance(value, str)


def test_completed_table_of_two_pods():
    pods = [PodBuilder("job", 0).running(host_ip="127.0.0.10", pod_ip="127.1.0.20").devices([4, 5, 6, 7]).build(),
            PodBuilder("job", 1).running(host_ip="127.0.0.11", pod_ip="127.1.0.21").devices([0, 1, 2, 3]).build()]
    table = build_rank_table(list(reversed(pods)), 4, pod_count=2)
    assert table == {
        "status": "completed", "version": "1.0", "server_count": "2",
        "server_list": [
            {"server_id": "127.0.0.10", "container_ip": "127.1.0.20", "device": [
                {"device_id": str(d), "device_ip": f"127.100.0.{d}", "rank_id": str(r)}
                for r, d in enumerate([4, 5, 6, 7])]},
            {"server_id": "127.0.0.11", "container_ip": "127.1.0.21", "device": [
                {"device_id": str(d), "device_ip": f"127.100.1.{d}", "rank_id": str(4 + r)}
                for r, d in enumerate([0, 1, 2, 3])]},
        ]}
    assert missing_for_completion(pods, 4, 2) == []
    assert json.loads(ranktable.dumps(table)) == table


def test_devices_are_taken_lowest_chip_first():
    pod = PodBuilder("job", 0).running().devices([7, 2, 5, 3]).build()
    table = build_rank_table([pod], 4)
    assert [(d["device_id"], d["rank_id"]) for d in table["server_list"][0]["device"]] == [
        ("2", "0"), ("3", "1"), ("5", "2"), ("7", "3")]
    assert table["server_list"][0]["device"][0]["device_ip"] == "127.100.0.2"


@pytest.mark.parametrize("change, reason", [
    (lambda pod: pod.phase("Pending"), "phase Pending"),
    (lambda pod: pod.phase("Failed"), "phase Failed"),
    (lambda pod: pod.running(pod_ip=None), "no pod IP"),
    (lambda pod: pod.running(host_ip=None), "no pod IP"),
    (lambda pod: pod.device_annotation(None), "no device annotation"),
    (lambda pod: pod.device_annotation("not json"), "no device annotation"),
    (lambda pod: pod.device_annotation('["list"]'), "no device annotation"),
    (lambda pod: pod.device_annotation('{"devices": [{"device_ip": "127.100.0.1"}]}'), "no device annotation"),
    (lambda pod: pod.devices([0, 1, 2]), "3 devices annotated, needs 4"),
    (lambda pod: pod.devices([0, 1, 2, 3, 4]), "5 devices annotated, needs 4"),
])
def test_initializing_until_every_pod_is_ready(change, reason):
    first = ready(0, 4).build()
    not_ready = change(ready(1, 4)).build()
    assert build_rank_table([first, not_ready], 4, pod_count=2) == INITIALIZING
    problems = missing_for_completion([first, not_ready], 4, 2)
    assert len(problems) == 1 and reason in problems[0] and "job-a1-1" in problems[0]
    assert build_rank_table([first, ready(1, 4).build()], 4, pod_count=2)["status"] == "completed"


def test_initializing_with_a_missing_pod():
    pods = [ready(0, 2).build(), ready(2, 2).build()]
    assert build_rank_table(pods, 2, pod_count=3) == INITIALIZING
    assert missing_for_completion(pods, 2, 3) == ["pod index 1: missing"]


@pytest.mark.parametrize("second", [
    lambda: ready(0, 2).running(pod_ip="127.16.0.9"),              # duplicate index
    lambda: ready(5, 2),                                           # out of range
    lambda: ready(1, 2).label(POD_INDEX_LABEL, None),              # no index label
    lambda: ready(1, 2).label(POD_INDEX_LABEL, "x"),               # bad index label
    lambda: ready(1, 2).label(POD_INDEX_LABEL, "-1"),
])
def test_bad_or_duplicate_indices_are_initializing(second):
    pods = [ready(0, 2).build(), second().build()]
    assert build_rank_table(pods, 2, pod_count=2) == INITIALIZING
    assert build_rank_table(pods, 2) == INITIALIZING
    assert any("bad or duplicate pod index" in problem for problem in missing_for_completion(pods, 2, 2))


def test_status_returned_is_a_copy():
    table = build_rank_table([PodBuilder("job", 0).node("node-0").devices(count=2).build()], 2)
    table["status"] = "mutated"
    assert INITIALIZING == {"status": "initializing"}


def test_empty_gang_is_initializing():
    assert build_rank_table([], 8, pod_count=1) == INITIALIZING


@settings(max_examples=120, deadline=None)
@given(pod_count=st.integers(1, 8), per_pod=st.sampled_from([1, 2, 4, 8, 16]), seed=st.integers(0, 2**32 - 1),
       super_pods=st.booleans())
def test_completed_table_properties(pod_count, per_pod, seed, super_pods):
    rng = random.Random(seed)
    annotated = {}
    pods = []
    for index in range(pod_count):
        ids = rng.sample(range(16), per_pod)
        annotated[index] = ids
        pods.append(PodBuilder("job", index).running(node=f"node-{index // 2}", host_ip=f"127.0.1.{index + 1}")
                    .devices(ids, super_ids=[1000 * index + i for i in ids] if super_pods else None).build())
    shuffled = pods[:]
    rng.shuffle(shuffled)
    node_super_pods = {f"node-{n}": str(n % 3) for n in range(pod_count)} if super_pods else None
    table = build_rank_table(shuffled, per_pod, node_super_pods, pod_count=pod_count)
    assert table == build_rank_table(pods, per_pod, node_super_pods, pod_count=pod_count), "order independent"
    assert all_strings(table)
    assert table["status"] == "completed"
    assert table["server_count"] == str(pod_count) == str(len(table["server_list"]))
    servers = table["server_list"]
    firsts = [int(server["device"][0]["rank_id"]) for server in servers]
    assert firsts == sorted(firsts), "server_list sorted by first rank_id"
    ranks = [int(device["rank_id"]) for server in servers for device in server["device"]]
    assert sorted(ranks) == list(range(pod_count * per_pod)), "every rank once"
    for index, server in enumerate(servers):
        assert server["server_id"] == f"127.0.1.{index + 1}"
        assert server["container_ip"] == f"127.16.0.{index + 1}"
        ids = [int(device["device_id"]) for device in server["device"]]
        assert ids == sorted(annotated[index]), "device ids from the annotation"
        for local, device in enumerate(server["device"]):
            assert device["rank_id"] == str(index * per_pod + local)
            assert device["device_ip"] == f"127.100.{index}.{device['device_id']}"
            if super_pods:
                assert device["super_device_id"] == str(1000 * index + int(device["device_id"]))
            else:
                assert "super_device_id" not in device
    if super_pods:
        assert table["version"] == "1.2"
        listed = [entry["server_id"] for group in table["super_pod_list"] for entry in group["server_list"]]
        assert sorted(listed) == sorted(server["server_id"] for server in servers), "each server in one super-pod"
        for group in table["super_pod_list"]:
            for entry in group["server_list"]:
                index = int(entry["server_id"].rsplit(".", 1)[1]) - 1
                assert group["super_pod_id"] == str((index // 2) % 3)
        ids = [group["super_pod_id"] for group in table["super_pod_list"]]
        assert ids == sorted(set(ids))
    else:
        assert table["version"] == "1.0"
        assert "super_pod_list" not in table


def test_v12_shape():
    pods = [PodBuilder("job", i).running(node=f"a3-{i}", host_ip=f"127.0.0.{i + 1}")
            .devices([0, 1], super_ids=[10 + 2 * i, 11 + 2 * i]).build() for i in range(3)]
    table = build_rank_table(pods, 2, {"a3-0": "7", "a3-1": "7", "a3-2": "9"})
    assert table["version"] == "1.2"
    assert table["super_pod_list"] == [
        {"super_pod_id": "7", "server_list": [{"server_id": "127.0.0.1"}, {"server_id": "127.0.0.2"}]},
        {"super_pod_id": "9", "server_list": [{"server_id": "127.0.0.3"}]},
    ]
    assert [d["super_device_id"] for d in table["server_list"][2]["device"]] == ["14", "15"]


def test_pod_devices_reads_the_device_plugin_annotation():
    pod = PodBuilder("job", 0).running().devices([3, 1]).build()
    assert json.loads(pod["metadata"]["annotations"][DEVICE_ANNOTATION])["devices"][0]["device_id"] == "3"
    assert [d["device_id"] for d in pod_devices(pod)] == ["1", "3"]
    assert pod_devices({"metadata": {}}) is None
    assert pod_index(pod) == 0
    assert pod_index({"metadata": {"labels": {}}}) is None


# -- the ConfigMap: plain whenever it fits, compact when only that fits, gzipped beyond ---------------------------
def big_table(pods: int, per_pod: int = 8) -> dict:
    """A completed v1.0 table of `pods` servers shaped as build_rank_table writes it (built directly: fast)."""
    servers = [{"server_id": f"127.{index // 250}.{index % 250}.1", "container_ip": f"127.16.{index // 250}.{index % 250}",
                "device": [{"device_id": str(chip), "device_ip": f"127.100.{index % 250}.{chip}",
                            "rank_id": str(index * per_pod + chip)} for chip in range(per_pod)]}
               for index in range(pods)]
    return {"status": "completed", "version": "1.0", "server_count": str(pods), "server_list": servers}


def config_map_size(data: dict, binary: dict) -> int:
    """What the apiserver counts against its 1 MiB: the data values' bytes and binaryData's decoded bytes."""
    import base64
    return sum(len(value.encode()) for value in data.values()) + sum(len(base64.b64decode(v)) for v in binary.values())


@pytest.mark.parametrize(("pods", "shape"), [(2, "indented"), (1000, "compact"), (2048, "gzip")])
def test_the_rank_table_configmap_is_plain_when_it_fits_and_reads_back_as_the_table(pods, shape):
    table = big_table(pods)
    data, binary = ranktable.config_map_data(table)
    assert config_map_size(data, binary) <= 1024 * 1024
    assert data["version"] == "1.0"
    mounted = json.loads(data[ranktable.TABLE_KEY])
    if shape == "gzip":
        assert set(binary) == {ranktable.COMPRESSED_KEY} and "server_list" not in mounted
        assert mounted == {"status": "completed", "version": "1.0", "server_count": str(pods),
                           "compressed": ranktable.COMPRESSED_KEY}
    else:
        assert binary == {} and mounted == table
        assert ("\n" in data[ranktable.TABLE_KEY]) == (shape == "indented")
    assert ranktable.from_config_map({"data": data, "binaryData": binary}) == table


def test_a_16384_rank_table_would_not_fit_even_compact_so_it_is_gzipped_and_the_same_table_gives_the_same_bytes():
    table = big_table(2048)
    assert len(ranktable.compact(table).encode()) > 1024 * 1024
    assert ranktable.config_map_data(table) == ranktable.config_map_data(big_table(2048))  # applies are no-ops


def test_a_rank_table_configmap_that_cannot_be_read_is_empty_and_none_is_none():
    data, binary = ranktable.config_map_data(big_table(2048))
    assert ranktable.from_config_map({"data": data, "binaryData": {}}) == {}
    assert ranktable.from_config_map({"data": data, "binaryData": {ranktable.COMPRESSED_KEY: "bm90IGd6aXA="}}) == {}
    assert ranktable.from_config_map({"data": {ranktable.TABLE_KEY: "{half"}}) == {}
    assert ranktable.from_config_map({"data": {}}) == {}
    assert ranktable.from_config_map(None) is None
