"""The reconcile core for a job with spec.scheduling.queue: Kueue admits the gang, then the operator places it
(queue_steps.py); preemption is a new attempt, not a restart. No API server involved."""

from __future__ import annotations

import copy
import dataclasses
from datetime import UTC, datetime, timedelta

from ascend_hybrid.contracts import kueue, names
from ascend_hybrid.contracts.ascend import ACCELERATOR_TYPE_LABEL
from ascend_hybrid.contracts.conditions import condition
from ascend_hybrid.gang.placement import Placement
from ascend_hybrid.reconcile.actions import (
    CreatePods,
    DeletePods,
    DeleteWorkloads,
    EnsureChildren,
    PinAndRelease,
    Place,
    PostEvent,
    RemoveGates,
)
from ascend_hybrid.reconcile.decision import decide
from ascend_hybrid.reconcile.placement_record import record_placement
from ascend_hybrid.reconcile.state import Observed, applied
from ascend_hybrid.spec.rules import parse
from support.builders import JobBuilder, NodeBuilder, PodBuilder

NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
NODES = {"node-001": "module-910b-8", "node-002": "module-910b-8", "node-005": "module"}
PLACED = ("node-002", "node-001")
QUEUE = "team-a"
FLAVOR = {"accelerator-type": "module-910b-8"}
PENDING_MESSAGE = ("couldn't assign flavors to pod set 7839867f: insufficient unused quota for huawei.com/Ascend910 "
                   "in flavor ascend-910b, 16 more needed")


def stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def demo(queue: str | None = QUEUE) -> JobBuilder:
    """The job under test: DP 2 × TP 8, one restart allowed, in `queue`, stored half an hour ago."""
    builder = (JobBuilder("demo", namespace="ns").uid("uid-1").created(NOW - timedelta(minutes=30))
               .parallelism(data=2, tensor=8).backoff_limit(1).status({}))
    return builder.queue(queue) if queue else builder


CHIP = {"key": "accelerator-type", "operator": "In", "values": ["module-910b-8"]}


def queued_pod(index: int, attempt: int = 1) -> PodBuilder:
    """Pod `index` as the operator creates it for Kueue: in the attempt's pod group, held by our gang gate and
    Kueue's gates, asking for the chip's nodes."""
    return (PodBuilder("demo", index, namespace="ns").attempt(attempt).created(NOW - timedelta(minutes=20))
            .labels({kueue.QUEUE_NAME_LABEL: QUEUE, kueue.POD_GROUP_LABEL: kueue.group_name("demo", attempt),
                     kueue.MANAGED_LABEL: "true"})
            .gates(names.GANG_GATE, "kueue.x-k8s.io/admission", "kueue.x-k8s.io/topology")
            .spec(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [CHIP]}]}}})
            .status(conditions=[]))


def admitted_pod(index: int, attempt: int = 1) -> PodBuilder:
    """Kueue admitted it: its gates gone, the flavor's node selector injected; our gang gate holds it."""
    return queued_pod(index, attempt).gates(names.GANG_GATE).spec(nodeSelector=dict(FLAVOR))


def admitted_gang() -> list[dict]:
    return [admitted_pod(index).build() for index in range(2)]


def released_pod(index: int) -> PodBuilder:
    """We placed it: pinned to its node of PLACED, every gate gone."""
    return admitted_pod(index).gates().pinned(PLACED[index], also=[CHIP])


def workload(*conditions, attempt=1):
    return {"metadata": {"name": kueue.group_name("demo", attempt)}, "spec": {"queueName": QUEUE},
            "status": {"conditions": [{"type": t, "status": s, "reason": r, "message": m} for t, s, r, m in conditions],
                       **({"admission": {"clusterQueue": "ascend", "podSetAssignments": [
                           {"name": "7839867f", "count": 2, "flavors": {"huawei.com/Ascend910": "ascend-910b"}}]}}
                          if any(t == "Admitted" and s == "True" for t, s, _, _ in conditions) else {})}}


def observe(body, pods=(), workload_=None, children_ready=True, now=NOW):
    return Observed(job=body, resolved=parse(body), spec_problems=(), pods=tuple(pods),
                    rank_table={"status": "initializing"}, children_ready=children_ready, sched_ip="127.32.0.10",
                    nodes={name: NodeBuilder(name).label(ACCELERATOR_TYPE_LABEL, accelerator).ready(since=NOW).build()
                           for name, accelerator in NODES.items()}, now=now, workload=workload_)


def of(decision, kind):
    return [action for action in decision.actions if isinstance(action, kind)]


def events(decision):
    return [(a.type, a.reason) for a in decision.actions if isinstance(a, PostEvent)]


def queued_status():
    """The status after the first passes: attempt 1, pods created, Kueue holding them."""
    return decide(observe(demo().build())).status


def placed(status):
    """The shell placed the admitted gang on PLACED."""
    body = demo().status(status).build()
    return applied(record_placement, status, parse(body), Placement(ok=True, nodes=PLACED), NOW, 1,
                   {name: "rack-0" for name in NODES}).status


def test_a_queued_job_creates_its_gang_unpinned_for_kueue_and_places_nothing():
    first = decide(observe(demo().build(), children_ready=False))
    assert of(first, EnsureChildren) and not of(first, Place), "children first: the pods need the scheduler's IP"
    decision = decide(observe(demo().build()))
    assert not of(decision, Place) and not of(decision, RemoveGates) and not of(decision, PinAndRelease)
    (create,) = of(decision, CreatePods)
    assert [p.node for p in create.pods] == [None, None], "no chips promised before admission"
    for created in create.pods:
        meta, spec = created.manifest["metadata"], created.manifest["spec"]
        assert meta["labels"][kueue.QUEUE_NAME_LABEL] == QUEUE
        assert meta["labels"][kueue.POD_GROUP_LABEL] == "demo-a1"
        assert meta["annotations"][kueue.GROUP_TOTAL_COUNT_ANNOTATION] == "2"
        assert meta["annotations"][kueue.RETRIABLE_IN_GROUP_ANNOTATION] == "false"
        assert spec["schedulingGates"] == [{"name": names.GANG_GATE}]
        (term,) = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"]
        assert term["matchExpressions"] == [{"key": "accelerator-type", "operator": "In",
                                             "values": ["module-910b-8"]}], "910B nodes only, none pinned"
    admitted = condition(decision.status, "Admitted")
    assert (admitted["status"], admitted["reason"]) == ("False", "WaitingForQuota")
    assert decision.status["phase"] == "Pending"


def test_while_kueue_holds_the_group_the_job_waits_with_kueues_message_and_polls_it():
    status = queued_status()
    decision = decide(observe(demo().status(status).build(), [queued_pod(0).build(), queued_pod(1).build()],
                              workload(("QuotaReserved", "False", "Pending", PENDING_MESSAGE))))
    assert decision.actions == []
    admitted = condition(decision.status, "Admitted")
    assert (admitted["status"], admitted["reason"], admitted["message"]) == ("False", "WaitingForQuota", PENDING_MESSAGE)
    assert decision.status["phase"] == "Pending" and decision.status["message"] == PENDING_MESSAGE
    assert decision.requeue_after == 5.0
    # not even our own gate goes while Kueue's is on: no pod of the group may bind
    half = decide(observe(demo().status(status).build(), [admitted_pod(0).build(), queued_pod(1).build()], None))
    assert not of(half, PinAndRelease) and not of(half, Place) and half.status["phase"] == "Pending"


def test_once_admitted_the_gang_is_placed_on_the_nodes_the_flavor_admits():
    status = queued_status()
    pods = admitted_gang()
    decision = decide(observe(demo().status(status).build(), pods, workload(("Admitted", "True", "Admitted", "ok"))))
    (place,) = of(decision, Place)
    assert dict(place.request.node_selector) == FLAVOR and place.request.pod_count == 2
    assert ("Normal", "Admitted") in events(decision)
    admitted = condition(decision.status, "Admitted")
    assert admitted["status"] == "True" and "ClusterQueue ascend (flavor ascend-910b)" in admitted["message"]


def test_a_placed_queued_gang_is_pinned_and_released_in_one_patch_per_pod():
    status = placed(decide(observe(demo().status(queued_status()).build(), admitted_gang(),
                                   workload(("Admitted", "True", "Admitted", "ok")))).status)
    pods = admitted_gang()
    decision = decide(observe(demo().status(status).build(), pods, workload(("Admitted", "True", "Admitted", "ok"))))
    (release,) = of(decision, PinAndRelease)
    assert not of(decision, RemoveGates) and not of(decision, CreatePods)
    for (name, patch), expected in zip(release.pods, PLACED):
        pinned = [op for op in patch if op["op"] == "add"]
        assert pinned == [{"op": "add", "value": {"key": "kubernetes.io/hostname", "operator": "In",
                                                  "values": [expected]},
                           "path": "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/"
                                   "nodeSelectorTerms/0/matchExpressions/-"}], name
        assert {"op": "replace", "path": "/spec/schedulingGates", "value": []} in patch
    assert decision.status["phase"] == "Starting"


def test_the_scheduling_timeout_of_a_queued_gang_counts_from_its_admission_not_its_creation():
    status = placed(decide(observe(demo().status(queued_status()).build(), admitted_gang(),
                                   workload(("Admitted", "True", "Admitted", "ok")))).status)
    status["phase"] = "Starting"
    later = NOW + timedelta(seconds=60)
    unbound = [released_pod(0).created(NOW - timedelta(hours=2)).build(),
               released_pod(1).created(NOW - timedelta(hours=2)).build()]
    decision = decide(observe(demo().status(status).build(), unbound, None, now=later))
    assert not of(decision, DeletePods), "queued for two hours, admitted a minute ago: no re-plan"
    assert decision.status["attempt"] == 1
    timed_out = decide(observe(demo().status(status).build(), unbound, None, now=NOW + timedelta(seconds=301)))
    assert of(timed_out, DeletePods) and timed_out.status["attempt"] == 2


def running_status():
    status = placed(decide(observe(demo().status(queued_status()).build(), admitted_gang(),
                                   workload(("Admitted", "True", "Admitted", "ok")))).status)
    status.update(phase="Running", startTime=stamp(NOW))
    return status


def test_kueue_preempting_the_gang_is_a_new_attempt_not_a_restart():
    status = running_status()
    message = "Preempted to accommodate a workload (UID: 2f1f) due to prioritization in the ClusterQueue"
    running = [released_pod(i).node(PLACED[i]).phase("Running").build() for i in range(2)]
    evicted = workload(("Evicted", "True", "Preempted", message), ("Admitted", "False", "NoReservation", ""))
    decision = decide(observe(demo().status(status).build(), running, evicted))
    assert decision.status["attempt"] == 2 and decision.status["restarts"] == 0, "backoffLimit untouched"
    assert of(decision, DeleteWorkloads) == [DeleteWorkloads(("demo-a1",))]
    assert of(decision, DeletePods)[0].names == ("demo-a1-0", "demo-a1-1")
    assert ("Warning", "Preempted") in events(decision)
    admitted = condition(decision.status, "Admitted")
    assert (admitted["status"], admitted["reason"]) == ("False", "Preempted") and message in admitted["message"]
    assert decision.status["phase"] == "Pending" and "preempted by Kueue" in decision.status["message"]
    assert "placement" not in decision.status
    # Kueue's TerminationTarget on the pods says the same once the Workload is gone
    target = {"type": "TerminationTarget", "status": "True", "reason": "WorkloadEvictedDueToPreempted",
              "message": message}
    doomed = [released_pod(0).node(PLACED[0]).phase("Failed").status(conditions=[target]).build()]
    assert decide(observe(demo().status(status).build(), doomed, None)).status["restarts"] == 0
    # and once every pod and the Workload are gone, the pods the watch saw evicted still say it
    gone = dataclasses.replace(observe(demo().status(status).build(), (), None), evicted_pods=tuple(doomed))
    after = decide(gone)
    assert (after.status["attempt"], after.status["restarts"]) == (2, 0)
    assert condition(after.status, "Admitted")["reason"] == "Preempted"
    # an eviction of an earlier attempt says nothing of this one: a pod gone now is a lost pod
    earlier = [released_pod(0).node(PLACED[0]).status(conditions=[target]).build()]
    earlier[0]["metadata"]["labels"][names.ATTEMPT_LABEL] = "0"
    lost = decide(dataclasses.replace(observe(demo().status(status).build(), running[1:], None),
                                      evicted_pods=tuple(earlier)))
    assert lost.status["restarts"] == 1
    # nor does one of an earlier job of the same name, deleted and made again
    job = demo().status(status).build()
    job["metadata"]["creationTimestamp"] = stamp(NOW)
    doomed[0]["metadata"]["creationTimestamp"] = stamp(NOW - timedelta(minutes=3))
    again_lost = decide(dataclasses.replace(observe(job, running[1:], None), evicted_pods=tuple(doomed)))
    assert again_lost.status["restarts"] == 1
    doomed[0]["metadata"]["creationTimestamp"] = stamp(NOW + timedelta(seconds=5))
    assert decide(dataclasses.replace(observe(job, (), None), evicted_pods=tuple(doomed))).status["restarts"] == 0

    # attempt 2 queues again as a new group while attempt 1's pods go, and keeps saying why it waits
    again = decide(observe(demo().status(decision.status).build(), running, None))
    (create,) = of(again, CreatePods)
    assert {p.manifest["metadata"]["labels"][kueue.POD_GROUP_LABEL] for p in create.pods} == {"demo-a2"}
    second = [queued_pod(index, attempt=2).build() for index in range(2)]
    waiting = decide(observe(demo().status(again.status).build(), [*running, *second],
                             workload(("QuotaReserved", "False", "Pending", PENDING_MESSAGE), attempt=2)))
    admitted = condition(waiting.status, "Admitted")
    assert admitted["reason"] == "Preempted" and PENDING_MESSAGE in admitted["message"]
    assert "waits for quota again" in waiting.status["message"]
    # re-admitted: placed only once attempt 1's pods are gone
    free = [admitted_pod(0, attempt=2).build(), admitted_pod(1, attempt=2).build()]
    blocked = decide(observe(demo().status(waiting.status).build(), [*running, *free], None))
    assert not of(blocked, Place) and condition(blocked.status, "Admitted")["status"] == "True"
    assert of(decide(observe(demo().status(blocked.status).build(), free, None)), Place)


def test_a_failed_pod_restarts_a_queued_gang_as_a_new_group_and_counts():
    status = running_status()
    pods = [released_pod(0).node(PLACED[0]).phase("Running").build(),
            released_pod(1).node(PLACED[1]).phase("Failed").build()]
    decision = decide(observe(demo().status(status).build(), pods, workload(("Admitted", "True", "Admitted", "ok"))))
    assert decision.status["restarts"] == 1 and decision.status["attempt"] == 2
    assert of(decision, DeleteWorkloads) == [DeleteWorkloads(("demo-a1",))], "quota back at once"


def test_pods_in_a_namespace_kueue_does_not_manage_never_run_outside_the_quota():
    status = queued_status()
    pods = [admitted_pod(index).label(kueue.MANAGED_LABEL, None).build() for index in range(2)]
    decision = decide(observe(demo().status(status).build(), pods, None))
    assert not of(decision, Place) and not of(decision, PinAndRelease)
    admitted = condition(decision.status, "Admitted")
    assert admitted["reason"] == "NotManagedByKueue" and "kubectl label namespace ns" in admitted["message"]
    assert ("Warning", "NotManagedByKueue") in events(decision)
    again = decide(observe(demo().status(decision.status).build(), pods, None))
    assert ("Warning", "NotManagedByKueue") not in events(again)


def test_without_a_queue_nothing_of_kueue_happens():
    body = demo(None).build()
    decision = decide(observe(body))
    assert of(decision, Place) and not of(decision, CreatePods)
    assert condition(decision.status, "Admitted") is None
    status = copy.deepcopy(placed(decision.status))
    created = decide(observe(demo(None).status(status).build()))
    (create,) = of(created, CreatePods)
    assert [p.node for p in create.pods] == list(PLACED)
    assert not [key for p in create.pods for key in p.manifest["metadata"]["labels"] if key.startswith("kueue.")]
    assert not of(created, RemoveGates) and not of(created, PinAndRelease)
    assert not [p for p in create.pods if "schedulingGates" in p.manifest["spec"]], "gates are Kueue's pod groups'"


def test_a_queued_pod_that_vanishes_after_admission_breaks_the_gang():
    """Before release (phase Placing) too: a group member Kueue admitted cannot be replaced inside the group."""
    status = placed(decide(observe(demo().status(queued_status()).build(), admitted_gang(),
                                   workload(("Admitted", "True", "Admitted", "ok")))).status)
    assert status["phase"] == "Placing"
    decision = decide(observe(demo().status(status).build(), [admitted_pod(0).build()], None))
    assert decision.status["restarts"] == 1 and decision.status["attempt"] == 2
    assert condition(decision.status, "Restarting")["reason"] == "PodDeleted"
    assert not of(decision, CreatePods), "never a replacement pod in an admitted group"


def test_pods_this_process_created_are_released_as_soon_as_kueue_admits_them():
    """In flight since their creation (the watch may lag behind it), but released only once pinned: no wait for
    the in-flight horizon between admission and release."""
    pods = admitted_gang()
    status = placed(decide(observe(demo().status(queued_status()).build(), pods,
                                   workload(("Admitted", "True", "Admitted", "ok")))).status)
    in_flight = frozenset(p["metadata"]["name"] for p in pods)
    decision = decide(dataclasses.replace(observe(demo().status(status).build(), pods, None), in_flight=in_flight))
    (release,) = of(decision, PinAndRelease)
    assert [name for name, _ in release.pods] == ["demo-a1-0", "demo-a1-1"]
    # the watch: pinned, gate not yet gone
    released = [admitted_pod(i).pinned(PLACED[i], also=[CHIP]).build() for i in range(2)]
    again = decide(dataclasses.replace(observe(demo().status(decision.status).build(), released, None),
                                       in_flight=in_flight))
    assert not of(again, PinAndRelease), "released a moment ago: not again"
