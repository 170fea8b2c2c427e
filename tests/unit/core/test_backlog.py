"""backlog.py: oldest-first order per chip type, and chips promised by placements whose pods are not visible."""

from __future__ import annotations

from ascend_hybrid.contracts import names
from ascend_hybrid.gang import backlog
from ascend_hybrid.gang.backlog import Waiting, ahead, entry, queue_key, unseen_placements
from ascend_hybrid.reconcile import placement_record


def body(name, phase="Placing", attempt=1, placed=1, nodes=("n1", "n2"), chip=None, per_pod=None,
         created="2026-12-01T10:00:00Z", namespace="ns"):
    npu = {k: v for k, v in {"chip": chip, "perPod": per_pod}.items() if v}
    return {"metadata": {"name": name, "namespace": namespace, "creationTimestamp": created},
            "spec": {"parallelism": {"data": 2}, "npu": npu},
            "status": {"phase": phase, "attempt": attempt, "placement": {"attempt": placed, "nodes": list(nodes)}}}


def test_entry_reads_placement_and_effective_chips_per_pod():
    e = entry(body("a", chip="A3"))
    assert (e.chip, e.per_pod, e.nodes, e.placed_attempt, e.attempt) == ("A3", 16, ("n1", "n2"), 1, 1)
    assert entry(body("b", per_pod=4)).per_pod == 4 and entry({"metadata": {}}).phase == "Pending"


def test_placed_pods_not_yet_visible_are_promised():
    entries = [entry(body("a", per_pod=4)), entry(body("done", phase="Succeeded")),
               entry(body("stale", attempt=2, placed=1)), entry(body("mine"))]
    visible = {("ns", names.pod_name("a", 1, 0))}
    promised = unseen_placements(entries, visible, exclude=("ns", "mine"))
    assert promised == {("ns", "a-a1-1"): ("n2", 4)}


def test_oldest_waiting_job_of_the_same_chip_goes_first():
    me = queue_key("2026-12-01T10:00:05Z", "ns", "young")
    waiting = [Waiting(queue_key("2026-12-01T10:00:01Z", "ns", "old"), "910B"),
               Waiting(queue_key("2026-12-01T10:00:00Z", "ns", "other-chip"), "910A"),
               Waiting(queue_key("2026-12-01T10:00:09Z", "ns", "younger"), "910B")]
    assert ahead(me, "910B", waiting) == ("2026-12-01T10:00:01Z", "ns", "old")
    assert ahead(me, "A3", waiting) is None
    # same second: the name decides, so the order is total and every process computes the same one
    assert ahead(queue_key("2026-12-01T10:00:01Z", "ns", "b"), "910B",
                 [Waiting(queue_key("2026-12-01T10:00:01Z", "ns", "a"), "910B")]) is not None


def test_a_queued_job_is_pending_with_the_reason_and_no_event():
    from datetime import UTC, datetime

    outcome = placement_record.record_queued({"phase": "Pending"}, ("t", "ns", "old"), datetime(2026, 12, 1, tzinfo=UTC), 1)
    placed = next(c for c in outcome.status["conditions"] if c["type"] == "Placed")
    assert (placed["status"], placed["reason"]) == ("False", "Queued") and "ns/old" in placed["message"]
    assert outcome.actions == [] and outcome.status["phase"] == "Pending"


def test_an_untried_pending_job_keeps_its_place_until_tried():
    known = [Waiting(queue_key("t1", "ns", "known"), "910B")]
    entries = [entry(body("new", phase="Pending", placed=None, created="t0")),
               entry(body("tried", phase="Pending", placed=None, created="t0")),
               entry(body("placed", phase="Placing", created="t0"))]
    found = backlog.waiting(known, entries, tried={("ns", "tried")})
    assert [w.key[2] for w in found] == ["known", "new"]


def test_a_job_waiting_for_kueue_holds_no_place_in_this_queue():
    """spec.scheduling.queue: Kueue admits it in its own order, so it never holds back a job placed here."""
    kueue_job = body("for-kueue", phase="Pending", placed=None, created="t0")
    kueue_job["spec"]["scheduling"] = {"queue": "team-a"}
    assert entry(kueue_job).queued and not entry(body("plain")).queued
    assert backlog.waiting([], [entry(kueue_job)], tried=set()) == []


def test_the_head_of_a_chip_types_queue_is_its_oldest_waiting_job_whoever_asks():
    waiting = [backlog.Waiting(("2026-12-01T00:00:02Z", "ns", "b"), "910B"),
               backlog.Waiting(("2026-12-01T00:00:01Z", "ns", "z"), "910B"),
               backlog.Waiting(("2026-12-01T00:00:00Z", "ns", "a"), "910A")]
    assert backlog.head("910B", waiting) == ("2026-12-01T00:00:01Z", "ns", "z")
    assert backlog.head("910A", waiting) == ("2026-12-01T00:00:00Z", "ns", "a")
    assert backlog.head("A3", waiting) is None
