"""Validation rules and resolved values of design §3: one failing and one passing example per rule."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_hybrid.spec import rules
from support.builders import JobBuilder
from support.rule_cases import BASE, RULE_CASES, spec_with
from support.strategies import valid_specs


def problems_of(body: dict) -> list[str]:
    try:
        rules.parse(body)
    except rules.SpecError as error:
        assert str(error) == "\n".join(error.problems)
        return error.problems
    return []


def job(spec: dict, name: str = "job") -> dict:
    """A manifest as written, before the apiserver gives it a namespace."""
    return JobBuilder(name).namespace(None).spec(spec).build()


# (id, failing spec, the one expected problem, a passing spec of the same rule)


@pytest.mark.parametrize("failing, expected, passing", [case[1:] for case in RULE_CASES],
                         ids=[case[0] for case in RULE_CASES])
def test_each_rule_fails_with_one_clear_message_and_passes_when_met(failing, expected, passing):
    assert problems_of(job(failing)) == [expected]
    assert problems_of(job(passing)) == []


def test_name_at_most_50_characters():
    assert problems_of(job(BASE, name="a" * 50)) == []
    [problem] = problems_of(job(BASE, name="a" * 51))
    assert problem.startswith(f"metadata.name='{'a' * 51}': must be at most 50 characters")
    assert "<job>-a<attempt>-<index>" in problem


@pytest.mark.parametrize("metadata, expected", [
    (None, "metadata.name: is required"),
    ({}, "metadata.name: is required"),
    ({"name": ""}, "metadata.name: is required"),
    ({"name": 12}, "metadata.name=12: must be a string"),
])
def test_name_required(metadata, expected):
    body = {"spec": BASE} if metadata is None else {"metadata": metadata, "spec": BASE}
    assert problems_of(body) == [expected]


def test_spec_required():
    assert problems_of({"metadata": {"name": "job"}, "spec": None}) == [
        "spec: is required (an object with at least spec.parallelism)"]


@pytest.mark.parametrize("spec, shown", [([], "[]"), ("x", '"x"'), (5, "5")])
def test_a_spec_that_is_not_an_object_is_named_as_such(spec, shown):
    """It is there, it is not an object: 'spec: 5' is not told it is missing."""
    assert problems_of({"metadata": {"name": "job"}, "spec": spec}) == [
        f"spec={shown}: must be an object (with at least spec.parallelism)"]


def test_every_problem_is_reported_at_once_in_schema_stage():
    spec = spec_with(parallelism={"data": 0, "tensor": 4, "bogus": 1}, runPolicy={"backoffLimit": -1},
                     npu={"perPod": 8, "chip": "910C"})
    problems = problems_of(job(spec, name="x" * 51))
    assert len(problems) == 5
    assert problems[0].startswith("metadata.name=")
    assert set(problems[1:]) == {
        "spec.parallelism.data=0 must be ≥ 1", "spec.parallelism.bogus: unknown field",
        "spec.runPolicy.backoffLimit=-1 must be ≥ 0", "spec.npu.chip='910C' must be one of '910A', '910B' or 'A3'"}


def test_every_problem_is_reported_at_once_in_rule_stage():
    spec = spec_with(parallelism={"data": 1, "tensor": 3, "pipeline": 5, "microBatches": 2, "expert": 2},
                     npu={"perPod": 4}, model={"hidden": 100})
    assert problems_of(job(spec, name="y" * 51)) == [
        f"metadata.name='{'y' * 51}': must be at most 50 characters "
        "(pod names <job>-a<attempt>-<index> must stay valid labels) of lowercase letters, digits and '-', "
      "starting with a letter (Service names)",
        "spec.npu.perPod=4 must divide the world size data×tensor×pipeline=15",
        "spec.parallelism.tensor=3 must divide spec.npu.perPod=4",
        "spec.parallelism.microBatches=2 must be ≥ spec.parallelism.pipeline=5",
        "spec.model.layers=24 must be divisible by spec.parallelism.pipeline=5",
        "spec.model.heads=8 must be divisible by spec.parallelism.tensor=3",
        "spec.model.hidden=100 must be divisible by spec.model.heads=8",
        "spec.parallelism.expert=2 needs spec.model.experts > 0",
        "spec.parallelism.expert=2 must divide spec.parallelism.data=1 (expertPlacement dataParallel)",
    ]


# --- defaults -------------------------------------------------------------------------------------------

PRESETS = {  # design §3, copied by hand: the table is a contract, not an implementation detail
    "tiny": dict(layers=24, hidden=128, heads=8, ffnHidden=512, vocab=512, experts=0, topK=None),
    "gpt-1b": dict(layers=24, hidden=2048, heads=16, ffnHidden=8192, vocab=50304, experts=0, topK=None),
    "moe-100b": dict(layers=64, hidden=5120, heads=40, ffnHidden=20480, vocab=64000, experts=8, topK=2),
}


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_presets_table_exactly(preset):
    resolved = rules.parse(job(spec_with(parallelism={"data": 8}, model={"preset": preset})))
    assert resolved.model == {"preset": preset, **PRESETS[preset]}


def test_default_preset_is_tiny():
    assert rules.parse(job(BASE)).model == {"preset": "tiny", **PRESETS["tiny"]}


def test_explicit_fields_override_the_preset():
    resolved = rules.parse(job(spec_with(parallelism={"data": 8}, model={"preset": "moe-100b", "layers": 32,
                                                                            "experts": 16, "topK": 4})))
    assert resolved.model == {**PRESETS["moe-100b"], "preset": "moe-100b", "layers": 32, "experts": 16, "topK": 4}


def test_custom_defaults():
    resolved = rules.parse(job(spec_with(model={"preset": "custom", "layers": 4, "hidden": 96, "heads": 4,
                                                 "vocab": 1000})))
    assert resolved.model == {"preset": "custom", "layers": 4, "hidden": 96, "heads": 4, "vocab": 1000,
                               "ffnHidden": 384, "experts": 0, "topK": 2}
    explicit = rules.parse(job(spec_with(model={"preset": "custom", "layers": 4, "hidden": 96, "heads": 4,
                                                "vocab": 1000, "ffnHidden": 100, "experts": 4, "topK": 1})))
    assert (explicit.model["ffnHidden"], explicit.model["experts"], explicit.model["topK"]) == (100, 4, 1)


@pytest.mark.parametrize("chip, per_pod", [("910A", 8), ("910B", 8), ("A3", 16)])
def test_per_pod_defaults_to_chips_per_node(chip, per_pod):
    resolved = rules.parse(job({"parallelism": {"data": 16}, "npu": {"chip": chip}}))
    assert resolved.per_pod == per_pod
    assert resolved.pod_count == 16 // per_pod


def test_defaults_of_degrees_and_policies():
    resolved = rules.parse(job({"parallelism": {}, "npu": {"perPod": 1}}))
    assert (resolved.data, resolved.tensor, resolved.pipeline, resolved.expert) == (1, 1, 1, 1)
    assert resolved.expert_placement == "dataParallel"
    assert resolved.chip == "910B"
    assert resolved.micro_batches == 1
    assert resolved.global_batch_size == 1
    spec = resolved.spec
    assert (spec.hccl.connect_timeout_seconds, spec.hccl.exec_timeout_seconds, spec.hccl.whitelist_disable) == (
        120, 600, True)
    policy = spec.run_policy
    assert (policy.backoff_limit, policy.suspend, policy.scheduling_timeout_seconds, policy.clean_pod_policy,
            policy.active_deadline_seconds, policy.ttl_seconds_after_finished) == (3, False, 300, "Running", None, None)
    assert spec.scheduling.topology_tiers == ["huawei.com/topotree.rackid"]
    assert spec.training.seed == 0
    assert spec.npu.resource == "huawei.com/Ascend910"


@pytest.mark.parametrize("pipeline", [1, 2, 4, 8])
def test_micro_batches_default_to_pipeline(pipeline):
    resolved = rules.parse(job(spec_with(parallelism={"data": 2, "tensor": 4, "pipeline": pipeline})))
    assert resolved.micro_batches == pipeline
    assert resolved.degrees["microBatches"] == pipeline
    assert resolved.global_batch_size == 2 * pipeline


def test_explicit_micro_batches_and_degrees():
    resolved = rules.parse(job(spec_with(parallelism={"data": 2, "tensor": 4, "pipeline": 2, "microBatches": 6},
                                          training={"globalBatchSize": 24})))
    assert resolved.degrees == {"data": 2, "tensor": 4, "pipeline": 2, "expert": 1,
                                 "expertPlacement": "dataParallel", "microBatches": 6}
    assert resolved.world_size == 16 and resolved.pod_count == 2 and resolved.global_batch_size == 24


# --- examples --------------------------------------------------------------------------------------------

def test_example_job_is_valid(examples):
    [body] = [doc for doc in yaml.safe_load_all((examples / "job.yaml").read_text()) if doc]
    resolved = rules.parse(body)
    assert (resolved.name, resolved.world_size, resolved.pod_count, resolved.per_pod) == ("tiny-tp4-dp2", 8, 1, 8)
    assert (resolved.data, resolved.tensor, resolved.pipeline) == (2, 4, 1)


def test_seed_example_is_valid(examples):
    [body] = [doc for doc in yaml.safe_load_all((examples / "seed-moe-128.yaml").read_text()) if doc]
    resolved = rules.parse(body)
    assert (resolved.world_size, resolved.pod_count, resolved.per_pod) == (128, 16, 8)
    assert resolved.degrees == {"data": 2, "tensor": 8, "pipeline": 8, "expert": 4,
                                 "expertPlacement": "intraNode", "microBatches": 32}
    assert resolved.model["experts"] == 8 and resolved.model["layers"] == 64


def test_yaml_dates_are_strings_as_kubectl_sends_them():
    # An unquoted date in YAML is a datetime.date for PyYAML; kubectl turns it into a string.
    body = yaml.safe_load("metadata: {name: job}\nspec:\n  parallelism: {data: 8}\n"
                          "  template: {metadata: {annotations: {since: 2024-01-02}}}\n")
    resolved = rules.parse(body)
    assert resolved.spec.template.metadata.annotations == {"since": "2024-01-02"}


# --- property: parse agrees with the rules of §3 stated independently ------------------------------------

ALLOWED = {"910A": {1, 2, 4, 8}, "910B": set(range(1, 9)), "A3": set(range(2, 17, 2))}
CHIPS_PER_NODE = {"910A": 8, "910B": 8, "A3": 16}


def expected_violations(spec: dict) -> int:
    par, npu, model = spec["parallelism"], spec.get("npu", {}), spec.get("model", {})
    d, t, p, e = (par.get(key, 1) for key in ("data", "tensor", "pipeline", "expert"))
    chip = npu.get("chip", "910B")
    k = npu.get("perPod", CHIPS_PER_NODE[chip])
    mb = par.get("microBatches", p)
    m = {**PRESETS[model.get("preset", "tiny")], **{key: v for key, v in model.items() if key != "preset"}}
    world = d * t * p
    placement_group = k if par.get("expertPlacement") == "intraNode" else d
    checks = [world <= 65536, world % k == 0, k % t == 0, k in ALLOWED[chip], p == 1 or mb >= p,
              m["layers"] % p == 0, m["heads"] % t == 0, m["hidden"] % m["heads"] == 0,
              e == 1 or m["experts"] > 0, e == 1 or m["experts"] == 0 or m["experts"] % e == 0,
              e == 1 or placement_group % e == 0,
              e == 1 or par.get("expertPlacement") != "intraNode" or t % e == 0,
              spec.get("training", {}).get("globalBatchSize", d * mb) % (d * mb) == 0]
    return checks.count(False)


specs = st.fixed_dictionaries(
    {"parallelism": st.fixed_dictionaries({}, optional={
        "data": st.integers(1, 64), "tensor": st.sampled_from([1, 2, 3, 4, 8, 16]),
        "pipeline": st.sampled_from([1, 2, 3, 4, 5, 8]), "expert": st.sampled_from([1, 2, 4, 8]),
        "expertPlacement": st.sampled_from(["dataParallel", "intraNode"]), "microBatches": st.integers(1, 16)})},
    optional={
        "npu": st.fixed_dictionaries({}, optional={"chip": st.sampled_from(["910A", "910B", "A3"]),
                                                   "perPod": st.integers(1, 16)}),
        "model": st.fixed_dictionaries({}, optional={
            "preset": st.sampled_from(["tiny", "gpt-1b", "moe-100b"]), "layers": st.sampled_from([8, 12, 24, 30]),
            "heads": st.sampled_from([4, 8, 12, 16]), "hidden": st.sampled_from([96, 128, 192, 256]),
            "experts": st.sampled_from([0, 2, 4, 6, 8])}),
        "training": st.fixed_dictionaries({}, optional={"globalBatchSize": st.integers(1, 256)}),
    })


@settings(max_examples=300, deadline=None)
@given(specs)
def test_parse_accepts_exactly_the_specs_that_meet_every_rule(spec):
    problems = problems_of(job(spec))
    assert len(problems) == expected_violations(spec), problems
    for problem in problems:
        assert problem.startswith("spec."), problem


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_valid_specs_resolve_every_default(data):
    spec = data.draw(valid_specs())
    assert expected_violations(spec) == 0
    resolved = rules.parse(job(spec))
    par, npu = spec["parallelism"], spec["npu"]
    assert (resolved.data, resolved.tensor, resolved.pipeline) == (par["data"], par["tensor"], par["pipeline"])
    assert resolved.expert == par.get("expert", 1)
    assert resolved.expert_placement == par.get("expertPlacement", "dataParallel")
    assert resolved.micro_batches == par.get("microBatches", par["pipeline"])
    assert resolved.per_pod == npu.get("perPod", CHIPS_PER_NODE[npu["chip"]])
    assert resolved.world_size == resolved.data * resolved.tensor * resolved.pipeline
    assert resolved.world_size == resolved.pod_count * resolved.per_pod
    assert resolved.global_batch_size == spec.get("training", {}).get(
        "globalBatchSize", resolved.data * resolved.micro_batches)
    preset = PRESETS[spec["model"]["preset"]]
    assert resolved.model == {**preset, **spec["model"]}


def test_default_enums_are_plain_strings():
    """Defaults must read like given values: `chip 910B`, never `Chip.ascend_910b`."""
    resolved = rules.parse(job({"parallelism": {"data": 8}}))
    for value in (resolved.chip, resolved.expert_placement, resolved.model["preset"],
                  resolved.spec.run_policy.clean_pod_policy):
        assert type(value) is str, repr(value)
    assert f"{resolved.chip} {resolved.expert_placement}" == "910B dataParallel"
    assert problems_of(job({"parallelism": {"data": 9}, "npu": {"perPod": 9}})) == [
        "spec.npu.perPod=9 is not allowed for chip 910B (allowed: 1, 2, 3, 4, 5, 6, 7, 8)"]


@pytest.mark.parametrize("name", ["9lives", "my.job", "Upper", "trailing-", "under_score"])
def test_names_that_cannot_be_service_names_are_refused(name):
    problems = problems_of(job(spec_with(), name=name))
    assert problems == [f"metadata.name={name!r}: must be at most 50 characters (pod names <job>-a<attempt>-<index> "
                        "must stay valid labels) of lowercase letters, digits and '-', starting with a letter "
                        "(Service names)"]
