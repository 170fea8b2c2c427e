"""What counts as progress alone in a status change (written at most once a second by the shell)."""

from __future__ import annotations

import copy

from ascend_hybrid.contracts.conditions import only_progress

STARTING = {"phase": "Starting", "attempt": 1, "message": "waiting for 128 pods: job-a1-0: phase Pending",
            "pods": {"total": 128, "pending": 128, "running": 0, "succeeded": 0, "failed": 0},
            "placement": {"attempt": 1, "nodes": ["node-0"]}, "rankTable": {"status": "initializing"},
            "conditions": [{"type": "Placed", "status": "True", "reason": "Placed", "message": "128 pods"},
                           {"type": "RankTableReady", "status": "False", "reason": "WaitingForPods",
                            "message": "job-a1-0: phase Pending"}]}


def changed(**edits) -> dict:
    status = copy.deepcopy(STARTING)
    for key, value in edits.items():
        status[key] = value
    return status


def test_pod_counts_and_messages_moving_are_progress_alone():
    later = changed(message="waiting for 3 pods: job-a1-7: no pod IP yet",
                    pods={**STARTING["pods"], "pending": 3, "running": 125})
    later["conditions"][1]["message"] = "job-a1-7: no pod IP yet"
    assert only_progress(STARTING, later)


def test_a_phase_a_condition_verdict_or_any_other_field_is_more_than_progress():
    assert not only_progress(STARTING, changed(phase="Running"))
    assert not only_progress(STARTING, changed(rankTable={"status": "completed", "version": "1.0"}))
    assert not only_progress(STARTING, changed(attempt=2))
    flipped = copy.deepcopy(STARTING)
    flipped["conditions"][1].update(status="True", reason="Completed")
    assert not only_progress(STARTING, flipped)
    added = copy.deepcopy(STARTING)
    added["conditions"].append({"type": "Running", "status": "True", "reason": "AllPodsRunning"})
    assert not only_progress(STARTING, added)


def test_no_change_is_not_progress_either():
    assert not only_progress(STARTING, copy.deepcopy(STARTING))


def test_a_gangs_start_moving_on_is_starting_alone_until_it_runs_or_breaks():
    from ascend_hybrid.contracts.conditions import only_starting

    placed = {key: value for key, value in STARTING.items() if key not in ("pods", "rankTable")}
    placed["phase"] = "Placing"
    assert only_starting(placed, changed(podTemplateHash="abc", startTime="2026-12-01T10:00:00Z"))
    assert only_starting(STARTING, changed(pods={**STARTING["pods"], "running": 5}))
    assert not only_starting(STARTING, changed(phase="Running", rankTable={"status": "completed"}))
    assert not only_starting(STARTING, changed(rankTable={"status": "completed", "version": "1.0"}))
    assert not only_starting(STARTING, changed(phase="Restarting"))
    assert not only_starting(STARTING, changed(lastFailure={"cause": "Unknown"}))
    assert not only_starting(STARTING, changed(placement={"attempt": 2, "nodes": []}))
    assert not only_starting({"phase": "Pending"}, changed())
