"""The recovery ladder and its ledger (recovery.py, pure): starting rungs by cause and rule, the finest-rung bound,
the hourly cap, escalation, timeouts, the ledger's milestones and goodput."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ascend_hybrid.diagnosis import recovery
from ascend_hybrid.diagnosis.failures import Failure
from ascend_hybrid.diagnosis.policy import judge
from ascend_hybrid.diagnosis.recovery import (
    RECOVERED,
    RECOVERING,
    REPLACE_POD,
    RESTART_GANG,
    RESTART_RANKS,
    RUNGS,
    Bounds,
)
from ascend_hybrid.spec.api import FailurePolicyRule, Recovery, RecoveryRecord
from ascend_hybrid.spec.causes import ACTIONS, CAUSES

NOW = datetime(2026, 12, 2, 8, 0, 0, tzinfo=UTC)

# Defaults, with nothing in the spec: software and peer failures restart ranks; a node, chip or pod lost replaces
# the pod; a table that never completed or a moved scheduler Service restarts the gang; the causes a restart
# cannot cure fail the job (rung None).
EXPECTED_DEFAULT_RUNGS = {
    "HCCLConnectTimeout": RESTART_RANKS, "HCCLExecTimeout": RESTART_RANKS, "PeerFailed": RESTART_RANKS,
    "Unknown": RESTART_RANKS, "NodeNotReady": REPLACE_POD, "ChipUnhealthy": REPLACE_POD, "PodDeleted": REPLACE_POD,
    "RankTableTimeout": RESTART_GANG, "SchedServiceChanged": RESTART_GANG,
    "ConfigError": None, "DataError": None, "DeviceOutOfMemory": None, "NumericalDivergence": None,
    "RankTableRejected": None,
}


def failure(cause, node="node-3"):
    return Failure(cause, "detail", pod="job-a1-1", index=1, node=node, exit_code=137)


def test_every_cause_has_an_expected_default_rung():
    assert set(EXPECTED_DEFAULT_RUNGS) == set(CAUSES)


@pytest.mark.parametrize("cause", sorted(EXPECTED_DEFAULT_RUNGS))
def test_the_default_rung_by_cause(cause):
    assert judge([], failure(cause)).rung == EXPECTED_DEFAULT_RUNGS[cause]


@pytest.mark.parametrize(("action", "rung"), [("RestartRanks", RESTART_RANKS), ("ReplacePod", REPLACE_POD),
                                              ("RestartJob", RESTART_GANG), ("RestartJobAvoidingNode", RESTART_GANG),
                                              ("FailJob", None)])
def test_a_rule_names_its_rung(action, rung):
    rules = [FailurePolicyRule.model_validate({"causes": ["Unknown"], "action": action})]
    assert judge(rules, failure("Unknown")).rung == rung


def test_ignore_keeps_the_causes_default_rung_and_is_not_counted():
    rules = [FailurePolicyRule.model_validate({"causes": ["PodDeleted", "Unknown"], "action": "Ignore"})]
    assert (judge(rules, failure("PodDeleted")).rung, judge(rules, failure("PodDeleted")).counts) == (REPLACE_POD,
                                                                                                      False)
    assert judge(rules, failure("Unknown")).rung == RESTART_RANKS


def test_replace_pod_avoids_the_node_only_where_the_cause_suspects_it():
    rules = [FailurePolicyRule.model_validate({"causes": ["HCCLExecTimeout", "PodDeleted", "ConfigError"],
                                               "action": "ReplacePod"})]
    assert judge(rules, failure("HCCLExecTimeout")).avoid == ("node-3",)
    assert judge(rules, failure("PodDeleted")).avoid == ()
    assert judge(rules, failure("ConfigError")).avoid == ()
    assert judge([], failure("NodeNotReady")).avoid == ("node-3",)
    assert judge([], failure("PodDeleted")).avoid == ()


def test_the_backoff_accounting_stays_by_cause():
    assert judge([], failure("Unknown")).counts and judge([], failure("PodDeleted")).counts
    assert not judge([], failure("NodeNotReady")).counts and judge([], failure("NodeNotReady")).disruption


def in_place_incidents(count, ago=timedelta(minutes=5), rung=RESTART_RANKS):
    ledger = []
    for _ in range(count):
        recovery.open_incident(ledger, cause="Unknown", rung=rung, why="w", detected=NOW - ago, decided=NOW - ago,
                               attempt=1, counted=True)
    return ledger


def test_the_finest_rung_bounds_the_start():
    bounds = Bounds(finest_rung=REPLACE_POD)
    start = recovery.starting_rung(RESTART_RANKS, "the default for Unknown", bounds, [], NOW, True)
    assert start.rung == REPLACE_POD and "finestRung=ReplacePod" in start.why
    assert recovery.starting_rung(RESTART_GANG, "x", bounds, [], NOW, True).rung == RESTART_GANG
    gang_only = Bounds(finest_rung=RESTART_GANG)
    assert recovery.starting_rung(RESTART_RANKS, "x", gang_only, [], NOW, True).rung == RESTART_GANG


def test_the_hourly_cap_sends_the_next_failure_to_the_gang():
    bounds = Bounds(max_in_place_per_hour=2)
    assert recovery.starting_rung(RESTART_RANKS, "x", bounds, in_place_incidents(1), NOW, True).rung == RESTART_RANKS
    capped = recovery.starting_rung(RESTART_RANKS, "x", bounds, in_place_incidents(2), NOW, True)
    assert capped.rung == RESTART_GANG and "maxInPlacePerHour=2" in capped.why
    # incidents older than an hour, and gang restarts, do not use the cap up
    old = in_place_incidents(5, ago=timedelta(minutes=61))
    assert recovery.starting_rung(RESTART_RANKS, "x", bounds, old, NOW, True).rung == RESTART_RANKS
    gang = in_place_incidents(5, rung=RESTART_GANG)
    assert recovery.starting_rung(REPLACE_POD, "x", bounds, gang, NOW, True).rung == REPLACE_POD
    assert recovery.starting_rung(RESTART_RANKS, "x", Bounds(max_in_place_per_hour=0), [], NOW,
                                  True).rung == RESTART_GANG


def test_pods_that_cannot_restart_in_place_get_the_gang():
    start = recovery.starting_rung(RESTART_RANKS, "x", Bounds(), [], NOW, False, "pod p has no launcher channel")
    assert start.rung == RESTART_GANG and "pod p has no launcher channel" in start.why


@given(st.sampled_from(RUNGS), st.sampled_from(RUNGS), st.integers(0, 40), st.integers(0, 32), st.booleans())
def test_the_start_is_never_finer_than_asked_or_allowed(wanted, finest, used, cap, ready):
    bounds = Bounds(finest_rung=finest, max_in_place_per_hour=cap)
    start = recovery.starting_rung(wanted, "x", bounds, in_place_incidents(min(used, recovery.LEDGER_SIZE)), NOW,
                                   ready)
    assert RUNGS.index(start.rung) >= max(RUNGS.index(wanted), RUNGS.index(finest))
    if start.rung in recovery.IN_PLACE_RUNGS:
        assert ready and min(used, recovery.LEDGER_SIZE) < cap


def test_escalation_climbs_one_rung_and_stops_at_the_gang():
    assert [recovery.escalate(rung) for rung in RUNGS] == [REPLACE_POD, RESTART_GANG, RESTART_GANG]


def test_timeouts_by_rung():
    bounds = Bounds(restart_ranks_timeout=60, replace_pod_timeout=120)
    decided = NOW - timedelta(seconds=70)
    assert recovery.timed_out(RESTART_RANKS, decided, bounds, NOW) == pytest.approx(10)
    assert recovery.timed_out(REPLACE_POD, decided, bounds, NOW) is None
    assert recovery.seconds_left(REPLACE_POD, decided, bounds, NOW) == pytest.approx(50)
    assert recovery.timed_out(RESTART_GANG, decided, bounds, NOW) is None
    assert recovery.seconds_left(RESTART_GANG, decided, bounds, NOW) is None


def test_bounds_from_the_spec_defaults():
    assert Bounds.of(Recovery()) == Bounds(RESTART_RANKS, 300.0, 600.0, 6)


def dumped(record: RecoveryRecord) -> dict:
    """The record as status.recoveries holds it."""
    return record.model_dump(by_alias=True, exclude_unset=True, exclude_none=True, mode="json")


def test_an_incident_from_detection_to_the_first_step_after():
    ledger: list[RecoveryRecord] = []
    record = recovery.open_incident(ledger, cause="Unknown", rung=RESTART_RANKS, why="the default for Unknown",
                                    detected=NOW, decided=NOW + timedelta(seconds=1), attempt=1, counted=True,
                                    pod="job-a1-1", node="node-3", rank=1, step=12)
    assert recovery.current_incident(ledger) is record and record.outcome == RECOVERING
    recovery.mark(record, "pods_ready", NOW + timedelta(seconds=1))
    recovery.mark(record, "ranks_relaunched", NOW + timedelta(seconds=3))
    recovery.mark(record, "ranks_relaunched", NOW + timedelta(seconds=9))  # the first observation stays
    recovery.resumed(record, 11, NOW + timedelta(seconds=20), resumed_from=10)
    assert dumped(record) == {
        "cause": "Unknown", "pod": "job-a1-1", "node": "node-3", "rank": 1, "step": 12, "attempt": 1,
        "rungs": [RESTART_RANKS], "why": "the default for Unknown", "outcome": RECOVERED, "counted": True,
        "detected": "2026-12-02T08:00:00Z", "decided": "2026-12-02T08:00:01Z", "podsReady": "2026-12-02T08:00:01Z",
        "ranksRelaunched": "2026-12-02T08:00:03Z", "firstStepAfter": "2026-12-02T08:00:20Z",
        "recoveredBy": RESTART_RANKS, "resumedFromStep": 10, "stepsRedone": 2, "seconds": 20.0}
    assert recovery.current_incident(ledger) is None
    with pytest.raises(ValueError, match="not a milestone"):
        recovery.mark(record, "outcome", NOW)


def test_a_climb_forgets_the_milestones_of_the_rung_that_gave_way():
    ledger: list[RecoveryRecord] = []
    record = recovery.open_incident(ledger, cause="Unknown", rung=RESTART_RANKS, why="w", detected=NOW,
                                    decided=NOW, attempt=1, counted=True)
    recovery.mark(record, "ranks_relaunched", NOW + timedelta(seconds=3))
    recovery.climb(record, RESTART_GANG, "RestartRanks timed out", NOW + timedelta(seconds=300))
    assert record.rungs == [RESTART_RANKS, RESTART_GANG] and "ranksRelaunched" not in dumped(record)
    assert record.decided == "2026-12-02T08:05:00Z" and record.detected == "2026-12-02T08:00:00Z"
    recovery.resumed(record, 5, NOW + timedelta(seconds=330))  # no step at the fault known: nothing redone told
    assert record.recovered_by == RESTART_GANG and "stepsRedone" not in dumped(record)
    assert record.resumed_from_step == 4
    recovery.gave_up(record, "backoffLimit")
    assert record.outcome == recovery.GAVE_UP


def test_the_ledger_keeps_the_last_incidents():
    ledger = in_place_incidents(recovery.LEDGER_SIZE + 5)
    assert len(ledger) == recovery.LEDGER_SIZE


def test_every_action_is_a_rung_or_fails():
    for action in ACTIONS:
        assert recovery.rung_of(action, "Unknown", True) in (*RUNGS, None)
