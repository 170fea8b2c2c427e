"""kueue.py: what a queued attempt's pods carry and how the pods and the Workload are read (pure)."""

from __future__ import annotations

import copy

import jsonpatch
import pytest

from ascend_hybrid.contracts import kueue, names

GROUP = "demo-a1"


def node(name: str, accelerator: str | None = None, chip_name: str | None = None) -> dict:
    labels = {"kubernetes.io/hostname": name}
    if accelerator:
        labels["accelerator-type"] = accelerator
    if chip_name:
        labels["node.kubernetes.io/npu.chip.name"] = chip_name
    return {"metadata": {"name": name, "labels": labels}}


def group_pod(index: int, managed: bool = True, kueue_gates: tuple[str, ...] = (kueue.GATE_PREFIX + "admission",),
              node_selector: dict | None = None, tolerations: list | None = None, conditions: list | None = None,
              affinity: dict | None = None) -> dict:
    labels = {names.JOB_LABEL: "demo", kueue.POD_GROUP_LABEL: GROUP}
    if managed:
        labels[kueue.MANAGED_LABEL] = "true"
    spec = {"schedulingGates": [{"name": names.GANG_GATE}, *({"name": gate} for gate in kueue_gates)]}
    if node_selector:
        spec["nodeSelector"] = node_selector
    if tolerations:
        spec["tolerations"] = tolerations
    if affinity is not None:
        spec["affinity"] = affinity
    return {"metadata": {"name": f"demo-a1-{index}", "labels": labels}, "spec": spec,
            "status": {"phase": "Pending", "conditions": conditions or []}}


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
    nodes = [node("b1", "module-910b-8"), node("b2", "card-910b-2"), node("a1", "module"), node("c1", "module-a3-16")]
    assert kueue.chip_affinity("910B", nodes) == [
        {"key": "accelerator-type", "operator": "In", "values": ["card-910b-2", "module-910b-8"]}]
    assert kueue.chip_affinity("910A", nodes)[0]["values"] == ["module"]
    assert kueue.chip_affinity("910B", [node("x", "module")]) == [], "no node of the chip: no requirement"
    # a 910B node typed by its chip name only would be excluded by an accelerator-type requirement: none then
    assert kueue.chip_affinity("910B", [*nodes, node("b3", chip_name="910B3")]) == []


def test_kueue_holding_the_group_is_waiting_in_kueues_own_words():
    pods = [group_pod(0), group_pod(1)]
    verdict = kueue.assess(pods, 2, workload(PENDING), GROUP)
    assert verdict.state == kueue.WAITING and verdict.message == PENDING[3]
    assert kueue.assess(pods, 2, None, GROUP).message == f"waiting for Kueue to create the Workload {GROUP}"
    reserved = workload(("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue ascend"))
    assert "admission checks" in kueue.assess(pods, 2, reserved, GROUP).message
    # admitted, Kueue still removing its gates: not admitted for us until every pod is free of them
    admitted = workload(("Admitted", "True", "Admitted", "The workload is admitted"), admission=ADMISSION)
    assert kueue.assess([group_pod(0, kueue_gates=()), group_pod(1)], 2, admitted, GROUP).state == kueue.WAITING


def test_a_group_is_admitted_once_no_pod_carries_a_kueue_gate_and_brings_the_flavors_constraints():
    toleration = {"key": "pool", "operator": "Equal", "value": "npu", "effect": "NoSchedule"}
    pods = [group_pod(i, kueue_gates=(), node_selector={"accelerator-type": "module-910b-8"},
                      tolerations=[toleration]) for i in range(2)]
    admitted = workload(("QuotaReserved", "True", "QuotaReserved", ""), ("Admitted", "True", "Admitted", ""),
                        admission=ADMISSION)
    verdict = kueue.assess(pods, 2, admitted, GROUP)
    assert verdict.state == kueue.ADMITTED
    assert verdict.node_selector == {"accelerator-type": "module-910b-8"} and verdict.tolerations == (toleration,)
    assert verdict.message == f"pod group {GROUP} admitted by ClusterQueue ascend (flavor ascend-910b)"
    # its Workload already gone (garbage-collected): the pods alone tell
    assert kueue.assess(pods, 2, None, GROUP).state == kueue.ADMITTED


def test_pods_kueue_never_gated_mean_the_queue_is_not_enforced():
    pods = [group_pod(0, managed=False, kueue_gates=()), group_pod(1, managed=False, kueue_gates=())]
    verdict = kueue.assess(pods, 2, None, GROUP)
    assert verdict.state == kueue.UNMANAGED and kueue.MANAGED_LABEL in verdict.message
    assert kueue.assess(pods[:1], 2, None, GROUP).state == kueue.ABSENT


def test_eviction_is_read_from_the_workload_or_from_the_pods_termination_target():
    message = "Preempted to accommodate a workload (UID: 2f1f) due to prioritization in the ClusterQueue"
    evicted = workload(("Evicted", "True", "Preempted", message), ("Admitted", "False", "NoReservation", ""))
    running = [group_pod(i, kueue_gates=()) for i in range(2)]
    assert kueue.assess(running, 2, evicted, GROUP) == kueue.Admission(kueue.EVICTED, "Preempted", message)
    target = [{"type": "TerminationTarget", "status": "True", "reason": "WorkloadEvictedDueToPreempted",
               "message": message}]
    doomed = [group_pod(0, kueue_gates=(), conditions=target)]
    assert kueue.assess(doomed, 2, None, GROUP) == kueue.Admission(kueue.EVICTED, "Preempted", message), (
        "the pod condition outlives the Workload, and counts even with pods missing")
    ours = [{"type": "TerminationTarget", "status": "True", "reason": "WorkloadDeleted", "message": "deleted"}]
    assert kueue.assess([group_pod(0, kueue_gates=(), conditions=ours), running[1]], 2, None, GROUP).state == (
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
    pod = group_pod(0, kueue_gates=(), affinity=affinity)
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
    pod = group_pod(0, kueue_gates=())
    patch = kueue.release_patch(pod, (names.GANG_GATE, "example.com/gone"), names.GANG_GATE, "node-001")
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(copy.deepcopy(pod), patch)
