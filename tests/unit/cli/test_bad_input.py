"""Bad input everywhere a user gives it: the corpus of one file per class, run through the installed
console script, and every subcommand driven with malformed files — always exit 2, `error:` lines naming the field
or the file, never a traceback."""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ascend_hybrid.cli import commands as cli
from support.bad_inputs import BAD_INPUT, BAD_INPUTS
from support.builders import NodeBuilder, PodBuilder
from support.paths import EXAMPLES

JOB = str(EXAMPLES / "job.yaml")
NODES = str(EXAMPLES / "nodes-16x8.yaml")


def expand(text: str, path: Path) -> str:
    return text.replace("{file}", str(path)).replace("{examples}", str(EXAMPLES))


@pytest.mark.parametrize("case", BAD_INPUTS, ids=[case.file for case in BAD_INPUTS])
def test_the_corpus_is_refused_with_exit_2_naming_the_field(cli_path, case):
    path = BAD_INPUT / case.file
    command = [expand(part, path) for part in case.command]
    stdin = path.read_bytes() if case.stdin else None
    result = subprocess.run([str(cli_path), *command], capture_output=True, input=stdin, timeout=60)
    out, err = result.stdout.decode(), result.stderr.decode()
    assert "Traceback" not in out + err, err
    assert result.returncode == 2, (result.returncode, out, err)
    assert out == case.stdout
    lines = err.splitlines()
    assert [line.removeprefix("error: ") for line in lines if line.startswith("error: ")] == [
        expand(line, path) for line in case.errors]
    assert [line.removeprefix("note: ") for line in lines if not line.startswith("error: ")] == [
        expand(line, path) for line in case.notes]
    errors = [line for line in lines if line.startswith("error: ")]
    fields = (case.field,) * len(errors) if isinstance(case.field, str) else case.field
    assert len(fields) == len(errors) and all(expand(f, path) in line for f, line in zip(fields, errors))


def test_every_corpus_file_has_its_case():
    assert sorted(path.name for path in BAD_INPUT.iterdir()) == sorted(case.file for case in BAD_INPUTS)


# --- every subcommand, every kind of malformed file -------------------------------------------------------------

MALFORMED = {  # name: (content, the start of the one error line; {file} is the path)
    "empty": (b"", "{file}: empty: no YAML document"),
    "blank": (b"\n# only a comment\n\n", "{file}: no AscendHybridJob object found"),
    "binary": (bytes(range(256)), "{file}: not UTF-8 text"),
    "control-characters": (b"a: \x07\n", "{file}: not valid YAML at line 1, column 4: unacceptable character #x0007"),
    "syntax": (b"spec: [1, 2\n", "{file}: not valid YAML at line 2, column 1:"),
    "tab-indent": (b"spec:\n\tparallelism: {}\n", "{file}: not valid YAML at line 2, column 1:"),
    "duplicate-key": (b"apiVersion: v1\nkind: Pod\nkind: Node\n",
                      "{file}: duplicate key 'kind' at line 3, column 1 (first at line 2, column 1)"),
    "scalar": (b"42\n", "{file}: document 1 (line 1) is a number, not a Kubernetes object"),
    "list": (b"- a\n- b\n", "{file}: document 1 (line 1) is a list, not a Kubernetes object"),
    "no-kind": (b"metadata: {name: x}\n", "{file}: document 1 (line 1): not a Kubernetes object: apiVersion and kind"),
    "python-tag": (b"!!python/object:os.system {}\n", "{file}: not valid YAML at line 1, column 1: could not "
                                                       "determine a constructor"),
    "deep": (b"[" * 5000 + b"]" * 5000, "{file}: "),
}


def run_main(capsys, *args: str) -> tuple[int, str, list[str]]:
    try:
        code = cli.main(list(args))
    except SystemExit as exit_:  # argparse
        code = exit_.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err.splitlines()


def assert_one_error(code, out, err, start: str) -> None:
    assert code == 2, (code, out, err)
    assert out == ""
    assert len(err) == 1 and err[0].startswith("error: "), err
    assert err[0].removeprefix("error: ").startswith(start), (err[0], start)


SUBCOMMANDS = {  # how each subcommand reads a malformed file, in each of its inputs
    "validate -f": lambda bad: ["validate", "-f", bad],
    "layout -f": lambda bad: ["layout", "-f", bad],
    "render -f": lambda bad: ["render", "-f", bad, "--nodes", NODES],
    "render --nodes": lambda bad: ["render", "-f", JOB, "--nodes", bad],
    "render --pods": lambda bad: ["render", "-f", JOB, "--nodes", NODES, "--pods", bad],
    "ranktable -f": lambda bad: ["ranktable", "-f", bad, "--pods", NODES],
    "ranktable --pods": lambda bad: ["ranktable", "-f", JOB, "--pods", bad],
    "plan -f": lambda bad: ["plan", "-f", bad],
    "plan --hardware": lambda bad: ["plan", "-f", JOB, "--hardware", bad],
}
NOT_A_JOB_FILE = {"blank"}  # fine as a pods, nodes or hardware file that is just empty of objects


@pytest.mark.parametrize("malformed", sorted(MALFORMED))
@pytest.mark.parametrize("subcommand", sorted(SUBCOMMANDS))
def test_every_subcommand_refuses_every_malformed_file(capsys, tmp_path, subcommand, malformed):
    content, start = MALFORMED[malformed]
    path = tmp_path / f"{malformed}.yaml"
    path.write_bytes(content)
    code, out, err = run_main(capsys, *SUBCOMMANDS[subcommand](str(path)))
    if malformed in NOT_A_JOB_FILE and not subcommand.endswith("-f"):
        expected = {"render --nodes": f"{path}: no Node objects found",
                    "render --pods": None, "ranktable --pods": f"{path}: no pods labelled",
                    "plan --hardware": f"{path}: empty: no hardware description"}[subcommand]
        if expected is None:  # no other pods: the job is placed and rendered
            assert code == 0, err
            return
        start = expected
    if subcommand == "plan --hardware" and malformed in ("empty", "scalar", "list", "no-kind"):
        start = {"empty": f"{path}: empty: no hardware description", "no-kind": f"{path}: "}.get(
            malformed, f"{path}: expected a mapping of hardware keys")
    assert_one_error(code, out, err, start.replace("{file}", str(path)))


@pytest.mark.parametrize("subcommand", ["validate", "layout", "plan"])
def test_standard_input_garbage_is_one_line(capsys, monkeypatch, subcommand):
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO("}}} not: [yaml\n"))
    code, out, err = run_main(capsys, subcommand, "-f", "-")
    assert_one_error(code, out, err, "-: not valid YAML at line 1, column 1:")


def test_a_directory_is_one_line_for_every_input(capsys, tmp_path):
    for make in SUBCOMMANDS.values():
        code, out, err = run_main(capsys, *make(str(tmp_path)))
        assert_one_error(code, out, err, f"{tmp_path}: Is a directory")


@pytest.mark.parametrize("args, start", [
    (["render", "-f", JOB, "--nodes", NODES, "--attempt", "0"], "--attempt=0: must be ≥ 1"),
    (["render", "-f", JOB, "--nodes", NODES, "--attempt", "-5"], "--attempt=-5: must be ≥ 1"),
    (["render", "-f", JOB, "--nodes", NODES, "--attempt", "1e3"], "ascend-hybrid render: argument --attempt: invalid int"),
    (["render", "-f", JOB, "--nodes", NODES, "--attempt", "9" * 48],
     f"--attempt={'9' * 48}: pod name 'tiny-tp4-dp2-a{'9' * 48}-0' would be 64 characters, more than the 63"),
    (["render", "-f", JOB, "--nodes", NODES, "--sched-ip", "sched.local"], "--sched-ip='sched.local': must be an IP"),
    (["render", "-f", JOB, "--nodes", NODES, "--namespace", "Team_A"], "--namespace='Team_A': a lowercase RFC 1123"),
    (["render", "-f", "-", "--nodes", "-"], "-f and --nodes: only one input can be standard input"),
    (["ranktable", "-f", "-", "--pods", "-"], "-f and --pods: only one input can be standard input"),
    (["render", "-f", JOB], "ascend-hybrid render: the following arguments are required: --nodes"),
    (["plan", "-f", JOB, "--top", "x"], "ascend-hybrid plan: argument --top: invalid int value: 'x'"),
    (["plan", "-f", JOB, "--world", "0"], "--world=0: must be ≥ 1"),
    (["validate"], "ascend-hybrid validate: the following arguments are required: -f/--file"),
    (["no-such-command"], "ascend-hybrid: argument command: invalid choice: 'no-such-command'"),
])
def test_malformed_arguments_are_one_line(capsys, args, start):
    assert_one_error(*run_main(capsys, *args), start)


def test_a_file_of_two_jobs_is_refused_by_the_commands_that_take_one(capsys, tmp_path):
    body = yaml.safe_load(Path(JOB).read_text())
    other = copy.deepcopy(body)
    other["metadata"]["name"] = "second"
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump_all([body, other]))
    for args in (["layout", "-f", str(path)], ["render", "-f", str(path), "--nodes", NODES],
                 ["ranktable", "-f", str(path), "--pods", NODES], ["plan", "-f", str(path)]):
        assert_one_error(*run_main(capsys, *args), f"{path}: 2 AscendHybridJob objects ('tiny-tp4-dp2', 'second')")


def test_validate_reports_every_job_by_name_and_a_repeated_name(capsys, tmp_path):
    body = yaml.safe_load(Path(JOB).read_text())
    bad = copy.deepcopy(body)
    bad["metadata"]["name"] = "bad"
    bad["spec"]["training"]["steps"] = 0
    path = tmp_path / "three.yaml"
    text = yaml.safe_dump_all([body, bad, body])
    path.write_text(text)
    third = [number for number, line in enumerate(text.splitlines(), 1) if line == "---"][1] + 1
    code, out, err = run_main(capsys, "validate", "-f", str(path))
    assert code == 2
    assert out == "tiny-tp4-dp2: valid (world 8 = DP 2 × TP 4 × PP 1, EP 1, 1 pods × 8 910B)\n"
    assert err == ["error: bad: spec.training.steps=0 must be ≥ 1",
                   f"error: tiny-tp4-dp2: {path}: document 3 (line {third}): a second AscendHybridJob named 'tiny-tp4-dp2' "
                   "(first: document 1 (line 1)): kubectl apply would keep only the last"]


def test_yaml_reads_numbers_as_kubectl_does(capsys, tmp_path):
    """PyYAML alone reads 1e-4 as a string (YAML 1.1 wants a dot and a signed exponent); kubectl reads a number."""
    body = yaml.safe_load(Path(JOB).read_text())
    text = yaml.safe_dump(body).replace("learningRate: 0.001", "learningRate: 1e-4")
    assert "learningRate: 1e-4" in text
    path = tmp_path / "job.yaml"
    path.write_text(text)
    [document] = cli.load_documents(str(path))
    assert document.obj["spec"]["training"]["learningRate"] == 1e-4
    assert cli.main(["validate", "-f", str(path)]) == 0


def test_merge_keys_may_override_but_explicit_keys_may_not_repeat(tmp_path):
    path = tmp_path / "merge.yaml"
    path.write_text("base: &base {a: 1, b: 2}\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: m}\n"
                    "data: {<<: *base, b: 3}\n")
    [document] = cli.load_documents(str(path))
    assert document.obj["data"] == {"a": 1, "b": 3}
    path.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: m}\ndata:\n  x: {a: 1, a: 2}\n")
    with pytest.raises(cli.InputError, match=r"duplicate key 'a' at line 5, column 13 \(first at line 5, column 7\)"):
        cli.load_documents(str(path))


# --- render and ranktable never crash on a malformed Node or Pod --------------------------------------------------

JUNK = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.text(max_size=4), st.lists(st.integers(), max_size=2),
                 st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
                 st.just(float("nan")), st.just("8"), st.just(8))


def paths_of(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from paths_of(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from paths_of(item, (*prefix, index))


def replaced(value, path, junk):
    if not path:
        return junk
    value = copy.deepcopy(value)
    target = value
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = junk
    return value


GOOD_NODE = (NodeBuilder("a2-0").chip("910B").condition("MemoryPressure", "False").rack("rack-0")
             .taint("t", value="v").build())
GOOD_POD = (PodBuilder("tiny-tp4-dp2", 0).running(node="a2-0").devices(count=8).pinned("a2-0")
            .chips(8, limits=False).build())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_node_or_pod_garbled_anywhere_is_refused_or_used_never_a_crash(tmp_path, capsys, data):
    which = data.draw(st.sampled_from(["node", "pod"]))
    good = GOOD_NODE if which == "node" else GOOD_POD
    path = data.draw(st.sampled_from(sorted(paths_of(good), key=str)))
    garbled = replaced(good, path, data.draw(JUNK))
    nodes, pods = ([garbled] if which == "node" else [GOOD_NODE]), ([garbled] if which == "pod" else [])
    (tmp_path / "nodes.yaml").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": nodes}))
    (tmp_path / "pods.yaml").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [*pods, *nodes]}))
    for args in (["render", "-f", JOB, "--nodes", str(tmp_path / "nodes.yaml"), "--pods", str(tmp_path / "pods.yaml")],
                 ["ranktable", "-f", JOB, "--pods", str(tmp_path / "pods.yaml")]):
        code, out, err = run_main(capsys, *args)  # an exception would fail the test here
        assert code in (0, 2), (code, err)
        if code == 2:
            assert err and all(line.startswith("error: ") for line in err), err


def test_a_control_character_in_a_value_stays_on_its_error_line(tmp_path, capsys):
    """Found by the property above: a taint key of a carriage return split the refusal into two lines."""
    node = replaced(GOOD_NODE, ("spec", "taints", 0, "key"), "\r")
    node["spec"]["taints"][0]["effect"] = "NoSchedule"
    (tmp_path / "nodes.yaml").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [node]}))
    code, _, err = run_main(capsys, "render", "-f", JOB, "--nodes", str(tmp_path / "nodes.yaml"))
    assert code == 2 and err and all(line.startswith("error: ") for line in err), err
