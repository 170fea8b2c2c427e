"""kueue.py: what a queued attempt's pods carry and how the pods and the Workload are read (pure)."""

from __future__ import annotations

import copy

import jsonpatch
import pytest

from ascend_hybrid.contracts import kueue, names
from ascend_hybrid.contracts.ascend import ACCELERATOR_TYPE_LABEL, CHIP_NAME_LABEL
from support.builders import NodeBuilder, PodBuilder

GROUP = "demo-a1"


def group_pod(index: int) -> PodBuilder:
    """Pod `index` of the attempt's pod group, as created: held by our gang gate and Kueue's admission gate."""
    return (PodBuilder("demo", index).labels({kueue.POD_GROUP_LABEL: GROUP, kueue.MANAGED_LABEL: "true"})
            .gates(names.GANG_GATE, kueue.GATE_PREFIX + "admission").status(conditions=[]))


def admitted_pod(index: int) -> PodBuilder:
    """Kueue removed its gate; ours holds the pod still."""
    return group_pod(index).gates(names.GANG_GATE)


def workload(*conditions: tuple[str, str, str, str], admission: dict | None = None) -> dict:
    status = {"conditions": [{"type": t, "status": s, "reason": r, "message": m} for t, s, r, m in conditions]}
    if admission:
        status["admission"] = admission
    return {"metadata": {"name": GROUP}, "spec": {"queueName": "team-a"}, "status": status}


PENDING = ("QuotaReserved", "False", "Pending",
           "couldn't assign flavors to pod set 7839867f: insufficient unused quota for huawei.com/Ascend910 in "
           "flavor ascend-910b, 16 more needed")
ADMISSION = {"clusterQueue": "ascend", "podSetAssignments": [
    {"name": "7839867f", "count": 2, "flavors": {"huawei.com/Ascend910": "ascend-910b", "cpu": "ascend-910b"}}]}


def test_pods_of_an_attempt_form_one_unretriable_group_named_after_the_attempt():
    labels, annotations = kueue.pod_metadata("demo", 3, 16, "team-a")
    assert labels == {"kueue.x-k8s.io/queue-name": "team-a", "kueue.x-k8s.io/pod-group-name": "demo-a3"}
    assert annotations == {"kueue.x-k8s.io/pod-group-total-count": "16", "kueue.x-k8s.io/retriable-in-group": "false"}
    assert kueue.group_name("demo", 3) == names.pod_name("demo", 3, 0).rsplit("-", 1)[0], "the pods' own prefix"


def test_the_chip_requirement_names_the_accelerator_types_of_the_jobs_chip_only():
    nodes = [NodeBuilder(name).label(ACCELERATOR_TYPE_LABEL, accelerator).build() for name, accelerator in
             (("b1", "module-910b-8"), ("b2", "card-910b-2"), ("a1", "module"), ("c1", "module-a3-16"))]
    assert kueue.chip_affinity("910B", nodes) == [
        {"key": "accelerator-type", "operator": "In", "values": ["card-910b-2", "module-910b-8"]}]
    assert kueue.chip_affinity("910A", nodes)[0]["values"] == ["module"]
    assert kueue.chip_affinity("910B", [NodeBuilder("x").label(ACCELERATOR_TYPE_LABEL, "module").build()]) == [], (
        "no node of the chip: no requirement")
    # a 910B node typed by its chip name only would be excluded by an accelerator-type requirement: none then
    assert kueue.chip_affinity("910B", [*nodes, NodeBuilder("b3").label(CHIP_NAME_LABEL, "910B3").build()]) == []


def test_kueue_holding_the_group_is_waiting_in_kueues_own_words():
    pods = [group_pod(0).build(), group_pod(1).build()]
    verdict = kueue.assess(pods, 2, workload(PENDING), GROUP)
    assert verdict.state == kueue.WAITING and verdict.message == PENDING[3]
    assert kueue.assess(pods, 2, None, GROUP).message == f"waiting for Kueue to create the Workload {GROUP}"
    reserved = workload(("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue ascend"))
    assert "admission checks" in kueue.assess(pods, 2, reserved, GROUP).message
    # admitted, Kueue still removing its gates: not admitted for us until every pod is free of them
    admitted = workload(("Admitted", "True", "Admitted", "The workload is admitted"), admission=ADMISSION)
    assert kueue.assess([admitted_pod(0).build(), group_pod(1).build()], 2, admitted, GROUP).state == kueue.WAITING


def test_a_group_is_admitted_once_no_pod_carries_a_kueue_gate_and_brings_the_flavors_constraints():
    toleration = {"key": "pool", "operator": "Equal", "value": "npu", "effect": "NoSchedule"}
    pods = [admitted_pod(i).spec(nodeSelector={"accelerator-type": "module-910b-8"}, tolerations=[toleration]).build()
            for i in range(2)]
    admitted = workload(("QuotaReserved", "True", "QuotaReserved", ""), ("Admitted", "True", "Admitted", ""),
                        admission=ADMISSION)
    verdict = kueue.assess(pods, 2, admitted, GROUP)
    assert verdict.state == kueue.ADMITTED
    assert verdict.node_selector == {"accelerator-type": "module-910b-8"} and verdict.tolerations == (toleration,)
    assert verdict.message == f"pod group {GROUP} admitted by ClusterQueue ascend (flavor ascend-910b)"
    # its Workload already gone (garbage-collected): the pods alone tell
    assert kueue.assess(pods, 2, None, GROUP).state == kueue.ADMITTED


def test_pods_kueue_never_gated_mean_the_queue_is_not_enforced():
    pods = [admitted_pod(i).label(kueue.MANAGED_LABEL, None).build() for i in range(2)]
    verdict = kueue.assess(pods, 2, None, GROUP)
    assert verdict.state == kueue.UNMANAGED and kueue.MANAGED_LABEL in verdict.message
    assert kueue.assess(pods[:1], 2, None, GROUP).state == kueue.ABSENT


def test_eviction_is_read_from_the_workload_or_from_the_pods_termination_target():
    message = "Preempted to accommodate a workload (UID: 2f1f) due to prioritization in the ClusterQueue"
    evicted = workload(("Evicted", "True", "Preempted", message), ("Admitted", "False", "NoReservation", ""))
    running = [admitted_pod(i).build() for i in range(2)]
    assert kueue.assess(running, 2, evicted, GROUP) == kueue.Admission(kueue.EVICTED, "Preempted", message)
    target = [{"type": "TerminationTarget", "status": "True", "reason": "WorkloadEvictedDueToPreempted",
               "message": message}]
    doomed = [admitted_pod(0).status(conditions=target).build()]
    assert kueue.assess(doomed, 2, None, GROUP) == kueue.Admission(kueue.EVICTED, "Preempted", message), (
        "the pod condition outlives the Workload, and counts even with pods missing")
    ours = [{"type": "TerminationTarget", "status": "True", "reason": "WorkloadDeleted", "message": "deleted"}]
    assert kueue.assess([admitted_pod(0).status(conditions=ours).build(), running[1]], 2, None, GROUP).state == (
        kueue.ADMITTED), "the operator deleting the Workload is no eviction"


@pytest.mark.parametrize("affinity", [
    None,
    {},
    {"podAntiAffinity": {}},
    {"nodeAffinity": {}},
    {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "accelerator-type", "operator": "In", "values": ["module-910b-8"]}]}]}}},
])
def test_the_release_patch_pins_to_the_node_keeps_kueues_requirement_and_drops_only_the_gang_gate(affinity):
    pod = (admitted_pod(0) if affinity is None else admitted_pod(0).spec(affinity=affinity)).build()
    pod["spec"]["schedulingGates"].append({"name": "example.com/other"})
    gates = tuple(gate["name"] for gate in pod["spec"]["schedulingGates"])
    patched = jsonpatch.apply_patch(copy.deepcopy(pod), kueue.release_patch(pod, gates, names.GANG_GATE, "node-007"))
    assert patched["spec"]["schedulingGates"] == [{"name": "example.com/other"}]
    terms = patched["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    assert len(terms) == 1, "the apiserver allows additions to the first term only"
    assert terms[0]["matchExpressions"][-1] == {"key": "kubernetes.io/hostname", "operator": "In",
                                                "values": ["node-007"]}
    before = ((affinity or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    if before:
        assert terms[0]["matchExpressions"][:-1] == before["nodeSelectorTerms"][0]["matchExpressions"]
    if affinity and "podAntiAffinity" in affinity:
        assert patched["spec"]["affinity"]["podAntiAffinity"] == {}


def test_the_release_patch_fails_when_the_gates_changed_since_they_were_observed():
    pod = admitted_pod(0).build()
    patch = kueue.release_patch(pod, (names.GANG_GATE, "example.com/gone"), names.GANG_GATE, "node-001")
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(copy.deepcopy(pod), patch)
