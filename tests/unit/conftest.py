"""Shared builders for the planning-core unit tests: job bodies, pods as the API returns them, CRD defaulting.

Helpers are handed out as session-scoped fixtures (they are pure functions), so hypothesis tests can use them.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import strategies as st

from ascend_hybrid.names import ATTEMPT_LABEL, JOB_LABEL, POD_INDEX_LABEL
from ascend_hybrid.ranktable import DEVICE_ANNOTATION

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = REPO_ROOT / "deploy" / "examples"
API_VERSION = "hybrid.ascend.dev/v1alpha1"


def job_body(spec: dict | None = None, name: str = "job", **metadata: Any) -> dict:
    """A whole AscendHybridJob object; the default spec is valid (DP 2 × TP 4 on one 8-NPU 910B pod)."""
    if spec is None:
        spec = {"parallelism": {"data": 2, "tensor": 4}, "npu": {"perPod": 8}}
    return {"apiVersion": API_VERSION, "kind": "AscendHybridJob",
            "metadata": {"name": name, "namespace": "default", **metadata}, "spec": copy.deepcopy(spec)}


def pod_object(job: str, index: int, per_pod: int, *, attempt: int = 1, phase: str = "Running",
               pod_ip: str | None = "auto", host_ip: str | None = "auto", device_ids: list[int] | None = None,
               annotate: bool = True, node: str | None = None, super_device_ids: list[int] | None = None,
               annotation: str | None = None, index_label: Any = "auto") -> dict:
    """A pod of a job as `kubectl get pod -o yaml` shows it, with the device plugin's annotation.

    Addresses are loopback (the simulated cluster never uses private ranges). Device ids default to the
    highest `per_pod` chips of a 16-chip node, so they differ from local ranks.
    """
    ids = list(device_ids) if device_ids is not None else list(range(16 - per_pod, 16))
    host = f"127.0.{index // 2}.{index % 2 + 1}" if host_ip == "auto" else host_ip
    labels = {JOB_LABEL: job, ATTEMPT_LABEL: str(attempt)}
    if index_label == "auto":
        labels[POD_INDEX_LABEL] = str(index)
    elif index_label is not None:
        labels[POD_INDEX_LABEL] = index_label
    annotations = {}
    if annotate:
        devices = []
        for position, device_id in enumerate(ids):
            device = {"device_id": str(device_id), "device_ip": f"127.100.{index}.{device_id}"}
            if super_device_ids is not None:
                device["super_device_id"] = str(super_device_ids[position])
            devices.append(device)
        annotations[DEVICE_ANNOTATION] = annotation if annotation is not None else json.dumps(
            {"pod_name": str(index), "server_id": host, "devices": devices})
    status: dict[str, Any] = {"phase": phase}
    if phase == "Running":
        if host is not None:
            status["hostIP"] = host
        if pod_ip is not None:
            status["podIP"] = f"127.1.0.{index + 1}" if pod_ip == "auto" else pod_ip
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{job}-a{attempt}-{index}", "namespace": "default", "labels": labels,
                         "annotations": annotations},
            "spec": {"nodeName": node or f"node-{index}", "containers": [{"name": "ascend", "image": "x"}]},
            "status": status}


def apply_defaults(schema: dict, value: Any) -> Any:
    """Structural defaulting as the apiserver does it: absent properties take their default, recursively."""
    if not isinstance(value, dict) or schema.get("type") != "object":
        if isinstance(value, list) and "items" in schema:
            return [apply_defaults(schema["items"], item) for item in value]
        return value
    result = dict(value)
    for name, child in schema.get("properties", {}).items():
        if name not in result and "default" in child:
            result[name] = copy.deepcopy(child["default"])
        if name in result:
            result[name] = apply_defaults(child, result[name])
    return result


@pytest.fixture(scope="session")
def make_job():
    return job_body


@pytest.fixture(scope="session")
def make_pod():
    return pod_object


@pytest.fixture(scope="session")
def defaulted():
    return apply_defaults


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def examples() -> Path:
    return EXAMPLES


@pytest.fixture(scope="session")
def cli_path() -> Path:
    """The installed console script of the interpreter running the tests."""
    script = Path(sys.executable).parent / "ascend-hybrid"
    assert script.exists(), f"{script} missing: install the project (pip install -e .[dev])"
    return script


ALLOWED_PER_POD = {"910A": (1, 2, 4, 8), "910B": tuple(range(1, 9)), "A3": tuple(range(2, 17, 2))}


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@st.composite
def _valid_specs(draw) -> dict:
    """Specs that meet every rule of §3, built from the rules (not filtered), with optional fields left out."""
    from math import gcd

    chip = draw(st.sampled_from(["910A", "910B", "A3"]))
    per_pod = draw(st.sampled_from(ALLOWED_PER_POD[chip]))
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
    spec: dict = {"parallelism": parallelism, "model": model}
    npu = {"chip": chip}
    if per_pod != {"910A": 8, "910B": 8, "A3": 16}[chip] or draw(st.booleans()):
        npu["perPod"] = per_pod
    spec["npu"] = npu
    if draw(st.booleans()):
        spec["training"] = {"globalBatchSize": data * (micro or pipeline) * draw(st.integers(1, 3))}
    return spec


@pytest.fixture(scope="session")
def valid_specs():
    return _valid_specs()
