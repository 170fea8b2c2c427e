"""The model and training fields of the API (kvHeads, ffnType, recompute kinds, sequenceParallel, flashAttention,
virtualPipelineStages): their rules in Python and CEL, their CRD schema, job.json, and the trainer refusing what it
does not implement yet."""

from __future__ import annotations

import copy

import celpy
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_hybrid.gang import render
from ascend_hybrid.spec import crd, rules
from ascend_hybrid.spec.api import AscendHybridJobSpec
from ascend_hybrid_trainer.config import ConfigError, parse_job
from support.builders import JobBuilder, apply_defaults

BASE = {"parallelism": {"data": 2, "tensor": 4}, "npu": {"perPod": 8}}


def job(spec: dict) -> dict:
    """A manifest as written, before the apiserver gives it a namespace."""
    return JobBuilder("job").namespace(None).spec(spec).build()


def problems_of(spec: dict) -> list[str]:
    try:
        rules.parse(job(spec))
    except rules.SpecError as error:
        return error.problems
    return []


def with_(**sections) -> dict:
    spec = copy.deepcopy(BASE)
    for key, value in sections.items():
        spec[key] = {**spec.get(key, {}), **value}
    return spec


CASES = [
    ("kvHeads-divides-heads", with_(parallelism={"data": 8, "tensor": 1}, model={"kvHeads": 3}),
     "spec.model.kvHeads=3 must divide spec.model.heads=8",
     with_(parallelism={"data": 8, "tensor": 1}, model={"kvHeads": 2})),
    ("kvHeads-by-tensor", with_(model={"kvHeads": 2}),
     "spec.model.kvHeads=2 must be divisible by spec.parallelism.tensor=4", with_(model={"kvHeads": 8})),
    ("kvHeads-min", with_(model={"kvHeads": 0}), "spec.model.kvHeads=0 must be ≥ 1", with_(model={"kvHeads": 4})),
    ("ffnType-enum", with_(model={"ffnType": "relu"}),
     "spec.model.ffnType='relu' must be one of 'gelu' or 'swiglu'", with_(model={"ffnType": "swiglu"})),
    ("recompute-enum", with_(training={"recompute": "partial"}),
     "spec.training.recompute='partial' must be one of 'none', 'selective' or 'full'",
     with_(training={"recompute": "selective"})),
    ("virtual-needs-pipeline", with_(parallelism={"virtualPipelineStages": 2}),
     ("spec.parallelism.virtualPipelineStages=2 needs spec.parallelism.pipeline > 1 (interleaving splits each "
      "pipeline stage into model chunks)"), with_(parallelism={"virtualPipelineStages": 2, "pipeline": 2})),
    ("layers-by-chunks", with_(parallelism={"pipeline": 4, "virtualPipelineStages": 4}),
     "spec.model.layers=24 must be divisible by pipeline×virtualPipelineStages=16",
     with_(parallelism={"pipeline": 4, "virtualPipelineStages": 3})),
    ("virtual-min", with_(parallelism={"virtualPipelineStages": 0}),
     "spec.parallelism.virtualPipelineStages=0 must be ≥ 1", BASE),
    ("sequenceParallel-bool", with_(training={"sequenceParallel": "yes"}),
     "spec.training.sequenceParallel='yes': must be a boolean", with_(training={"sequenceParallel": True})),
]


@pytest.mark.parametrize("failing, expected, passing", [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_each_new_rule_fails_with_one_clear_message_and_passes_when_met(failing, expected, passing):
    assert problems_of(failing) == [expected]
    assert problems_of(passing) == []


@pytest.mark.parametrize("given, kind", [(True, "full"), (False, "none"), ("none", "none"),
                                         ("selective", "selective"), ("full", "full")])
def test_recompute_takes_the_old_boolean_and_the_new_kinds(given, kind):
    resolved = rules.parse(job(with_(training={"recompute": given})))
    assert resolved.spec.training.recompute == kind
    assert render.job_config(resolved)["training"]["recompute"] == kind


def test_defaults_and_job_json():
    resolved = rules.parse(job(BASE))
    training = resolved.spec.training
    assert (training.recompute, training.sequence_parallel, training.flash_attention) == ("none", False, False)
    assert resolved.virtual_pipeline_stages == 1
    config = render.job_config(resolved)
    # Jobs that do not interleave render exactly the degrees they rendered before.
    assert "virtualPipelineStages" not in config["parallelism"]
    assert "kvHeads" not in config["model"] and "ffnType" not in config["model"]
    interleaved = rules.parse(job(with_(parallelism={"pipeline": 2, "virtualPipelineStages": 3},
                                        model={"kvHeads": 4, "ffnType": "swiglu"},
                                        training={"sequenceParallel": True, "flashAttention": True})))
    config = render.job_config(interleaved)
    assert config["parallelism"]["virtualPipelineStages"] == 3
    assert (config["model"]["kvHeads"], config["model"]["ffnType"]) == (4, "swiglu")
    assert config["training"]["sequenceParallel"] is True and config["training"]["flashAttention"] is True


# --- CRD ---------------------------------------------------------------------------------------------------

SPEC = crd.build()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]


def test_recompute_schema_takes_booleans_and_kinds_and_no_cel_reads_it():
    node = SPEC["properties"]["training"]["properties"]["recompute"]
    # Untyped + preserve-unknown-fields is structural (apiextensions ValidateStructural); the enum still refuses
    # anything else, and CEL cannot see such a node, so no rule may name it.
    assert "type" not in node and node["x-kubernetes-preserve-unknown-fields"] is True
    assert node["enum"] == ["none", "selective", "full", True, False]
    assert node["default"] == "none"
    assert not any("recompute" in v["rule"] for v in SPEC["x-kubernetes-validations"])


def test_new_fields_schema():
    model, par = SPEC["properties"]["model"]["properties"], SPEC["properties"]["parallelism"]["properties"]
    training = SPEC["properties"]["training"]["properties"]
    assert model["kvHeads"]["type"] == "integer" and model["kvHeads"]["minimum"] == 1
    assert model["ffnType"]["enum"] == ["gelu", "swiglu"] and "default" not in model["ffnType"]
    assert par["virtualPipelineStages"]["type"] == "integer" and "default" not in par["virtualPipelineStages"]
    for flag in ("sequenceParallel", "flashAttention"):
        assert (training[flag]["type"], training[flag]["default"]) == ("boolean", False)


def _cel_format(template, arguments):
    pending = list(arguments)

    def verb(text: str) -> str:
        return str(int(pending.pop(0))) if text == "d" else str(pending.pop(0))

    out, i = [], 0
    template = str(template)
    while i < len(template):
        if template[i] == "%":
            out.append(verb(template[i + 1]))
            i += 2
        else:
            out.append(template[i])
            i += 1
    return celpy.celtypes.StringType("".join(out))


ENV = celpy.Environment()
CHECKED = [(rule, v) for rule, v in zip([r for r in rules.RULES if r.cel], SPEC["x-kubernetes-validations"])]
PROGRAMS = [(rule, ENV.program(ENV.compile(v["rule"]), functions={"format": _cel_format}),
             ENV.program(ENV.compile(v["messageExpression"]), functions={"format": _cel_format}))
            for rule, v in CHECKED]

new_field_specs = st.fixed_dictionaries({
    "parallelism": st.fixed_dictionaries({"data": st.just(2)}, optional={
        "tensor": st.sampled_from([1, 2, 4, 8]), "pipeline": st.sampled_from([1, 2, 3, 4]),
        "virtualPipelineStages": st.sampled_from([1, 2, 3, 4, 6])}),
    "npu": st.just({"perPod": 8}),
    "model": st.fixed_dictionaries({}, optional={
        "preset": st.sampled_from(["tiny", "gpt-1b", "moe-100b", "custom"]), "heads": st.sampled_from([8, 12, 16]),
        "kvHeads": st.sampled_from([1, 2, 3, 4, 8]), "layers": st.sampled_from([12, 24, 36])}),
})


@settings(max_examples=200, deadline=None)
@given(spec=new_field_specs)
def test_cel_and_python_agree_on_the_new_fields(spec):
    activation = {"self": celpy.json_to_cel(apply_defaults(SPEC, spec))}
    resolved = rules.resolve("job", AscendHybridJobSpec.model_validate(spec))
    for rule, check, message in PROGRAMS:
        expected = rule.check(resolved)
        verdict = check.evaluate(activation)
        assert bool(verdict) == (expected is None), (rule.check, spec)
        if expected is not None:
            assert str(message.evaluate(activation)) == expected


# --- trainer ----------------------------------------------------------------------------------------------

TRAINER_JOB = {"parallelism": {"data": 2}, "model": {"preset": "tiny"}, "training": {}}


@pytest.mark.parametrize("section, key, value", [
    ("model", "ffnType", "swiglu"), ("model", "kvHeads", 4), ("training", "sequenceParallel", True),
    ("training", "flashAttention", True), ("training", "recompute", "selective"),
])
def test_trainer_reads_every_field_the_planner_can_choose(section, key, value):
    raw = copy.deepcopy(TRAINER_JOB)
    raw[section][key] = value
    config = parse_job(raw)
    resolved = {"ffnType": config.model.ffn_type, "kvHeads": config.model.kv_heads,
                "sequenceParallel": config.training.sequence_parallel,
                "flashAttention": config.training.flash_attention, "recompute": config.training.recompute}
    assert resolved[key] == value


@pytest.mark.parametrize("change, refusal", [
    ({"training": {"flashAttention": True}}, "training.flashAttention=true: flash_attention_score"),
    ({"parallelism": {"pipeline": 2, "virtualPipelineStages": 2}, "model": {"layers": 4}},
     "parallelism pipeline=2: the CPU backend can run only data parallel"),
    ({"parallelism": {"tensor": 2}, "training": {"sequenceParallel": True}},
     "parallelism tensor=2: the CPU backend can run only data parallel"),
])
def test_trainer_refuses_on_cpu_what_the_cpu_cannot_run_naming_the_field(change, refusal):
    from ascend_hybrid_trainer.strategy import validate_run

    raw = copy.deepcopy(TRAINER_JOB)
    for section, values in change.items():
        raw[section] = {**raw[section], **values}
    config = parse_job(raw)
    world = config.parallelism.world_size
    with pytest.raises(ConfigError, match=refusal.replace("(", r"\(")):
        validate_run(config.parallelism, config.model, config.training, world, "CPU", "dynamic")
    validate_run(config.parallelism, config.model, config.training, world, "Ascend", "dynamic")


@pytest.mark.parametrize("section, key, value", [
    ("model", "ffnType", "gelu"), ("model", "kvHeads", 8), ("training", "sequenceParallel", False),
    ("training", "flashAttention", False), ("parallelism", "virtualPipelineStages", 1),
])
def test_trainer_accepts_the_defaults_written_out(section, key, value):
    raw = copy.deepcopy(TRAINER_JOB)
    raw[section][key] = value
    parse_job(raw)


@pytest.mark.parametrize("value, kind", [(True, "full"), (False, "none"), ("full", "full"), ("none", "none"),
                                         ("selective", "selective")])
def test_trainer_reads_recompute_as_boolean_or_kind(value, kind):
    assert parse_job({**TRAINER_JOB, "training": {"recompute": value}}).training.recompute == kind


def test_trainer_runs_the_job_json_the_operator_renders_for_the_default_fields(examples):
    import yaml

    [body] = [d for d in yaml.safe_load_all((examples / "seed-moe-128.yaml").read_text()) if d]
    config = parse_job(render.job_config(rules.parse(body)))
    assert config.training.recompute == "full" and config.parallelism.pipeline == 8
