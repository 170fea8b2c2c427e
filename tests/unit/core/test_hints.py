"""What to change, per cause (hints.py, pure), with the job's own numbers and the planner's prediction."""

from __future__ import annotations

import pytest

from ascend_hybrid.diagnosis.failures import Failure
from ascend_hybrid.diagnosis.hints import hint, memory_prediction, prediction
from ascend_hybrid.planner.hardware import GIB
from ascend_hybrid.spec.causes import CAUSES
from ascend_hybrid.spec.rules import parse
from support.builders import job_body

JOB = parse(job_body({"parallelism": {"data": 2, "tensor": 4}, "npu": {"perPod": 8},
                      "hccl": {"connectTimeoutSeconds": 240}, "training": {"learningRate": 1e6}}, name="big"))


def failure(cause, **fields):
    return Failure(cause, "detail", **{"pod": "big-a1-1", "node": "node-3", **fields})


@pytest.mark.parametrize("cause, words", [
    ("HCCLConnectTimeout", ["connectTimeoutSeconds=240", "rings-config-big", "hccn_tool", "without node-3"]),
    ("HCCLExecTimeout", ["execTimeoutSeconds=600", "without node-3"]),
    ("DeviceOutOfMemory", ["training.recompute", "microBatches (now 1)", "pipeline (now 1)", "optimizerShard",
                           "the planner's prediction was"]),
    ("NumericalDivergence", ["at step 2", "learningRate (now 1e+06)", "gradientClipNorm (now 0", "grad_norm"]),
    ("RankTableTimeout", ["rings-config-big", "RankTableReady"]),
    ("ConfigError", ["ascend-hybrid[trainer]", "no node is to blame"]),
    ("DataError", ["seqLength", "vocab"]),
    ("PeerFailed", ["kubectl logs -l hybrid.ascend.dev/job=big"]),
    ("NodeNotReady", ["node-3", "status.disruptions"]),
    ("ChipUnhealthy", ["chip 5 of node-3", "mindx-dl-deviceinfo-node-3"]),
    ("PodDeleted", ["eviction"]),
    ("SchedServiceChanged", ["big-sched", "MS_SCHED_HOST"]),
    ("Unknown", ["kubectl logs big-a1-1", "failurePolicy"]),
])
def test_each_cause_says_what_to_change(cause, words):
    text = hint(failure(cause, step=2, chips=(5,)), JOB, prediction(JOB))
    missing = [word for word in words if word not in text]
    assert not missing, text


def test_every_cause_has_its_own_hint():
    texts = {cause: hint(failure(cause), JOB) for cause in CAUSES}
    assert len(set(texts.values())) == len(CAUSES)


def test_the_memory_prediction_is_the_planners_for_this_strategy():
    evaluation = prediction(JOB)
    assert evaluation is not None and evaluation.strategy.tensor == 4 and evaluation.strategy.data == 2
    text = memory_prediction(JOB, evaluation)
    assert f"{evaluation.memory.total / GIB:.1f} GiB of {evaluation.usable / GIB:.1f} GiB usable per 910B NPU" in text
    huge = parse(job_body({"parallelism": {"data": 8}, "npu": {"perPod": 8}, "model": {"preset": "moe-100b"}}))
    assert "it does not fit" in memory_prediction(huge, prediction(huge))
    assert "could not evaluate" in memory_prediction(JOB, None)


def test_a_host_oom_kill_points_at_the_memory_limit_not_at_the_npu():
    text = hint(failure("DeviceOutOfMemory", reason="OOMKilled"), JOB, prediction(JOB))
    assert "spec.template.resources.limits.memory" in text and "planner" not in text
