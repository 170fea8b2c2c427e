"""`ascend-hybrid plan` as users run it: every example plans, the JSON output is the documented contract
(docs/planner.md's JSON Schema), and bad input is one `error:` line with exit code 2."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from ascend_hybrid.cli import commands as cli
from support.paths import PLANNER_FIXTURES

FIXTURES = PLANNER_FIXTURES
GIB = 2 ** 30


@pytest.fixture(scope="module")
def plan_schema(repo_root):
    """The JSON Schema the docs publish, between its two markers: the test reads the contract users read."""
    text = (repo_root / "docs" / "planner.md").read_text()
    block = re.search(r"<!-- plan-json-schema -->\s*```json\n(.*?)```", text, re.DOTALL)
    assert block, "docs/planner.md lost its plan-json-schema block"
    schema = json.loads(block.group(1))
    jsonschema.Draft202012Validator.check_schema(schema)
    return schema


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def job_files(examples: Path) -> list[Path]:
    return sorted(path for path in examples.glob("*.yaml")
                  if any(doc and doc.get("kind") == "AscendHybridJob" for doc in yaml.safe_load_all(path.read_text())))


def test_there_are_examples_to_plan(examples):
    assert {path.name for path in job_files(examples)} >= {"job.yaml", "seed-moe-128.yaml"}


@pytest.mark.parametrize("evaluate", [False, True], ids=["plan", "evaluate"])
def test_plan_runs_on_every_example_and_its_json_is_the_documented_shape(examples, capsys, plan_schema, evaluate):
    for path in job_files(examples):
        code, out, err = run(capsys, "plan", "-f", str(path), "-o", "json", *(["--evaluate"] if evaluate else []))
        assert code == 0, (path, err)
        document = json.loads(out)
        jsonschema.validate(document, plan_schema)
        assert len(document["candidates"]) == 1 if evaluate else document["candidates"]
        code, table, err = run(capsys, "plan", "-f", str(path), *(["--evaluate"] if evaluate else []))
        assert code == 0 and "why: " in table, (path, err)


def test_the_schema_rejects_what_the_contract_forbids(plan_schema, capsys, examples):
    _, out, _ = run(capsys, "plan", "-f", str(examples / "job.yaml"), "-o", "json")
    document = json.loads(out)
    del document["candidates"][0]["memory"]["totalGiB"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(document, plan_schema)


def test_korthikanti_22b_activations_through_evaluate_with_an_a100_file(capsys, tmp_path):
    """59.25 GiB with TP only, 9.5625 GiB with TP + SP + selective recompute (Korthikanti Fig. 1)."""
    job = FIXTURES / "korthikanti-22b.yaml"
    hardware = str(FIXTURES / "a100-80g.yaml")
    code, out, _ = run(capsys, "plan", "-f", str(job), "--evaluate", "--hardware", hardware, "-o", "json")
    assert code == 0
    [tp_only] = json.loads(out)["candidates"]
    s, b, h, a, layers, t = 2048, 4, 6144, 64, 48, 8
    formula = s * b * h * layers * (10 + 24 / t + 5 * a * s / (h * t)) / GIB
    assert tp_only["memory"]["activationsGiB"] == pytest.approx(formula) and tp_only["memory"]["activationsGiB"] == 59.25
    body = yaml.safe_load(job.read_text())
    body["spec"]["training"].update(recompute="selective", sequenceParallel=True)
    variant = tmp_path / "sp-selective.yaml"
    variant.write_text(yaml.safe_dump(body))
    code, out, _ = run(capsys, "plan", "-f", str(variant), "--evaluate", "--hardware", hardware, "-o", "json")
    [sp_selective] = json.loads(out)["candidates"]
    assert code == 0 and sp_selective["memory"]["activationsGiB"] == pytest.approx(s * b * h * layers * 34 / t / GIB)
    assert sp_selective["memory"]["activationsGiB"] == 9.5625
    assert json.loads(out)["hardware"]["name"] == "a100-80g"
    # the paper's conclusion: TP only does not fit an 80 GB GPU, SP + selective does
    assert not tp_only["fits"] and sp_selective["fits"]
    assert any("does not fit" in warning for warning in tp_only["warnings"])


def test_world_and_nodes_choose_the_size(capsys, examples):
    seed = str(examples / "seed-moe-128.yaml")
    code, out, _ = run(capsys, "plan", "-f", seed, "--nodes", "32", "-o", "json", "--top", "2")
    document = json.loads(out)
    assert code == 0 and document["world"] == 256 and len(document["candidates"]) == 2
    for candidate in document["candidates"]:
        p = candidate["parallelism"]
        assert p["data"] * p["tensor"] * p["pipeline"] == 256
    code, out, _ = run(capsys, "plan", "-f", seed, "--world", "256", "-o", "json", "--top", "2")
    assert json.loads(out) == document


def test_table_shows_the_idle_warning_under_a_deep_pipeline(capsys, examples, tmp_path):
    body = yaml.safe_load((examples / "job.yaml").read_text())
    body["spec"]["parallelism"] = {"data": 1, "tensor": 1, "pipeline": 8}
    body["spec"]["training"]["globalBatchSize"] = 8
    path = tmp_path / "deep.yaml"
    path.write_text(yaml.safe_dump(body))
    code, out, _ = run(capsys, "plan", "-f", str(path), "--evaluate")
    p = m = 8  # microBatches defaults to the pipeline degree
    assert code == 0
    assert f"! idle {100 * (p - 1) / (m + p - 1):.1f} % of the step (> 25 %): use more micro-batches (≥ 4 × pipeline = 32)" in out


def test_tp_across_910a_rings_is_warned(capsys, examples, tmp_path):
    body = yaml.safe_load((examples / "job.yaml").read_text())
    body["spec"]["parallelism"] = {"data": 1, "tensor": 8}
    body["spec"]["npu"] = {"chip": "910A", "perPod": 8}
    body["spec"]["training"]["globalBatchSize"] = 8
    path = tmp_path / "rings.yaml"
    path.write_text(yaml.safe_dump(body))
    code, out, _ = run(capsys, "plan", "-f", str(path), "--evaluate")
    assert code == 0 and "! TP 8 crosses the 4-chip HCCS rings" in out


def _error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("error:")]


@pytest.mark.parametrize("args, message", [
    (["--chip", "910C"], "error: --chip 910C: unknown chip '910C' (known: 910A, 910B, A3)"),
    (["--world", "12"], "passes the job rules"),
    (["--world", "0"], "error: --world=0: must be ≥ 1"),
    (["--evaluate", "--world", "8"], "--evaluate scores the file's own strategy"),
    (["--hardware", "MISSING.yaml"], "MISSING.yaml: No such file or directory"),
])
def test_bad_input_is_one_error_line_and_exit_2(capsys, examples, args, message):
    code, out, err = run(capsys, "plan", "-f", str(examples / "job.yaml"), *args)
    assert code == 2 and out == ""
    assert len(_error_lines(err)) == 1 and message in err, err


@pytest.mark.parametrize("content, message", [
    ("name: x\nchipsPerNode: 8\n", "hbmGiB: is required"),
    ("[1, 2]", "expected a mapping of hardware keys, found list"),
    ("name: [unclosed", "not valid YAML"),
])
def test_malformed_hardware_file_is_one_error_line(capsys, examples, tmp_path, content, message):
    path = tmp_path / "hw.yaml"
    path.write_text(content)
    code, _, err = run(capsys, "plan", "-f", str(examples / "job.yaml"), "--hardware", str(path))
    assert code == 2 and len(_error_lines(err)) == 1 and message in err and str(path) in err


def test_nothing_fits_prints_the_closest_candidate_and_by_how_much(capsys, examples):
    code, out, err = run(capsys, "plan", "-f", str(examples / "seed-moe-128.yaml"), "--world", "16")
    assert code == 2 and out == ""
    [line] = _error_lines(err)
    match = re.search(r"the closest needs ([\d.]+) GiB on stage \d+, ([\d.]+) GiB more than the ([\d.]+) GiB usable",
                      line)
    assert match, line
    needs, over, usable = map(float, match.groups())
    assert usable == 57.6 and needs == pytest.approx(usable + over, abs=0.11)
    assert "closest:" in err and "why: " in err and "does not fit" in err
    code, out, _ = run(capsys, "plan", "-f", str(examples / "seed-moe-128.yaml"), "--world", "16", "-o", "json")
    document = json.loads(out)
    assert code == 2 and document["candidates"] == [] and document["closest"]["fits"] is False


def test_the_worked_example_in_the_docs_is_real_output(capsys, repo_root, monkeypatch):
    """Every `$ ascend-hybrid …` block of docs/planner.md, run again, prints what the docs show."""
    monkeypatch.chdir(repo_root)
    text = (repo_root / "docs" / "planner.md").read_text()
    blocks = re.findall(r"```\n\$ ascend-hybrid (.*?)\n(.*?)```", text, re.DOTALL)
    assert len(blocks) >= 4
    for command, shown in blocks:
        expected_exit = 0
        if command.endswith('; echo "exit $?"'):
            command = command.removesuffix('; echo "exit $?"')
            shown, exit_line = shown.rstrip("\n").rsplit("\n", 1)
            expected_exit = int(exit_line.removeprefix("exit "))
            shown += "\n"
        code, out, err = run(capsys, *command.split())
        assert code == expected_exit, command
        assert out + err == shown, command


LONG_SEQUENCE_JOB = """
apiVersion: hybrid.ascend.dev/v1alpha1
kind: AscendHybridJob
metadata: {name: llama31-8b-128k}
spec:
  parallelism: {data: 1, tensor: 8, pipeline: 1, context: 4, microBatches: 32}
  npu: {chip: 910B}
  model: {preset: custom, layers: 32, hidden: 4096, heads: 32, kvHeads: 8, ffnHidden: 14336, vocab: 128256,
          ffnType: swiglu}
  training: {seqLength: 131072, globalBatchSize: 32, flashAttention: true, sequenceParallel: true}
"""
UNEVEN_JOB = """
apiVersion: hybrid.ascend.dev/v1alpha1
kind: AscendHybridJob
metadata: {name: llama3-70b}
spec:
  parallelism: {data: 1, tensor: 8, pipeline: 4, microBatches: 64, pipelineLayers: [17, 20, 22, 21]}
  npu: {chip: 910B}
  model: {preset: custom, layers: 80, hidden: 8192, heads: 64, kvHeads: 8, ffnHidden: 28672, vocab: 128256,
          ffnType: swiglu}
  training: {seqLength: 8192, globalBatchSize: 64, flashAttention: true, sequenceParallel: true}
"""


@pytest.mark.parametrize("content", [LONG_SEQUENCE_JOB, UNEVEN_JOB], ids=["context", "uneven"])
def test_context_parallel_and_uneven_jobs_print_the_documented_json(tmp_path, capsys, plan_schema, content):
    path = tmp_path / "job.yaml"
    path.write_text(content)
    code, out, err = run(capsys, "plan", "-f", str(path), "--evaluate", "-o", "json")
    assert code == 0, err
    document = json.loads(out)
    jsonschema.validate(document, plan_schema)
    [candidate] = document["candidates"]
    if "context" in content.split("parallelism:")[1].split("\n")[0]:
        assert candidate["parallelism"]["context"] == 4 and candidate["groups"]["context"]["size"] == 4
        assert "CP 4 ring attention across 4 nodes" in candidate["why"]
    else:
        assert candidate["parallelism"]["pipelineLayers"] == [17, 20, 22, 21]
        assert "stages of 17/20/22/21 layers" in candidate["why"]
