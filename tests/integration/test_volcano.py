"""A real Volcano in the simulated cluster (`dev-cluster up --volcano`): Volcano v1.14.1's scheduler and controller
manager built from its module bind PodGroups' pods; the stand-in for Huawei's Ascend plugin writes the chips
inside the node and the plugin's bind annotations. Then the operator in Volcano mode (`--scheduler volcano`,
docs/install.md "On a MindCluster cluster with Volcano") on the same cluster: the example jobs, Volcano's Queues,
the recovery rungs, an elastic shrink and growth, and the real MindSpore DP 2 job through Volcano.

The module brings up its own cluster (two 910B nodes in one rack and one 910A node; the operator's tests add the
910B nodes the seed example needs) and takes it down at the end; its tests share it one after another, each in
its own namespace whose pods are gone before the next test starts.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from dataclasses import dataclass
from typing import cast

import pytest
from kubernetes import client

from ascend_hybrid.contracts import names
from ascend_hybrid.devcluster import cluster
from ascend_hybrid.devcluster.controlplane import toolchain
from ascend_hybrid.devcluster.deviceplugin.allocation import KUBELET_DEVICES_ANNOTATION as KUBELET_DEVICES
from ascend_hybrid.devcluster.kube.client import api_client, raw_list, read_raw
from ascend_hybrid.devcluster.kube.waiting import wait_until
from ascend_hybrid.devcluster.nodes import fleet
from ascend_hybrid.devcluster.nodes.manifests import ACCELERATOR_TYPE_LABEL, PROFILES
from ascend_hybrid.devcluster.paths import ClusterPaths
from ascend_hybrid.devcluster.runtime import claims
from ascend_hybrid.devcluster.runtime import helper as runtime_helper
from ascend_hybrid.devcluster.runtime.launch import claim_directory
from ascend_hybrid.devcluster.testing.pods import outcome_annotations, pod_manifest
from ascend_hybrid.devcluster.volcano import ascend_plugin as rules
from ascend_hybrid.devcluster.volcano import manager as volcano_manager
from ascend_hybrid.devcluster.volcano import manifests as volcano
from ascend_hybrid.devcluster.volcano.stand_in import REASON
from integration.test_process_runtime import trainer_worker
from support.faults import Monitor, check_job, converge
from support.hccl_check import hccl_problems
from support.launchers import ledger, recovered, started
from support.losses import MODEL, local_losses, step_records
from support.namespaces import namespace_name, scratch_namespace
from support.operator_harness import Jobs, OperatorProcess, example, install_crd, job_manifest, kubectl, wait_for
from support.paths import EXAMPLES

pytestmark = pytest.mark.integration

CLUSTER = "ahj-volcano" + os.environ.get("AHJ_CLUSTER_SUFFIX", "")
BIND_TIMEOUT = 30.0


@dataclass
class VolcanoCluster:
    paths: ClusterPaths
    api: client.ApiClient
    core: client.CoreV1Api
    custom: client.CustomObjectsApi

    def nodes(self, chip: str) -> list[str]:
        wanted = PROFILES[chip].accelerator_type
        return sorted(n["metadata"]["name"] for n in fleet.simulated_nodes(self.core)
                      if n["metadata"]["labels"].get(ACCELERATOR_TYPE_LABEL) == wanted)

    def pods(self, namespace: str) -> list[dict]:
        return raw_list(self.core.list_namespaced_pod, namespace=namespace)["items"]

    def podgroup(self, namespace: str, name: str) -> dict:
        # a custom object comes back as the JSON the apiserver sent
        return cast(dict, self.custom.get_namespaced_custom_object(volcano.GROUP, volcano.VERSION, namespace,
                                                                   volcano.PODGROUPS, name))

    def logs(self) -> str:
        """The tails of Volcano's and the stand-in's logs, for a failure message."""
        return "\n".join(f"--- {helper.name}\n{helper.log_tail(15)}" for helper in volcano_manager.helpers(self.paths))

    def events(self, namespace: str) -> list[dict]:
        return raw_list(self.core.list_namespaced_event, namespace=namespace)["items"]

    @property
    def kubeconfig(self) -> str:
        return str(self.paths.kubeconfig)

    def podgroups(self, namespace: str) -> dict[str, dict]:
        listed = self.custom.list_namespaced_custom_object(volcano.GROUP, volcano.VERSION, namespace, volcano.PODGROUPS)
        return {group["metadata"]["name"]: group for group in listed["items"]}


@pytest.fixture(scope="module")
def volcano_cluster():
    missing = toolchain.missing(toolchain.REQUIRED + toolchain.VOLCANO)
    if missing:
        pytest.fail(f"the toolchain lacks {', '.join(missing)}: run `ascend-hybrid dev-cluster build --with-volcano`",
                    pytrace=False)
    cluster.down(CLUSTER, log=lambda line: None)
    paths = cluster.up(CLUSTER, nodes=2, chip="910B", racks=1, volcano=True, log=lambda line: None)
    try:
        cluster.add_nodes(CLUSTER, 1, chip="910A", log=lambda line: None)
        api = api_client(str(paths.kubeconfig))
        yield VolcanoCluster(paths, api, client.CoreV1Api(api), client.CustomObjectsApi(api))
    finally:
        cluster.down(CLUSTER, log=lambda line: None)


@pytest.fixture
def namespace(request, volcano_cluster):
    """The test's namespace; its pods are deleted and gone before the next test, so every test finds free nodes."""
    core = volcano_cluster.core
    with scratch_namespace(core, namespace_name("v", request.node.name, 30, 6)) as name:
        yield name
        core.delete_collection_namespaced_pod(name, grace_period_seconds=0, _preload_content=False)
        wait_until(lambda: not volcano_cluster.pods(name), 30, f"the pods of {name} to be gone")


def create_gang(dev: VolcanoCluster, namespace: str, group: str, pods: int, chips: int, accelerator_type: str,
                labels: dict | None = None) -> list[str]:
    """A PodGroup of minMember `pods` and its pods, each asking for `chips` chips of nodes of `accelerator_type`,
    scheduled by Volcano, as MindCluster's ascend-operator creates them."""
    dev.custom.create_namespaced_custom_object(volcano.GROUP, volcano.VERSION, namespace, volcano.PODGROUPS,
                                               volcano.podgroup_manifest(group, pods))
    names = [f"{group}-{index}" for index in range(pods)]
    for name in names:
        manifest = pod_manifest(name, chips=chips, labels=labels,
                                annotations={rules.GROUP_NAME_ANNOTATION: group, "volcano.sh/task-spec": "worker"})
        manifest["spec"].update(schedulerName=volcano.SCHEDULER_NAME,
                                nodeSelector={ACCELERATOR_TYPE_LABEL: accelerator_type})
        dev.core.create_namespaced_pod(namespace, manifest, _preload_content=False)
    return names


def bound_and_annotated(dev: VolcanoCluster, namespace: str, names: list[str]) -> list[dict]:
    def ready() -> list[dict] | None:
        pods = [read_raw(dev.core.read_namespaced_pod, name, namespace) for name in names]
        done = all(p["spec"].get("nodeName") and rules.CHIPS_ANNOTATION in (p["metadata"].get("annotations") or {})
                   for p in pods)
        return pods if done else None
    return wait_until(ready, BIND_TIMEOUT, f"Volcano to bind {names} and the stand-in to annotate them",
                      describe=dev.logs)


def chips_of(pod: dict) -> list[int]:
    return sorted(rules.chip_ids(pod["metadata"]["annotations"][rules.CHIPS_ANNOTATION]))


def test_a_podgroup_of_two_whole_node_pods_is_bound_by_volcano_with_the_plugins_annotations(volcano_cluster,
                                                                                           namespace):
    dev = volcano_cluster
    names = create_gang(dev, namespace, "gang", pods=2, chips=8, accelerator_type="module-910b-8")
    pods = bound_and_annotated(dev, namespace, names)
    assert sorted(p["spec"]["nodeName"] for p in pods) == dev.nodes("910B")
    for pod in pods:
        annotations = pod["metadata"]["annotations"]
        assert chips_of(pod) == list(range(8))
        assert annotations[rules.REAL_CHIPS_ANNOTATION] == annotations[rules.CHIPS_ANNOTATION]
        assert int(annotations[rules.PREDICATE_TIME_ANNOTATION]) > 1_700_000_000 * 10**9  # UnixNano
        node = read_raw(dev.core.read_node, pod["spec"]["nodeName"])
        infos = json.loads(node["metadata"]["annotations"][rules.BASE_DEVICE_INFOS_ANNOTATION])
        config = json.loads(annotations[rules.CONFIG_ANNOTATION])
        assert config["pod_name"] == pod["metadata"]["name"] and config["server_id"] == pod["metadata"]["uid"]
        assert [d["device_ip"] for d in config["devices"]] == [infos[f"Ascend910-{i}"]["IP"] for i in range(8)]
    scheduled = {e["involvedObject"]["name"] for e in dev.events(namespace)
                 if e["reason"] == "Scheduled" and "volcano" in ((e.get("source") or {}).get("component", "")
                                                                 + (e.get("reportingComponent") or ""))}
    assert scheduled == set(names), f"Scheduled events from volcano: {scheduled}"
    wait_until(lambda: (dev.podgroup(namespace, "gang").get("status") or {}).get("phase") == "Running", 15,
               "the PodGroup to be Running")


def test_a_gang_that_does_not_fit_leaves_no_pod_bound(volcano_cluster, namespace):
    dev = volcano_cluster
    names = create_gang(dev, namespace, "toobig", pods=3, chips=8, accelerator_type="module-910b-8")

    def unschedulable() -> bool:
        conditions = (dev.podgroup(namespace, "toobig").get("status") or {}).get("conditions") or []
        return any(c.get("type") == "Unschedulable" and c.get("status") == "True" for c in conditions)

    wait_until(unschedulable, BIND_TIMEOUT, "Volcano to find the gang unschedulable", describe=dev.logs)
    wait_until(lambda: len([e for e in dev.events(namespace) if e["involvedObject"]["name"] == "toobig"]) > 0, 10,
               "an event on the PodGroup")
    pods = {p["metadata"]["name"]: p for p in dev.pods(namespace)}
    assert sorted(pods) == names
    assert [name for name, pod in pods.items() if pod["spec"].get("nodeName")] == [], "part of the gang was bound"
    assert all(rules.CHIPS_ANNOTATION not in (p["metadata"].get("annotations") or {}) for p in pods.values())


def test_four_chip_pods_on_a_910a_node_land_inside_one_hccs_ring_each(volcano_cluster, namespace):
    dev = volcano_cluster
    names = create_gang(dev, namespace, "rings", pods=2, chips=4, accelerator_type="module",
                        labels={rules.OPERATOR_NAME_LABEL: "ascend-operator"})
    pods = bound_and_annotated(dev, namespace, names)
    assert {p["spec"]["nodeName"] for p in pods} == set(dev.nodes("910A"))
    assert sorted(chips_of(p) for p in pods) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    for pod in pods:  # the operator's label: the configuration is written for a part of the node too
        config = json.loads(pod["metadata"]["annotations"][rules.CONFIG_ANNOTATION])
        assert [int(d["device_id"]) for d in config["devices"]] == chips_of(pod)


def test_a_pod_bound_where_no_ring_fits_is_left_unannotated_with_a_warning(volcano_cluster, namespace):
    dev = volcano_cluster
    [node] = dev.nodes("910A")
    fleet.set_chip_health(dev.core, node, 0, healthy=False)
    fleet.set_chip_health(dev.core, node, 4, healthy=False)
    try:
        [name] = create_gang(dev, namespace, "split", pods=1, chips=4, accelerator_type="module")
        warned = wait_until(lambda: [e for e in dev.events(namespace)
                                     if e["involvedObject"]["name"] == name and e["reason"] == REASON],
                            BIND_TIMEOUT, "the stand-in's Warning event", describe=dev.logs)
        assert warned[0]["type"] == "Warning" and "would not have chosen this node" in warned[0]["message"]
        pod = read_raw(dev.core.read_namespaced_pod, name, namespace)
        assert pod["spec"]["nodeName"] == node, "Volcano bound it: the stand-in cannot steer its choice"
        assert rules.CHIPS_ANNOTATION not in (pod["metadata"].get("annotations") or {})
    finally:
        fleet.set_chip_health(dev.core, node, 0, healthy=True)
        fleet.set_chip_health(dev.core, node, 4, healthy=True)


# -- the operator in Volcano mode --------------------------------------------------------------------------------
SEED_NODES = 16  # 910B nodes the seed example's 128 NPUs take; one more for the other example beside it


@pytest.fixture(scope="module")
def operator(volcano_cluster, tmp_path_factory):
    """`ascend-hybrid run --scheduler volcano`: jobs that name no scheduler go through Volcano too."""
    install_crd(volcano_cluster)
    process = OperatorProcess(volcano_cluster.kubeconfig, tmp_path_factory.mktemp("operator") / "operator.log",
                              extra_args=("--scheduler", "volcano", "--hardware-profiles",
                                          str(EXAMPLES / "hardware-cpu.yaml"))).start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def seed_nodes(volcano_cluster):
    """The seed example's 16 910B nodes and one for the small example beside it (added once, kept)."""
    missing = SEED_NODES + 1 - len(volcano_cluster.nodes("910B"))
    if missing > 0:
        cluster.add_nodes(CLUSTER, missing, chip="910B", log=lambda line: None)
    return volcano_cluster.nodes("910B")


@pytest.fixture
def jobs(volcano_cluster, seed_nodes, namespace, operator):
    handle = Jobs(volcano_cluster.api, namespace, operator)
    yield handle
    handle.delete_all(timeout=90)


def scheduled_by_volcano(dev: VolcanoCluster, namespace: str) -> set[str]:
    """The pods Volcano's scheduler bound (its Scheduled events)."""
    return {e["involvedObject"]["name"] for e in dev.events(namespace)
            if e["reason"] == "Scheduled" and "volcano" in ((e.get("source") or {}).get("component", "")
                                                            + (e.get("reportingComponent") or ""))}


def assert_through_volcano(dev: VolcanoCluster, jobs: Jobs, name: str, pod_count: int) -> list[dict]:
    """The job's current attempt runs as one PodGroup of every pod, owned by the job, whose pods Volcano bound (no
    pod was created bound) and whose rank table lists, pod by pod, the chips the device plugin mounted."""
    status = jobs.status(name)
    attempt = status["attempt"]
    pods = sorted(jobs.pods(name, attempt=attempt), key=lambda p: int(p["metadata"]["labels"][names.POD_INDEX_LABEL]))
    assert len(pods) == pod_count
    group = dev.podgroup(jobs.namespace, f"{name}-a{attempt}")
    owner = group["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("AscendHybridJob", name, True)
    assert (group["spec"]["minMember"], group["spec"]["minTaskMember"]) == (pod_count, {"worker": pod_count})
    assert status["placement"]["podGroup"] == group["metadata"]["name"] and status["placement"]["scheduler"] == "volcano"
    bound = scheduled_by_volcano(dev, jobs.namespace)
    for pod in pods:
        assert pod["spec"]["schedulerName"] == "volcano" and pod["metadata"]["name"] in bound
        assert pod["metadata"]["annotations"][rules.GROUP_NAME_ANNOTATION] == group["metadata"]["name"]
        assert not (pod["spec"].get("affinity") or {}).get("nodeAffinity", {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"), "never pinned to a node"
    assert [p["spec"]["nodeName"] for p in pods] == status["placement"]["nodes"]
    table = jobs.rank_table(name)
    chip = (jobs.get(name)["spec"].get("npu") or {}).get("chip", "910B")
    assert table["status"] == "completed" and hccl_problems(table, chip) == []
    assert [s["container_ip"] for s in table["server_list"]] == [p["status"]["podIP"] for p in pods]
    for server, pod in zip(table["server_list"], pods):
        mounted = pod["metadata"]["annotations"][KUBELET_DEVICES]  # the simulated kubelet's record
        assert [int(d["device_id"]) for d in server["device"]] == sorted(map(int, mounted.split(",")))
    return pods


def test_the_example_jobs_run_through_volcano_with_the_chips_the_device_plugin_mounted(jobs, volcano_cluster):
    dev = volcano_cluster
    started = time.monotonic()
    for example_name in ("job.yaml", "seed-moe-128.yaml"):
        jobs.create(example(example_name))
    jobs.wait_running("tiny-tp4-dp2", timeout=90)
    jobs.wait_running("seed-moe-128", timeout=120)
    took = time.monotonic() - started
    assert_through_volcano(dev, jobs, "tiny-tp4-dp2", 1)
    pods = assert_through_volcano(dev, jobs, "seed-moe-128", 16)
    assert len({p["spec"]["nodeName"] for p in pods}) == 16
    status = jobs.status("seed-moe-128")
    placement = status["placement"]
    assert placement["planned"]["nodes"] and len(placement["planned"]["nodes"]) == 16
    assert placement["onPlannedNodes"].endswith("/16") and placement["tensorGroupsNodeLocal"] == "16/16"
    honoured = next(c for c in status["conditions"] if c["type"] == "PlacementHonoured")
    assert honoured["reason"] in ("AsPlanned", "AsCloseAsPlanned", "PlanNotHonoured"), honoured
    assert f"{placement['onPlannedNodes']} pods on their planned nodes" in honoured["message"]
    print(f"\nthrough Volcano: job.yaml (1 pod) and seed-moe-128 (16 pods) created -> both Running {took:.1f} s; "
          f"seed-moe-128: {placement['onPlannedNodes']} pods on their planned nodes, {honoured['reason']}")


def queue_manifest(name: str, chips: int) -> dict:
    return {"apiVersion": f"{volcano.GROUP}/{volcano.VERSION}", "kind": "Queue", "metadata": {"name": name},
            "spec": {"weight": 1, "reclaimable": False, "capability": {rules.RESOURCE: str(chips)}}}


@pytest.fixture
def two_node_queue(volcano_cluster):
    """A Volcano Queue with room for 16 chips, Open."""
    custom, name = volcano_cluster.custom, "two-nodes"
    custom.create_cluster_custom_object(volcano.GROUP, volcano.VERSION, "queues", queue_manifest(name, 16))
    wait_until(lambda: (custom.get_cluster_custom_object(volcano.GROUP, volcano.VERSION, "queues", name)
                        .get("status") or {}).get("state") == "Open", 30, f"Queue {name} to be Open")
    yield name
    custom.delete_cluster_custom_object(volcano.GROUP, volcano.VERSION, "queues", name)


def test_a_job_that_does_not_fit_and_a_second_job_in_a_full_queue_wait_unbound_and_say_why(jobs, volcano_cluster,
                                                                                          two_node_queue):
    dev = volcano_cluster
    ends = outcome_annotations("succeed", after_seconds=8)
    jobs.create(job_manifest("q-first", data=2, tensor=8, per_pod=8, annotations=ends,
                             scheduling={"volcano": {"queue": two_node_queue}}))
    jobs.wait_running("q-first", timeout=60)
    jobs.create(job_manifest("q-second", data=2, tensor=8, per_pod=8,
                             scheduling={"schedulerName": "volcano", "volcano": {"queue": two_node_queue}}))
    jobs.create(job_manifest("too-big", data=40, tensor=8, per_pod=8))

    def held(name: str) -> dict | None:
        placed = next((c for c in jobs.status(name).get("conditions") or () if c["type"] == "Placed"), {})
        return placed if placed.get("reason") in ("WaitingInQueue", "Unschedulable") else None
    waiting = wait_until(lambda: held("q-second"), 30, "q-second to wait in its Queue", describe=dev.logs)
    assert waiting["reason"] == "WaitingInQueue" and f"Volcano Queue {two_node_queue}" in waiting["message"]
    assert "16 huawei.com/Ascend910" in waiting["message"]
    assert jobs.status("q-second")["phase"] == "Pending" and jobs.status("q-first")["phase"] == "Running"
    assert [p for p in jobs.pods("q-second") if p["spec"].get("nodeName")] == [], "part of the gang was bound"
    too_big = wait_until(lambda: held("too-big"), 30, "too-big to say why it waits", describe=dev.logs)
    assert "320 huawei.com/Ascend910" in too_big["message"], too_big
    assert jobs.status("too-big")["phase"] == "Pending" and len(jobs.pods("too-big")) == 40
    assert [p for p in jobs.pods("too-big") if p["spec"].get("nodeName")] == []
    assert ("Warning" if too_big["reason"] == "Unschedulable" else "Normal", too_big["reason"]) in {
        (t, r) for t, r, _ in jobs.events("too-big")}

    jobs.wait_phase("q-first", "Succeeded", timeout=60)
    wait_until(lambda: "q-first-a1" not in dev.podgroups(jobs.namespace), 30, "q-first's PodGroup to go")
    jobs.wait_running("q-second", timeout=60)
    assert_through_volcano(dev, jobs, "q-second", 2)
    assert jobs.status("too-big")["phase"] == "Pending"


def test_restart_ranks_replace_pod_and_restart_gang_under_volcano(jobs, volcano_cluster):
    """The recovery rungs with the default mode's assertions (tests/faults/test_recovery_rungs.py): RestartRanks
    keeps the pods and the PodGroup; ReplacePod makes the pod of a lost node again in the same PodGroup, Volcano
    binding it elsewhere; RestartGang (RestartRanks past its timeout) replaces the attempt's PodGroup."""
    dev, name = volcano_cluster, "rungs"
    jobs.create(job_manifest(name, data=2, tensor=8, per_pod=8,
                             runPolicy={"recovery": {"restartRanksTimeoutSeconds": 10}}))
    with Monitor(dev.core) as monitor:
        launchers = started(jobs, name, 2)
        uids = launchers.pods()
        keeper, victim = sorted(uids)
        group_uid = dev.podgroup(jobs.namespace, f"{name}-a1")["metadata"]["uid"]
        launchers.fail(victim, 0)
        launchers.wait_generation(1)
        launchers.all(1, "Stepping", resumedFrom=4, step=5)
        wait_for(lambda: recovered(jobs, name, 1), 60, "RestartRanks recovered", lambda: jobs.describe(name))
        assert launchers.pods() == uids, "RestartRanks keeps the pods"
        assert dev.podgroup(jobs.namespace, f"{name}-a1")["metadata"]["uid"] == group_uid

        lost = jobs.status(name)["placement"]["nodes"][1]
        try:
            fleet.set_node_ready(dev.core, lost, False)
            launchers.wait_generation(2, timeout=60)
            wait_for(lambda: launchers.pods().get(victim) not in (None, uids[victim]), 90, "the replacement pod",
                     lambda: jobs.describe(name))
            wait_for(lambda: all(p["status"].get("phase") == "Running" for p in jobs.pods(name, attempt=1))
                     and jobs.rank_table(name).get("status") == "completed", 90,
                     "the replacement running, the table again", lambda: jobs.describe(name))
            launchers.all(2, "Stepping", resumedFrom=6, step=7)
            wait_for(lambda: recovered(jobs, name, 2), 60, "ReplacePod recovered", lambda: jobs.describe(name))
        finally:
            fleet.set_node_ready(dev.core, lost, True)
        record = ledger(jobs, name)[-1]
        assert (record["cause"], record["rungs"], record["recoveredBy"]) == ("NodeNotReady", ["ReplacePod"],
                                                                             "ReplacePod")
        now = launchers.pods()
        assert now[keeper] == uids[keeper] and now[victim] != uids[victim], "only the lost pod made again"
        replacement = next(p for p in jobs.pods(name, attempt=1) if p["metadata"]["name"] == victim)
        assert replacement["spec"]["nodeName"] != lost and victim in scheduled_by_volcano(dev, jobs.namespace)
        assert dev.podgroup(jobs.namespace, f"{name}-a1")["metadata"]["uid"] == group_uid, "the same PodGroup"
        assert_through_volcano(dev, jobs, name, 2)

        launchers.fail(keeper, 2)
        launchers.wait_generation(3)
        launchers.all(3, "Started", resumedFrom=6)  # and never a step: the rung times out
        converge(jobs, name, attempt=2, timeout=90)
        wait_until(lambda: f"{name}-a1" not in dev.podgroups(jobs.namespace), 30, "attempt 1's PodGroup to go")
        assert_through_volcano(dev, jobs, name, 2)
    duplicated, lost_pods = check_job(jobs, name, 2)
    status = jobs.status(name)
    assert [r["rungs"] for r in status["recoveries"]] == [["RestartRanks"], ["ReplacePod"],
                                                          ["RestartRanks", "RestartGang"]], status["recoveries"]
    assert (status["attempt"], status["restarts"], status["disruptions"]) == (2, 3, 1), status
    assert (duplicated, lost_pods, monitor.max_duplicates, monitor.double_booked) == (0, 0, 0, [])


FILLER = {"role": "filler"}


@pytest.fixture
def fill_all_but(jobs, volcano_cluster):
    """fill(free): a PodGroup of whole-node pods on every 910B node but the first `free`, bound by Volcano; returns
    the free nodes. The fillers go before the jobs fixture waits for the namespace's pods to go."""
    dev, namespace = volcano_cluster, jobs.namespace

    def fill(free: int) -> list[str]:
        nodes = dev.nodes("910B")
        taken, left = nodes[free:], nodes[:free]
        dev.custom.create_namespaced_custom_object(volcano.GROUP, volcano.VERSION, namespace, volcano.PODGROUPS,
                                                   volcano.podgroup_manifest("fillers", len(taken)))
        made = []
        for index, node in enumerate(taken):
            manifest = pod_manifest(f"filler-{index}", node=node, chips=8, labels=FILLER,
                                    annotations={rules.GROUP_NAME_ANNOTATION: "fillers"})
            manifest["spec"]["schedulerName"] = volcano.SCHEDULER_NAME
            dev.core.create_namespaced_pod(namespace, manifest, _preload_content=False)
            made.append(manifest["metadata"]["name"])
        bound_and_annotated(dev, namespace, made)
        return left
    yield fill
    dev.core.delete_collection_namespaced_pod(namespace, label_selector="role=filler", grace_period_seconds=0)


def test_an_elastic_job_shrinks_and_grows_back_under_volcano_keeping_its_running_pods(jobs, volcano_cluster,
                                                                                   fill_all_but):
    """The default mode's elastic case (tests/integration/test_process_runtime.py) with played launchers: DP 4, one
    pod per node and no spare; pod 0's node lost, ReplacePod finds no room and the job shrinks to DP 2 keeping
    pods 1 and 2 (their PodGroup now the new attempt's, minMember 2); the node back, it grows to DP 4 keeping them
    and adding two pods Volcano binds (minMember 4)."""
    dev, name = volcano_cluster, "elastic"
    free = fill_all_but(4)
    jobs.create(job_manifest(name, data=4, tensor=8, per_pod=8, training={"steps": 10, "globalBatchSize": 8},
                             elastic={"minData": 2, "replacementTimeoutSeconds": 0}))
    launchers = started(jobs, name, 4)
    uids = launchers.pods()
    status = jobs.status(name)
    assert sorted(status["placement"]["nodes"]) == free
    victim = status["placement"]["nodes"][0]
    try:
        fleet.set_node_ready(dev.core, victim, False)

        def shrunk() -> bool:
            now = jobs.status(name)
            return (now.get("elastic") or {}).get("data") == 2 and len(launchers.pods()) == 2
        wait_for(shrunk, 90, "the job to shrink to DP 2", lambda: jobs.describe(name))
        status = jobs.status(name)
        attempt = status["attempt"]
        wait_for(lambda: launchers.generation() >= status["recovery"]["generation"], 30, "the shrink's generation")
        launchers.all(status["recovery"]["generation"], "Stepping", resumedFrom=0, step=1)
        wait_for(lambda: (ledger(jobs, name)[-1]).get("recoveredBy") == "Shrink", 60, "the shrink recovered",
                 lambda: jobs.describe(name))
        status = jobs.status(name)
        assert (status["parallelism"]["data"], status["parallelism"]["microBatches"], status["worldSize"]) == (
            2, 2, 16), status["parallelism"]
        degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
        assert (degraded["status"], degraded["reason"]) == ("True", "Shrunk") and "data 4→2" in degraded["message"]
        assert status["recovery"]["kept"] == [names.pod_name(name, 1, 1), names.pod_name(name, 1, 2)]
        assert status["recoveries"][-1]["rungs"] == ["ReplacePod", "Shrink"], status["recoveries"][-1]
        kept = {int(p["metadata"]["labels"][names.POD_INDEX_LABEL]): p for p in jobs.pods(name, attempt=attempt)}
        assert {i: (p["metadata"]["name"], p["metadata"]["uid"]) for i, p in kept.items()} == {
            0: (names.pod_name(name, 1, 1), uids[names.pod_name(name, 1, 1)]),
            1: (names.pod_name(name, 1, 2), uids[names.pod_name(name, 1, 2)])}  # kept, relabelled, not made again
        group = dev.podgroup(jobs.namespace, f"{name}-a{attempt}")
        assert group["spec"]["minMember"] == 2 and f"{name}-a1" not in dev.podgroups(jobs.namespace)
        for pod in kept.values():
            assert pod["metadata"]["annotations"][rules.GROUP_NAME_ANNOTATION] == f"{name}-a{attempt}"
    finally:
        fleet.set_node_ready(dev.core, victim, True)

    def growing() -> bool:
        return jobs.status(name).get("attempt") == attempt + 1 and len(launchers.pods()) == 4
    wait_for(growing, 90, "the job to grow back to DP 4", lambda: jobs.describe(name))
    wait_for(lambda: all(p["status"].get("phase") == "Running" for p in jobs.pods(name, attempt=attempt + 1))
             and jobs.rank_table(name).get("status") == "completed", 90, "the grown gang running, its table",
             lambda: jobs.describe(name))
    launchers.all(jobs.status(name)["recovery"]["generation"], "Stepping", resumedFrom=1, step=2)
    wait_for(lambda: ledger(jobs, name)[-1].get("rungs") == ["Grow"] and ledger(jobs, name)[-1].get("outcome")
             == "Recovered", 60, "the growth recovered", lambda: jobs.describe(name))
    status = jobs.status(name)
    assert (status["parallelism"]["data"], status["worldSize"]) == (4, 32) and "elastic" not in status
    assert status["recoveries"][-1]["podsKept"] == 2
    grown = {int(p["metadata"]["labels"][names.POD_INDEX_LABEL]): p["metadata"]
             for p in jobs.pods(name, attempt=attempt + 1)}
    assert [(grown[i]["name"], grown[i]["uid"]) for i in (0, 1)] == [
        (names.pod_name(name, 1, i), uids[names.pod_name(name, 1, i)]) for i in (1, 2)]
    assert [grown[i]["name"] for i in (2, 3)] == [names.pod_name(name, attempt + 1, i) for i in (2, 3)]
    assert next(c for c in status["conditions"] if c["type"] == "Degraded")["status"] == "False"
    assert f"{name}-a{attempt}" not in dev.podgroups(jobs.namespace)
    assert_through_volcano(dev, jobs, name, 4)


def test_the_real_mindspore_dp2_job_through_volcano_recovers_with_the_losses_of_an_uninterrupted_run(
        jobs, volcano_cluster):
    """deploy/examples/tiny-dp2-real.yaml on the process runtime, through Volcano (the 2-layer model every
    real-MindSpore test trains, 40 steps): rank 1's worker SIGKILLed after a checkpoint, RestartRanks on the same
    pods; every loss, redone steps included, equals an uninterrupted run's."""
    dev = volcano_cluster
    if runtime_helper.ensure_running(dev.paths) is None:
        pytest.fail("the Volcano cluster has no process runtime", pytrace=False)
    body = example("tiny-dp2-real.yaml")
    name, steps, every = body["metadata"]["name"], 40, 4
    body["spec"]["model"] = dict(MODEL)
    body["spec"]["training"].update(steps=steps, checkpoint={"claimName": "ckpt", "everySteps": every})
    volume = claims.bind_claim(dev.core, jobs.namespace, "ckpt")
    directory = claim_directory(runtime_helper.runtime_root(dev.paths), jobs.namespace, "ckpt")
    latest = directory / "latest.json"
    try:
        jobs.create(body)
        jobs.wait_running(name, timeout=180)
        assert_through_volcano(dev, jobs, name, 2)
        pods = {int(p["metadata"]["labels"][names.POD_INDEX_LABEL]): p for p in jobs.pods(name, attempt=1)}
        uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods.values()}
        wait_for(lambda: latest.exists() and json.loads(latest.read_text())["step"] >= 2 * every, 240,
                 "a checkpoint", lambda: jobs.describe(name))
        os.kill(trainer_worker(pods[1]), signal.SIGKILL)
        wait_for(lambda: recovered(jobs, name, 1), 150, "rank 1 recovered in place", lambda: jobs.describe(name))
        assert ledger(jobs, name)[-1]["recoveredBy"] == "RestartRanks"
        assert {p["metadata"]["name"]: p["metadata"]["uid"] for p in jobs.pods(name)} == uids
        jobs.wait_phase(name, "Succeeded", timeout=240)
        records = step_records(kubectl(dev, "logs", "-n", jobs.namespace, names.pod_name(name, 1, 0)))
        assert {r["step"] for r in records} == set(range(1, steps + 1))
        training = body["spec"]["training"]
        expected = local_losses(steps, seed=training["seed"], seq_length=training["seqLength"],
                                global_batch=training["globalBatchSize"], data=2)
        for record in records:
            assert record["loss"] == pytest.approx(expected[record["step"] - 1], abs=1e-5), record
    finally:
        jobs.delete_all(timeout=90)
        dev.core.delete_persistent_volume(volume)
        shutil.rmtree(directory, ignore_errors=True)
