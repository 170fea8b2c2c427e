"""The pod projection the watch keeps: every reader answers the same on a pod and on its projection, and the
projection is a small part of the pod."""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import json
from pathlib import Path

import pytest

from ascend_hybrid.contracts import ascend, kueue, names, podview
from ascend_hybrid.contracts.ascend import DEVICE_ANNOTATION, RESOURCE
from ascend_hybrid.contracts.podview import project_pod
from ascend_hybrid.diagnosis import failures
from ascend_hybrid.gang import inventory, ranktable, render
from ascend_hybrid.spec import rules
from support.builders import NodeBuilder, job_body

HERE = Path(__file__).parent


# Not a PodBuilder: the subject is the projection of the whole pod as the apiserver returns it (the rendered
# manifest plus managedFields, defaults and statuses), so every field here is written out.
def full_pod(index: int = 0, *, phase: str = "Running", failed: bool = False, gated: bool = False,
             queued: bool = False) -> dict:
    """A pod as the apiserver returns it: the operator's rendered manifest plus what the apiserver, the
    scheduler, the device plugin and the kubelet add (managedFields, defaults, statuses)."""
    spec = {"parallelism": {"data": 4, "tensor": 8}, "npu": {"perPod": 8},
            "template": {"metadata": {"annotations": {"team": "llm", "note": "x" * 300}}}}
    if queued:
        spec["scheduling"] = {"queue": "team-a"}
    resolved = rules.parse(job_body(spec))
    pod = render.pod(resolved, "ns", "uid-1", 1, index, None if queued else f"node-{index}", "127.32.0.10")
    metadata = pod["metadata"]
    metadata.update(uid=f"pod-uid-{index}", resourceVersion="1234", creationTimestamp="2026-12-01T10:00:00Z",
                    managedFields=[{"manager": "kube-scheduler", "operation": "Update", "fieldsV1": {"f:status": {
                        "f:conditions": {f"k:{{\"type\":\"{kind}\"}}": {".": {}} for kind in ("Ready", "PodScheduled")}}}}])
    metadata["annotations"][DEVICE_ANNOTATION] = json.dumps(
        {"pod_name": str(index), "server_id": f"127.15.0.{index + 1}",
         "devices": [{"device_id": str(chip), "device_ip": f"127.100.{index}.{chip}"} for chip in range(8)]})
    metadata["annotations"]["huawei.com/AscendReal"] = ",".join(f"Ascend910-{chip}" for chip in range(8))
    if gated:
        pod["spec"].pop("nodeName", None)
    else:
        pod["spec"]["nodeName"] = f"node-{index}"
        pod["spec"].pop("schedulingGates", None)
    pod["spec"].update(dnsPolicy="ClusterFirst", schedulerName="default-scheduler", priority=0,
                       tolerations=[{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                                     "effect": "NoExecute", "tolerationSeconds": 300}])
    pod["spec"]["initContainers"] = [{"name": "prepare", "image": "busybox",
                                      "resources": {"limits": {RESOURCE: "8", "cpu": "1"}}}]
    status = {"phase": "Pending" if gated else phase, "qosClass": "Burstable",
              "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-12-01T10:00:01Z"},
                             {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}]}
    if not gated and phase in ("Running", "Failed"):
        status.update(podIP=f"127.16.0.{index + 1}", hostIP=f"127.15.0.{index + 1}", startTime="2026-12-01T10:00:02Z")
        state = {"running": {"startedAt": "2026-12-01T10:00:03Z"}}
        if failed:
            state = {"terminated": {"exitCode": 137, "reason": "Error", "finishedAt": "2026-12-01T10:05:00Z",
                                    "message": 'log tail\n{"cause": "HCCLExecTimeout", "rank": 3, "step": 7}'}}
        status["containerStatuses"] = [{"name": "ascend", "image": "ascend-hybrid/trainer:0.1.0", "ready": True,
                                        "imageID": "sha256:" + "0" * 64, "containerID": "podman://" + "1" * 64,
                                        "restartCount": 0, "started": True, "state": state, "lastState": {}}]
    pod["status"] = status
    return pod


def refused_pod(index: int) -> dict:
    """Unbound, pinned, and the scheduler's PodScheduled=False Unschedulable on it (a rival took its node)."""
    pod = full_pod(index, gated=True)
    pod["status"]["conditions"][0] = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                      "message": "0/10 nodes are available: 1 Insufficient huawei.com/Ascend910.",
                                      "lastTransitionTime": "2026-12-01T10:00:01Z"}
    return pod


def rejected_pod(index: int) -> dict:
    """Bound at creation, and its node's kubelet refused to admit it (a rival holds the chips): Failed, no container."""
    pod = full_pod(index, phase="Pending")
    pod["status"].update(phase="Failed", reason="OutOfhuawei.com/Ascend910",
                         message="Pod was rejected: Node didn't have enough resource: huawei.com/Ascend910, "
                                 "requested: 8, used: 8, capacity: 8")
    return pod


PODS = [full_pod(0), full_pod(1, gated=True), full_pod(2, phase="Failed", failed=True), full_pod(3, phase="Pending"),
        full_pod(4, queued=True, gated=True), refused_pod(5), rejected_pod(6)]
NODES = [NodeBuilder(f"node-{index}").chip("910B").build() for index in range(7)]

READERS = {
    "labels_of": podview.labels_of, "attempt_of": podview.attempt_of, "pod_index": podview.pod_index,
    "phase_of": podview.phase_of, "is_finished": podview.is_finished, "exit_code": podview.exit_code,
    "sched_host": lambda pod: podview.container_env(pod, render.SCHED_HOST_ENV),
    "is_gated": podview.is_gated, "is_deleting": podview.is_deleting, "node_of": podview.node_of,
    "unschedulable_message": podview.unschedulable_message, "admission_refusal": podview.admission_refusal,
    "npu_request": podview.npu_request, "holds_npus": lambda pod: podview.holds_npus(pod.get("spec") or {}),
    "pod_devices": ascend.pod_devices, "pod_chip_ids": ascend.pod_chip_ids,
    "pinned_node": lambda pod: inventory.pinned_node(pod, {}),
    "terminated_state": failures.terminated_state, "true_conditions": failures.true_conditions,
    "classify_failed_pod": lambda pod: failures.classify_failed_pod(pod, podview.node_of(pod)),
    "group_of": kueue.group_of, "kueue_gates": kueue.kueue_gates,
    "release_patch": lambda pod: kueue.release_patch(pod, [names.GANG_GATE], names.GANG_GATE, "node-9"),
    "pod_ip": lambda pod: pod["status"].get("podIP"), "name": lambda pod: pod["metadata"]["name"],
    "created": lambda pod: pod["metadata"].get("creationTimestamp"),
}


@pytest.mark.parametrize("reader", sorted(READERS))
def test_every_reader_answers_the_same_on_a_pod_and_on_its_projection(reader):
    for pod in PODS:
        assert READERS[reader](project_pod(pod)) == READERS[reader](pod), pod["metadata"]["name"]


def test_the_inventory_and_the_rank_table_are_the_same_from_projections():
    projected = [project_pod(pod) for pod in PODS]
    assert inventory.build_inventory(NODES, projected) == inventory.build_inventory(NODES, PODS)
    running = [full_pod(index) for index in range(3)]
    assert ranktable.build_rank_table([project_pod(pod) for pod in running], 8) == \
        ranktable.build_rank_table(running, 8)
    assert ranktable.build_rank_table(running, 8)["status"] == "completed"
    assert kueue.assess(projected[4:], 1, None, "g") == kueue.assess(PODS[4:], 1, None, "g")


def test_the_projection_keeps_a_small_part_of_the_pod_and_none_of_its_bulk():
    for pod in PODS:
        projected = project_pod(pod)
        assert len(json.dumps(projected)) < len(json.dumps(pod)) / 2
        assert "managedFields" not in projected["metadata"] and "note" not in projected["metadata"]["annotations"]
        assert all(set(container) <= {"name", "resources", "env"} for container in projected["spec"]["containers"])
    assert project_pod(project_pod(PODS[2])) == project_pod(PODS[2])  # a projection is its own projection


def test_a_pod_of_nothing_but_a_name_projects_without_failing():
    assert project_pod({"metadata": {"name": "p"}}) == {"metadata": {"name": "p"}, "spec": {}, "status": {}}


def _load(module_name: str):
    spec = importlib.util.spec_from_file_location(f"projection_{module_name}", HERE / f"{module_name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("module_name", ["test_reconcile", "test_queueing"])
def test_every_reconcile_scenario_decides_the_same_on_projected_pods(module_name, monkeypatch):
    """Runs the decide() scenarios of another test module, each decide() also on the projections of its pods."""
    module = _load(module_name)
    real, compared = module.decide, []

    def decide_both(observed):
        projected = dataclasses.replace(observed, pods=tuple(project_pod(pod) for pod in observed.pods))
        on_pods, on_projections = real(observed), real(projected)
        assert (on_projections.actions, on_projections.status, on_projections.requeue_after) == \
            (on_pods.actions, on_pods.status, on_pods.requeue_after)
        compared.append(len(observed.pods))
        return on_pods

    monkeypatch.setattr(module, "decide", decide_both)
    for name, test in inspect.getmembers(module, inspect.isfunction):
        if name.startswith("test_") and not inspect.signature(test).parameters:
            test()
    assert sum(compared) > 20  # the scenarios did decide on pods


def test_only_a_pod_the_kubelet_refused_before_it_ran_is_an_admission_refusal():
    assert [podview.admission_refusal(pod) for pod in PODS] == [None] * 6 + [
        "OutOfhuawei.com/Ascend910: Pod was rejected: Node didn't have enough resource: huawei.com/Ascend910, "
        "requested: 8, used: 8, capacity: 8"]
    started = rejected_pod(7)
    started["status"]["containerStatuses"] = full_pod(7, phase="Failed", failed=True)["status"]["containerStatuses"]
    assert podview.admission_refusal(started) is None  # a container ran: a training failure, diagnosed as such
    affinity = rejected_pod(8)
    affinity["status"].update(reason="NodeAffinity", message="")
    assert podview.admission_refusal(affinity) == "NodeAffinity"
