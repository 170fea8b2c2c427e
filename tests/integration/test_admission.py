"""Admission by the real kube-apiserver (1.36) of the simulated cluster: the CRD, with its CEL rules for Kubernetes'
own field rules, is accepted (cost estimates included), refuses each failing case of the rule table with the very
message `ascend-hybrid validate` prints, and admits its passing neighbour. No operator runs here."""

from __future__ import annotations

import copy
import json

import pytest
from kubernetes import client

from ascend_hybrid.contracts.names import GROUP
from ascend_hybrid.spec.api import PLURAL, VERSION
from support.operator_harness import install_crd
from support.rule_cases import RULE_CASES

pytestmark = pytest.mark.integration

# the new rules of the table that CEL checks at admission (the others are Python only: map keys, free-form objects)
CEL_CASES = {"image-empty", "image-whitespace", "image-uppercase", "serviceAccountName", "priorityClassName",
             "schedulerName", "claimName", "queue-name", "topologyTiers-label-key",
             # uneven stages (a list's sum: Kubernetes' CEL lists library), context parallelism, MoE knobs
             "pipelineLayers-per-stage", "pipelineLayers-sum", "pipelineLayers-even-model",
             "pipelineLayers-not-interleaved", "context-world", "context-flash-attention", "context-sequence",
             "capacityFactor-moe-only", "auxLossWeight-moe-only", "slidingWindow-context",
             # annotations the device plugin, Volcano, Kueue and the operator write on the pods
             "annotation-reserved", "annotation-reserved-key",
             # the slowness policy and the checkpoint interval's int-or-auto
             "slowness-shrink-needs-elastic", "checkpoint-every-steps-word", "checkpoint-every-steps-ge-1"}
SCHEMA_CASES = {"imagePullPolicy-enum": "spec.template.imagePullPolicy", "tiers-at-most-16": "spec.scheduling.topologyTiers",
                "seed-32-bit": "spec.training.seed",
                "annotations-at-most-256": "spec.template.metadata.annotations"}


@pytest.fixture(scope="module")
def custom(dev_cluster):
    install_crd(dev_cluster)
    return client.CustomObjectsApi(dev_cluster.api)


def create(custom, namespace: str, name: str, spec: dict) -> None:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "AscendHybridJob", "metadata": {"name": name},
            "spec": copy.deepcopy(spec)}
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)


def refusal(custom, namespace: str, name: str, spec: dict) -> client.ApiException:
    with pytest.raises(client.ApiException) as refused:
        create(custom, namespace, name, spec)
    return refused.value


def test_cel_refuses_each_field_rule_with_the_operators_message_and_admits_the_fix(custom, namespace):
    cases = [case for case in RULE_CASES if case[0] in CEL_CASES]
    assert {case[0] for case in cases} == CEL_CASES
    for index, (case_id, failing, expected, passing) in enumerate(cases):
        error = refusal(custom, namespace, f"bad-{index}", failing)
        assert error.status == 422, (case_id, error.body)
        assert expected in json.loads(error.body)["message"], (case_id, error.body)
        create(custom, namespace, f"good-{index}", passing)


def test_schema_bounds_refuse_at_admission(custom, namespace):
    cases = [case for case in RULE_CASES if case[0] in SCHEMA_CASES]
    assert {case[0] for case in cases} == set(SCHEMA_CASES)
    for index, (case_id, failing, _, passing) in enumerate(cases):
        error = refusal(custom, namespace, f"bound-{index}", failing)
        assert error.status == 422 and SCHEMA_CASES[case_id] in error.body, (case_id, error.body)
        create(custom, namespace, f"bound-ok-{index}", passing)


@pytest.mark.parametrize("training", [{"steps": 2 ** 63}, {"learningRate": float("inf")}, {"learningRate": float("nan")}],
                         ids=["int64-overflow", "infinity", "nan"])
def test_numbers_kubernetes_cannot_hold_never_get_in(custom, namespace, training):
    """What rules.parse refuses by name cannot be stored either: the apiserver's JSON has no NaN or Infinity and no
    integer past int64 (the request is refused before admission, with a decoding error)."""
    error = refusal(custom, namespace, "number", {"parallelism": {"data": 1}, "npu": {"perPod": 1},
                                                  "training": training})
    assert error.status in (400, 422), error.body
