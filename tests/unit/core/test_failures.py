"""The first failure of an attempt, classified from what the operator observes (failures.py, pure)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ascend_hybrid.contracts.ascend import DeviceInfo
from ascend_hybrid.diagnosis.failures import (
    PEER_GRACE_SECONDS,
    Failure,
    Wait,
    classify_failed_pod,
    find_failure,
    first_failed,
    last_failure,
    parse_termination_message,
    summary,
)
from ascend_hybrid.spec.causes import CAUSES, TRAINER_CAUSES
from support.builders import NodeBuilder, PodBuilder

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
PLACED = ["node-0", "node-1", "node-2"]


def pod(index: int) -> PodBuilder:
    """Pod `index` of job's first attempt, running on its node of PLACED, holding chips 0 and 1."""
    return PodBuilder("job", index).running(node=PLACED[index]).devices([0, 1])


def report(cause, rank=None, step=None, detail=""):
    return json.dumps({"cause": cause, "rank": rank, "step": step, "detail": detail})


def gang() -> list[dict]:
    """The three pods, running."""
    return [pod(index).build() for index in range(3)]


def node(name: str) -> NodeBuilder:
    return NodeBuilder(name).ready(since=NOW)


LOST = {"reason": "KubeletNotReady", "message": "kubelet stopped posting"}
HEALTHY = {name: node(name).build() for name in PLACED}


def find(pods, nodes=HEALTHY, infos=None, now=NOW, grace=30.0, lost=()):
    return find_failure({i: p for i, p in enumerate(pods) if p is not None}, PLACED, nodes, infos or {}, now, grace,
                        list(lost))


# -- the termination message ------------------------------------------------------------------------------------
@pytest.mark.parametrize("cause", TRAINER_CAUSES)
def test_every_trainer_cause_is_read_with_its_rank_step_and_detail(cause):
    assert parse_termination_message(report(cause, 3, 17, "the detail")) == {
        "cause": cause, "rank": 3, "step": 17, "detail": "the detail"}


def test_the_last_report_line_wins_over_log_lines_and_earlier_reports():
    text = "\n".join(['{"step": 4, "loss": 2.5}', report("PeerFailed", 1), "Traceback ...",
                      report("HCCLConnectTimeout", 1, None, "EI0006"), "trailing noise"])
    assert parse_termination_message(text)["cause"] == "HCCLConnectTimeout"


@pytest.mark.parametrize("text", ["", None, "plain log line", '{"step": 1}', "{not json", '{"cause": 7}', "[1, 2]"])
def test_no_report_in_a_log_tail(text):
    assert parse_termination_message(text) is None


def test_an_odd_report_is_kept_safe():
    odd = json.dumps({"cause": "no spaces allowed", "rank": True, "step": "9", "detail": ["x"]})
    assert parse_termination_message(odd) == {"cause": "Unknown", "rank": None, "step": None, "detail": ""}
    assert parse_termination_message(report("TrainerNotInstalled"))["cause"] == "TrainerNotInstalled"  # a newer trainer's
    assert len(parse_termination_message(report("Unknown", detail="x" * 5000))["detail"]) == 1024


@given(st.text())
def test_any_message_parses_or_is_none(text):
    parsed = parse_termination_message(text)
    assert parsed is None or set(parsed) == {"cause", "rank", "step", "detail"}


@given(cause=st.sampled_from(TRAINER_CAUSES), rank=st.none() | st.integers(0, 65535),
       step=st.none() | st.integers(0, 10**9), detail=st.text(max_size=300),
       noise=st.lists(st.text(alphabet=st.characters(blacklist_characters="{\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"),
                              max_size=40), max_size=5))
def test_a_report_survives_any_log_lines_before_it(cause, rank, step, detail, noise):
    parsed = parse_termination_message("\n".join([*noise, report(cause, rank, step, detail)]))
    assert parsed == {"cause": cause, "rank": rank, "step": step, "detail": detail}


HCCL_TIMEOUT = pod(1).exited(7, reason="Error", message=report("HCCLExecTimeout", 9, 40, "EI0002"), finished=NOW)


# -- one failed pod -----------------------------------------------------------------------------------------------
def test_a_report_classifies_the_pod():
    failure = classify_failed_pod(HCCL_TIMEOUT.build(), "n")
    assert (failure.cause, failure.rank, failure.step, failure.detail, failure.exit_code) == (
        "HCCLExecTimeout", 9, 40, "EI0002", 7)
    assert (failure.pod, failure.index, failure.node, failure.time) == ("job-a1-1", 1, "n", NOW)


def test_a_host_oom_kill_is_out_of_memory_and_a_bare_exit_is_unknown_with_its_last_line():
    oom = classify_failed_pod(pod(0).exited(137, reason="OOMKilled").build(), "n")
    assert oom.cause == "DeviceOutOfMemory" and oom.host_oom and "OOMKilled" in oom.detail
    tail = classify_failed_pod(pod(0).exited(3, reason="Error", message="Traceback\nModuleNotFoundError: No module "
                                            "named 'mindspore'\n").build(), "n")
    assert tail.cause == "Unknown" and tail.detail == "ModuleNotFoundError: No module named 'mindspore'"
    bare = classify_failed_pod(pod(0).exited(1).build(), "n")
    assert bare.cause == "Unknown" and bare.detail == "exit code 1 (no reason given)"


def test_pod_conditions_that_are_true_are_kept():
    failure = classify_failed_pod(pod(0).exited(1).condition("DisruptionTarget").build(), "n")
    assert failure.conditions == frozenset({"DisruptionTarget"})


# -- the first of the attempt -------------------------------------------------------------------------------------
def test_the_earliest_finished_container_is_the_first_failure():
    later = pod(0).exited(7, message=report("HCCLExecTimeout", 0), finished=NOW + timedelta(seconds=5)).build()
    earlier = pod(2).exited(4, message=report("DeviceOutOfMemory", 17), finished=NOW).build()
    assert find([later, pod(1).build(), earlier], now=NOW + timedelta(seconds=6)).cause == "DeviceOutOfMemory"


@given(st.lists(st.tuples(st.integers(0, 5), st.sampled_from(CAUSES)), min_size=1, max_size=6))
def test_first_failed_takes_the_earliest_real_cause_ties_by_index(ends):
    failures = [Failure(cause, "d", index=index, time=NOW + timedelta(seconds=offset))
                for index, (offset, cause) in enumerate(ends)]
    chosen = first_failed(failures, still_running=False, now=NOW + timedelta(seconds=60))
    real = [f for f in failures if f.cause != "PeerFailed"] or failures
    assert chosen == min(real, key=lambda f: (f.time, f.index))


def test_an_echo_waits_for_the_real_cause_then_stands_alone():
    echo = pod(0).exited(9, message=report("PeerFailed", 0), finished=NOW).build()
    waiting = find([echo, pod(1).build(), pod(2).build()], now=NOW + timedelta(seconds=3))
    assert isinstance(waiting, Wait) and waiting.hold and waiting.seconds == pytest.approx(PEER_GRACE_SECONDS - 3)
    assert find([echo, *gang()[1:]], now=NOW + timedelta(seconds=PEER_GRACE_SECONDS)).cause == "PeerFailed"
    others_done = [echo, pod(1).exited(9, message=report("PeerFailed", 1), finished=NOW).build(),
                   pod(2).phase("Succeeded").build()]
    assert find(others_done, now=NOW + timedelta(seconds=1)).cause == "PeerFailed"  # nobody left to say more


def test_a_node_not_ready_past_its_grace_or_next_to_a_failure_is_the_cause():
    nodes = {**HEALTHY, "node-1": node("node-1").not_ready(since=NOW - timedelta(seconds=10), **LOST).build()}
    within = find(gang(), nodes)
    assert isinstance(within, Wait) and not within.hold and within.seconds == pytest.approx(20)
    past = find(gang(), nodes, now=NOW + timedelta(seconds=20))
    assert (past.cause, past.node, past.pod) == ("NodeNotReady", "node-1", "job-a1-1") and past.fault
    assert "kubelet stopped posting" in past.detail
    echo = pod(0).exited(7, message=report("HCCLExecTimeout", 0), finished=NOW).build()
    assert find([echo, pod(1).build(), pod(2).build()], nodes).cause == "NodeNotReady"


def test_a_finished_pod_on_a_lost_node_is_no_fault():
    nodes = {**HEALTHY, "node-1": node("node-1").not_ready(since=NOW - timedelta(seconds=90), **LOST).build()}
    assert find([pod(0).build(), pod(1).phase("Succeeded").build(), pod(2).build()], nodes) is None


def test_an_unusable_chip_the_pod_holds_is_a_chip_fault():
    infos = {"node-2": DeviceInfo("node-2", unusable=frozenset({1, 6}))}
    failure = find(gang(), infos=infos)
    assert (failure.cause, failure.node, failure.chips, failure.index) == ("ChipUnhealthy", "node-2", (1,), 2)
    assert find([pod(0).build(), pod(1).build(), pod(2).devices((2, 3)).build()], infos=infos) is None


def test_a_lost_pod_is_pod_deleted_and_a_healthy_attempt_is_none():
    assert find(gang()) is None
    lost = find([pod(0).build(), None, pod(2).build()], lost=[(1, "job-a1-1")])
    assert (lost.cause, lost.pod, lost.node) == ("PodDeleted", "job-a1-1", "node-1")


def dumped(model) -> dict:
    """As the status holds it."""
    return model.model_dump(by_alias=True, exclude_unset=True, exclude_none=True, mode="json")


def test_summary_and_last_failure_record_what_is_known():
    failure = classify_failed_pod(HCCL_TIMEOUT.build(),
                                  "node-1")
    assert summary(failure) == ("pod job-a1-1 on node node-1 failed: exit code 7 (Error), rank 9, step 40: "
                                "HCCLExecTimeout: EI0002")
    assert dumped(last_failure(failure, "RestartJobAvoidingNode", 2, "fix it", NOW + timedelta(seconds=9))) == {
        "cause": "HCCLExecTimeout", "action": "RestartJobAvoidingNode", "attempt": 2, "pod": "job-a1-1",
        "node": "node-1", "rank": 9, "exitCode": 7, "step": 40, "reason": "Error", "message": "EI0002",
        "hint": "fix it", "time": "2026-11-29T12:00:00Z"}
    fault = Failure("NodeNotReady", "node n NotReady for 31s", pod="p", node="n")
    assert summary(fault) == "NodeNotReady: node n NotReady for 31s (pod p)"
    assert set(dumped(last_failure(fault, "RestartJobAvoidingNode", 1, "h", NOW))) == {
        "cause", "action", "attempt", "pod", "node", "message", "hint", "time"}
