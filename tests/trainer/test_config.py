"""The job contract as the trainer reads it (config.py): job.json and the AHJ_* env are validated as given. Each
out-of-range or wrong-type value stops with one line naming the field and the rule — never a coercion, never a
traceback — and a pod started with such a job.json ends with the ConfigError exit code and record."""

from __future__ import annotations

import json
import os

import pytest

from ascend_hybrid_trainer import defaults, failures
from ascend_hybrid_trainer.config import ConfigError, EnvSettings, load_run_config, parse_job, read_json
from support.trainer_harness import TRAINER, ProcessSet

OUT_OF_RANGE = [
    ({"parallelism": {"data": 0}}, "parallelism.data=0: must be >= 1"),
    ({"parallelism": {"tensor": -2}}, "parallelism.tensor=-2: must be >= 1"),
    ({"parallelism": {"microBatches": 0}}, "parallelism.microBatches=0: must be >= 1"),
    ({"parallelism": {"virtualPipelineStages": 0}}, "parallelism.virtualPipelineStages=0: must be >= 1"),
    ({"training": {"steps": 0}}, "training.steps=0: must be >= 1"),
    ({"training": {"seqLength": 0}}, "training.seqLength=0: must be >= 1"),
    ({"training": {"globalBatchSize": 0}}, "training.globalBatchSize=0: must be >= 1"),
    ({"training": {"learningRate": 0.0}}, "training.learningRate=0.0: must be > 0"),
    ({"training": {"learningRate": float("inf")}}, "training.learningRate=inf: must be a finite number"),
    ({"training": {"learningRate": float("nan")}}, "training.learningRate=nan: must be a finite number"),
    ({"training": {"seed": -1}}, "training.seed=-1: must be >= 0"),
    ({"training": {"steps": 2**63}}, "training.steps=9223372036854775808: must fit in a signed 64-bit integer"),
    ({"training": {"gradientClipNorm": -1.0}}, "training.gradientClipNorm=-1.0: must be >= 0"),
    ({"training": {"divergenceLossFactor": 0.5}}, "training.divergenceLossFactor=0.5: must be 0 (off) or greater "
                                                  "than 1"),
    ({"training": {"divergenceGradFactor": 1}}, "training.divergenceGradFactor=1: must be 0 (off) or greater than 1"),
    ({"training": {"checkpoint": {"everySteps": 0}}}, "training.checkpoint.everySteps=0: must be an integer >= 1 or auto"),
    ({"training": {"checkpoint": {"everySteps": "often"}}},
     "training.checkpoint.everySteps='often': must be an integer >= 1 or auto"),
    ({"model": {"layers": 0}}, "model.layers=0: must be >= 1"),
    ({"model": {"kvHeads": 0}}, "model.kvHeads=0: must be >= 1"),
    ({"model": {"experts": -1}}, "model.experts=-1: must be >= 0"),
    ({"worldSize": 0}, "worldSize=0: must be >= 1"),
]
WRONG_TYPE = [
    ({"parallelism": {"data": "2"}}, "parallelism.data='2': must be an integer"),
    ({"parallelism": {"data": 2.0}}, "parallelism.data=2.0: must be an integer"),
    ({"parallelism": {"data": True}}, "parallelism.data=True: must be an integer"),
    ({"training": {"steps": "1000"}}, "training.steps='1000': must be an integer"),
    ({"training": {"learningRate": "1e-3"}}, "training.learningRate='1e-3': must be a number"),
    ({"training": {"optimizerShard": 1}}, "training.optimizerShard=1: must be true or false"),
    ({"training": {"flashAttention": "yes"}}, "training.flashAttention='yes': must be true or false"),
    ({"training": {"recompute": "partial"}}, "training.recompute='partial': must be one of none, selective, full, "
                                             "true or false"),
    ({"training": {"recompute": 1}}, "training.recompute=1: must be one of none, selective, full, true or false"),
    ({"parallelism": {"expertPlacement": "anywhere"}}, "parallelism.expertPlacement='anywhere': must be one of "
                                                       "'dataParallel' or 'intraNode'"),
    ({"model": {"preset": "gpt-7b"}}, "model.preset='gpt-7b': must be one of 'tiny', 'gpt-1b', 'moe-100b' or "
                                      "'custom'"),
    ({"model": {"ffnType": "relu"}}, "model.ffnType='relu': must be one of 'gelu' or 'swiglu'"),
    ({"model": {"hidden": [128]}}, "model.hidden=[128]: must be an integer"),
    ({"model": 3}, "model=3: must be an object"),
    ({"training": {"checkpoint": "every 5"}}, "training.checkpoint='every 5': must be an object"),
    ({"training": {"stpes": 10}}, "training.stpes=10: not a setting of the job contract this trainer implements"),
]
RULES = [
    ({"model": {"kvHeads": 3}}, "model.kvHeads=3 must divide model.heads=8"),
    ({"parallelism": {"tensor": 2}, "model": {"kvHeads": 1}}, "model.kvHeads=1 must be divisible by "
                                                              "parallelism.tensor=2"),
    ({"parallelism": {"virtualPipelineStages": 2}}, "parallelism.virtualPipelineStages=2 needs parallelism.pipeline "
                                                    "> 1"),
    ({"parallelism": {"pipeline": 4, "virtualPipelineStages": 4}}, "model.layers=24 must be divisible by "
                                                                   "parallelism.pipeline=4 x virtualPipelineStages=4"),
    ({"parallelism": {"pipeline": 4, "microBatches": 2}}, "parallelism.microBatches=2 must be >= "
                                                          "parallelism.pipeline=4"),
    ({"parallelism": {"data": 2}, "worldSize": 4}, "worldSize=4 but parallelism data x tensor x pipeline = 2"),
    ({"model": {"preset": "custom", "heads": 4}}, "model: preset custom needs layers, hidden, vocab"),
]


@pytest.mark.parametrize("job, message", OUT_OF_RANGE + WRONG_TYPE + RULES,
                         ids=[m.split(":")[0].split(" ")[0] for _, m in OUT_OF_RANGE + WRONG_TYPE + RULES])
def test_a_bad_value_stops_with_one_line_naming_the_field_and_the_rule(job, message):
    with pytest.raises(ConfigError) as refused:
        parse_job(job)
    text = str(refused.value)
    assert message in text, text
    assert "\n" not in text


def test_every_error_of_a_document_is_on_the_one_line():
    with pytest.raises(ConfigError) as refused:
        parse_job({"parallelism": {"data": 0}, "training": {"steps": "ten"}})
    assert str(refused.value) == "parallelism.data=0: must be >= 1; training.steps='ten': must be an integer"


def test_nothing_is_coerced_and_null_means_absent():
    config = parse_job({"parallelism": {"data": 2, "microBatches": None}, "model": {"topK": None},
                        "training": {"learningRate": 1, "globalBatchSize": None}})
    assert config.parallelism.micro_batches == 1 and config.training.global_batch_size == 2
    assert isinstance(config.training.learning_rate, float) and config.training.learning_rate == 1.0


def test_the_job_json_reader_refuses_what_python_json_accepts():
    for text, message in [('{"training": {"steps": 1, "steps": 2}}', "duplicate key 'steps'"),
                          ('{"training": {"learningRate": Infinity}}', "Infinity is not JSON"),
                          ('{"training": {"learningRate": NaN}}', "NaN is not JSON"),
                          ('{"training": ', "not valid JSON")]:
        with pytest.raises(ConfigError, match=message):
            read_json(text, "job.json")


@pytest.mark.parametrize("name, value, message", [
    ("AHJ_METRICS_PORT", "http", "AHJ_METRICS_PORT='http': must be an integer"),
    ("AHJ_METRICS_PORT", "70000", "AHJ_METRICS_PORT='70000': must be <= 65535"),
    ("AHJ_LOG_EVERY_STEPS", "0", "AHJ_LOG_EVERY_STEPS='0': must be >= 1"),
    ("AHJ_CHECKPOINT_KEEP", "-1", "AHJ_CHECKPOINT_KEEP='-1': must be >= 0"),
    ("AHJ_RANKTABLE_TIMEOUT_SECONDS", "inf", "AHJ_RANKTABLE_TIMEOUT_SECONDS='inf': must be a finite number"),
    ("AHJ_STOP_GRACE_SECONDS", "soon", "AHJ_STOP_GRACE_SECONDS='soon': must be a number"),
    ("AHJ_LAUNCH_MODE", "mpirun", "AHJ_LAUNCH_MODE='mpirun': must be one of 'dynamic' or 'ranktable'"),
    ("AHJ_PARALLEL", '{"data": "2"}', "AHJ_PARALLEL.data='2': must be an integer"),
    ("AHJ_PARALLEL", '{"data": 2', "AHJ_PARALLEL: not valid JSON"),
])
def test_a_bad_environment_value_is_refused_naming_the_variable(name, value, message):
    with pytest.raises(ConfigError) as refused:
        load_run_config({name: value})
    assert message in str(refused.value)


def test_the_environment_defaults_come_from_the_one_table():
    settings = EnvSettings.from_env({"AHJ_METRICS_PORT": "", "PATH": "/usr/bin"})
    assert (settings.metrics_port, settings.log_every_steps, settings.checkpoint_keep,
            settings.ranktable_timeout_seconds, settings.stop_grace_seconds, settings.termination_log) == tuple(
        defaults.ENV[key] for key in ("AHJ_METRICS_PORT", "AHJ_LOG_EVERY_STEPS", "AHJ_CHECKPOINT_KEEP",
                                      "AHJ_RANKTABLE_TIMEOUT_SECONDS", "AHJ_STOP_GRACE_SECONDS",
                                      "AHJ_TERMINATION_LOG"))
    config = load_run_config({"AHJ_METRICS_PORT": "9500", "AHJ_CHECKPOINT_KEEP": "0"})
    assert (config.metrics_port, config.checkpoint_keep) == (9500, 0)


@pytest.mark.parametrize("job, message", [
    ({"training": {"steps": 0}}, "training.steps=0: must be >= 1"),
    ({"parallelism": {"data": "1"}}, "parallelism.data='1': must be an integer"),
    # json.dumps writes a non-finite float as `Infinity`, which is not JSON: refused by the reader
    ({"training": {"learningRate": 1e400}}, "job.json: Infinity is not JSON (a non-finite number); give a finite "
                                            "number"),
])
def test_a_pod_with_a_bad_job_json_ends_with_config_error_and_no_traceback(tmp_path, job, message):
    """The launcher as the pod runs it, before anything starts: exit code 2, one line, the termination record."""
    (tmp_path / "job.json").write_text(json.dumps(job))
    (tmp_path / "hccl.json").write_text("{}")
    env = {**os.environ, "MS_LOCAL_WORKER": "1", "MS_NODE_RANK": "0", "RANK_SIZE": "1", "RANK_START": "0",
           "RANK_TABLE_FILE": str(tmp_path / "hccl.json"), "AHJ_JOB_CONFIG": str(tmp_path / "job.json"),
           "AHJ_TERMINATION_LOG": str(tmp_path / "termination-log"), "AHJ_DEVICE_TARGET": "CPU"}
    processes = ProcessSet()
    launcher = processes.start(TRAINER + ["launch"], env)
    processes.wait_all(60)
    stderr = launcher.text("stderr")
    assert launcher.process.returncode == failures.EXIT_CODES[failures.Cause.CONFIG_ERROR] == 2, stderr
    assert "Traceback" not in stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("[launcher pod 0] error: ") and last.endswith(message), last
    record = json.loads((tmp_path / "termination-log").read_text())
    assert record == {"cause": "ConfigError", "rank": 0, "step": 0, "detail": last.removeprefix(
        "[launcher pod 0] error: ")}
