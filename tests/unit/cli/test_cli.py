"""`ascend-hybrid` as users run it (a subprocess): exit 2 and one `error:` line per problem on bad input, never
a traceback; layout JSON shape; ranktable from a pods file; crd check, also on a tampered copy."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from support.builders import PodBuilder

GOOD = {"apiVersion": "hybrid.ascend.dev/v1alpha1", "kind": "AscendHybridJob", "metadata": {"name": "cli-job"},
        "spec": {"parallelism": {"data": 2, "tensor": 2}, "npu": {"perPod": 2}}}


def run(cli_path: Path, *args: str, stdin: str | None = None, cwd: Path | None = None,
        env: dict | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run([str(cli_path), *args], capture_output=True, text=True, input=stdin, timeout=60,
                            cwd=cwd, env=env)
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    return result


def write(tmp_path: Path, name: str, content) -> Path:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif isinstance(content, str):
        path.write_text(content)
    else:
        path.write_text(yaml.safe_dump_all(content if isinstance(content, list) else [content], sort_keys=False))
    return path


def errors_of(result: subprocess.CompletedProcess) -> list[str]:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert lines and all(line.startswith("error: ") for line in lines), lines
    assert result.stdout == ""
    return [line.removeprefix("error: ") for line in lines]


def with_spec(**changes) -> dict:
    body = json.loads(json.dumps(GOOD))
    body["spec"].update(changes)
    return body


BAD_INPUTS = [
    ("missing-file", None, ["{path}: No such file or directory"]),
    ("bad-yaml", "spec: [unclosed\n", ["{path}: not valid YAML at line 2, column 1: did not find expected ',' or ']' "
                                       "(while parsing a flow sequence started at line 1, column 7)"]),
    ("not-utf8", b"\xff\xfe\x00bad", ["{path}: not UTF-8 text (invalid start byte at byte 0)"]),
    ("scalar-document", "just a string\n", ["{path}: document 1 (line 1) is a string, not a Kubernetes object"]),
    ("kind-null", "kind: null\n",
     ["{path}: document 1 (line 1): not a Kubernetes object: apiVersion and kind are required"]),
    ("wrong-kind", {**GOOD, "kind": "PyTorchJob"},
     ["{path}: no AscendHybridJob object found: document 1 (line 1) has kind 'PyTorchJob'; expected kind: "
      "AscendHybridJob, apiVersion: hybrid.ascend.dev/v1alpha1"]),
    ("wrong-apiVersion", {**GOOD, "apiVersion": "hybrid.ascend.dev/v1"},
     ["{path}: apiVersion must be hybrid.ascend.dev/v1alpha1, got 'hybrid.ascend.dev/v1'"]),
    ("no-metadata", {key: value for key, value in GOOD.items() if key != "metadata"},
     ["metadata.name: is required"]),
    ("no-spec", {key: value for key, value in GOOD.items() if key != "spec"},
     ["spec: is required (an object with at least spec.parallelism)"]),
    ("unknown-field", with_spec(parallelism={"data": 2, "tensor": 2, "bogus": 1}),
     ["spec.parallelism.bogus: unknown field"]),
    ("tensor-divides-perPod", with_spec(parallelism={"data": 4, "tensor": 3}, npu={"perPod": 4},
                                        model={"heads": 12, "hidden": 384}),
     ["spec.parallelism.tensor=3 must divide spec.npu.perPod=4"]),
    ("several-rules", with_spec(parallelism={"data": 3, "tensor": 3, "pipeline": 5}, npu={"perPod": 2}),
     ["spec.npu.perPod=2 must divide the world size data×tensor×pipeline=45",
      "spec.parallelism.tensor=3 must divide spec.npu.perPod=2",
      "spec.model.layers=24 must be divisible by spec.parallelism.pipeline=5",
      "spec.model.heads=8 must be divisible by spec.parallelism.tensor=3"]),
    ("several-schema", with_spec(parallelism={"data": 0}, runPolicy={"backoffLimit": -1, "suspend": "no"}),
     ["spec.parallelism.data=0 must be ≥ 1", "spec.runPolicy.backoffLimit=-1 must be ≥ 0",
      "spec.runPolicy.suspend='no': must be a boolean"]),
    ("name-too-long", {**GOOD, "metadata": {"name": "x" * 51}},
     [f"metadata.name='{'x' * 51}': must be at most 50 characters "
      "(pod names <job>-a<attempt>-<index> must stay valid labels) of lowercase letters, digits and '-', "
      "starting with a letter (Service names)"]),
]


@pytest.mark.parametrize("content, expected", [case[1:] for case in BAD_INPUTS], ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_is_exit_2_with_one_line_per_problem(cli_path, tmp_path, content, expected):
    path = tmp_path / "job.yaml" if content is None else write(tmp_path, "job.yaml", content)
    errors = errors_of(run(cli_path, "validate", "-f", str(path)))
    assert errors == [line.format(path=path) for line in expected]


@pytest.mark.parametrize("command", [["layout"], ["layout", "-o", "json"], ["ranktable", "--pods", "/dev/null"]])
def test_every_command_refuses_bad_jobs(cli_path, tmp_path, command):
    path = write(tmp_path, "job.yaml", with_spec(parallelism={"data": 3}, npu={"perPod": 2}))
    assert errors_of(run(cli_path, command[0], "-f", str(path), *command[1:])) == [
        "spec.npu.perPod=2 must divide the world size data×tensor×pipeline=3"]


def test_validate_examples(cli_path, examples):
    result = run(cli_path, "validate", "-f", str(examples / "seed-moe-128.yaml"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ("seed-moe-128: valid (world 128 = DP 2 × TP 8 × PP 8, EP 4, "
                                     "16 pods × 8 910B)")


def test_validate_reads_stdin_and_lists(cli_path):
    listing = yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [GOOD]})
    result = run(cli_path, "validate", "-f", "-", stdin=listing)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "cli-job: valid (world 4 = DP 2 × TP 2 × PP 1, EP 1, 2 pods × 2 910B)\n"


def test_layout_json_shape(cli_path, examples):
    result = run(cli_path, "layout", "-f", str(examples / "seed-moe-128.yaml"), "-o", "json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert set(document) == {"worldSize", "groups", "pods"}
    assert document["worldSize"] == 128
    assert set(document["groups"]) == {"tensor", "data", "pipeline", "expert"}
    assert document["groups"]["tensor"][2] == list(range(16, 24))
    assert [17, 25] in document["groups"]["data"]
    assert [16, 17, 18, 19] in document["groups"]["expert"]
    assert document["pods"] == [{"index": p, "ranks": [8 * p, 8 * p + 7]} for p in range(16)]


def test_layout_text(cli_path, examples):
    result = run(cli_path, "layout", "-f", str(examples / "job.yaml"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("world 8: DP 2 × TP 4 × PP 1")
    assert "pod 0: ranks 0-7" in result.stdout


def ready(job: str, index: int) -> dict:
    """Pod `index` of `job`, running with its IPs and 2 chips annotated: what the rank table waits for."""
    return PodBuilder(job, index).running().devices(count=2).build()


def pods_file(tmp_path: Path, pods: list[dict], nodes: list[dict] = ()) -> Path:
    return write(tmp_path, "pods.yaml", {"apiVersion": "v1", "kind": "List", "items": [*pods, *nodes]})


def test_ranktable_from_pods_yaml(cli_path, tmp_path):
    job = write(tmp_path, "job.yaml", GOOD)
    pods = [PodBuilder("cli-job", i).running().devices([2 * i, 2 * i + 1]).build() for i in range(2)]
    stale = PodBuilder("cli-job", 0).attempt(0).node("node-0").devices(count=2).phase("Failed").build()
    other = ready("other-job", 0)
    path = pods_file(tmp_path, [stale, *pods, other])
    result = run(cli_path, "ranktable", "-f", str(job), "--pods", str(path))
    assert result.returncode == 0, result.stderr
    table = json.loads(result.stdout)
    assert table["status"] == "completed" and table["version"] == "1.0" and table["server_count"] == "2"
    assert [d["rank_id"] for s in table["server_list"] for d in s["device"]] == ["0", "1", "2", "3"]
    assert [d["device_id"] for s in table["server_list"] for d in s["device"]] == ["0", "1", "2", "3"]
    assert result.stderr == ""


def test_ranktable_prints_the_configmap_the_pods_mount(cli_path, tmp_path):
    """-o configmap: the rank-table ConfigMap exactly as the operator writes it (render.rank_table_config_map)."""
    from ascend_hybrid.gang import render
    from ascend_hybrid.gang.ranktable import build_rank_table

    body = json.loads(json.dumps(GOOD))
    body["metadata"].update(namespace="team-a", uid="uid-7")
    job = write(tmp_path, "job.yaml", body)
    pods = [PodBuilder("cli-job", i).running(node="node-a", host_ip="127.15.0.1").devices([2 * i, 2 * i + 1]).build()
            for i in range(2)]
    result = run(cli_path, "ranktable", "-f", str(job), "--pods", str(pods_file(tmp_path, pods)), "-o", "configmap",
                 "--revision", "4")
    assert result.returncode == 0, result.stderr
    config_map = yaml.safe_load(result.stdout)
    from ascend_hybrid.spec.rules import parse

    expected = render.rank_table_config_map("cli-job", "team-a", "uid-7", render.job_config_text(parse(body)),
                                            build_rank_table(pods, 2), 4)
    assert config_map == expected
    assert config_map["data"]["version"] == "4"
    table = json.loads(config_map["data"]["hccl.json"])
    assert [s["server_id"] for s in table["server_list"]] == [p["metadata"]["uid"] for p in pods]  # one node, two pods
    bad = run(cli_path, "ranktable", "-f", str(job), "--pods", str(pods_file(tmp_path, pods)), "-o", "configmap",
              "--revision", "-1")
    assert bad.returncode == 2 and "--revision=-1: must be ≥ 0" in bad.stderr


def test_ranktable_waits_and_says_why(cli_path, tmp_path):
    job = write(tmp_path, "job.yaml", GOOD)
    pods = [ready("cli-job", 0), PodBuilder("cli-job", 1).node("node-1").devices(count=2).build()]
    result = run(cli_path, "ranktable", "-f", str(job), "--pods", str(pods_file(tmp_path, pods)))
    assert result.returncode == 0
    assert json.loads(result.stdout) == {"status": "initializing", "version": "1.0"}
    assert result.stderr.splitlines() == ["waiting: cli-job-a1-1: phase Pending"]


def test_ranktable_a3_uses_super_pod_labels(cli_path, tmp_path):
    body = json.loads(json.dumps(GOOD))
    body["spec"]["npu"] = {"chip": "A3", "perPod": 2}
    job = write(tmp_path, "job.yaml", body)
    pods = [PodBuilder("cli-job", i).running(node=f"a3-{i}").devices(count=2, super_ids=[7, 8]).build()
            for i in range(2)]
    nodes = [{"apiVersion": "v1", "kind": "Node",
              "metadata": {"name": f"a3-{i}", "labels": {"huawei.com/topotree.superpodid": str(3 + i)}}}
             for i in range(2)]
    result = run(cli_path, "ranktable", "-f", str(job), "--pods", str(pods_file(tmp_path, pods, nodes)))
    assert result.returncode == 0, result.stderr
    table = json.loads(result.stdout)
    assert table["version"] == "1.2"
    assert [group["super_pod_id"] for group in table["super_pod_list"]] == ["3", "4"]


def test_ranktable_without_pods_of_the_job(cli_path, tmp_path):
    job = write(tmp_path, "job.yaml", GOOD)
    path = pods_file(tmp_path, [ready("other", 0)])
    assert errors_of(run(cli_path, "ranktable", "-f", str(job), "--pods", str(path))) == [
        f"{path}: no pods labelled hybrid.ascend.dev/job=cli-job"]


def test_ranktable_with_a_garbled_attempt_label(cli_path, tmp_path):
    job = write(tmp_path, "job.yaml", GOOD)
    pods = [ready("cli-job", i) for i in range(2)]
    pods[0]["metadata"]["labels"]["hybrid.ascend.dev/attempt"] = "x"
    result = run(cli_path, "ranktable", "-f", str(job), "--pods", str(pods_file(tmp_path, pods)))
    assert result.returncode == 0
    assert json.loads(result.stdout) == {"status": "initializing", "version": "1.0"}


def test_crd_check_passes(cli_path, repo_root):
    result = run(cli_path, "crd", "check", cwd=repo_root)
    assert (result.returncode, result.stderr) == (0, "")


def test_crd_check_fails_on_a_tampered_copy(tmp_path, repo_root):
    """A throwaway copy of the package and every CRD file: the real crds/ are never touched."""
    shutil.copytree(repo_root / "operator" / "ascend_hybrid", tmp_path / "operator" / "ascend_hybrid",
                    ignore=shutil.ignore_patterns("__pycache__"))
    name = "ascendhybridjobs.hybrid.ascend.dev.yaml"
    chart = tmp_path / "charts" / "ascend-hybrid-operator" / "crds"
    chart.mkdir(parents=True)
    (tmp_path / "crds").mkdir()
    shutil.copy(repo_root / "pyproject.toml", tmp_path / "pyproject.toml")
    for each in (repo_root / "crds").iterdir():
        shutil.copy(each, tmp_path / "crds" / each.name)
        shutil.copy(repo_root / "charts" / "ascend-hybrid-operator" / "crds" / each.name, chart / each.name)
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "operator")}
    command = [sys.executable, "-c", "import sys, ascend_hybrid.cli as c; print(c.__file__, file=sys.stderr); "
                                     "sys.exit(c.main(sys.argv[1:]))", "crd", "check"]

    def check():
        return subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)

    clean = check()
    assert clean.returncode == 0, clean.stderr
    assert clean.stderr.strip() == str(tmp_path / "operator" / "ascend_hybrid" / "cli" / "__init__.py")
    tampered = chart / name
    tampered.write_text(tampered.read_text().replace("- ahj", "- ahx"))
    result = check()
    assert result.returncode == 1
    assert f"error: {tampered} differs from the CRD generated from api.py" in result.stderr
    assert str(tmp_path / "crds" / name) not in result.stderr
    assert "Traceback" not in result.stderr


# --- render (uses topology.py and placement.py) ---------------------------------------------------------

def test_render_places_the_seed_job_on_16_nodes(cli_path, examples):
    import kubernetes_validate

    result = run(cli_path, "render", "-f", str(examples / "seed-moe-128.yaml"), "--nodes",
                 str(examples / "nodes-16x8.yaml"), "--sched-ip", "10.96.0.7", "--namespace", "ml", "--attempt", "2")
    assert result.returncode == 0, result.stderr
    objects = list(yaml.safe_load_all(result.stdout))
    assert [o["kind"] for o in objects] == ["Service", "Service", "ConfigMap"] + ["Pod"] * 16
    pods = objects[3:]
    assert [p["metadata"]["name"] for p in pods] == [f"seed-moe-128-a2-{i}" for i in range(16)]
    nodes = [p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
             ["nodeSelectorTerms"][0]["matchExpressions"][0]["values"][0] for p in pods]
    assert len(set(nodes)) == 16
    racks = [node.split("-")[1] for node in nodes]
    assert all(racks[2 * s] == racks[2 * s + 1] for s in range(8)), "each stage's pods in one rack"
    for obj in objects:
        assert obj["metadata"]["namespace"] == "ml"
        assert "ownerReferences" not in obj["metadata"]
        kubernetes_validate.validate(obj, "1.36.0", strict=True)
    env = {e["name"]: e.get("value") for e in pods[5]["spec"]["containers"][0]["env"]}
    assert (env["MS_SCHED_HOST"], env["RANK_START"], env["MS_NODE_RANK"]) == ("10.96.0.7", "40", "5")
    assert "TP groups node-local 16/16" in result.stderr
    assert "note: the job has no metadata.uid" in result.stderr


def test_render_under_volcano_shows_the_podgroup_and_pods_that_only_prefer_their_planned_node(cli_path, examples):
    result = run(cli_path, "render", "-f", str(examples / "seed-moe-128.yaml"), "--nodes",
                 str(examples / "nodes-16x8.yaml"), "--sched-ip", "10.96.0.7", "--scheduler", "volcano")
    assert result.returncode == 0, result.stderr
    objects = list(yaml.safe_load_all(result.stdout))
    assert [o["kind"] for o in objects] == ["Service", "Service", "ConfigMap", "PodGroup"] + ["Pod"] * 16
    group, pods = objects[3], objects[4:]
    assert group["metadata"]["name"] == "seed-moe-128-a1" and group["spec"]["minMember"] == 16
    preferred = set()
    for pod in pods:
        spec = pod["spec"]
        assert spec["schedulerName"] == "volcano" and "nodeName" not in spec
        assert pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "seed-moe-128-a1"
        assert "requiredDuringSchedulingIgnoredDuringExecution" not in spec["affinity"]["nodeAffinity"]
        term = spec["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
        preferred.add(term["preference"]["matchExpressions"][0]["values"][0])
    assert len(preferred) == 16
    body = run(cli_path, "render", "-f", str(examples / "seed-moe-128.yaml"), "--nodes",
               str(examples / "nodes-16x8.yaml"))
    assert "PodGroup" not in body.stdout, "the default: the operator binds the pods itself"


def test_render_refuses_what_cannot_be_placed(cli_path, tmp_path, examples):
    body = json.loads(json.dumps(GOOD))
    body["spec"]["npu"] = {"chip": "A3", "perPod": 2}
    job = write(tmp_path, "job.yaml", body)
    result = run(cli_path, "render", "-f", str(job), "--nodes", str(examples / "nodes-16x8.yaml"))
    errors = errors_of(result)
    assert len(errors) == 1 and errors[0].startswith("cannot place cli-job: ")


def test_render_needs_nodes(cli_path, tmp_path, examples):
    empty = write(tmp_path, "nodes.yaml", {"apiVersion": "v1", "kind": "List", "items": []})
    assert errors_of(run(cli_path, "render", "-f", str(examples / "job.yaml"), "--nodes", str(empty))) == [
        f"{empty}: no Node objects found"]


def rule_cases():
    from support.rule_cases import RULE_CASES  # the one table of every rule's failing example

    return RULE_CASES


@pytest.mark.parametrize("failing, expected", [case[1:3] for case in rule_cases()], ids=[c[0] for c in rule_cases()])
def test_every_rule_through_main(tmp_path, capsys, failing, expected):
    """In-process (the subprocess cases above show the console script behaves the same): exit 2, one line."""
    from ascend_hybrid.cli import commands as cli

    path = write(tmp_path, "job.yaml", {**GOOD, "spec": failing})
    assert cli.main(["validate", "-f", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"error: {expected}\n"
