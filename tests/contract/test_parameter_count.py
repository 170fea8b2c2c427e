"""Three counts of the same model must agree: the parameters the MindSpore model really builds (model.py, on CPU),
the trainer's pure count (parameters.parameter_count) and the operator's planner (Workload.total_parameters, which
prices memory and time). For every preset and for custom grouped-query-attention + SwiGLU models.

The presets are built under mindspore.nn.utils.no_init_parameters: every Parameter gets its real shape but no
data (gpt-1b would take ~80 s and 5.8 GB to initialise, moe-100b 460 GB). The tiny preset and the small custom
models are also built with their data, which shows the lazy build counts what a training run holds.
"""

from __future__ import annotations

import time

import pytest

from ascend_hybrid.planner.workload import Workload
from ascend_hybrid.spec import rules
from ascend_hybrid_trainer.config import parse_job
from ascend_hybrid_trainer.parameters import parameter_breakdown, parameter_count
from support.builders import job_body

pytestmark = pytest.mark.trainer

SEQ_LENGTH = 256
MODELS = {
    "tiny": {"preset": "tiny"},
    "gpt-1b": {"preset": "gpt-1b"},
    "moe-100b": {"preset": "moe-100b"},
    "gpt-1b-gqa-swiglu": {"preset": "gpt-1b", "kvHeads": 4, "ffnType": "swiglu", "ffnHidden": 5504},
    "moe-100b-gqa-swiglu": {"preset": "moe-100b", "kvHeads": 8, "ffnType": "swiglu"},
    "custom-gqa-swiglu": {"preset": "custom", "layers": 3, "hidden": 96, "heads": 12, "kvHeads": 3,
                          "ffnType": "swiglu", "ffnHidden": 160, "vocab": 300},
    "custom-moe-swiglu": {"preset": "custom", "layers": 2, "hidden": 64, "heads": 4, "kvHeads": 2,
                          "ffnType": "swiglu", "ffnHidden": 96, "vocab": 128, "experts": 4, "topK": 2},
}
MATERIALISED = ("tiny", "custom-gqa-swiglu", "custom-moe-swiglu")


def built_count(model: dict, lazy: bool) -> tuple[int, float, bool]:
    """(parameters of the real MindSpore model, seconds to build it, whether every parameter holds data)."""
    import mindspore as ms
    from mindspore.nn.utils import no_init_parameters

    from ascend_hybrid_trainer.model import GPTWithLoss
    from ascend_hybrid_trainer.strategy import plan_parallel

    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_device("CPU")
    config = parse_job({"model": model, "training": {"seqLength": SEQ_LENGTH}})
    plan = plan_parallel(config.parallelism, config.model, config.training)
    started = time.perf_counter()
    if lazy:
        with no_init_parameters():
            network = GPTWithLoss(config.model, plan, SEQ_LENGTH, micro_batch=1)
    else:
        network = GPTWithLoss(config.model, plan, SEQ_LENGTH, micro_batch=1)
    seconds = time.perf_counter() - started
    params = network.trainable_params()
    return sum(param.size for param in params), seconds, not any(param.has_init for param in params)


def planner_count(model: dict) -> int:
    spec = {"parallelism": {"data": 1}, "npu": {"perPod": 1}, "model": model, "training": {"seqLength": SEQ_LENGTH}}
    return Workload.from_job(rules.parse(job_body(spec))).total_parameters


@pytest.mark.parametrize("name", MODELS)
def test_the_model_the_planner_and_the_trainer_count_the_same_parameters(name):
    model = MODELS[name]
    config = parse_job({"model": model, "training": {"seqLength": SEQ_LENGTH}})
    real, seconds, materialised = built_count(model, lazy=True)
    ours, planner = parameter_count(config.model, SEQ_LENGTH), planner_count(model)
    print(f"\n{name}: built {real:,} parameters in {seconds:.2f} s (lazy); trainer {ours:,}, planner {planner:,}")
    assert not materialised, "the lazy build initialised the parameters"
    assert real == ours == planner, parameter_breakdown(config.model, SEQ_LENGTH)


@pytest.mark.parametrize("name", MATERIALISED)
def test_a_materialised_build_has_the_same_count_as_the_lazy_one(name):
    real, seconds, materialised = built_count(MODELS[name], lazy=False)
    print(f"\n{name}: built with data in {seconds:.2f} s")
    assert materialised and real == built_count(MODELS[name], lazy=True)[0]


def test_grouped_query_attention_and_swiglu_change_the_count_as_published():
    """planner-reference §1: attention 2h² + 2h²·kv/a, SwiGLU 3·h·ffn (per layer)."""
    base = parse_job({"model": {"preset": "gpt-1b"}}).model
    both = parse_job({"model": MODELS["gpt-1b-gqa-swiglu"]}).model
    h, a, layers = base.hidden, base.heads, base.layers
    per_layer = (2 * h * h + 2 * h * h * 4 // a + 3 * h * 5504) - (4 * h * h + 2 * h * base.ffn_hidden)
    assert parameter_count(both, SEQ_LENGTH) - parameter_count(base, SEQ_LENGTH) == layers * per_layer
