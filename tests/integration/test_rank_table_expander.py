"""A 16 384-rank job's table as its pods read it, without the bundled launcher: the ConfigMap the operator writes
(through the real CLI, `ascend-hybrid ranktable -o configmap`) is accepted by the real apiserver (≤ 1 MiB), the
rank-table expander runs as its own process on the ConfigMap projected as the kubelet projects it, and a plain
Python (isolated: no project code on its path, as in a user's own image) reads a complete hccl.json at
RANK_TABLE_FILE, before and after the table changes.

The simulated cluster's runtimes run one container per pod, not a native sidecar, and a 2 048-pod gang is far
beyond a test's budget: the pods' side is this process pair on the files a kubelet would mount (the sidecar's
manifest is checked in tests/unit/core/test_ranktable_sidecar.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from ascend_hybrid.contracts import names
from ascend_hybrid.devcluster.testing.pods import device_configuration, pod_manifest
from ascend_hybrid.gang import render
from ascend_hybrid.gang.ranktable import build_rank_table
from support.builders import PodBuilder
from support.hccl_check import hccl_problems
from support.projection import project

pytestmark = pytest.mark.integration

PODS, PER_POD = 2048, 8
JOB = "big16k"


def gang(moved: int | None = None) -> list[dict]:
    """The running gang, each pod on a node of its own; `moved`: that pod rescheduled onto a fresh node."""
    pods = []
    for index in range(PODS):
        where = (250, 0) if index == moved else divmod(index, 250)
        pods.append(PodBuilder(JOB, index)
                    .running(node=f"node-{where[0]}-{where[1]}", host_ip=f"127.15.{where[0]}.{where[1] + 1}",
                             pod_ip=f"127.16.{index // 250}.{index % 250 + 1}")
                    .devices(range(PER_POD),
                             device_ips=[f"127.{(64 + where[0]) % 256}.{where[1]}.{chip}" for chip in range(PER_POD)])
                    .build())
    return pods


def cli_config_map(tmp_path: Path, revision: int) -> dict:
    job = {"apiVersion": "hybrid.ascend.dev/v1alpha1", "kind": "AscendHybridJob", "metadata": {"name": JOB},
           "spec": {"parallelism": {"data": PODS * PER_POD}, "npu": {"chip": "910B", "perPod": PER_POD}}}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    (tmp_path / "pods.yaml").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": gang()}))
    result = subprocess.run([sys.executable, "-m", "ascend_hybrid.cli", "ranktable", "-f", str(tmp_path / "job.yaml"),
                             "--pods", str(tmp_path / "pods.yaml"), "-o", "configmap", "--revision", str(revision)],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    return yaml.load(result.stdout, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


PLAIN_READER = """
import json, os, sys
path = os.environ["RANK_TABLE_FILE"]
table = json.load(open(path))
ranks = sorted(int(d["rank_id"]) for s in table["server_list"] for d in s["device"])
version = open(os.path.join(os.path.dirname(path), "version")).read()
print(json.dumps({"status": table["status"], "ranks": len(ranks), "contiguous": ranks == list(range(len(ranks))),
                  "version": version, "server_7": table["server_list"][7]["server_id"]}))
"""


def is_running_with_devices(pod: dict) -> bool:
    return pod["status"].get("phase") == "Running" and device_configuration(pod) is not None


def read_plainly(target: Path) -> dict:
    """A user's image: plain Python, isolated (-I: no PYTHONPATH, no user site), only RANK_TABLE_FILE."""
    env = {"RANK_TABLE_FILE": str(target / "hccl.json"), "PATH": os.environ.get("PATH", "")}
    result = subprocess.run([sys.executable, "-I", "-c", PLAIN_READER], env=env, capture_output=True, text=True,
                            timeout=60, check=True)
    return json.loads(result.stdout)


def wait_for_version(target: Path, version: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if (target / "version").read_text() == version:
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"the expander did not write version {version} within {timeout} s")


def test_a_16384_rank_table_reaches_a_plain_reader_whole_through_the_configmap(dev_cluster, namespace, tmp_path):
    core = dev_cluster.core
    first = cli_config_map(tmp_path, revision=1)
    first["metadata"]["namespace"] = namespace
    core.create_namespaced_config_map(namespace, first)  # the apiserver refuses more than 1 MiB
    stored = client.ApiClient().sanitize_for_serialization(
        core.read_namespaced_config_map(names.rank_table_config_map(JOB), namespace))
    assert "server_list" not in json.loads(stored["data"]["hccl.json"]), "the ConfigMap holds only the pointer"
    source, target = tmp_path / "source", tmp_path / "target"
    project(source, stored)
    expander = subprocess.Popen([sys.executable, "-m", "ascend_hybrid.ranktable_sidecar", "--source", str(source),
                                 "--target", str(target), "--poll-seconds", "0.2"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for_version(target, "1")
        seen = read_plainly(target)
        assert seen == {"status": "completed", "ranks": PODS * PER_POD, "contiguous": True, "version": "1",
                        "server_7": "127.15.0.8"}
        assert hccl_problems(json.loads((target / "hccl.json").read_text()), "910B") == []

        # a recovery moved pod 7: the operator writes the next table (rendered here as the CLI did: one CLI run of
        # 2 048 pods is enough), the kubelet swaps the volume
        second = render.rank_table_config_map(JOB, namespace, "", first["data"]["job.json"],
                                              build_rank_table(gang(moved=7), PER_POD), 2)
        second["metadata"].pop("ownerReferences", None)
        core.replace_namespaced_config_map(names.rank_table_config_map(JOB), namespace, second)
        stored = client.ApiClient().sanitize_for_serialization(
            core.read_namespaced_config_map(names.rank_table_config_map(JOB), namespace))
        project(source, stored)
        wait_for_version(target, "2")
        assert read_plainly(target)["server_7"] == "127.15.250.1" and read_plainly(target)["version"] == "2"
    finally:
        expander.send_signal(signal.SIGTERM)
        output, _ = expander.communicate(timeout=10)
    assert expander.returncode == 0, output
    assert output.count("status completed") == 2, output


def test_a_pod_carrying_the_expander_runs_with_its_devices_on_the_simulated_cluster(dev_cluster, namespace):
    """The shape of a large job's pod (render.expander_container, the source ConfigMap and the shared emptyDir) is
    admitted by the 1.36 apiserver, scheduled, annotated by the device plugin and Running under kwok."""
    node = dev_cluster.nodes("910B")[0]
    manifest = pod_manifest("with-expander", node=node, chips=8)
    spec = manifest["spec"]
    spec["initContainers"] = [render.expander_container(names.DEFAULT_EXPANDER_IMAGE)]
    spec["volumes"] = [{"name": names.RANK_TABLE_SOURCE_VOLUME, "configMap": {"name": "rings-config-x"}},
                       {"name": names.RANK_TABLE_VOLUME, "emptyDir": {}}]
    spec["containers"][0]["volumeMounts"] = [{"name": names.RANK_TABLE_VOLUME, "mountPath": names.RANK_TABLE_DIR,
                                              "readOnly": True}]
    dev_cluster.core.create_namespaced_pod(namespace, manifest, _preload_content=False)
    pod = dev_cluster.wait_pod(namespace, "with-expander", is_running_with_devices, "to run with devices")
    assert pod["spec"]["initContainers"][0]["restartPolicy"] == "Always"
    assert len(device_configuration(pod)["devices"]) == 8  # the sidecar asks for no NPU: the pod holds its 8
