"""Hypothesis strategies shared by the tests: job specs built from the rules (valid by construction, not filtered)."""

from __future__ import annotations

from math import gcd

from hypothesis import strategies as st

from ascend_hybrid.contracts.chips import CHIP_NAMES, CHIPS
from ascend_hybrid.spec.causes import ACTIONS, CAUSES, RESTART_AVOIDING_NODE, SOFTWARE_CAUSES


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@st.composite
def valid_specs(draw) -> dict:
    """Specs that meet every rule of §3, built from the rules (not filtered), with optional fields left out."""
    chip = draw(st.sampled_from(CHIP_NAMES))
    per_pod = draw(st.sampled_from(CHIPS[chip].allowed_per_pod))
    tensor = draw(st.sampled_from(_divisors(per_pod)))
    pipeline = draw(st.sampled_from([1, 2, 3, 4, 8]))
    step = per_pod // gcd(per_pod, tensor * pipeline)
    data = step * draw(st.integers(1, 4))
    placement = draw(st.sampled_from(["dataParallel", "intraNode"]))
    expert = draw(st.sampled_from(_divisors(tensor if placement == "intraNode" else data)))  # intraNode: inside TP
    micro = draw(st.one_of(st.none(), st.integers(pipeline, pipeline + 6)))
    parallelism = {"data": data, "tensor": tensor, "pipeline": pipeline}
    if expert > 1 or draw(st.booleans()):
        parallelism["expert"] = expert
    if placement == "intraNode" or draw(st.booleans()):
        parallelism["expertPlacement"] = placement
    if micro is not None:
        parallelism["microBatches"] = micro
    heads = tensor * draw(st.sampled_from([1, 2, 3]))
    model = {"preset": draw(st.sampled_from(["tiny", "gpt-1b", "moe-100b"])), "layers": pipeline * draw(st.integers(1, 3)),
             "heads": heads, "hidden": heads * draw(st.sampled_from([8, 16])),
             "experts": expert * draw(st.integers(1 if expert > 1 else 0, 2))}
    if model["experts"]:  # each token goes to topK distinct experts
        model["topK"] = draw(st.integers(1, model["experts"]))
    spec: dict = {"parallelism": parallelism, "model": model}
    npu = {"chip": chip}
    if per_pod != CHIPS[chip].chips_per_node or draw(st.booleans()):
        npu["perPod"] = per_pod
    spec["npu"] = npu
    if draw(st.booleans()):
        spec["training"] = {"globalBatchSize": data * (micro or pipeline) * draw(st.integers(1, 3))}
    if draw(st.booleans()):
        spec["runPolicy"] = {"failurePolicy": {"rules": draw(st.lists(failure_policy_rules(), max_size=4))}}
    return spec


@st.composite
def failure_policy_rules(draw) -> dict:
    """One valid rule: exactly one matcher, and no node avoided for the job's own failures."""
    action = draw(st.sampled_from(ACTIONS))
    kind = draw(st.sampled_from(["causes", "exitCodes", "podConditions"]))
    if kind == "causes":
        allowed = [c for c in CAUSES if action != RESTART_AVOIDING_NODE or c not in SOFTWARE_CAUSES]
        matcher = draw(st.lists(st.sampled_from(allowed), min_size=1, max_size=3, unique=True))
    elif kind == "exitCodes":
        matcher = draw(st.lists(st.integers(0, 255), min_size=1, max_size=4, unique=True))
    else:
        matcher = draw(st.lists(st.sampled_from(["DisruptionTarget", "Ready", "PodReadyToStartContainers"]),
                                min_size=1, max_size=2, unique=True))
    return {kind: matcher, "action": action}
