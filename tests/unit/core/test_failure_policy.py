"""The failure policy (diagnosis/policy.py, pure): the rules in order, the first match wins, the defaults after."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ascend_hybrid.diagnosis.failures import Failure
from ascend_hybrid.diagnosis.policy import counters_after, judge, restart_text
from ascend_hybrid.spec.api import FailurePolicyRule
from ascend_hybrid.spec.causes import ACTIONS, CAUSES
from ascend_hybrid.spec.rules import SpecError, parse
from support.builders import job_body


def failure(cause="Unknown", code=1, node="node-7", conditions=()):
    return Failure(cause, "detail", pod="job-a1-0", index=0, node=node, exit_code=code,
                   conditions=frozenset(conditions))


def rule(**fields):
    return FailurePolicyRule.model_validate(fields)


DEFAULTS = {
    "ConfigError": ("FailJob", False, ()), "DataError": ("FailJob", False, ()),
    "DeviceOutOfMemory": ("FailJob", False, ()), "NumericalDivergence": ("FailJob", False, ()),
    "RankTableRejected": ("FailJob", False, ()),
    "HCCLConnectTimeout": ("RestartJobAvoidingNode", True, ("node-7",)),
    "HCCLExecTimeout": ("RestartJobAvoidingNode", True, ("node-7",)),
    "NodeNotReady": ("RestartJobAvoidingNode", False, ("node-7",)),
    "ChipUnhealthy": ("RestartJobAvoidingNode", False, ("node-7",)),
    "RankTableTimeout": ("RestartJob", True, ()), "PeerFailed": ("RestartJob", True, ()),
    "Unknown": ("RestartJob", True, ()), "PodDeleted": ("RestartJob", True, ()),
    "SchedServiceChanged": ("RestartJob", True, ()),
}


def test_the_default_table_covers_every_cause():
    assert set(DEFAULTS) == set(CAUSES)


@pytest.mark.parametrize("cause", sorted(DEFAULTS))
def test_defaults(cause):
    verdict = judge([], failure(cause))
    action, counts, avoid = DEFAULTS[cause]
    assert (verdict.action, verdict.counts, verdict.avoid) == (action, counts, avoid)
    assert verdict.disruption == (cause in ("NodeNotReady", "ChipUnhealthy"))
    assert verdict.why == f"the default for {cause}"


def test_the_first_matching_rule_decides():
    rules = [rule(exitCodes=[42], action="Ignore"), rule(causes=["HCCLExecTimeout"], action="FailJob"),
             rule(causes=["HCCLExecTimeout", "Unknown"], action="RestartJob")]
    ignored = judge(rules, failure("HCCLExecTimeout", code=42))
    assert (ignored.action, ignored.counts, ignored.disruption) == ("Ignore", False, False)
    assert ignored.why == "spec.runPolicy.failurePolicy.rules[0] (exitCodes 42)"
    failed = judge(rules, failure("HCCLExecTimeout", code=7))
    assert failed.fails and failed.why == "spec.runPolicy.failurePolicy.rules[1] (causes HCCLExecTimeout)"
    assert judge(rules, failure("Unknown", code=7)).action == "RestartJob"
    assert judge(rules, failure("DataError", code=7)).action == "FailJob"  # no rule: the default


def test_pod_conditions_match_the_first_failed_pods_true_conditions():
    rules = [rule(podConditions=["DisruptionTarget"], action="Ignore")]
    assert judge(rules, failure(conditions=("DisruptionTarget", "Ready"))).action == "Ignore"
    assert judge(rules, failure(conditions=("Ready",))).action == "RestartJob"


def test_an_operator_seen_fault_has_no_exit_code_to_match():
    rules = [rule(exitCodes=[0, 1, 137], action="FailJob")]
    assert judge(rules, failure("NodeNotReady", code=None)).action == "RestartJobAvoidingNode"


def test_a_software_failure_never_avoids_a_node_even_by_exit_code():
    rules = [rule(exitCodes=[2], action="RestartJobAvoidingNode")]
    verdict = judge(rules, failure("ConfigError", code=2))
    assert verdict.action == "RestartJobAvoidingNode" and verdict.avoid == () and verdict.counts
    assert judge(rules, failure("Unknown", code=2)).avoid == ("node-7",)
    assert judge(rules, failure("Unknown", code=2, node=None)).avoid == ()


def test_a_fault_restart_is_a_disruption_whatever_the_restart_action():
    for action in ("RestartJob", "RestartJobAvoidingNode", "Ignore"):
        verdict = judge([rule(causes=["NodeNotReady"], action=action)], failure("NodeNotReady"))
        assert verdict.disruption and not verdict.counts, action
    assert not judge([rule(causes=["NodeNotReady"], action="FailJob")], failure("NodeNotReady")).disruption


@given(st.lists(st.tuples(st.sampled_from(["causes", "exitCodes"]), st.sampled_from(ACTIONS)), max_size=6),
       st.sampled_from(CAUSES), st.integers(0, 3))
def test_the_verdict_is_the_first_match_else_the_default(specs, cause, code):
    rules = [rule(**({"causes": [cause]} if kind == "causes" else {"exitCodes": [code]}), action=action)
             if position % 2 == 0 else rule(exitCodes=[200 + position], action=action)
             for position, (kind, action) in enumerate(specs)]
    expected = next((r.action for r in rules if (r.causes and cause in r.causes) or
                     (r.exit_codes and code in r.exit_codes)), None)
    verdict = judge(rules, failure(cause, code=code))
    assert verdict.action == (expected or DEFAULTS[cause][0])


# -- the rules in the spec: refused when malformed ----------------------------------------------------------------
def spec(*rules):
    return {"parallelism": {"data": 2, "tensor": 4}, "npu": {"perPod": 8},
            "runPolicy": {"failurePolicy": {"rules": list(rules)}}}


def problems(body_spec) -> list[str]:
    try:
        parse(job_body(body_spec))
        return []
    except SpecError as error:
        return error.problems


def test_a_rule_sets_exactly_one_matcher():
    message = "spec.runPolicy.failurePolicy.rules: each rule sets exactly one of causes, exitCodes or podConditions"
    assert problems(spec({"causes": ["Unknown"], "exitCodes": [1], "action": "Ignore"})) == [message]
    assert problems(spec({"action": "Ignore"})) == [message]
    assert problems(spec({"exitCodes": [42], "action": "Ignore"}, {"causes": ["HCCLExecTimeout"], "action": "FailJob"})) == []


def test_a_rule_names_known_causes_and_actions_and_exit_codes_in_range():
    assert problems(spec({"causes": ["Hccl"], "action": "FailJob"}))[0].startswith(
        "spec.runPolicy.failurePolicy.rules[0].causes[0]='Hccl' must be one of")
    assert problems(spec({"exitCodes": [256], "action": "FailJob"})) == [
        "spec.runPolicy.failurePolicy.rules[0].exitCodes[0]=256 must be ≤ 255"]
    assert problems(spec({"exitCodes": [1], "action": "Retry"}))[0].startswith(
        "spec.runPolicy.failurePolicy.rules[0].action='Retry' must be one of")


def test_a_software_cause_cannot_avoid_nodes():
    assert problems(spec({"causes": ["HCCLExecTimeout", "ConfigError"], "action": "RestartJobAvoidingNode"})) == [
        "spec.runPolicy.failurePolicy.rules: ConfigError and DataError are failures of the job itself: "
        "RestartJobAvoidingNode would mark a healthy node (use RestartJob or FailJob)"]
    assert problems(spec({"causes": ["HCCLExecTimeout"], "action": "RestartJobAvoidingNode"})) == []


def test_only_counted_restarts_use_up_the_backoff_limit():
    status = {"restarts": 5, "disruptions": 2, "ignoredFailures": 1}
    assert counters_after(status, judge([], failure("Unknown"))) == (
        {"restarts": 6, "disruptions": 2, "ignoredFailures": 1}, 3)
    assert counters_after(status, judge([], failure("NodeNotReady"))) == (
        {"restarts": 6, "disruptions": 3, "ignoredFailures": 1}, 2)
    assert counters_after({}, judge([rule(exitCodes=[1], action="Ignore")], failure())) == (
        {"restarts": 1, "disruptions": 0, "ignoredFailures": 1}, 0)


def test_the_restart_text_says_what_was_done_and_how_it_counts():
    avoided = judge([], failure("HCCLExecTimeout"))
    assert restart_text("pod p failed", avoided, 3, 2, 4) == (
        "pod p failed; RestartJobAvoidingNode by the default for HCCLExecTimeout: restarting the whole gang as "
        "attempt 3, without node node-7 (2/4)")
    assert restart_text("x", judge([], failure("ChipUnhealthy")), 2, 0, 4).endswith(
        "(a disruption, not counted against backoffLimit)")
