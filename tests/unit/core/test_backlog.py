"""backlog.py: oldest-first order per chip type, and chips promised by placements whose pods are not visible."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_hybrid.contracts import names
from ascend_hybrid.gang import backlog
from ascend_hybrid.gang.backlog import Waiting, ahead, entry, oldest_waiting, queue_key, unseen_placements
from ascend_hybrid.reconcile import placement_record
from ascend_hybrid.reconcile.state import applied


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
    waiting = oldest_waiting([Waiting(queue_key("2026-12-01T10:00:01Z", "ns", "old"), "910B"),
                              Waiting(queue_key("2026-12-01T10:00:00Z", "ns", "other-chip"), "910A"),
                              Waiting(queue_key("2026-12-01T10:00:09Z", "ns", "younger"), "910B")], [], set())
    assert ahead(me, "910B", waiting) == ("2026-12-01T10:00:01Z", "ns", "old")
    assert ahead(me, "A3", waiting) is None
    assert ahead(queue_key("2026-12-01T09:00:00Z", "ns", "oldest"), "910B", waiting) is None
    # same second: the name decides, so the order is total and every process computes the same one
    assert ahead(queue_key("2026-12-01T10:00:01Z", "ns", "b"), "910B",
                 oldest_waiting([Waiting(queue_key("2026-12-01T10:00:01Z", "ns", "a"), "910B")], [], set())) is not None


def test_a_queued_job_is_pending_with_the_reason_and_no_event():
    from datetime import UTC, datetime

    outcome = applied(placement_record.record_queued, {"phase": "Pending"}, ("t", "ns", "old"),
                      datetime(2026, 12, 1, tzinfo=UTC), 1)
    placed = next(c for c in outcome.status["conditions"] if c["type"] == "Placed")
    assert (placed["status"], placed["reason"]) == ("False", "Queued") and "ns/old" in placed["message"]
    assert outcome.actions == [] and outcome.status["phase"] == "Pending"


def test_an_untried_pending_job_keeps_its_place_until_tried():
    known = [Waiting(queue_key("t1", "ns", "known"), "910B")]
    entries = [entry(body("new", phase="Pending", placed=None, created="t0")),
               entry(body("tried", phase="Pending", placed=None, created="t0")),
               entry(body("placed", phase="Placing", created="t0"))]
    assert oldest_waiting(known, entries, tried={("ns", "tried")}) == {"910B": ("t0", "ns", "new")}
    assert oldest_waiting(known, entries, tried={("ns", "tried"), ("ns", "new")}) == {"910B": ("t1", "ns", "known")}


def test_a_job_waiting_for_kueue_holds_no_place_in_this_queue():
    """spec.scheduling.queue: Kueue admits it in its own order, so it never holds back a job placed here."""
    kueue_job = body("for-kueue", phase="Pending", placed=None, created="t0")
    kueue_job["spec"]["scheduling"] = {"queue": "team-a"}
    assert entry(kueue_job).queued and not entry(body("plain")).queued
    assert oldest_waiting([], [entry(kueue_job)], tried=set()) == {}


def test_a_job_volcano_schedules_holds_no_place_and_promises_no_chip_before_it_is_bound():
    """Under Volcano its Queue orders the jobs, and a pod not bound yet has no node (status.placement.nodes "")."""
    for scheduling in ({"schedulerName": "volcano"}, {"volcano": {"queue": "q"}}):
        waiting = body("for-volcano", phase="Pending", placed=None, created="t0")
        waiting["spec"]["scheduling"] = scheduling
        assert entry(waiting).queued and oldest_waiting([], [entry(waiting)], tried=set()) == {}
    half_bound = entry(body("v", nodes=("n1", "")))
    assert unseen_placements([half_bound], set()) == {("ns", "v-a1-0"): ("n1", 8)}


def test_the_head_of_a_chip_types_queue_is_its_oldest_waiting_job_whoever_asks():
    waiting = oldest_waiting([backlog.Waiting(("2026-12-01T00:00:02Z", "ns", "b"), "910B"),
                              backlog.Waiting(("2026-12-01T00:00:01Z", "ns", "z"), "910B"),
                              backlog.Waiting(("2026-12-01T00:00:00Z", "ns", "a"), "910A")], [], set())
    assert backlog.head("910B", waiting) == ("2026-12-01T00:00:01Z", "ns", "z")
    assert backlog.head("910A", waiting) == ("2026-12-01T00:00:00Z", "ns", "a")
    assert backlog.head("A3", waiting) is None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 20), st.sampled_from(["910A", "910B", "A3"]),
                          st.sampled_from(["Pending", "Placing", "Running"]), st.booleans(), st.booleans(),
                          st.booleans()), max_size=30),
       st.lists(st.tuples(st.integers(0, 20), st.sampled_from(["910A", "910B"])), max_size=5),
       st.integers(0, 20), st.sampled_from(["910A", "910B", "A3"]))
def test_the_oldest_per_chip_is_the_oldest_of_every_job_that_waits(jobs, known_jobs, my_second, my_chip):
    """The one-pass answer against the definition: the list of every waiting job, then the oldest older than me."""
    def created(second: int) -> str:
        return f"2026-12-01T10:00:{second:02d}Z"
    def job(i: int, second: int, chip: str, phase: str, placed: bool, kueue: bool) -> dict:
        made = body(f"j{i}", phase=phase, placed=1 if placed else None, chip=chip, created=created(second))
        made["spec"]["scheduling"] = {"queue": "team-a"} if kueue else {}
        return made
    entries = [entry(job(i, *fields)) for i, (*fields, _) in enumerate(jobs)]
    tried = {("ns", f"j{i}") for i, (*_, was_tried) in enumerate(jobs) if was_tried}
    known = [Waiting(queue_key(created(second), "other", f"k{i}"), chip) for i, (second, chip) in enumerate(known_jobs)]
    every = [*known, *(Waiting(e.queue_key, e.chip) for e in entries if (e.namespace, e.name) not in tried
                       and e.phase == "Pending" and e.placed_attempt is None and not e.queued)]
    me = queue_key(created(my_second), "ns", "me")
    older = [w.key for w in every if w.chip == my_chip and w.key < me]
    oldest = oldest_waiting(known, entries, tried)
    assert ahead(me, my_chip, oldest) == (min(older) if older else None)
    same_chip = [w.key for w in every if w.chip == my_chip]
    assert backlog.head(my_chip, oldest) == (min(same_chip) if same_chip else None)
