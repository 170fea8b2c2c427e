"""Multi-tenant quotas through a real Kueue: Kueue v0.17 built from its module, run by the dev cluster
against the real apiserver, scheduler and kwok nodes; the operator as a real process.

Each test gets its own namespace (labelled for Kueue), ClusterQueue and LocalQueue `team`, so quotas never leak
between tests. A sampler watches every Workload and pod of the namespace while a test runs and fails it if a
gang is ever partly admitted or partly bound.
"""

from __future__ import annotations

import ipaddress
import json
import os
import threading
import time

import pytest
from kubernetes import client

from ascend_hybrid.contracts import kueue, names
from ascend_hybrid.devcluster import cluster
from ascend_hybrid.devcluster.kube import processes
from ascend_hybrid.devcluster.kueue import manager as kueue_manager
from ascend_hybrid.devcluster.kueue import manifests as kueue_manifests
from ascend_hybrid.devcluster.nodes import fleet
from ascend_hybrid.devcluster.testing import procnet
from ascend_hybrid.devcluster.testing.pods import pod_manifest
from support.operator_harness import (
    Jobs,
    OperatorProcess,
    channel_data,
    install_crd,
    job_manifest,
    patch_channel,
    wait_for,
)

pytestmark = pytest.mark.integration

FAIL = {"sim.hybrid.ascend.dev/outcome": "fail", "sim.hybrid.ascend.dev/exit-code": "3"}
QUEUE = "team"
KUEUE_DEFAULT_PORTS = {8080, 8081, 8082, 8443, 9443}


@pytest.fixture(scope="module")
def kueue_cluster(dev_cluster):
    """The session cluster with Kueue running (as `dev-cluster up --kueue` leaves it) and the operator's CRD."""
    if dev_cluster.paths is None:
        pytest.fail("the Kueue tests need a cluster made by `ascend-hybrid dev-cluster up` (its Kueue helper)",
                    pytrace=False)
    kueue_manager.ensure_running(dev_cluster.paths, dev_cluster.api, fleet.simulated_nodes(dev_cluster.core),
                                 progress=lambda line: None)
    install_crd(dev_cluster)
    return dev_cluster


@pytest.fixture(scope="module")
def operator(kueue_cluster, tmp_path_factory):
    process = OperatorProcess(str(kueue_cluster.kubeconfig), tmp_path_factory.mktemp("kueue") / "operator.log").start()
    yield process
    process.stop()


class Queues:
    """The test's ClusterQueue (named after its namespace) and the LocalQueue `team` pointing at it."""

    def __init__(self, dev_cluster, namespace: str):
        self.custom, self.namespace, self.name = client.CustomObjectsApi(dev_cluster.api), namespace, namespace
        self.priority_classes: list[str] = []

    def create(self, npus: int) -> None:
        quota = {flavor: {**amounts, kueue_manifests.RESOURCE: str(npus)}
                 for flavor, amounts in kueue_manifests.flavor_quotas(fleet.simulated_nodes(
                     client.CoreV1Api(self.custom.api_client))).items() if flavor == "910B"}
        kueue_manager.apply_queue_objects(self.custom.api_client, [
            kueue_manifests.cluster_queue(self.name, quota),
            kueue_manifests.local_queue(QUEUE, self.namespace, self.name)])
        wait_for(lambda: any(c["type"] == "Active" and c["status"] == "True" for c in
                             (self.cluster_queue().get("status") or {}).get("conditions") or []),
                 30, f"ClusterQueue {self.name} to be active")

    def cluster_queue(self) -> dict:
        return self.custom.get_cluster_custom_object(kueue.GROUP, "v1beta2", "clusterqueues", self.name)

    def priority_class(self, suffix: str, value: int) -> str:
        name = f"{self.namespace}-{suffix}"[:63]
        self.custom.create_cluster_custom_object(kueue.GROUP, "v1beta2", "workloadpriorityclasses", {
            "apiVersion": f"{kueue.GROUP}/v1beta2", "kind": "WorkloadPriorityClass",
            "metadata": {"name": name}, "value": value})
        self.priority_classes.append(name)
        return name

    def workloads(self) -> dict[str, dict]:
        items = self.custom.list_namespaced_custom_object(kueue.GROUP, "v1beta2", self.namespace, "workloads")["items"]
        return {item["metadata"]["name"]: item for item in items}

    def workload(self, name: str) -> dict | None:
        return self.workloads().get(name)

    def delete(self) -> None:
        for plural, name in [("clusterqueues", self.name), *(("workloadpriorityclasses", n)
                                                             for n in self.priority_classes)]:
            try:
                self.custom.delete_cluster_custom_object(kueue.GROUP, "v1beta2", plural, name)
            except client.ApiException as error:
                if error.status != 404:
                    raise


def condition(obj: dict | None, kind: str) -> dict | None:
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c["type"] == kind), None)


def is_true(obj: dict | None, kind: str) -> bool:
    found = condition(obj, kind)
    return found is not None and found["status"] == "True"


class GangSampler(threading.Thread):
    """Samples the namespace's pods and Workloads every 0.2 s; records every moment a gang is split: a Workload
    whose pod sets or admission do not cover all its pods, a pod free of Kueue's gate while its Workload is not
    admitted, or a pod bound while another of its group still carries Kueue's gate."""

    def __init__(self, dev_cluster, queues: Queues, namespace: str):
        super().__init__(daemon=True)
        self.core, self.queues, self.namespace = dev_cluster.core, queues, namespace
        self.stop_event, self.violations, self.samples, self.errors = threading.Event(), [], 0, []

    def run(self) -> None:
        while not self.stop_event.wait(0.2):
            try:
                self.sample()
            except Exception as error:  # noqa: BLE001 - a sample may race a deletion; counted, not fatal
                self.errors.append(repr(error))

    def sample(self) -> None:
        # Pods before Workloads: Kueue admits a Workload and then ungates its pods, so a Workload read first can be
        # older than the pods' release. Read after them, a Workload still not admitted held pods Kueue released.
        pods = [client.ApiClient().sanitize_for_serialization(p) for p in self.core.list_namespaced_pod(
            self.namespace, label_selector=kueue.POD_GROUP_LABEL).items]
        workloads = self.queues.workloads()
        groups: dict[str, list[dict]] = {}
        for pod in pods:
            groups.setdefault(kueue.group_of(pod), []).append(pod)
        for name, workload in workloads.items():
            total = int(next(iter(groups.get(name, [])), {}).get("metadata", {}).get("annotations", {}).get(
                kueue.GROUP_TOTAL_COUNT_ANNOTATION, 0) or 0)
            counted = sum(int(s.get("count", 1)) for s in workload["spec"].get("podSets") or [])
            if total and counted != total:
                self.violations.append(f"{name}: pod sets count {counted} pods of {total}")
            admission = (workload.get("status") or {}).get("admission")
            if admission and total:
                admitted = sum(int(a.get("count", 0)) for a in admission.get("podSetAssignments") or [])
                if admitted != total:
                    self.violations.append(f"{name}: admitted {admitted} of {total} pods")
        for name, members in groups.items():
            live = [p for p in members if not p["metadata"].get("deletionTimestamp")]
            gated = [p for p in live if kueue.kueue_gates(p)]
            bound = [p for p in live if p["spec"].get("nodeName")]
            workload = workloads.get(name)
            if gated and bound:
                self.violations.append(f"{name}: {[p['metadata']['name'] for p in bound]} bound while "
                                       f"{[p['metadata']['name'] for p in gated]} wait for Kueue")
            if workload is not None and len(gated) < len(live) and not (
                    is_true(workload, "Admitted") or is_true(workload, "Evicted") or is_true(workload, "Finished")
                    or workload["metadata"].get("deletionTimestamp")):
                conditions = {c["type"]: c["status"] for c in (workload.get("status") or {}).get("conditions") or []}
                self.violations.append(f"{name}: pods released by Kueue, Workload not admitted ({conditions})")
        self.samples += 1

    def finish(self) -> None:
        self.stop_event.set()
        self.join(timeout=10)
        assert self.samples >= 3, f"the sampler hardly ran ({self.samples} samples, errors {self.errors[-3:]})"
        assert not self.violations, f"a gang was split: {self.violations[:5]}"


@pytest.fixture
def managed_namespace(kueue_cluster, namespace):
    kueue_manager.label_managed(kueue_cluster.core, namespace)
    return namespace


@pytest.fixture
def queues(kueue_cluster, managed_namespace):
    handle = Queues(kueue_cluster, managed_namespace)
    yield handle
    handle.delete()


@pytest.fixture
def jobs(kueue_cluster, managed_namespace, operator, queues):
    handle = Jobs(kueue_cluster.api, managed_namespace, operator)
    sampler = GangSampler(kueue_cluster, queues, managed_namespace)
    sampler.start()
    yield handle
    handle.delete_all()
    sampler.finish()


def queued_job(name: str, priority_class: str | None = None, **spec) -> dict:
    body = job_manifest(name, data=2, tensor=8, per_pod=8, scheduling={"queue": QUEUE}, **spec)
    if priority_class:
        body["spec"].setdefault("template", {}).setdefault("metadata", {})["labels"] = {
            "kueue.x-k8s.io/priority-class": priority_class}
    return body


def admitted_reason(jobs: Jobs, name: str) -> tuple[str, str, str] | None:
    found = condition({"status": jobs.status(name)}, "Admitted")
    return (found["status"], found["reason"], found["message"]) if found else None


def free_npus(core: client.CoreV1Api, chip_type: str = "module-910b-8") -> int:
    """NPUs of the 910B nodes that no live pod holds or is pinned to (what placement could still use)."""
    nodes = [n for n in fleet.simulated_nodes(core) if n["metadata"]["labels"].get("accelerator-type") == chip_type
             and fleet.ready_status(n) == "True"]
    total = sum(int(n["status"]["allocatable"]["huawei.com/Ascend910"]) for n in nodes)
    used = 0
    for pod in core.list_pod_for_all_namespaces().items:
        if pod.status.phase in ("Succeeded", "Failed") or not pod.spec.node_name:
            continue
        if pod.spec.node_name in {n["metadata"]["name"] for n in nodes}:
            used += sum(int((c.resources.limits or {}).get("huawei.com/Ascend910", 0)) for c in pod.spec.containers)
    return total - used


def test_two_jobs_in_one_queue_whose_quota_fits_one_run_one_after_the_other(jobs, queues, kueue_cluster):
    queues.create(npus=16)
    jobs.create(queued_job("first"))
    jobs.wait_running("first", timeout=60)
    assert is_true(queues.workload("first-a1"), "Admitted")
    assert [s["count"] for s in queues.workload("first-a1")["spec"]["podSets"]] == [2], "one role: the whole gang"

    jobs.create(queued_job("second"))
    held = wait_for(lambda: (admitted_reason(jobs, "second") or ("",))[0] == "False"
                    and "insufficient unused quota" in admitted_reason(jobs, "second")[2]
                    and admitted_reason(jobs, "second"), 30, "second to wait for quota", lambda: jobs.describe("second"))
    assert held[1] == "WaitingForQuota"
    status = jobs.status("second")
    assert status["phase"] == "Pending" and status["message"] == held[2], "Kueue's own words"
    workload = queues.workload("second-a1")
    quota = condition(workload, "QuotaReserved")
    assert quota["status"] == "False" and quota["message"] == held[2] and not is_true(workload, "Admitted")
    pods = jobs.pods("second")
    assert len(pods) == 2 and not [p for p in pods if p["spec"].get("nodeName")], "no pod of the second bound"
    assert all("kueue.x-k8s.io/admission" in kueue.kueue_gates(p) and names.GANG_GATE in
               [g["name"] for g in p["spec"]["schedulingGates"]] for p in pods)
    assert free_npus(kueue_cluster.core) >= 16, "the nodes have room: only the quota holds the second back"
    time.sleep(3)  # held, not merely slow
    assert jobs.status("second")["phase"] == "Pending" and not [p for p in jobs.pods("second") if p["spec"].get("nodeName")]

    deleted = time.monotonic()
    jobs.delete("first")
    wait_for(lambda: is_true(queues.workload("second-a1"), "Admitted"), 60, "second to be admitted",
             lambda: jobs.describe("second"))
    admitted_after = time.monotonic() - deleted
    status = jobs.wait_running("second", timeout=60)
    running_after = time.monotonic() - deleted
    print(f"\nfirst deleted → second admitted {admitted_after:.1f}s, Running {running_after:.1f}s")
    assert admitted_reason(jobs, "second")[:2] == ("True", "Admitted")
    assert status["restarts"] == 0 and status["attempt"] == 1
    nodes = [p["spec"]["nodeName"] for p in jobs.pods("second")]
    assert len(set(nodes)) == 2 and all(n.startswith("node-") for n in nodes)


def test_a_higher_priority_job_preempts_a_lower_one_that_runs_again_as_a_new_attempt(jobs, queues):
    queues.create(npus=16)
    low, high = queues.priority_class("low", 100), queues.priority_class("high", 1000)
    jobs.create(queued_job("low", priority_class=low))
    jobs.wait_running("low", timeout=60)
    first_pods = {p["metadata"]["name"] for p in jobs.pods("low", attempt=1)}

    jobs.create(queued_job("high", priority_class=high))
    jobs.wait_running("high", timeout=90)
    preempted = wait_for(lambda: (admitted_reason(jobs, "low") or ("", ""))[1] == "Preempted"
                         and jobs.status("low"), 30, "low to say Preempted", lambda: jobs.describe("low"))
    assert preempted["phase"] == "Pending" and "preempted by Kueue" in preempted["message"]
    assert preempted["restarts"] == 0 and preempted["attempt"] == 2, "a new attempt, not a restart"
    wait_for(lambda: not jobs.pods("low", attempt=1), 60, "the preempted pods to go", lambda: jobs.describe("low"))
    assert not {p["metadata"]["name"] for p in jobs.pods("low")} & first_pods
    assert ("Warning", "Preempted") in {(e[0], e[1]) for e in jobs.events("low")}
    # the pass that ends attempt 1 writes its status; the next one creates attempt 2's pods
    waiting = wait_for(lambda: len(jobs.pods("low", attempt=2)) == 2 and jobs.pods("low", attempt=2), 30,
                       "attempt 2's pods, queued", lambda: jobs.describe("low"))
    assert not [p for p in waiting if p["spec"].get("nodeName")]
    assert {kueue.group_of(p) for p in waiting} == {"low-a2"}

    jobs.delete("high")
    status = jobs.wait_running("low", timeout=90, attempt=2)
    assert status["restarts"] == 0, "preemption never counts against backoffLimit"
    assert is_true(queues.workload("low-a2"), "Admitted")


def test_a_whole_gang_restart_under_kueue_is_a_new_pod_group_admitted_again(jobs, queues):
    queues.create(npus=16)
    jobs.create(queued_job("flaky", runPolicy={"backoffLimit": 2}))
    jobs.wait_running("flaky", timeout=60)
    victim = jobs.pods("flaky", attempt=1)[1]
    jobs.core.patch_namespaced_pod(victim["metadata"]["name"], jobs.namespace, {"metadata": {"annotations": FAIL}})
    status = jobs.wait_running("flaky", timeout=90, attempt=2)
    assert status["restarts"] == 1
    pods = jobs.pods("flaky", attempt=2)
    assert {kueue.group_of(p) for p in pods} == {"flaky-a2"} and len(pods) == 2
    assert is_true(queues.workload("flaky-a2"), "Admitted")
    wait_for(lambda: queues.workload("flaky-a1") is None and not jobs.pods("flaky", attempt=1), 60,
             "attempt 1's Workload and pods to go", lambda: jobs.describe("flaky"))


def npu_usage(queues: Queues) -> int:
    """NPUs the test's ClusterQueue has admitted workloads for now."""
    status = queues.cluster_queue().get("status") or {}
    return sum(int(resource.get("total") or 0) for flavor in status.get("flavorsUsage") or []
               for resource in flavor.get("resources") or () if resource["name"] == kueue_manifests.RESOURCE)


def idle_910b_nodes(core: client.CoreV1Api, count: int) -> list[str]:
    """`count` Ready 910B nodes that no live pod is bound to."""
    busy = {pod.spec.node_name for pod in core.list_pod_for_all_namespaces().items
            if pod.spec.node_name and pod.status.phase not in ("Succeeded", "Failed")}
    idle = sorted(n["metadata"]["name"] for n in fleet.simulated_nodes(core)
                  if n["metadata"]["labels"].get("accelerator-type") == "module-910b-8"
                  and fleet.ready_status(n) == "True" and n["metadata"]["name"] not in busy)
    assert len(idle) >= count, f"only {len(idle)} idle 910B nodes"
    return idle[:count]


def step_reported(jobs: Jobs, name: str) -> None:
    """Every launcher of the job's current pods reports its first step (the simulated pods run no launcher)."""
    generation = int((channel_data(jobs.custom, jobs.namespace, name) or {}).get("generation") or 0)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    reports = {pod["metadata"]["name"]: json.dumps({"uid": pod["metadata"]["uid"], "generation": generation,
                                                    "state": "Stepping", "time": now, "resumedFrom": 0, "step": 1})
               for pod in jobs.pods(name, attempt=jobs.status(name)["attempt"])}
    patch_channel(jobs.custom, jobs.namespace, name, reports)


def test_an_elastic_queued_job_shrinks_and_grows_as_pod_groups_kueue_admits_for_the_chips_they_run(
        jobs, queues, kueue_cluster):
    """spec.elastic under Kueue: DP 2 on the only two nodes its template selects; one NotReady, no room for 2 →
    the admitted group of 2 ends and DP 1 queues as a group of its own, which Kueue admits for 8 NPUs (the
    ClusterQueue's usage follows the chips the job runs on); the node Ready again → DP 2 queues and runs again."""
    core, label = kueue_cluster.core, "ahj-test/elastic"
    pair = idle_910b_nodes(core, 2)
    for node in pair:
        core.patch_node(node, {"metadata": {"labels": {label: jobs.namespace}}})
    lost = None
    try:
        queues.create(npus=16)
        jobs.create(queued_job("elastic", training={"globalBatchSize": 4},
                               elastic={"minData": 1, "replacementTimeoutSeconds": 0},
                               template={"nodeSelector": {label: jobs.namespace}}))
        jobs.wait_running("elastic", timeout=60)
        wait_for(lambda: npu_usage(queues) == 16, 30, "the ClusterQueue's usage at 16 NPUs",
                 lambda: str(queues.cluster_queue().get("status")))
        step_reported(jobs, "elastic")
        lost = next(p["spec"]["nodeName"] for p in jobs.pods("elastic", attempt=1) if p["metadata"]["name"].endswith("-1"))
        fleet.set_node_ready(core, lost, False)

        def at(data: int, after: int) -> dict | None:
            status = jobs.status("elastic")
            return status if (status.get("phase") == "Running" and status["attempt"] > after
                              and (status.get("rankTable") or {}).get("status") == "completed"
                              and status["parallelism"]["data"] == data) else None

        shrunk = wait_for(lambda: at(1, 1), 120, "DP 1 Running", lambda: jobs.describe("elastic"))
        (pod_set,) = queues.workload(f"elastic-a{shrunk['attempt']}")["spec"]["podSets"]
        assert pod_set["count"] == 1 and is_true(queues.workload(f"elastic-a{shrunk['attempt']}"), "Admitted")
        wait_for(lambda: npu_usage(queues) == 8, 30, "the ClusterQueue's usage down to 8 NPUs",
                 lambda: str(queues.cluster_queue().get("status")))
        # the node's loss is the one restart (a disruption, not against backoffLimit); the resize is none
        assert (shrunk["restarts"], shrunk["disruptions"]) == (1, 1)
        assert shrunk["elastic"]["data"] == 1 and shrunk["elastic"]["microBatches"] == 2
        assert shrunk["recoveries"][-1]["rungs"][-1] == "Shrink"
        reasons = [reason for _, reason, _ in jobs.events("elastic")]
        assert "Shrunk" in reasons and "Resized" in reasons, reasons
        assert [p["spec"]["nodeName"] for p in jobs.pods("elastic", attempt=shrunk["attempt"])] != [lost]

        step_reported(jobs, "elastic")
        wait_for(lambda: (jobs.status("elastic")["recoveries"][-1].get("outcome") == "Recovered"), 30,
                 "the shrink's first step in the ledger", lambda: jobs.describe("elastic"))
        fleet.set_node_ready(core, lost, True)
        lost = None
        grown = wait_for(lambda: at(2, shrunk["attempt"]), 120, "DP 2 Running again", lambda: jobs.describe("elastic"))
        (pod_set,) = queues.workload(f"elastic-a{grown['attempt']}")["spec"]["podSets"]
        assert pod_set["count"] == 2 and is_true(queues.workload(f"elastic-a{grown['attempt']}"), "Admitted")
        wait_for(lambda: npu_usage(queues) == 16, 30, "the ClusterQueue's usage back to 16 NPUs",
                 lambda: str(queues.cluster_queue().get("status")))
        assert grown["restarts"] == 1 and "elastic" not in grown
        assert grown["recoveries"][-1]["rungs"] == ["Grow"]
    finally:
        if lost is not None:
            fleet.set_node_ready(core, lost, True)
        for node in pair:
            core.patch_node(node, {"metadata": {"labels": {label: None}}})


def test_a_gang_of_more_than_eight_pods_is_one_pod_set_for_kueue(jobs, queues):
    """Kueue refuses a group of more than 8 distinct pod shapes without a word; per-pod pins before admission would
    make every pod its own shape. Created unpinned, ten pods are one pod set, admitted and run."""
    queues.create(npus=32)
    jobs.create(job_manifest("wide", data=10, tensor=2, per_pod=2, scheduling={"queue": QUEUE}))
    status = jobs.wait_running("wide", timeout=90)
    (pod_set,) = queues.workload("wide-a1")["spec"]["podSets"]
    assert pod_set["count"] == 10 and status["worldSize"] == 20
    pinned = {p["spec"]["nodeName"] for p in jobs.pods("wide")}
    assert len(pinned) >= 3, "placed across nodes after admission"


def test_deleted_pods_held_by_kueues_finalizer_terminate_under_kwok_and_the_process_runtime(
        kueue_cluster, queues, managed_namespace):
    """A kubelet writes a terminal phase for a pod being deleted; Kueue waits for it before it drops its finalizer."""
    queues.create(npus=16)
    core = kueue_cluster.core
    # Each a group of one, as the operator's pods are members of a group: Kueue drops its finalizer from a lone
    # pod as soon as it is deleted, but from a group's pods only once they are terminated.
    simulated, real = (pod_manifest(name, chips=1, labels={
        kueue.QUEUE_NAME_LABEL: QUEUE, kueue.POD_GROUP_LABEL: name}, annotations={
        kueue.GROUP_TOTAL_COUNT_ANNOTATION: "1", kueue.RETRIABLE_IN_GROUP_ANNOTATION: "false", **extra})
        for name, extra in (("simulated", {}), ("real", {"sim.hybrid.ascend.dev/runtime": "process"})))
    real["spec"]["containers"][0]["command"] = ["sleep", "300"]
    for manifest in (simulated, real):
        # a grace period, as the operator's pods have: with none, Kueue counts a deleted pod as gone at once
        manifest["spec"]["terminationGracePeriodSeconds"] = 30
        core.create_namespaced_pod(managed_namespace, manifest)
    for name in ("simulated", "real"):
        pod = kueue_cluster.wait_phase(managed_namespace, name, "Running", timeout=60)
        assert "kueue.x-k8s.io/managed" in pod["metadata"]["finalizers"]
        deleted = time.monotonic()
        core.delete_namespaced_pod(name, managed_namespace)
        wait_for(lambda name=name: not [p for p in core.list_namespaced_pod(managed_namespace).items
                                        if p.metadata.name == name], 30, f"pod {name} to go",
                 lambda name=name: str(kueue_cluster.pod(managed_namespace, name)["status"]))
        assert time.monotonic() - deleted < 30


def test_kueue_keeps_to_loopback_and_down_leaves_no_kueue_process(kueue_cluster):
    pid = kueue_manager.helper(kueue_cluster.paths).pid()
    assert pid is not None
    recorded = kueue_manager.recorded_ports(kueue_cluster.paths)
    sockets = procnet.sockets_of([pid])
    listening = {s.local for s in sockets if s.listening}
    assert listening == {("127.0.0.1", port) for port in recorded.values()}, listening
    assert not {port for _, port in listening} & KUEUE_DEFAULT_PORTS
    strays = [(s.protocol, s.state, s.local, s.remote) for s in sockets
              if not all(procnet.is_loopback_v4(address) for address in s.addresses())]
    assert not strays, f"Kueue off 127.0.0.0/8: {strays}"
    assert [s for s in sockets if not s.listening and s.state == "ESTABLISHED"], "it talks to the apiserver"
    # the webhooks the apiserver calls, and the conversion webhook, are urls on 127.0.0.1 with our CA
    admission = client.AdmissionregistrationV1Api(kueue_cluster.api)
    for configuration in (admission.read_mutating_webhook_configuration(kueue_manifests.MUTATING),
                          admission.read_validating_webhook_configuration(kueue_manifests.VALIDATING)):
        for webhook in configuration.webhooks:
            assert webhook.client_config.url.startswith(f"https://127.0.0.1:{recorded['webhook']}/")
            assert webhook.client_config.ca_bundle and webhook.client_config.service is None

    name = "ahj-test-kueue-down" + os.environ.get("AHJ_CLUSTER_SUFFIX", "")
    try:
        started = time.monotonic()
        paths = cluster.up(name, nodes=1, racks=1, log=lambda line: None, kueue=True)
        took = time.monotonic() - started
        core = cluster.core_api(paths)
        probe = core.create_namespaced_pod("default", kueue_manifests.probe_pod(), dry_run="All")
        assert "kueue.x-k8s.io/admission" in [g.name for g in probe.spec.scheduling_gates], "webhooks answer on return"
        owned = cluster.owned_processes(paths)
        assert "kueue" in owned
        print(f"\nup --kueue of a 1-node cluster: {took:.1f}s")
        healthy, lines = cluster.status(name)
        assert healthy and any(line.startswith("  ClusterQueue ascend:") for line in lines), lines
        addresses = [ipaddress.ip_address(h.split(":")[0]) for line in lines if line.startswith("  kueue:")
                     for h in line.replace(",", " ").split() if h.count(".") == 3 and ":" in h]
        assert addresses and all(a in ipaddress.ip_network("127.0.0.0/8") for a in addresses)
    finally:
        assert cluster.down(name, log=lambda line: None)
    survivors = {n: p for n, p in owned.items() if processes.is_alive(p)}
    assert not survivors, f"alive after down: {survivors}"
