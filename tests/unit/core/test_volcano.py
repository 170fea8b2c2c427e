"""Volcano mode, the pure core: the wire contract (contracts/volcano.py), the PodGroup and the pods render makes for
Volcano, the placement as a preference, and the decide() scenarios of a job Volcano schedules (docs/install.md,
"On a MindCluster cluster with Volcano")."""

from __future__ import annotations

import copy
import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from ascend_hybrid.contracts import names
from ascend_hybrid.contracts import volcano as volcanos
from ascend_hybrid.contracts.ascend import ACCELERATOR_TYPE_LABEL, RACK_LABEL, VOLCANO_MODE, DevicePlugins
from ascend_hybrid.gang import render
from ascend_hybrid.gang.inventory import build_inventory
from ascend_hybrid.gang.placement import GangRequest, Placement, place
from ascend_hybrid.reconcile import membership
from ascend_hybrid.reconcile.actions import (
    AdoptPods,
    ApplyPodGroup,
    CreatePods,
    DeletePodGroups,
    DeletePods,
    Place,
    PostEvent,
    WriteRankTable,
)
from ascend_hybrid.reconcile.decision import decide
from ascend_hybrid.reconcile.placement_record import record_placement, record_replacement
from ascend_hybrid.reconcile.state import Observed, Pass, applied
from ascend_hybrid.spec import rules
from ascend_hybrid.spec.rules import parse
from support.builders import JobBuilder, NodeBuilder, PodBuilder

NOW = datetime(2026, 12, 8, 12, 0, 0, tzinfo=UTC)
NODES = ("node-a", "node-b", "node-c")


def vjob(name: str = "vj", **scheduling) -> JobBuilder:
    """DP 2 × TP 4 on two 4-NPU 910B pods, scheduled by Volcano."""
    return (JobBuilder(name, namespace="ns").uid("uid-1").created("2026-12-08T11:59:00Z")
            .parallelism(data=2, tensor=4).per_pod(4).backoff_limit(2)
            .section("scheduling", schedulerName="volcano", **scheduling).status({}))


def nodes(racks: tuple[str, ...] = ("r0", "r0", "r1")) -> dict[str, dict]:
    return {name: NodeBuilder(name).ready(since=NOW).label(ACCELERATOR_TYPE_LABEL, "module-910b-8")
            .label(RACK_LABEL, rack).build() for name, rack in zip(NODES, racks)}


def observe(body: dict, pods=(), podgroup: dict | None = None, podgroup_read: bool = False,
            rank_table: dict | None = None, now: datetime = NOW, **extra) -> Observed:
    try:
        resolved, problems = parse(body), ()
    except rules.SpecError as error:
        resolved, problems = None, tuple(error.problems)
    return Observed(job=body, resolved=resolved, spec_problems=problems, pods=tuple(pods),
                    rank_table=rank_table or {"status": "initializing"}, children_ready=True, sched_ip="127.32.0.10",
                    nodes=nodes(), now=now, podgroup=podgroup, podgroup_read=podgroup_read, **extra)


def of(decision, kind):
    return [a for a in decision.actions if isinstance(a, kind)]


def events(decision) -> list[tuple[str, str]]:
    return [(a.type, a.reason) for a in decision.actions if isinstance(a, PostEvent)]


def condition(status: dict, kind: str) -> dict:
    return next(c for c in status["conditions"] if c["type"] == kind)


def handed_over(body: dict, plan: tuple[str, ...] | None = ("node-a", "node-b"), attempt: int = 1) -> dict:
    """The status after the shell's placement under Volcano: the plan (or none) handed over with the PodGroup."""
    status = decide(observe(body)).status
    placement = Placement(ok=True, nodes=plan) if plan else Placement(ok=False, reason="needs 2 pods; found 1")
    status = applied(record_placement, status, parse(body), placement, NOW, 1, {"node-a": "r0", "node-b": "r0",
                     "node-c": "r1"}, volcano=True).status
    status["attempt"] = status["placement"]["attempt"] = attempt
    return status


def vpod(index: int, attempt: int = 1, node: str | None = None, chips=range(4)) -> PodBuilder:
    built = (PodBuilder("vj", index, namespace="ns").attempt(attempt).created(NOW)
             .label(volcanos.REPLICA_INDEX_LABEL, str(index)))
    return built.running(node=node).devices(chips) if node else built


def podgroup(phase: str, unschedulable: str | None = None) -> dict:
    conditions = [{"type": "Unschedulable", "status": "True", "reason": "NotEnoughResources",
                   "message": unschedulable}] if unschedulable else []
    return {"metadata": {"name": "vj-a1"}, "status": {"phase": phase, "conditions": conditions}}


# -- the contract ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("scheduler, options, queue, default, expected", [
    ("volcano", False, None, None, True), (None, True, None, None, True), (None, False, None, "volcano", True),
    (None, False, "team-a", "volcano", False), ("default-scheduler", False, None, "volcano", False),
    (None, False, None, None, False), ("", False, None, "volcano", True)])
def test_a_job_runs_through_volcano_when_it_names_it_sets_its_options_or_the_operator_says_so(
        scheduler, options, queue, default, expected):
    assert volcanos.uses_volcano(scheduler, options, queue, default) is expected


@pytest.mark.parametrize("chip, per_pod, asked, labels, annotations", [
    ("910A", 8, None, {"ring-controller.atlas": "ascend-910"}, {}),
    ("910B", 8, None, {"ring-controller.atlas": "ascend-910b"}, {"huawei.com/schedule_policy": "chip8-node8"}),
    ("A3", 8, None, {"ring-controller.atlas": "ascend-910b"}, {"huawei.com/schedule_policy": "chip2-node16"}),
    ("A3", 16, None, {"ring-controller.atlas": "ascend-910b"},
     {"huawei.com/schedule_policy": "chip2-node16-sp", "sp-block": "64"}),
    ("A3", 16, 32, {"ring-controller.atlas": "ascend-910b"},
     {"huawei.com/schedule_policy": "chip2-node16-sp", "sp-block": "32"}),
])
def test_the_podgroup_carries_what_the_ascend_plugin_reads_for_each_chip(chip, per_pod, asked, labels, annotations):
    block = volcanos.sp_block(chip, per_pod, 64, asked)
    got_labels, got_annotations = volcanos.podgroup_metadata(chip, block, None)
    assert got_labels == {**labels, "framework": "mindspore"} and got_annotations == annotations
    assert volcanos.podgroup_metadata(chip, block, "large-model-schema")[0]["tor-affinity"] == "large-model-schema"


def test_the_chip_type_is_a_node_selector_when_its_nodes_agree_on_one_accelerator_type():
    same = [NodeBuilder(n).label(ACCELERATOR_TYPE_LABEL, "module-910b-8").build() for n in ("a", "b")]
    mixed = same + [NodeBuilder("c").label(ACCELERATOR_TYPE_LABEL, "card-910b-2").build()]
    a910 = [NodeBuilder("d").label(ACCELERATOR_TYPE_LABEL, "module").build()]
    assert volcanos.chip_selection("910B", same + a910, {}) == ({ACCELERATOR_TYPE_LABEL: "module-910b-8"}, [])
    assert volcanos.chip_selection("910B", mixed, {}) == (
        {}, [{"key": ACCELERATOR_TYPE_LABEL, "operator": "In", "values": ["card-910b-2", "module-910b-8"]}])
    assert volcanos.chip_selection("910B", same, {ACCELERATOR_TYPE_LABEL: "x"}) == ({}, [])
    assert volcanos.chip_selection("A3", same, {}) == ({}, [])


def test_min_resources_ask_for_the_pods_being_placed_only():
    assert volcanos.min_resources("huawei.com/Ascend910", 8, {"cpu": "500m", "memory": "1.5Gi"}, 3) == {
        "huawei.com/Ascend910": "24", "cpu": "1500m", "memory": "4.5Gi"}
    assert volcanos.min_resources("huawei.com/Ascend910", 8, {"cpu": "1e3"}, 2)["cpu"] == "1e3"


@pytest.mark.parametrize("group, state, words", [
    (None, volcanos.ABSENT, "no PodGroup"),
    (podgroup("Pending"), volcanos.PENDING, "waits in Volcano Queue q1"),
    (podgroup("Inqueue", "2/2 tasks in gang unschedulable: pod group is not ready"), volcanos.UNSCHEDULABLE,
     "2/2 tasks in gang unschedulable"),
    (podgroup("Inqueue"), volcanos.INQUEUE, "admitted by Volcano Queue q1"),
    (podgroup("Running"), volcanos.RUNNING, "Running")])
def test_the_podgroup_says_where_volcano_holds_the_gang(group, state, words):
    verdict = volcanos.assess(group, "q1")
    assert verdict.state == state and words in verdict.message


# -- render -------------------------------------------------------------------------------------------------------------
def test_the_podgroup_holds_every_pod_of_the_attempt_owned_by_the_job():
    job = parse(vjob(volcano={"queue": "team-a", "torAffinity": "normal-schema"})
                .section("template", priorityClassName="high", resources={"requests": {"cpu": "2"}}).build())
    metadata = {"labels": {"team": "nlp"}, "annotations": {"fault-scheduling": "grace",
                                                           "kubectl.kubernetes.io/last-applied-configuration": "{}"}}
    group = render.pod_group(job, "ns", "uid-1", 3, 0, metadata)
    assert (group["apiVersion"], group["kind"]) == ("scheduling.volcano.sh/v1beta1", "PodGroup")
    assert group["metadata"]["name"] == names.pod_group("vj", 3) == "vj-a3"
    assert group["metadata"]["ownerReferences"] == [{"apiVersion": "hybrid.ascend.dev/v1alpha1",
                                                     "kind": "AscendHybridJob", "name": "vj", "uid": "uid-1",
                                                     "controller": True, "blockOwnerDeletion": True}]
    assert group["spec"] == {"minMember": 2, "minTaskMember": {"worker": 2}, "queue": "team-a",
                             "priorityClassName": "high",
                             "minResources": {"huawei.com/Ascend910": "8", "cpu": "4"}}
    assert group["metadata"]["labels"] == {"team": "nlp", names.JOB_LABEL: "vj", **names.MANAGED_BY,
                                           "ring-controller.atlas": "ascend-910b", "framework": "mindspore",
                                           "tor-affinity": "normal-schema"}
    assert group["metadata"]["annotations"] == {"fault-scheduling": "grace",
                                                "huawei.com/schedule_policy": "chip8-node8"}
    assert render.pod_group(job, "ns", "uid-1", 3, 1)["spec"]["minResources"] == {
        "huawei.com/Ascend910": "4", "cpu": "2"}, "a pod made again asks Volcano for itself only"


def test_volcano_pods_are_neither_bound_nor_pinned_and_prefer_the_planned_node():
    job = parse(vjob().build())
    chips = render.ByVolcano({ACCELERATOR_TYPE_LABEL: "module-910b-8"})
    pods = render.gang_pods(job, "ns", "uid-1", 2, [(0, "node-a"), (1, None)], "127.32.0.10", volcano=chips)
    for index, pod in enumerate(pods):
        meta, spec = pod["metadata"], pod["spec"]
        assert spec["schedulerName"] == "volcano" and "nodeName" not in spec and "schedulingGates" not in spec
        assert meta["annotations"] == {"hccl/rankIndex": str(index), "scheduling.k8s.io/group-name": "vj-a2",
                                       "volcano.sh/task-spec": "worker"}
        assert {key: meta["labels"][key] for key in meta["labels"] if key.startswith("training.kubeflow.org/")} == {
            "training.kubeflow.org/job-name": "vj", "training.kubeflow.org/replica-type": "worker",
            "training.kubeflow.org/replica-index": str(index)}, "no operator-name: the device plugin annotates"
        assert meta["labels"]["ring-controller.atlas"] == "ascend-910b"
        assert spec["nodeSelector"] == {ACCELERATOR_TYPE_LABEL: "module-910b-8"}
        assert not [key for key in meta["annotations"] if key.startswith("huawei.com/") or "ascend" in key]
        assert pod == render.pod(job, "ns", "uid-1", 2, index, ("node-a", None)[index], "127.32.0.10",
                                 volcano=chips)
    assert pods[0]["spec"]["affinity"] == {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "preference": {"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-a"]}]}}]}}
    assert "affinity" not in pods[1]["spec"], "no plan for it: no preference"
    required = render.ByVolcano(requirements=({"key": ACCELERATOR_TYPE_LABEL, "operator": "In", "values": ["x"]},))
    [pinned] = render.gang_pods(job, "ns", "uid-1", 2, [(1, "node-b")], None, volcano=required)
    assert set(pinned["spec"]["affinity"]["nodeAffinity"]) == {"requiredDuringSchedulingIgnoredDuringExecution",
                                                              "preferredDuringSchedulingIgnoredDuringExecution"}


# -- placement --------------------------------------------------------------------------------------------------------
def test_a_volcano_plan_uses_volcano_mode_nodes_and_no_kubelet_ring_rule():
    node_objects = [NodeBuilder(f"n{i}").chip("910A").ready().build() for i in range(2)]
    plugins = DevicePlugins(forced=VOLCANO_MODE)
    inventory = build_inventory(node_objects, [], plugins=plugins)
    request = GangRequest(pod_count=2, chips_per_pod=4, chip="910A")
    refused = place(request, inventory)
    assert not refused.ok and refused.cause == "DevicePluginVolcanoMode"
    assert place(dataclasses.replace(request, volcano=True), inventory).ok
    kubelet = build_inventory(node_objects, [], plugins=DevicePlugins(forced="kubelet"))
    assert not place(request, kubelet).ok, "kubelet mode: a 4-chip 910A pod may have its ring split"
    assert place(dataclasses.replace(request, volcano=True), kubelet).ok


# -- decide -----------------------------------------------------------------------------------------------------------
def test_a_volcano_job_asks_for_a_plan_handed_over_with_its_podgroup_and_pods():
    decision = decide(observe(vjob().build()))
    [asked] = of(decision, Place)
    assert asked.request.volcano and asked.request.pod_count == 2
    status = handed_over(vjob().build())
    placement = status["placement"]
    assert placement["scheduler"] == "volcano" and placement["podGroup"] == "vj-a1"
    assert placement["nodes"] == ["", ""] and placement["planned"]["nodes"] == ["node-a", "node-b"]
    placed = condition(status, "Placed")
    assert (placed["status"], placed["reason"]) == ("False", "Scheduling") and "Queue default" in placed["message"]
    started = decide(observe(vjob().status(status).build()))
    [group] = of(started, ApplyPodGroup)
    [created] = of(started, CreatePods)
    assert started.actions.index(group) < started.actions.index(created), "the PodGroup before its pods"
    assert group.manifest["spec"]["minMember"] == 2
    assert [pod.node for pod in created.pods] == ["node-a", "node-b"], "the plan's chips promised meanwhile"
    for pod, node in zip(created.pods, ("node-a", "node-b")):
        assert "nodeName" not in pod.manifest["spec"] and pod.manifest["spec"]["schedulerName"] == "volcano"
        preference = pod.manifest["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
        assert preference[0]["preference"]["matchExpressions"][0]["values"] == [node]
        assert pod.manifest["spec"]["nodeSelector"] == {ACCELERATOR_TYPE_LABEL: "module-910b-8"}
    assert started.status["phase"] == "Starting" and "PodGroup vj-a1" in started.status["message"]


def test_the_operators_scheduler_setting_runs_a_job_that_names_none_through_volcano():
    plain = JobBuilder("vj", namespace="ns").uid("u").parallelism(data=2, tensor=4).per_pod(4).status({}).build()
    assert not of(decide(observe(plain)), Place)[0].request.volcano
    assert of(decide(observe(plain, default_scheduler="volcano")), Place)[0].request.volcano


def test_a_gang_the_placer_finds_no_room_for_goes_to_volcano_without_preferences():
    status = handed_over(vjob().build(), plan=None)
    assert status["placement"]["planned"] == {"nodes": []} and status["placement"]["reason"] == "needs 2 pods; found 1"
    started = decide(observe(vjob().status(status).build()))
    [created] = of(started, CreatePods)
    assert [pod.node for pod in created.pods] == [None, None]
    assert all("affinity" not in pod.manifest["spec"] for pod in created.pods)


def test_an_elastic_job_that_may_shrink_soon_waits_as_on_the_direct_path():
    body = vjob().build()
    status = decide(observe(body)).status
    waiting = applied(record_placement, status, parse(body), Placement(ok=False, reason="no room"), NOW, 1, {},
                      volcano=True, may_wait=True).status
    assert "attempt" not in waiting["placement"] and condition(waiting, "Placed")["reason"] == "Unschedulable"


@pytest.mark.parametrize("group, reason, kind", [
    (podgroup("Pending"), "WaitingInQueue", "Normal"),
    (podgroup("Inqueue", "2/2 tasks in gang unschedulable: pod group is not ready, 2 Pending, 2 minAvailable"),
     "Unschedulable", "Warning")])
def test_a_gang_volcano_holds_is_pending_in_volcanos_words_and_never_times_out(group, reason, kind):
    body = vjob().status(handed_over(vjob().build())).build()
    unbound = [vpod(0).build(), vpod(1).build()]
    late = NOW + timedelta(hours=2)  # far past schedulingTimeoutSeconds
    decision = decide(observe(body, pods=unbound, podgroup=group, podgroup_read=True, now=late))
    placed = condition(decision.status, "Placed")
    assert (placed["status"], placed["reason"]) == ("False", reason)
    assert placed["message"] == volcanos.assess(group, "default").message
    assert decision.status["phase"] == "Pending" and decision.status["attempt"] == 1
    assert not of(decision, DeletePods) and (kind, reason) in events(decision)
    again = decide(observe(vjob().status(decision.status).build(), pods=unbound, podgroup=group, podgroup_read=True,
                           now=late))
    assert (kind, reason) not in events(again), "said once"


def test_a_podgroup_gone_while_its_pods_wait_is_applied_again_for_the_pods_not_bound():
    body = vjob().status(handed_over(vjob().build())).build()
    decision = decide(observe(body, pods=[vpod(0, node="node-a").build(), vpod(1).build()], podgroup=None,
                              podgroup_read=True))
    [group] = of(decision, ApplyPodGroup)
    assert group.manifest["spec"]["minResources"]["huawei.com/Ascend910"] == "4"
    assert not of(decide(observe(body, pods=[vpod(0).build(), vpod(1).build()])), ApplyPodGroup), "not read: not known"


def test_where_volcano_bound_the_gang_is_recorded_against_the_plan_and_the_rank_table_completes():
    status = handed_over(vjob().build())
    pods = [vpod(0, node="node-a").build(), vpod(1, node="node-c").build()]
    decision = decide(observe(vjob().status(status).build(), pods=pods))
    placement = decision.status["placement"]
    assert placement["nodes"] == ["node-a", "node-c"] and placement["onPlannedNodes"] == "1/2"
    assert (placement["racks"], placement["stageRacks"], placement["planned"]["racks"]) == (2, 2, 1)
    honoured = condition(decision.status, "PlacementHonoured")
    assert (honoured["status"], honoured["reason"]) == ("False", "PlanNotHonoured")
    assert "racks" in honoured["message"] and "1/2 pods on their planned nodes" in honoured["message"]
    assert ("Warning", "PlanNotHonoured") in events(decision)
    assert condition(decision.status, "Placed")["reason"] == "BoundByVolcano"
    [table] = of(decision, WriteRankTable)
    assert table.table["status"] == "completed" and decision.status["phase"] == "Running"
    same = decide(observe(vjob().status(decision.status).build(), pods=pods, rank_table=table.table))
    assert ("Warning", "PlanNotHonoured") not in events(same)
    swapped = [vpod(0, node="node-b").build(), vpod(1, node="node-a").build()]
    close = decide(observe(vjob().status(status).build(), pods=swapped)).status
    assert condition(close, "PlacementHonoured")["reason"] == "AsCloseAsPlanned"
    assert close["placement"]["onPlannedNodes"] == "0/2"
    wider = decide(observe(vjob().status(close).build(), pods=pods))  # bound again, wider: honoured no more
    assert condition(wider.status, "PlacementHonoured")["reason"] == "PlanNotHonoured"
    assert ("Warning", "PlanNotHonoured") in events(wider)


def test_a_pod_a_node_refused_is_made_again_in_the_same_podgroup_and_nothing_else_moves():
    status = handed_over(vjob().build())
    why = "Allocate failed due to not get valid pod, which is unexpected"
    refused = vpod(1).node("node-b").phase("Failed").status(reason="UnexpectedAdmissionError", message=why)
    running = vpod(0, node="node-a").build()
    decision = decide(observe(vjob().status(status).build(), pods=[running, refused.build()]))
    assert [a.names for a in of(decision, DeletePods)] == [("vj-a1-1",)], "that pod only"
    assert not of(decision, DeletePodGroups) and decision.status["attempt"] == 1
    assert decision.status["restarts"] == 0 and "lastFailure" not in decision.status
    assert decision.status["placement"]["remaking"] == [1] and ("Warning", "RefusedByNode") in events(decision)
    deleting = decide(observe(vjob().status(decision.status).build(),
                              pods=[running, refused.deleting(NOW).build()]))
    assert not of(deleting, DeletePods) and not of(deleting, CreatePods), "waits for it to go"
    gone = decide(observe(vjob().status(decision.status).build(), pods=[running]))
    assert "lastFailure" not in gone.status and gone.status["attempt"] == 1, "not a lost pod"
    [group] = of(gone, ApplyPodGroup)
    [created] = of(gone, CreatePods)
    assert group.manifest["metadata"]["name"] == "vj-a1" and group.manifest["spec"]["minMember"] == 2
    assert [pod.manifest["metadata"]["name"] for pod in created.pods] == ["vj-a1-1"]
    assert gone.status["placement"]["remaking"] == []


def test_a_whole_gang_restart_replaces_the_attempts_podgroup():
    status = handed_over(vjob().section("runPolicy", recovery={"finestRung": "RestartGang"}).build())
    status.update(phase="Running")
    pods = [vpod(0, node="node-a").build(), vpod(1, node="node-b").exited(137).build()]
    body = vjob().section("runPolicy", backoffLimit=2, recovery={"finestRung": "RestartGang"}).status(status).build()
    decision = decide(observe(body, pods=pods))
    assert decision.status["attempt"] == 2
    assert [a.names for a in of(decision, DeletePodGroups)] == [("vj-a1",)]
    assert of(decision, DeletePods)[0].attempt == 1


def test_a_finished_job_deletes_its_podgroup_once():
    status = handed_over(vjob().build())
    status.update(phase="Running")
    done = [vpod(i, node=n).phase("Succeeded").build() for i, n in enumerate(("node-a", "node-b"))]
    decision = decide(observe(vjob().status(status).build(), pods=done))
    assert decision.status["phase"] == "Succeeded"
    assert [a.names for a in of(decision, DeletePodGroups)] == [("vj-a1",)]
    assert not of(decide(observe(vjob().status(decision.status).build(), pods=done)), DeletePodGroups)


def test_a_suspended_job_gives_its_queue_its_room_back():
    status = handed_over(vjob().build())
    body = vjob().section("runPolicy", suspend=True).status(status).build()
    decision = decide(observe(body, pods=[vpod(0).build(), vpod(1).build()]))
    assert [a.names for a in of(decision, DeletePodGroups)] == [("vj-a1",)]


def test_replace_pod_under_volcano_gives_the_new_pod_its_plan_as_a_preference():
    status = handed_over(vjob().build())
    status["placement"]["nodes"] = ["node-a", "node-b"]
    replaced = applied(record_replacement, status, 1, Placement(ok=True, nodes=("node-c",)), NOW).status
    assert replaced["placement"]["nodes"] == ["node-a", ""]
    assert replaced["placement"]["planned"]["nodes"] == ["node-a", "node-c"]


def test_a_kept_pod_joins_the_new_attempts_podgroup_when_it_is_adopted():
    status = handed_over(vjob().build(), attempt=2)
    status["recovery"] = {"kept": ["vj-a1-1"], "keptAttempt": 2}
    kept = vpod(1, attempt=1, node="node-b").build()
    p = Pass(observe(vjob().status(status).build(), pods=[kept]))
    membership.adopt(p, [kept])
    [adopt] = of(p.d, AdoptPods)
    [(name, patch)] = adopt.pods
    assert name == "vj-a1-1"
    assert {op["path"]: op["value"] for op in patch} == {
        "/metadata/labels/hybrid.ascend.dev~1attempt": "2", "/metadata/labels/hybrid.ascend.dev~1pod-index": "0",
        "/metadata/labels/training.kubeflow.org~1replica-index": "0", "/metadata/annotations/hccl~1rankIndex": "0",
        "/metadata/annotations/scheduling.k8s.io~1group-name": "vj-a2"}


def test_a_direct_path_pod_is_adopted_without_volcanos_keys():
    plain = PodBuilder("vj", 1, namespace="ns").running(node="node-b").build()
    wanted = membership.as_member(copy.deepcopy(plain), 2, 0)
    assert {op["path"] for op in membership.adoption_patch(wanted)} == {
        "/metadata/labels/hybrid.ascend.dev~1attempt", "/metadata/labels/hybrid.ascend.dev~1pod-index",
        "/metadata/annotations/hccl~1rankIndex"}


def test_a_pod_made_again_waits_for_volcano_inside_its_rung():
    status = handed_over(vjob().build())
    status.update(phase="Restarting")
    status["placement"]["nodes"] = ["node-a", ""]
    pods = [vpod(0, node="node-a").build(), vpod(1).build()]
    decision = decide(observe(vjob().status(status).build(), pods=pods, podgroup=podgroup("Inqueue"),
                              podgroup_read=True))
    assert decision.status["phase"] == "Restarting" and "1 of 2 pods waiting" in decision.status["message"]
