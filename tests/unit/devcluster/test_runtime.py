"""The process runtime's decisions (decisions.decide) and its guard (guard.py), and the cluster default's
admission policy (runtime_default): pure, no cluster."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ascend_hybrid.devcluster.runtime import runtime_default
from ascend_hybrid.devcluster.runtime.decisions import (
    Announce,
    Forget,
    Kill,
    Remove,
    ReportExit,
    ReportLost,
    ReportStopped,
    Start,
    Stop,
    SyncVolumes,
    Tracked,
    Wait,
    decide,
)
from ascend_hybrid.devcluster.runtime.guard import admit, default_capacity, requested_workers
from support.builders import PodBuilder

NOW = 1000.0
DELETED = "2026-11-29T17:05:00Z"


def pod(uid: str, workers: int | None = 1) -> PodBuilder:
    """Pod `uid` as the runtime finds it: bound and given its IP by kwok, Pending, its container asking for
    `workers` worker processes (None: saying nothing)."""
    pod = PodBuilder.named(uid, namespace="ns").uid(uid).created("2026-11-29T17:00:00Z").status(podIP="127.16.0.1")
    return pod if workers is None else pod.container(env=[{"name": "MS_LOCAL_WORKER", "value": str(workers)}])


def running(workers: int = 1, **fields) -> Tracked:
    return Tracked(**{"pid": 100, "workers": workers, "grace": 30.0, "announced": True, **fields})


def test_a_bound_pod_with_its_ip_starts_and_one_without_an_ip_waits_for_kwok():
    pods = {"a": pod("a").build(), "b": pod("b").status(podIP=None).build()}
    assert decide(pods, {}, capacity=4, now=NOW) == [Start("a")]


def test_pods_start_oldest_first_while_the_guard_has_room_and_the_first_that_does_not_fit_holds_the_rest():
    pods = {"late": pod("late", 1).created("2026-11-29T17:03:00Z").build(),
            "big": pod("big", 3).created("2026-11-29T17:02:00Z").build(),
            "first": pod("first", 2).created("2026-11-29T17:01:00Z").build()}
    actions = decide(pods, {}, capacity=4, now=NOW)
    assert actions[0] == Start("first")
    assert [type(a) for a in actions[1:]] == [Wait, Wait]
    assert actions[1].uid == "big" and "2 of the 4" in actions[1].message
    assert actions[2].uid == "late" and "behind ns/big" in actions[2].message


def test_a_pod_that_can_never_fit_waits_alone():
    pods = {"huge": pod("huge", 99).created("2026-11-29T17:01:00Z").build(),
            "small": pod("small", 1).created("2026-11-29T17:02:00Z").build()}
    actions = decide(pods, {}, capacity=4, now=NOW)
    assert actions[0].uid == "huge" and isinstance(actions[0], Wait) and "cannot start here" in actions[0].message
    assert actions[1] == Start("small")


def test_running_processes_count_against_the_capacity():
    pods = {"old": pod("old").phase("Running").build(), "new": pod("new", 2).build()}
    assert isinstance(decide(pods, {"old": running(workers=3)}, capacity=4, now=NOW)[-1], Wait)
    assert decide(pods, {"old": running(workers=2)}, capacity=4, now=NOW)[-1] == Start("new")


def test_a_running_process_keeps_its_volumes_in_sync_and_its_running_status_written():
    pods = {"a": pod("a").phase("Running").build()}
    assert decide(pods, {"a": running()}, capacity=4, now=NOW) == [SyncVolumes("a")]
    assert decide(pods, {"a": running(announced=False)}, capacity=4, now=NOW) == [Announce("a"), SyncVolumes("a")]


def test_an_ended_process_is_reported_once():
    pods = {"a": pod("a").phase("Running").build()}
    assert decide(pods, {"a": running(exit_code=137)}, capacity=4, now=NOW) == [ReportExit("a")]
    assert decide(pods, {"a": running(exit_code=137, reported=True)}, capacity=4, now=NOW) == []


def test_deleting_a_pod_stops_its_group_kills_it_after_the_grace_period_and_then_removes_the_pod():
    deleting = {"a": pod("a").phase("Running").deleting(DELETED, grace=7).build()}
    assert decide(deleting, {"a": running()}, capacity=4, now=NOW) == [Stop("a", 7.0)]
    stopping = running(stop_deadline=NOW + 1)
    assert decide(deleting, {"a": stopping}, capacity=4, now=NOW) == []
    assert decide(deleting, {"a": stopping}, capacity=4, now=NOW + 1) == [Kill("a")]
    assert decide(deleting, {"a": running(exit_code=143, stop_deadline=NOW + 1)}, capacity=4, now=NOW) == [Remove("a")]
    # never started (e.g. waiting for room): removed at once
    assert decide({"b": pod("b").deleting(DELETED).build()}, {}, capacity=4, now=NOW) == [Remove("b")]


def test_a_deleted_pod_held_by_a_finalizer_gets_its_terminal_phase_before_it_is_removed():
    """Kueue lets go of a pod only once it is terminated: the runtime writes the end first, as a kubelet does."""
    held = ("kueue.x-k8s.io/managed",)
    deleting = {"a": pod("a").phase("Running").deleting(DELETED).finalizers(*held).build()}
    assert decide(deleting, {"a": running()}, capacity=4, now=NOW) == [Stop("a", 30.0)]
    ended = running(exit_code=143, stop_deadline=NOW + 1)
    assert decide(deleting, {"a": ended}, capacity=4, now=NOW) == [ReportExit("a"), Remove("a")]
    reported = {"a": pod("a").phase("Failed").deleting(DELETED).finalizers(*held).build()}
    assert decide(reported, {"a": running(exit_code=143, reported=True)}, capacity=4, now=NOW) == [Remove("a")]
    # never started here: a terminal phase all the same
    assert decide({"b": pod("b").deleting(DELETED).finalizers(*held).build()}, {}, capacity=4, now=NOW) == [
        ReportStopped("b"), Remove("b")]
    failed = {"c": pod("c").phase("Failed").deleting(DELETED).finalizers(*held).build()}
    assert decide(failed, {}, capacity=4, now=NOW) == [Remove("c")]


def test_a_pod_gone_from_the_api_has_its_process_stopped_and_then_forgotten():
    assert decide({}, {"a": running()}, capacity=4, now=NOW) == [Stop("a", 30.0)]
    assert decide({}, {"a": running(stop_deadline=NOW - 1)}, capacity=4, now=NOW) == [Kill("a")]
    assert decide({}, {"a": running(exit_code=0, reported=True)}, capacity=4, now=NOW) == [Forget("a")]


def test_a_running_pod_without_a_process_here_was_lost_and_finished_pods_are_left_alone():
    phases = {"r": "Running", "s": "Succeeded", "f": "Failed"}
    pods = {uid: pod(uid).phase(phase).build() for uid, phase in phases.items()}
    assert decide(pods, {}, capacity=4, now=NOW) == [ReportLost("r")]


@given(st.lists(st.tuples(st.integers(1, 6), st.booleans()), max_size=8), st.integers(1, 8))
def test_what_starts_never_exceeds_the_capacity(pod_specs, capacity):
    pods, tracked = {}, {}
    for index, (workers, is_running) in enumerate(pod_specs):
        uid = f"p{index}"
        pods[uid] = (pod(uid, workers).created(f"2026-11-29T17:{index:02d}:00Z")
                     .phase("Running" if is_running else "Pending").build())
        if is_running:
            tracked[uid] = running(workers=workers)
    in_use = sum(t.workers for t in tracked.values())
    started = [a.uid for a in decide(pods, tracked, capacity, NOW) if isinstance(a, Start)]
    assert in_use > capacity or in_use + sum(requested_workers(pods[u]["spec"]["containers"][0])
                                             for u in started) <= capacity


def test_the_guard():
    assert default_capacity(cores=2) == 4 and default_capacity(cores=16, per_core=1) == 16
    assert requested_workers({"env": [{"name": "MS_LOCAL_WORKER", "value": "8"}]}) == 8
    assert requested_workers({"env": [{"name": "MS_LOCAL_WORKER", "value": "lots"}]}) == 1
    assert requested_workers({"command": ["sleep", "1"]}) == 1
    assert admit(2, 2, 4).admitted and not admit(3, 2, 4).admitted
    assert "starts when others end" in admit(3, 2, 4).message
    assert "cannot start here" in admit(5, 0, 4).message


def test_the_cluster_default_is_an_admission_policy_on_pod_creation_that_keeps_an_explicit_choice():
    policy, binding = runtime_default.policy(), runtime_default.binding()
    spec = policy["spec"]
    assert spec["matchConstraints"]["resourceRules"][0]["resources"] == ["pods"]
    assert spec["matchConstraints"]["resourceRules"][0]["operations"] == ["CREATE"]
    assert "sim.hybrid.ascend.dev/runtime" in spec["matchConditions"][0]["expression"]
    assert '"sim.hybrid.ascend.dev/runtime": "process"' in spec["mutations"][0]["applyConfiguration"]["expression"]
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
