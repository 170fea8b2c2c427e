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
        "status": "completed", "server_count": "2", "version": "1.0",
        "server_list": [
            {"server_id": "127.0.0.10", "host_ip": "127.0.0.10", "container_ip": "127.1.0.20", "device": [
                {"device_id": str(d), "device_ip": f"127.100.0.{d}", "rank_id": str(r)}
                for r, d in enumerate([4, 5, 6, 7])]},
            {"server_id": "127.0.0.11", "host_ip": "127.0.0.11", "container_ip": "127.1.0.21", "device": [
                {"device_id": str(d), "device_ip": f"127.100.1.{d}", "rank_id": str(4 + r)}
                for r, d in enumerate([0, 1, 2, 3])]},
        ]}
    assert missing_for_completion(pods, 4, 2) == []
    assert json.loads(ranktable.dumps(table)) == table


def test_the_table_is_written_compact_in_mindclusters_key_order():
    """ascend-operator's Go structs (pkg/ranktable/common: BaseGenerator, Server, Dev/Device) marshalled by
    json.Marshal: status, server_list, server_count, version; device, server_id, host_ip, container_ip;
    device_id, device_ip, rank_id."""
    pods = [PodBuilder("job", 0).running(host_ip="127.0.0.10", pod_ip="127.1.0.20").devices([3]).build()]
    text = ranktable.compact(build_rank_table(pods, 1))
    assert text == ('{"status":"completed","server_list":[{"device":[{"device_id":"3","device_ip":"127.100.0.3",'
                    '"rank_id":"0"}],"server_id":"127.0.0.10","host_ip":"127.0.0.10","container_ip":"127.1.0.20"}],'
                    '"server_count":"1","version":"1.0"}')
    assert ranktable.compact(INITIALIZING) == '{"status":"initializing","version":"1.0"}'


# A device-plugin annotation as ascend-device-plugin (pkg/common/common.go GetPodConfiguration, json.Marshal of
# pkg/common/proto.go Instance) writes it for a 4-chip 910B pod; only the addresses are loopback.
PLUGIN_ANNOTATION = ('{"pod_name":"job-a1-{i}","server_id":"{uid}","host_ip":"127.15.0.3","super_pod_id":-1,'
                     '"devices":[{"device_id":"{a}","device_ip":"127.64.3.{a}","super_device_id":"-2"},'
                     '{"device_id":"{b}","device_ip":"127.64.3.{b}","super_device_id":"-2"}],'
                     '"rack_id":-1,"server_index":"-1","server_ip":"127.15.0.3"}')


def plugin_pod(index: int, chips: tuple[int, int], uid: str, node: str = "node-a") -> dict:
    annotation = (PLUGIN_ANNOTATION.replace("{i}", str(index)).replace("{uid}", uid)
                  .replace("{a}", str(chips[0])).replace("{b}", str(chips[1])))
    return (PodBuilder("job", index).uid(uid).running(node=node, host_ip="127.15.0.3")
            .device_annotation(annotation).build())


def test_a_device_plugin_annotation_sample_gives_mindclusters_server_entries():
    uids = ("6c1d0f6e-3d4b-4a51-9b0e-0f7a8c2d1e01", "6c1d0f6e-3d4b-4a51-9b0e-0f7a8c2d1e02")
    pods = [plugin_pod(0, (0, 1), uids[0]), plugin_pod(1, (2, 3), uids[1])]
    table = build_rank_table(pods, 2)
    assert [(s["server_id"], s["host_ip"]) for s in table["server_list"]] == [
        (uids[0], "127.15.0.3"), (uids[1], "127.15.0.3")]
    assert [d["device_ip"] for s in table["server_list"] for d in s["device"]] == [
        "127.64.3.0", "127.64.3.1", "127.64.3.2", "127.64.3.3"]
    # the same pods on nodes of their own: the node's IP, as MindCluster's onePodOneNode
    alone = [plugin_pod(0, (0, 1), uids[0], node="node-a"), plugin_pod(1, (2, 3), uids[1], node="node-b")]
    assert [s["server_id"] for s in build_rank_table(alone, 2)["server_list"]] == ["127.15.0.3", "127.15.0.3"]


@pytest.mark.parametrize(("chip", "pods", "per_pod"), [("910A", 2, 4), ("910B", 2, 4), ("910B", 8, 1), ("A3", 2, 8)])
def test_pods_sharing_a_node_get_unique_server_ids(chip, pods, per_pod):
    """HCCL refuses a repeated server_id (topoinfo_ranktableConcise.cc, CheckUniqueAndInsertPool, EI0004): pods of
    one node are told apart by the device plugin's server_id, the pod's UID, with the node's IP as host_ip."""
    super_pods = {"node-0": "0"} if chip == "A3" else None
    gang_on_one_node = [PodBuilder("job", i).running(node="node-0", host_ip="127.15.0.1")
                        .devices(range(i * per_pod, (i + 1) * per_pod),
                                 super_ids=list(range(i * per_pod, (i + 1) * per_pod)) if super_pods else None).build()
                        for i in range(pods)]
    table = build_rank_table(gang_on_one_node, per_pod, super_pods)
    server_ids = [server["server_id"] for server in table["server_list"]]
    assert server_ids == [pod["metadata"]["uid"] for pod in gang_on_one_node]
    assert len(set(server_ids)) == pods
    assert {server["host_ip"] for server in table["server_list"]} == {"127.15.0.1"}
    if super_pods:
        assert [m["server_id"] for m in table["super_pod_list"][0]["server_list"]] == server_ids


def test_the_strict_hccl_check_refuses_what_the_old_table_did_and_accepts_the_new():
    from support.hccl_check import hccl_problems

    pods = [PodBuilder("job", i).running(node="node-0", host_ip="127.15.0.1")
            .devices(range(4 * i, 4 * i + 4), device_ips=[f"127.64.0.{chip}" for chip in range(4 * i, 4 * i + 4)]).build()
            for i in range(2)]
    table = build_rank_table(pods, 4)
    assert hccl_problems(table, "910A") == []
    old = json.loads(json.dumps(table))
    for server in old["server_list"]:
        server["server_id"] = server["host_ip"]  # what the operator wrote before: the node's IP for both pods
    assert hccl_problems(old, "910A") == ["server 1: server_id 127.15.0.1 repeated (EI0004)"]
    old["server_list"][0]["device"][1]["device_ip"] = "-1"
    assert "server 0: ip[-1] is not a valid ip address" in hccl_problems(old, "910A")


def test_an_older_device_plugin_annotation_still_gives_unique_server_ids():
    """An older plugin wrote the node's IP as server_id and no host_ip: shared nodes fall back on the pod's UID
    (what the current plugin writes), the host IP comes from the pod's status."""
    pods = [PodBuilder("job", i).running(node="node-0", host_ip="127.15.0.1").devices(range(4 * i, 4 * i + 4), legacy=True)
            .build() for i in range(2)]
    table = build_rank_table(pods, 4)
    assert [(s["server_id"], s["host_ip"]) for s in table["server_list"]] == [
        (pods[0]["metadata"]["uid"], "127.15.0.1"), (pods[1]["metadata"]["uid"], "127.15.0.1")]
    own = [PodBuilder("job", i).running(host_ip=f"127.15.0.{i + 1}").devices(count=4, legacy=True).build()
           for i in range(2)]
    assert [s["server_id"] for s in build_rank_table(own, 4)["server_list"]] == ["127.15.0.1", "127.15.0.2"]


@pytest.mark.parametrize("bad_ip", ["-1", "", "not-an-ip"])
def test_a_chip_without_a_device_ip_keeps_the_table_initializing_and_names_the_chip(bad_ip):
    """HCCL refuses `ip[-1] is not a valid ip address`; MindCluster's validateDeviceIP keeps the table
    initializing. The problem names the pod and the device."""
    pods = [PodBuilder("job", 0).running().devices([0, 5], device_ips=["127.64.0.0", bad_ip]).build(),
            PodBuilder("job", 1).running().devices(count=2).build()]
    assert build_rank_table(pods, 2) == INITIALIZING
    [problem] = missing_for_completion(pods, 2)
    assert problem.startswith("job-a1-0: device 5 has device_ip") and repr(bad_ip) in problem


def test_a3_needs_device_ips_only_across_super_pods():
    """v1.2 inside one super-pod links chips by super_device_id (MindCluster validates device IPs for v1.2 only
    across logical super-pods)."""
    pods = [PodBuilder("job", i).running(node=f"a3-{i}")
            .devices([0, 1], super_ids=[2 * i, 2 * i + 1], device_ips=["-1", "-1"]).build() for i in range(2)]
    one = build_rank_table(pods, 2, {"a3-0": "1", "a3-1": "1"})
    assert one["status"] == "completed" and [d["device_ip"] for d in one["server_list"][0]["device"]] == ["-1", "-1"]
    two = {"a3-0": "1", "a3-1": "2"}
    assert build_rank_table(pods, 2, two) == {"status": "initializing", "version": "1.2"}
    assert len(missing_for_completion(pods, 2, 2, two)) == 4


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
    # the reconcile pass asks both in one reading
    assert ranktable.assess([first, not_ready], 4, pod_count=2) == (INITIALIZING, problems)
    both = [first, ready(1, 4).build()]
    assert ranktable.assess(both, 4, pod_count=2) == (build_rank_table(both, 4, pod_count=2), [])


def test_the_devices_read_are_shared_read_only():
    pod = ready(0, 4).build()
    devices = pod_devices(pod)
    assert devices is pod_devices(pod), "parsed once per annotation"
    with pytest.raises(TypeError):
        devices[0]["device_id"] = "7"  # type: ignore[index]


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
    assert INITIALIZING == {"status": "initializing", "version": "1.0"}


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
        pods.append(PodBuilder("job", index).running(node=f"node-{index}", host_ip=f"127.0.1.{index + 1}")
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
                assert group["super_pod_id"] == str(index % 3)
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


# -- the ConfigMap: compact whenever it fits, gzipped beyond; `version` counts the tables written ---------------
def big_table(pods: int, per_pod: int = 8) -> dict:
    """A completed v1.0 table of `pods` servers shaped as build_rank_table writes it (built directly: fast)."""
    servers = [{"device": [{"device_id": str(chip), "device_ip": f"127.100.{index % 250}.{chip}",
                            "rank_id": str(index * per_pod + chip)} for chip in range(per_pod)],
                "server_id": f"127.{index // 250}.{index % 250}.1", "host_ip": f"127.{index // 250}.{index % 250}.1",
                "container_ip": f"127.16.{index // 250}.{index % 250}"}
               for index in range(pods)]
    return {"status": "completed", "server_list": servers, "server_count": str(pods), "version": "1.0"}


def config_map_size(data: dict, binary: dict) -> int:
    """What the apiserver counts against its 1 MiB: the data values' bytes and binaryData's decoded bytes."""
    import base64
    return sum(len(value.encode()) for value in data.values()) + sum(len(base64.b64decode(v)) for v in binary.values())


@pytest.mark.parametrize(("pods", "shape"), [(2, "compact"), (1000, "compact"), (2048, "gzip")])
def test_the_rank_table_configmap_is_compact_when_it_fits_and_reads_back_as_the_table(pods, shape):
    table = big_table(pods)
    data, binary = ranktable.config_map_data(table, revision=7)
    assert config_map_size(data, binary) <= 1024 * 1024
    assert data["version"] == "7"  # the counter; the format version is inside hccl.json
    assert ranktable.config_map_revision({"data": data}) == 7
    mounted = json.loads(data[ranktable.TABLE_KEY])
    if shape == "gzip":
        assert set(binary) == {ranktable.COMPRESSED_KEY} and "server_list" not in mounted
        assert mounted == {"status": "completed", "version": "1.0", "server_count": str(pods),
                           "compressed": ranktable.COMPRESSED_KEY}
    else:
        assert binary == {} and mounted == table
        assert data[ranktable.TABLE_KEY] == ranktable.compact(table)
    assert ranktable.from_config_map({"data": data, "binaryData": binary}) == table


def test_the_counter_reads_zero_when_absent_or_not_a_number():
    assert ranktable.config_map_revision(None) == 0
    assert ranktable.config_map_revision({"data": {"version": "1.0"}}) == 0  # a table written before the counter
    assert ranktable.config_map_revision({"data": {"version": "12"}}) == 12


def test_a_16384_rank_table_would_not_fit_even_compact_so_it_is_gzipped_and_the_same_table_gives_the_same_bytes():
    table = big_table(2048)
    assert len(ranktable.compact(table).encode()) > 1024 * 1024
    assert ranktable.config_map_data(table) == ranktable.config_map_data(big_table(2048))  # applies are no-ops


@pytest.mark.parametrize(("world", "per_pod", "expander"), [
    (128, 8, False), (4096, 8, False), (2048, 1, False), (2745, 1, True), (6488, 8, False), (6496, 8, True), (16384, 8, True), (65536, 16, True)])
def test_jobs_whose_table_may_outgrow_the_configmap_are_known_before_any_address(world, per_pod, expander):
    assert ranktable.may_exceed_config_map(world, per_pod) is expander


@settings(max_examples=30, deadline=None)
@given(pods=st.integers(1, 64), per_pod=st.sampled_from([1, 2, 4, 8, 16]))
def test_the_size_bound_is_an_upper_bound(pods, per_pod):
    """A table with the longest addresses and ids still fits when the bound says it cannot exceed the budget."""
    long_ip = "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255"  # the longest text of an address
    servers = [{"device": [{"device_id": "15", "device_ip": long_ip, "super_device_id": "4294967295",
                            "rank_id": "65535"} for _ in range(per_pod)],
                "server_id": "6c1d0f6e-3d4b-4a51-9b0e-0f7a8c2d1e01", "host_ip": long_ip, "container_ip": long_ip}
               for _ in range(pods)]
    table = {"status": "completed", "server_list": servers, "server_count": str(pods), "version": "1.2",
             "super_pod_list": [{"super_pod_id": "4294967295", "server_list": [{"server_id": long_ip}] * pods}]}
    scale = 256  # the bound is linear in the servers: the table of 256 times as many servers
    world = pods * per_pod * scale
    size = len(ranktable.compact(table).encode()) * scale
    if not ranktable.may_exceed_config_map(world, per_pod):
        assert size <= ranktable.CONFIG_MAP_BUDGET


def test_a_rank_table_configmap_that_cannot_be_read_is_empty_and_none_is_none():
    data, binary = ranktable.config_map_data(big_table(2048))
    assert ranktable.from_config_map({"data": data, "binaryData": {}}) == {}
    assert ranktable.from_config_map({"data": data, "binaryData": {ranktable.COMPRESSED_KEY: "bm90IGd6aXA="}}) == {}
    assert ranktable.from_config_map({"data": {ranktable.TABLE_KEY: "{half"}}) == {}
    assert ranktable.from_config_map({"data": {}}) == {}
    assert ranktable.from_config_map(None) is None


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.ip_addresses().map(str), st.text(alphabet="0123456789.:abcdef-", max_size=20),
                 st.lists(st.integers(0, 300), min_size=3, max_size=5).map(lambda parts: ".".join(map(str, parts)))))
def test_the_device_ip_check_agrees_with_ipaddress(text):
    import ipaddress
    try:
        ipaddress.ip_address(text)
        expected = True
    except ValueError:
        expected = False
    assert ranktable.is_valid_ip(text) is expected
