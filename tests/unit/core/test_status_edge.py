"""The core's status edge (reconcile/status_edge.py): a status parsed into its model and dumped again is the dict it
was parsed from, a field set to None leaves the dump (the shell's merge patch sends null for it), and a field that
does not validate is carried through untouched."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_hybrid.controller.kube import merge_patch
from ascend_hybrid.reconcile import status_edge
from ascend_hybrid.reconcile.decision import decide
from ascend_hybrid.reconcile.state import Pass
from ascend_hybrid.spec.api import Condition, RecoveryRecord
from support.reconcile_passes import job, observe

STAMP = "2026-11-29T12:00:00Z"


def record(n: int) -> dict:
    """One closed incident of the ledger, every milestone filled in."""
    return {"cause": "HCCLConnectTimeout", "pod": f"demo-a{n}-1", "node": "node-b", "rank": 4, "step": 100 * n,
            "attempt": n, "rungs": ["RestartRanks", "RestartGang"], "recoveredBy": "RestartGang",
            "outcome": "Recovered", "why": "policy rule 1", "counted": True, "avoid": ["node-b"],
            "detected": STAMP, "decided": STAMP, "podsReady": STAMP, "ranksRelaunched": STAMP,
            "firstStepAfter": STAMP, "resumedFromStep": 100 * n - 20, "stepsRedone": 20, "seconds": 41.5,
            "podsKept": 1}


def large_status() -> dict:
    """A long-lived elastic job's status: 32 incidents, a full goodput account, a plan with its measurements, the
    slowness and checkpoint-interval state, a Volcano placement."""
    conditions = [{"type": kind, "status": value, "reason": kind, "message": f"{kind} message",
                   "lastTransitionTime": STAMP, "observedGeneration": 3}
                  for kind, value in (("Created", "True"), ("Placed", "True"), ("RankTableReady", "True"),
                                      ("Running", "True"), ("Restarting", "False"), ("Degraded", "True"),
                                      ("MetricsAvailable", "True"), ("SlowNode", "False"))]
    return {
        "phase": "Running", "message": "attempt 33: 2 pods running, rank table completed", "conditions": conditions,
        "worldSize": 8, "attempt": 33, "restarts": 32, "disruptions": 3, "ignoredFailures": 1,
        "lastFailure": {"cause": "HCCLConnectTimeout", "action": "RestartJob", "attempt": 32, "pod": "demo-a32-1",
                        "node": "node-b", "rank": 4, "exitCode": 1, "step": 3200, "reason": "Error",
                        "message": "hccl timeout", "hint": "check the network", "time": STAMP},
        "observedGeneration": 3, "startTime": STAMP, "podTemplateHash": "0123456789abcdef",
        "pods": {"total": 2, "pending": 0, "running": 2, "succeeded": 0, "failed": 0},
        "avoidedNodes": ["node-c", "node-d"], "admissionRefusals": {"node-e": 1},
        "placement": {"attempt": 33, "nodes": ["node-a", "node-b"], "scheduler": "volcano",
                      "podGroup": "demo-a33", "planned": {"nodes": ["node-a", "node-b"], "racks": 1,
                                                          "stageRacks": 1, "tensorGroupsNodeLocal": "2/2"},
                      "onPlannedNodes": "2/2", "stageRacks": 1, "summary": "2 nodes in 1 rack",
                      "tensorGroupsNodeLocal": "2/2", "racks": 1},
        "rankTable": {"configMap": "demo-rank-table", "status": "completed", "version": "1.0"},
        "training": {"step": 3300, "loss": 2.5, "tokensPerSecond": 1200.5, "stepSeconds": 1.5,
                     "progressPercentage": 33.0, "estimatedRemainingSeconds": 10050},
        "utilization": {"npuPercent": 80, "hbmPercent": 61.5, "source": "prometheus", "sampledAt": STAMP},
        "parallelism": {"data": 1, "tensor": 4, "pipeline": 2, "expert": 1, "expertPlacement": "dataParallel",
                        "microBatches": 8, "virtualPipelineStages": 1, "pipelineLayers": [12, 12]},
        "plan": {"source": "evaluated", "hardware": "910B-64G", "specHash": "abc", "microBatchSize": 1,
                 "parallelism": {"data": 2, "tensor": 4, "pipeline": 2}, "recompute": "selective",
                 "sequenceParallel": True, "flashAttention": True, "optimizerShard": False, "fits": True,
                 "memory": {"totalGiB": 40.5, "stages": [{"stage": 0, "gib": 40.5}]},
                 "time": {"stepSeconds": 1.4, "bubble": 0.1, "groups": {"tp": 0.2, "dp": None}},
                 "tokensPerSecondPerDevice": 150.0, "mfu": 0.41, "why": "TP inside the node",
                 "warnings": ["a large bubble"], "considered": 120, "rejected": 80,
                 "measured": {"stepSeconds": 1.5, "tokensPerSecond": 1200, "hbmPercent": 61.5,
                              "warmupMark": {"steps": 20, "seconds": 31.5}, "steadySteps": 3280,
                              "steadyStepSeconds": 1.45},
                 "running": {"data": 1, "microBatches": 16, "stepSeconds": 2.8}, "stepTimeRatio": 1.04,
                 "observed": {"stepScale": 1.1, "jobs": 3}},
        "monitoring": {"sampledAt": STAMP, "imbalancedSamples": 0, "stepSeconds": [1.5, 1.4, 1.6],
                       "lastStep": 3300, "lastStepAt": STAMP},
        "elastic": {"data": 1, "microBatches": 16, "fromData": 2, "since": STAMP, "growFits": False,
                    "growReason": "no node has 4 free chips", "growNodes": [], "growFitsAtStep": 3000},
        "recovery": {"generation": 40, "kept": ["demo-a32-0", ""], "keptAttempt": 33},
        "recoveries": [record(n) for n in range(1, 33)],
        "goodput": 0.82,
        "goodputAccount": {
            "since": STAMP, "accountedAt": STAMP, "wallSeconds": 9000.5,
            "seconds": {"productive": 7380, "slowSteps": 120.5, "redoneSteps": 640.0, "checkpointSaves": 300,
                        "startsAndRestarts": 500, "waitingForPlacement": 60},
            "stepsKept": 3300, "stepsRedone": 640, "steppingSeconds": 7500.5, "healthyStepSeconds": 1.45,
            "predictedStepSeconds": 1.4, "mode": "running", "world": 8, "highWater": 3300,
            "pace": {str(bin_): 32 for bin_ in range(30, 60)}, "paceIntervals": 30, "paceSteps": 960,
            "window": {"seconds": 12.5, "steps": 8},
            "pending": [{"from": 3290, "to": 3300, "seconds": 14.5, "start": False, "redone": 0}],
            "process": {"epoch": "33/40", "base": 3000, "done": 300, "saveSeconds": 30.5, "saves": 3}},
        "checkpointInterval": {"everySteps": 200, "fromStep": 3400, "saveSeconds": 10.0, "saves": 15,
                               "mtbfSeconds": 36000, "failures": 2.5, "exposureSeconds": 90000,
                               "nodeFaultsPerNodeDay": 0.01, "basis": "the job's own failures",
                               "stepSeconds": 1.45, "optimumSeconds": 850.0, "optimumSteps": 586,
                               "changedAt": STAMP, "reason": "Daly's optimum"},
        "slowness": {"sampledAt": STAMP, "epoch": "33/40", "scored": 100, "epochScored": 10,
                     "baselines": {"node-a": 1.06}, "suspects": {"node-b": 1}, "clearSamples": 0,
                     "confirmed": {"node": "node-b", "since": STAMP, "atStep": 3200, "pods": ["demo-a33-1"],
                                   "ranks": [4, 5], "ratio": 1.3, "slowdown": 1.2, "evidence": "compute 1.3x",
                                   "saveAt": 3250, "acted": STAMP, "decision": "Replace"}},
        "slowNodes": [{"node": "node-f", "since": STAMP, "ratio": 1.4, "slowdown": 1.3, "action": "Replace",
                       "at": STAMP}],
    }


def round_trip(raw: dict) -> dict:
    return status_edge.dump(status_edge.parse(raw))


def test_the_large_status_round_trips_exactly():
    raw = large_status()
    parsed = status_edge.parse(raw)
    assert not parsed.unparsed
    assert status_edge.dump(parsed) == raw


def test_statuses_decide_writes_round_trip():
    first = decide(observe(job())).status
    assert first and round_trip(first) == first
    again = decide(observe(job(status=first))).status
    assert round_trip(again) == again


def prune(draw: st.DrawFn, value: Any, depth: int = 0) -> Any:
    """`value` with some optional keys (at any depth) left out; the keys the model requires stay."""
    if isinstance(value, dict):
        kept = {}
        for key, item in value.items():
            if key in REQUIRED or not draw(st.booleans()):
                kept[key] = prune(draw, item, depth + 1)
        return kept
    if isinstance(value, list):
        return [prune(draw, item, depth + 1) for item in value[:draw(st.integers(0, len(value)))]]
    return value


# required by the models (Condition, FailureStatus, RecoveryRecord, GoodputProcess, GoodputPending, WarmupMark,
# ObservedScale, RunningPrediction, SlowNodeFinding, SlowNodeRecord)
REQUIRED = {"type", "status", "reason", "lastTransitionTime", "cause", "epoch", "base", "done", "from", "to",
            "seconds", "steps", "stepScale", "jobs", "data", "microBatches", "stepSeconds", "node"}


@st.composite
def sub_statuses(draw: st.DrawFn) -> dict:
    return prune(draw, large_status())


@settings(max_examples=60, deadline=None)
@given(sub_statuses())
def test_any_part_of_a_status_round_trips_exactly(raw: dict):
    parsed = status_edge.parse(raw)
    assert not parsed.unparsed, parsed.unparsed
    assert status_edge.dump(parsed) == raw


def test_a_field_set_to_none_leaves_the_dump_so_the_merge_patch_nulls_it():
    raw = large_status()
    parsed = status_edge.parse(raw)
    parsed.model.elastic = None
    assert parsed.model.recovery is not None
    parsed.model.recovery.kept = None
    dumped = status_edge.dump(parsed)
    assert "elastic" not in dumped and "kept" not in dumped["recovery"]
    patch = merge_patch(raw, dumped)
    assert patch["elastic"] is None and patch["recovery"] == {"kept": None}


def test_a_list_filled_in_place_is_written_and_untouched_defaults_are_not():
    parsed = status_edge.parse({"attempt": 1})
    parsed.model.conditions.append(Condition(type="Created", status="True", reason="Created",
                                             last_transition_time=STAMP))
    parsed.model.recoveries.append(RecoveryRecord(cause="NodeNotReady"))
    dumped = status_edge.dump(parsed)
    assert dumped == {"attempt": 1, "recoveries": [{"cause": "NodeNotReady"}],
                      "conditions": [{"type": "Created", "status": "True", "reason": "Created",
                                      "lastTransitionTime": STAMP}]}


def test_a_field_that_does_not_validate_is_carried_through_unless_the_core_sets_it():
    raw = {**large_status(), "elastic": {"data": "many"}, "futureField": {"x": 1}}
    parsed = status_edge.parse(raw)
    assert set(parsed.unparsed) == {"elastic", "futureField"}
    assert parsed.model.elastic is None and parsed.model.attempt == 33
    assert status_edge.dump(parsed) == raw
    parsed.model.elastic = None  # the core clears it: the odd value goes too
    assert "elastic" not in status_edge.dump(parsed)


def test_the_parse_does_not_share_the_observed_status():
    raw = large_status()
    before = copy.deepcopy(raw)
    parsed = status_edge.parse(raw)
    assert parsed.model.recoveries[0].rungs is not raw["recoveries"][0]["rungs"]
    parsed.model.recoveries[0].rungs.append("Shrink")
    assert parsed.model.plan is not None and parsed.model.plan.memory is not None
    parsed.model.plan.memory["stages"].append({"stage": 1})
    assert raw == before


def test_a_pass_that_changes_nothing_leaves_the_status_it_observed():
    raw = large_status()
    p = Pass(observe(job(status=copy.deepcopy(raw))))
    assert p.serialised() == raw


def test_an_unknown_key_inside_a_field_drops_the_key_not_the_field():
    """A status a newer operator wrote (a rollback leaves it): a key the models do not declare, inside the
    placement or one condition, is dropped; the placement and every condition are still read and written."""
    raw = large_status()
    raw["placement"] = {**raw["placement"], "futureField": "x"}
    raw["conditions"] = [{**raw["conditions"][0], "futureKey": 1}, *raw["conditions"][1:]]
    parsed = status_edge.parse(raw)
    assert not parsed.unparsed
    assert parsed.model.placement is not None and parsed.model.placement.nodes == raw["placement"]["nodes"]
    expected = large_status()
    assert status_edge.dump(parsed) == expected
