"""The rank-table expander (ranktable_sidecar.py) on ConfigMaps projected as the kubelet projects them: the complete
hccl.json at RANK_TABLE_FILE whatever the table's size, kept in step with every update, never half written."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ascend_hybrid.contracts import names
from ascend_hybrid.gang import ranktable, render
from ascend_hybrid.ranktable_sidecar import main, read_source, sync_once
from support.builders import PodBuilder
from support.projection import project

WORLD, PER_POD = 16384, 8


def gang_table(pods: int, per_pod: int, moved: int | None = None) -> dict:
    """A completed table from `pods` running pods, each on a node of its own (`moved`: that pod on another node)."""
    gang = [PodBuilder("big", index)
            .running(node=f"node-{index + (100000 if index == moved else 0)}",
                     host_ip=f"127.15.{(index + (1000 if index == moved else 0)) // 250}.{index % 250 + 1}",
                     pod_ip=f"127.16.{index // 250}.{index % 250 + 1}")
            .devices(range(per_pod), device_ips=[f"127.{64 + index // 250}.{index % 250}.{chip}" for chip in range(per_pod)])
            .build() for index in range(pods)]
    return ranktable.build_rank_table(gang, per_pod)


@pytest.fixture(scope="module")
def big_tables() -> tuple[dict, dict]:
    return gang_table(WORLD // PER_POD, PER_POD), gang_table(WORLD // PER_POD, PER_POD, moved=7)


def config_map(table: dict, revision: int) -> dict:
    return render.rank_table_config_map("big", "default", "uid-big", "{}", table, revision)


def test_a_16384_rank_table_fits_the_configmap_and_the_expander_writes_it_whole(tmp_path, big_tables):
    table, _ = big_tables
    manifest = config_map(table, 3)
    import base64
    size = sum(len(v.encode()) for v in manifest["data"].values()) + sum(
        len(base64.b64decode(v)) for v in manifest.get("binaryData", {}).values())
    assert size <= 1024 * 1024 and "server_list" not in json.loads(manifest["data"][ranktable.TABLE_KEY])
    source, target = tmp_path / "source", tmp_path / "target"
    project(source, manifest)
    seen, written = sync_once(source, target, None)
    assert seen is not None and written is not None and written.status == "completed"
    complete = json.loads((target / "hccl.json").read_text())
    assert complete == table
    ranks = [int(device["rank_id"]) for server in complete["server_list"] for device in server["device"]]
    assert ranks == list(range(WORLD))
    assert (target / "version").read_text() == "3"
    assert sync_once(source, target, seen) == (seen, None), "nothing new: nothing written"


def test_every_update_of_the_configmap_reaches_the_file(tmp_path, big_tables):
    """Recovery and elastic resize rewrite the table: initializing, then completed, then a new placement."""
    table, moved = big_tables
    source, target = tmp_path / "source", tmp_path / "target"
    seen = None
    for revision, current in enumerate([ranktable.INITIALIZING, table, ranktable.INITIALIZING, moved]):
        project(source, config_map(current, revision))
        seen, written = sync_once(source, target, seen)
        assert written is not None
        assert json.loads((target / "hccl.json").read_text()) == current
        assert (target / "version").read_text() == str(revision)
    assert sorted(path.name for path in target.iterdir()) == ["hccl.json", "version"], "no temporary file left"


def test_a_small_table_is_copied_as_it_is(tmp_path):
    table = gang_table(2, 4)
    assert table["status"] == "completed"
    source, target = tmp_path / "source", tmp_path / "target"
    project(source, config_map(table, 1))
    sync_once(source, target, None)
    assert (target / "hccl.json").read_text() == ranktable.compact(table)


def test_a_pointer_without_its_gzipped_copy_is_waited_for(tmp_path, big_tables):
    source, target = tmp_path / "source", tmp_path / "target"
    source.mkdir()
    data, _ = ranktable.config_map_data(big_tables[0], 2)
    (source / "hccl.json").write_text(data["hccl.json"])
    (source / "version").write_text("2")
    assert read_source(source) is None
    assert sync_once(source, target, None) == (None, None) and not target.exists()


def test_the_command_expands_once_and_refuses_a_bad_poll_interval(tmp_path, capsys):
    source, target = tmp_path / "source", tmp_path / "target"
    project(source, config_map(gang_table(2, 2), 5))
    assert main(["--source", str(source), "--target", str(target), "--once"]) == 0
    assert "status completed, version 5" in capsys.readouterr().out
    assert main(["--source", str(tmp_path / "absent"), "--target", str(target), "--once"]) == 1
    assert main(["--source", str(source), "--target", str(target), "--poll-seconds", "0"]) == 2


def test_a_plain_reader_without_this_project_reads_the_complete_table(tmp_path, big_tables):
    """What a user's own image does (MindSpore's parse_hccl_file, HCCL): json.load(RANK_TABLE_FILE), no launcher."""
    source, target = tmp_path / "source", tmp_path / "target"
    project(source, config_map(big_tables[0], 1))
    sync_once(source, target, None)
    reader = ("import json, sys; t = json.load(open(sys.argv[1])); "
              "print(t['status'], len([d for s in t['server_list'] for d in s['device']]))")
    result = subprocess.run([sys.executable, "-I", "-c", reader, str(target / "hccl.json")], capture_output=True,
                            text=True, timeout=60, check=True)
    assert result.stdout.split() == ["completed", str(WORLD)]


def test_pods_of_a_job_whose_table_may_outgrow_its_configmap_get_the_expander():
    from ascend_hybrid.spec.rules import parse
    from support.builders import job_body

    def pods_of(data: int, image: str = names.DEFAULT_EXPANDER_IMAGE) -> list[dict]:
        body = job_body({"parallelism": {"data": data}, "npu": {"perPod": 8}}, name="big", uid="u")
        resolved = parse(body)
        return render.gang_pods(resolved, "default", "u", 1, [(0, "node-1"), (1, "node-2")], "127.32.0.1",
                                expander_image=image)

    small = pods_of(16)[0]["spec"]
    assert "initContainers" not in small
    assert {v["name"]: v for v in small["volumes"]}[names.RANK_TABLE_VOLUME]["configMap"]["name"] == "rings-config-big"
    for pod in pods_of(WORLD, image="registry.example/op:1"):
        spec = pod["spec"]
        [expander] = spec["initContainers"]
        assert expander["restartPolicy"] == "Always" and expander["image"] == "registry.example/op:1"
        assert expander["command"][:3] == ["python3", "-m", "ascend_hybrid.ranktable_sidecar"]
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert volumes[names.RANK_TABLE_VOLUME] == {"name": names.RANK_TABLE_VOLUME, "emptyDir": {}}
        assert volumes[names.RANK_TABLE_SOURCE_VOLUME]["configMap"]["name"] == "rings-config-big"
        [main_container] = spec["containers"]
        mounts = {m["name"]: m for m in main_container["volumeMounts"]}
        assert mounts[names.RANK_TABLE_VOLUME]["mountPath"] == names.RANK_TABLE_DIR
        assert names.RANK_TABLE_SOURCE_VOLUME not in mounts  # only the expander reads the pointer
        env = {e["name"]: e.get("value") for e in main_container["env"]}
        assert env["RANK_TABLE_FILE"] == names.RANK_TABLE_FILE == f"{names.RANK_TABLE_DIR}/hccl.json"
