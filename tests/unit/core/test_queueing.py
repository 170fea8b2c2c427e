"""The reconcile core for a job with spec.scheduling.queue: Kueue admits the gang, then the operator places it
(queue_steps.py); preemption is a new attempt, not a restart. No API server involved."""

from __future__ import annotations

import copy
import dataclasses
from datetime import UTC, datetime, timedelta

from ascend_hybrid.contracts import kueue, names
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
from ascend_hybrid.reconcile.state import Observed
from ascend_hybrid.spec.rules import parse

NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
NODES = {"node-001": "module-910b-8", "node-002": "module-910b-8", "node-005": "module"}
PLACED = ("node-002", "node-001")
QUEUE = "team-a"
FLAVOR = {"accelerator-type": "module-910b-8"}
PENDING_MESSAGE = ("couldn't assign flavors to pod set 7839867f: insufficient unused quota for huawei.com/Ascend910 "
                   "in flavor ascend-910b, 16 more needed")


def stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def job(status=None, queue=QUEUE):
    spec = {"parallelism": {"data": 2, "tensor": 8}, "runPolicy": {"backoffLimit": 1}}
    if queue:
        spec["scheduling"] = {"queue": queue}
    return {"apiVersion": "hybrid.ascend.dev/v1alpha1", "kind": "AscendHybridJob",
            "metadata": {"name": "demo", "namespace": "ns", "uid": "uid-1", "generation": 1,
                         "creationTimestamp": stamp(NOW - timedelta(minutes=30))},
            "spec": spec, "status": status or {}}


def node(name: str) -> dict:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "accelerator-type": NODES[name]}},
            "status": {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": stamp(NOW)}]}}


def pod(index, attempt=1, kueue_gated=True, ours=True, pinned=None, phase="Pending", managed=True,
        created=NOW - timedelta(minutes=20), conditions=()):
    group = kueue.group_name("demo", attempt)
    labels = {names.JOB_LABEL: "demo", names.ATTEMPT_LABEL: str(attempt), names.POD_INDEX_LABEL: str(index),
              kueue.QUEUE_NAME_LABEL: QUEUE, kueue.POD_GROUP_LABEL: group}
    if managed:
        labels[kueue.MANAGED_LABEL] = "true"
    gates = ([{"name": names.GANG_GATE}] if ours else []) + (
        [{"name": "kueue.x-k8s.io/admission"}, {"name": "kueue.x-k8s.io/topology"}] if kueue_gated else [])
    spec = {"schedulingGates": gates, "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "accelerator-type", "operator": "In", "values": ["module-910b-8"]},
            *([{"key": "kubernetes.io/hostname", "operator": "In", "values": [pinned]}] if pinned else [])]}]}}}}
    if not kueue_gated:
        spec["nodeSelector"] = dict(FLAVOR)
    if phase != "Pending":
        spec["nodeName"] = pinned
    return {"metadata": {"name": names.pod_name("demo", attempt, index), "namespace": "ns", "labels": labels,
                         "creationTimestamp": stamp(created)},
            "spec": spec, "status": {"phase": phase, "conditions": list(conditions)}}


def workload(*conditions, attempt=1):
    return {"metadata": {"name": kueue.group_name("demo", attempt)}, "spec": {"queueName": QUEUE},
            "status": {"conditions": [{"type": t, "status": s, "reason": r, "message": m} for t, s, r, m in conditions],
                       **({"admission": {"clusterQueue": "ascend", "podSetAssignments": [
                           {"name": "7839867f", "count": 2, "flavors": {"huawei.com/Ascend910": "ascend-910b"}}]}}
                          if any(t == "Admitted" and s == "True" for t, s, _, _ in conditions) else {})}}


def observe(body, pods=(), workload_=None, children_ready=True, now=NOW):
    return Observed(job=body, resolved=parse(body), spec_problems=(), pods=tuple(pods),
                    rank_table={"status": "initializing"}, children_ready=children_ready, sched_ip="127.32.0.10",
                    nodes={name: node(name) for name in NODES}, now=now, workload=workload_)


def of(decision, kind):
    return [action for action in decision.actions if isinstance(action, kind)]


def events(decision):
    return [(a.type, a.reason) for a in decision.actions if isinstance(a, PostEvent)]


def queued_status():
    """The status after the first passes: attempt 1, pods created, Kueue holding them."""
    return decide(observe(job())).status


def placed(status):
    """The shell placed the admitted gang on PLACED."""
    body = job(status=status)
    return record_placement(status, parse(body), Placement(ok=True, nodes=PLACED), NOW, 1,
                            {name: "rack-0" for name in NODES}).status


def test_a_queued_job_creates_its_gang_unpinned_for_kueue_and_places_nothing():
    first = decide(observe(job(), children_ready=False))
    assert of(first, EnsureChildren) and not of(first, Place), "children first: the pods need the scheduler's IP"
    decision = decide(observe(job()))
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
    decision = decide(observe(job(status=status), [pod(0), pod(1)],
                              workload(("QuotaReserved", "False", "Pending", PENDING_MESSAGE))))
    assert decision.actions == []
    admitted = condition(decision.status, "Admitted")
    assert (admitted["status"], admitted["reason"], admitted["message"]) == ("False", "WaitingForQuota", PENDING_MESSAGE)
    assert decision.status["phase"] == "Pending" and decision.status["message"] == PENDING_MESSAGE
    assert decision.requeue_after == 5.0
    # not even our own gate goes while Kueue's is on: no pod of the group may bind
    half = decide(observe(job(status=status), [pod(0, kueue_gated=False), pod(1)], None))
    assert not of(half, PinAndRelease) and not of(half, Place) and half.status["phase"] == "Pending"


def test_once_admitted_the_gang_is_placed_on_the_nodes_the_flavor_admits():
    status = queued_status()
    pods = [pod(0, kueue_gated=False), pod(1, kueue_gated=False)]
    decision = decide(observe(job(status=status), pods, workload(("Admitted", "True", "Admitted", "ok"))))
    (place,) = of(decision, Place)
    assert dict(place.request.node_selector) == FLAVOR and place.request.pod_count == 2
    assert ("Normal", "Admitted") in events(decision)
    admitted = condition(decision.status, "Admitted")
    assert admitted["status"] == "True" and "ClusterQueue ascend (flavor ascend-910b)" in admitted["message"]


def test_a_placed_queued_gang_is_pinned_and_released_in_one_patch_per_pod():
    status = placed(decide(observe(job(status=queued_status()), [pod(0, kueue_gated=False), pod(1, kueue_gated=False)],
                                   workload(("Admitted", "True", "Admitted", "ok")))).status)
    pods = [pod(0, kueue_gated=False), pod(1, kueue_gated=False)]
    decision = decide(observe(job(status=status), pods, workload(("Admitted", "True", "Admitted", "ok"))))
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
    status = placed(decide(observe(job(status=queued_status()), [pod(0, kueue_gated=False), pod(1, kueue_gated=False)],
                                   workload(("Admitted", "True", "Admitted", "ok")))).status)
    status["phase"] = "Starting"
    later = NOW + timedelta(seconds=60)
    unbound = [pod(0, kueue_gated=False, ours=False, pinned=PLACED[0], created=NOW - timedelta(hours=2)),
               pod(1, kueue_gated=False, ours=False, pinned=PLACED[1], created=NOW - timedelta(hours=2))]
    decision = decide(observe(job(status=status), unbound, None, now=later))
    assert not of(decision, DeletePods), "queued for two hours, admitted a minute ago: no re-plan"
    assert decision.status["attempt"] == 1
    timed_out = decide(observe(job(status=status), unbound, None, now=NOW + timedelta(seconds=301)))
    assert of(timed_out, DeletePods) and timed_out.status["attempt"] == 2


def running_status():
    status = placed(decide(observe(job(status=queued_status()), [pod(0, kueue_gated=False), pod(1, kueue_gated=False)],
                                   workload(("Admitted", "True", "Admitted", "ok")))).status)
    status.update(phase="Running", startTime=stamp(NOW))
    return status


def test_kueue_preempting_the_gang_is_a_new_attempt_not_a_restart():
    status = running_status()
    message = "Preempted to accommodate a workload (UID: 2f1f) due to prioritization in the ClusterQueue"
    running = [pod(i, kueue_gated=False, ours=False, pinned=PLACED[i], phase="Running") for i in range(2)]
    evicted = workload(("Evicted", "True", "Preempted", message), ("Admitted", "False", "NoReservation", ""))
    decision = decide(observe(job(status=status), running, evicted))
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
    doomed = [pod(0, kueue_gated=False, ours=False, pinned=PLACED[0], phase="Failed", conditions=[target])]
    assert decide(observe(job(status=status), doomed, None)).status["restarts"] == 0

    # attempt 2 queues again as a new group while attempt 1's pods go, and keeps saying why it waits
    again = decide(observe(job(status=decision.status), running, None))
    (create,) = of(again, CreatePods)
    assert {p.manifest["metadata"]["labels"][kueue.POD_GROUP_LABEL] for p in create.pods} == {"demo-a2"}
    waiting = decide(observe(job(status=again.status), [*running, pod(0, attempt=2), pod(1, attempt=2)],
                             workload(("QuotaReserved", "False", "Pending", PENDING_MESSAGE), attempt=2)))
    admitted = condition(waiting.status, "Admitted")
    assert admitted["reason"] == "Preempted" and PENDING_MESSAGE in admitted["message"]
    assert "waits for quota again" in waiting.status["message"]
    # re-admitted: placed only once attempt 1's pods are gone
    free = [pod(0, attempt=2, kueue_gated=False), pod(1, attempt=2, kueue_gated=False)]
    blocked = decide(observe(job(status=waiting.status), [*running, *free], None))
    assert not of(blocked, Place) and condition(blocked.status, "Admitted")["status"] == "True"
    assert of(decide(observe(job(status=blocked.status), free, None)), Place)


def test_a_failed_pod_restarts_a_queued_gang_as_a_new_group_and_counts():
    status = running_status()
    pods = [pod(0, kueue_gated=False, ours=False, pinned=PLACED[0], phase="Running"),
            pod(1, kueue_gated=False, ours=False, pinned=PLACED[1], phase="Failed")]
    decision = decide(observe(job(status=status), pods, workload(("Admitted", "True", "Admitted", "ok"))))
    assert decision.status["restarts"] == 1 and decision.status["attempt"] == 2
    assert of(decision, DeleteWorkloads) == [DeleteWorkloads(("demo-a1",))], "quota back at once"


def test_pods_in_a_namespace_kueue_does_not_manage_never_run_outside_the_quota():
    status = queued_status()
    pods = [pod(0, kueue_gated=False, managed=False), pod(1, kueue_gated=False, managed=False)]
    decision = decide(observe(job(status=status), pods, None))
    assert not of(decision, Place) and not of(decision, PinAndRelease)
    admitted = condition(decision.status, "Admitted")
    assert admitted["reason"] == "NotManagedByKueue" and "kubectl label namespace ns" in admitted["message"]
    assert ("Warning", "NotManagedByKueue") in events(decision)
    assert ("Warning", "NotManagedByKueue") not in events(decide(observe(job(status=decision.status), pods, None)))


def test_without_a_queue_nothing_of_kueue_happens():
    body = job(queue=None)
    decision = decide(observe(body))
    assert of(decision, Place) and not of(decision, CreatePods)
    assert condition(decision.status, "Admitted") is None
    status = copy.deepcopy(placed(decision.status))
    created = decide(observe(job(status=status, queue=None)))
    (create,) = of(created, CreatePods)
    assert [p.node for p in create.pods] == list(PLACED)
    assert not [key for p in create.pods for key in p.manifest["metadata"]["labels"] if key.startswith("kueue.")]
    assert of(created, RemoveGates) and not of(created, PinAndRelease)


def test_a_queued_pod_that_vanishes_after_admission_breaks_the_gang():
    """Before release (phase Placing) too: a group member Kueue admitted cannot be replaced inside the group."""
    status = placed(decide(observe(job(status=queued_status()), [pod(0, kueue_gated=False), pod(1, kueue_gated=False)],
                                   workload(("Admitted", "True", "Admitted", "ok")))).status)
    assert status["phase"] == "Placing"
    decision = decide(observe(job(status=status), [pod(0, kueue_gated=False)], None))
    assert decision.status["restarts"] == 1 and decision.status["attempt"] == 2
    assert condition(decision.status, "Restarting")["reason"] == "PodDeleted"
    assert not of(decision, CreatePods), "never a replacement pod in an admitted group"


def test_pods_this_process_created_are_released_as_soon_as_kueue_admits_them():
    """In flight since their creation (the watch may lag behind it), but released only once pinned: no wait for
    the in-flight horizon between admission and release."""
    pods = [pod(0, kueue_gated=False), pod(1, kueue_gated=False)]
    status = placed(decide(observe(job(status=queued_status()), pods,
                                   workload(("Admitted", "True", "Admitted", "ok")))).status)
    in_flight = frozenset(p["metadata"]["name"] for p in pods)
    decision = decide(dataclasses.replace(observe(job(status=status), pods, None), in_flight=in_flight))
    (release,) = of(decision, PinAndRelease)
    assert [name for name, _ in release.pods] == ["demo-a1-0", "demo-a1-1"]
    released = [pod(i, kueue_gated=False, pinned=PLACED[i]) for i in range(2)]  # the watch: pinned, gate not yet gone
    again = decide(dataclasses.replace(observe(job(status=decision.status), released, None), in_flight=in_flight))
    assert not of(again, PinAndRelease), "released a moment ago: not again"
