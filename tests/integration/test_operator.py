"""The operator end to end on the real apiserver + scheduler + kwok of the simulated cluster."""

from __future__ import annotations

import threading
import time

import pytest
from kubernetes import client

from ascend_hybrid.contracts import names
from ascend_hybrid.controller.kube import Kube
from ascend_hybrid.devcluster.nodes import fleet
from ascend_hybrid.devcluster.nodes.manifests import plan_nodes
from ascend_hybrid.devcluster.paths import load_settings
from ascend_hybrid.devcluster.testing.pods import pod_manifest
from ascend_hybrid.gang import render
from support.builders import PodBuilder
from support.hccl_check import hccl_problems
from support.operator_harness import Jobs, OperatorProcess, example, install_crd, job_manifest, kubectl, wait_for

pytestmark = pytest.mark.integration

FAIL = {"sim.hybrid.ascend.dev/outcome": "fail", "sim.hybrid.ascend.dev/exit-code": "3"}
SUCCEED = {"sim.hybrid.ascend.dev/outcome": "succeed", "sim.hybrid.ascend.dev/after-seconds": "2"}


SEED_NODES = 16


def add_910b_nodes(dev_cluster, count: int) -> list[str]:
    existing = fleet.existing_sim_nodes(dev_cluster.core)
    per_rack = load_settings(dev_cluster.paths).nodes_per_rack if dev_cluster.paths else 2
    start = max(existing, default=0) + 1
    nodes = plan_nodes(start, count, "910B", per_rack)
    fleet.create_nodes(dev_cluster.core, nodes)
    fleet.wait_nodes_ready(dev_cluster.core, {node.name for node in nodes}, timeout=60)
    return [node.name for node in nodes]


@pytest.fixture(scope="module")
def ascend_cluster(dev_cluster):
    """The session cluster with the CRD and at least the 16 × 8 910B NPUs the seed example needs (seed §4.5,
    docs/design.md §11)."""
    install_crd(dev_cluster)
    missing = SEED_NODES - len(dev_cluster.nodes("910B"))
    if missing > 0:
        add_910b_nodes(dev_cluster, missing)
    return dev_cluster


@pytest.fixture
def operator(ascend_cluster, tmp_path):
    process = OperatorProcess(str(ascend_cluster.kubeconfig), tmp_path / "operator.log").start()
    yield process
    process.stop()


@pytest.fixture
def jobs(ascend_cluster, namespace, operator):
    handle = Jobs(ascend_cluster.api, namespace, operator)
    yield handle
    handle.delete_all()


def schedulable_910b_nodes(core: client.CoreV1Api) -> list[str]:
    nodes = []
    for node in core.list_node().items:
        labels = node.metadata.labels or {}
        ready = any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])
        if ready and not node.spec.unschedulable and not node.spec.taints and "910b" in labels.get("accelerator-type", ""):
            nodes.append(node.metadata.name)
    return nodes


def assert_rank_table_matches(jobs: Jobs, name: str, world: int, per_pod: int) -> None:
    table = jobs.rank_table(name)
    assert table["status"] == "completed"
    ranks = [device["rank_id"] for server in table["server_list"] for device in server["device"]]
    assert ranks == [str(rank) for rank in range(world)]
    pods = {p["status"]["podIP"]: p for p in jobs.pods(name, attempt=jobs.status(name)["attempt"])}
    own_node = len({p["spec"]["nodeName"] for p in pods.values()}) == len(pods)
    for server in table["server_list"]:
        pod = pods[server["container_ip"]]
        assert server["host_ip"] == pod["status"]["hostIP"]
        assert server["server_id"] == (pod["status"]["hostIP"] if own_node else pod["metadata"]["uid"])
        first = int(server["device"][0]["rank_id"])
        assert first == int(pod["metadata"]["labels"][names.POD_INDEX_LABEL]) * per_pod


def test_example_job_runs_with_a_completed_rank_table(jobs, ascend_cluster):
    body = example("job.yaml")
    jobs.create(body)
    status = jobs.wait_running("tiny-tp4-dp2")
    assert status["worldSize"] == 8 and status["placement"]["tensorGroupsNodeLocal"] == "2/2"
    assert_rank_table_matches(jobs, "tiny-tp4-dp2", 8, 8)
    pod = jobs.pods("tiny-tp4-dp2")[0]
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    # one pod: its scheduler is its own IP, no Service is made (render.needs_services)
    assert env["MS_SCHED_HOST"]["valueFrom"] == {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}
    assert not [s for s in jobs.core.list_namespaced_service(jobs.namespace).items
                if s.metadata.name.startswith("tiny-tp4-dp2")]
    assert pod["metadata"]["annotations"][names.RANK_INDEX_ANNOTATION] == "0"
    header, row = kubectl(ascend_cluster, "get", "ahj", "-n", jobs.namespace, "-o", "wide").splitlines()[:2]
    assert header.split()[:10] == ["NAME", "WORLD", "TP", "PP", "DP", "EP", "PHASE", "UTIL", "STEP", "RESTARTS"]
    assert row.split()[:7] == ["tiny-tp4-dp2", "8", "4", "1", "2", "1", "Running"]
    assert "2/2" in row


def test_a_910a_job_of_4_chip_pods_is_held_where_the_kubelet_could_split_a_ring(jobs):
    """Kubelet mode (the cluster's plugin, as its DaemonSet says): the kubelet picks any free chips, so a 4-chip
    pod on a 910A node whose free chips span both HCCS rings could get chips of both, and HCCL would fail the job.
    The operator creates no pod and says why; a whole-node 910A job of the same degrees runs."""
    jobs.create(job_manifest("ring-pair", data=2, tensor=4, per_pod=4, npu={"chip": "910A"}))

    def held():
        placed = next((c for c in jobs.status("ring-pair").get("conditions") or [] if c["type"] == "Placed"), {})
        return placed.get("reason") == "KubeletMaySplitRings" and placed
    placed = wait_for(held, 30, "ring-pair held for a possible ring split", lambda: jobs.describe("ring-pair"))
    assert "2 let the kubelet pick a pod's 4 chips from both HCCS rings" in placed["message"]
    assert jobs.pods("ring-pair") == [] and jobs.status("ring-pair")["phase"] == "Pending"
    assert ("Warning", "KubeletMaySplitRings") in {(t, r) for t, r, _ in jobs.events("ring-pair")}
    jobs.create(job_manifest("ring-whole", data=2, tensor=4, per_pod=8, npu={"chip": "910A"}))
    jobs.wait_running("ring-whole")
    table = jobs.rank_table("ring-whole")
    assert hccl_problems(table, "910A") == []
    (pod,) = jobs.pods("ring-whole")
    (server,) = table["server_list"]
    assert [d["device_id"] for d in server["device"]] == [str(i) for i in range(8)]
    assert server["host_ip"] == pod["status"]["hostIP"]


def test_a_ring_split_the_kubelet_made_after_placement_never_starts_the_job(jobs, ascend_cluster):
    """The placement gives a 4-chip 910A pod only a node whose free chips sit in one ring, but the chips can change
    before the kubelet admits it: here ring 0 of node-006 is out of service at placement and back before admission
    (the device plugin stopped meanwhile, as a slow kubelet), and the kubelet, forced to straddle, takes chips of
    both rings. The operator never completes that table: the attempt is placed anew (no restart counted)."""
    paths = ascend_cluster.paths
    if paths is None:
        pytest.fail("needs a cluster the tests brought up (the device plugin is restarted)")
    from ascend_hybrid.devcluster import cluster

    plugin = cluster.device_plugin(paths)
    core = ascend_cluster.core
    try:
        fleet.set_straddle_rings(core, "node-006", True)
        for chip in range(4):
            fleet.set_chip_health(core, "node-006", chip, healthy=False)
        for chip in range(8):
            fleet.set_chip_health(core, "node-005", chip, healthy=False)  # node-006 is the only place
        time.sleep(1)
        assert plugin.stop()
        jobs.create(job_manifest("late-split", data=1, tensor=4, per_pod=4, npu={"chip": "910A"}))
        wait_for(lambda: jobs.pods("late-split"), 30, "the pod created on node-006", lambda: jobs.describe("late-split"))
        assert jobs.pods("late-split")[0]["spec"]["nodeName"] == "node-006"
        for chip in range(4):
            fleet.set_chip_health(core, "node-006", chip, healthy=True)
        plugin.wait_ready(cluster.ensure_device_plugin(paths), timeout=30)

        def split_seen():
            return ("Warning", "ChipsSplitAcrossRings") in {(t, r) for t, r, _ in jobs.events("late-split")}
        wait_for(split_seen, 40, "the split to be seen", lambda: jobs.describe("late-split"))
        status = jobs.status("late-split")
        assert status["restarts"] == 0 and status["attempt"] >= 2
        assert jobs.rank_table("late-split")["status"] == "initializing"
        assert all(c["status"] != "True" for c in status["conditions"] if c["type"] == "RankTableReady")
        # placed anew: node-006's free chips now span both rings, so it is held, never started
        wait_for(lambda: (jobs.status("late-split").get("placement") or {}).get("reason", "").find("HCCS") >= 0,
                 30, "the job held", lambda: jobs.describe("late-split"))
    finally:
        if not plugin.running():
            plugin.wait_ready(cluster.ensure_device_plugin(paths), timeout=30)
        fleet.set_straddle_rings(core, "node-006", False)
        for node, chips in (("node-006", range(4)), ("node-005", range(8))):
            for chip in chips:
                fleet.set_chip_health(core, node, chip, healthy=True)


def test_a_job_is_held_off_nodes_whose_device_plugin_runs_in_volcano_mode(jobs, ascend_cluster):
    """The operator reads each node's plugin mode from the plugin's DaemonSets: a node a -volcanoType=true plugin
    serves would refuse a pod bound by spec.nodeName (UnexpectedAdmissionError), so no pod goes there and the job
    says which nodes and why."""
    apps = client.AppsV1Api(ascend_cluster.api)
    core = ascend_cluster.core
    volcano = {"apiVersion": "apps/v1", "kind": "DaemonSet",
               "metadata": {"name": "test-volcano-pool", "namespace": "kube-system"},
               "spec": {"selector": {"matchLabels": {"name": "test-volcano-pool"}},
                        "template": {"metadata": {"labels": {"name": "test-volcano-pool"}},
                                     "spec": {"nodeSelector": {"test-pool": "volcano"},
                                              "containers": [{"name": "device-plugin-01", "image": "x",
                                                              "command": ["/bin/bash", "-c", "--"],
                                                              "args": ["device-plugin -volcanoType=true"]}]}}}}
    apps.create_namespaced_daemon_set("kube-system", volcano)
    try:
        core.patch_node("node-004", {"metadata": {"labels": {"test-pool": "volcano"}}})
        jobs.create(job_manifest("on-volcano", data=1, tensor=8, per_pod=8,
                                 template={"nodeSelector": {"test-pool": "volcano"}}))

        def held():
            placed = next((c for c in jobs.status("on-volcano").get("conditions") or [] if c["type"] == "Placed"), {})
            return placed.get("reason") == "DevicePluginVolcanoMode" and placed
        placed = wait_for(held, 30, "the job held off the Volcano-mode node", lambda: jobs.describe("on-volcano"))
        assert "run the device plugin in Volcano mode (node-004" in placed["message"]
        assert jobs.pods("on-volcano") == []
        core.patch_node("node-004", {"metadata": {"labels": {"test-pool": None}}})
        apps.delete_namespaced_daemon_set("test-volcano-pool", "kube-system")
    finally:
        core.patch_node("node-004", {"metadata": {"labels": {"test-pool": None}}})
        try:
            apps.delete_namespaced_daemon_set("test-volcano-pool", "kube-system")
        except client.ApiException:
            pass


def test_a_chip_ip_the_device_plugin_could_not_read_keeps_the_table_initializing_naming_it(jobs, ascend_cluster):
    """The device plugin annotates `"device_ip": "-1"` for a chip whose IP it could not read; HCCL would refuse the
    table, so it stays initializing and RankTableReady names the pod and the chip (MindCluster's validateDeviceIP)."""
    rings = ascend_cluster.nodes("910A")
    for node in rings:
        fleet.set_device_ip_readable(ascend_cluster.core, node, 5, readable=False)
    try:
        time.sleep(1)  # the device plugin's node watch sees the annotation before the gang is released
        jobs.create(job_manifest("lost-ip", data=2, tensor=4, per_pod=8, npu={"chip": "910A"}))

        def names_the_chip():
            ready = next((c for c in jobs.status("lost-ip").get("conditions") or []
                          if c["type"] == "RankTableReady"), {})
            return ready.get("status") == "False" and "device 5 has device_ip '-1'" in ready.get("message", "") \
                and ready
        ready = wait_for(names_the_chip, 60, "RankTableReady to name chip 5", lambda: jobs.describe("lost-ip"))
        assert "lost-ip-a1-0" in ready["message"]  # the one pod, on a whole node
        assert jobs.rank_table("lost-ip") == {"status": "initializing", "version": "1.0"}
        assert all(pod["status"]["phase"] == "Running" for pod in jobs.pods("lost-ip"))
    finally:
        for node in rings:
            fleet.set_device_ip_readable(ascend_cluster.core, node, 5, readable=True)


def test_seed_moe_128_places_each_stage_in_one_rack(jobs):
    assert len(schedulable_910b_nodes(jobs.core)) >= 16
    jobs.create(example("seed-moe-128.yaml"))
    status = jobs.wait_running("seed-moe-128", timeout=120)
    assert status["placement"]["tensorGroupsNodeLocal"] == "16/16"
    assert_rank_table_matches(jobs, "seed-moe-128", 128, 8)
    nodes = status["placement"]["nodes"]
    assert len(set(nodes)) == 16
    racks = {n.metadata.name: (n.metadata.labels or {}).get("huawei.com/topotree.rackid") for n in jobs.core.list_node().items}
    for stage in range(8):
        assert racks[nodes[2 * stage]] == racks[nodes[2 * stage + 1]], f"stage {stage} spans racks"


def test_pods_succeed_then_ttl_deletes_the_job(jobs):
    jobs.create(job_manifest("done", annotations=SUCCEED, runPolicy={"ttlSecondsAfterFinished": 3, "cleanPodPolicy": "None"}))
    status = jobs.wait_phase("done", "Succeeded", timeout=60)
    assert status["completionTime"]
    assert any(c["type"] == "Succeeded" and c["status"] == "True" for c in status["conditions"])
    assert [p["status"]["phase"] for p in jobs.pods("done")] == ["Succeeded"]  # cleanPodPolicy None keeps it
    wait_for(lambda: jobs.get("done") is None, 30, "the TTL to delete the job", lambda: jobs.describe("done"))


def test_failed_pod_restarts_the_gang_then_backoff_fails_the_job(jobs):
    jobs.create(job_manifest("flaky", data=2, tensor=4, per_pod=4, runPolicy={"backoffLimit": 1}))
    jobs.wait_running("flaky")
    victim = jobs.pods("flaky", attempt=1)[1]
    jobs.core.patch_namespaced_pod(victim["metadata"]["name"], jobs.namespace, {"metadata": {"annotations": FAIL}})
    status = jobs.wait_running("flaky", timeout=60, attempt=2)
    # exit code 3 and no termination message: the cause is Unknown, so the gang restarts but no node is blamed
    assert status["restarts"] == 1 and status["avoidedNodes"] == []
    assert (status["lastFailure"]["cause"], status["lastFailure"]["pod"]) == ("Unknown", victim["metadata"]["name"])
    assert not jobs.pods("flaky", attempt=1)
    assert_rank_table_matches(jobs, "flaky", 8, 4)
    warnings = [e for e in jobs.events("flaky") if e[0] == "Warning" and e[1] == "Unknown"]
    assert warnings and victim["metadata"]["name"] in warnings[0][2] and "exit code 3" in warnings[0][2]
    second = jobs.pods("flaky", attempt=2)[0]
    jobs.core.patch_namespaced_pod(second["metadata"]["name"], jobs.namespace, {"metadata": {"annotations": FAIL}})
    status = jobs.wait_phase("flaky", "Failed", timeout=60)
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "BackoffLimitExceeded"
    assert second["metadata"]["name"] in failed["message"] and "exit code 3" in failed["message"]


def test_not_enough_npus_is_pending_until_a_node_is_added(jobs, ascend_cluster):
    free_nodes = len(schedulable_910b_nodes(jobs.core))
    jobs.create(job_manifest("big", data=free_nodes + 1, tensor=8, per_pod=8))
    wait_for(lambda: (jobs.status("big").get("placement") or {}).get("reason"), 30, "a placement reason",
             lambda: jobs.describe("big"))
    status = jobs.status("big")
    assert status["phase"] == "Pending"
    assert f"needs {free_nodes + 1} pods × 8" in status["placement"]["reason"]
    assert not jobs.pods("big")
    time.sleep(3)
    assert len([e for e in jobs.events("big") if e[1] == "Unschedulable"]) == 1  # not one per retry
    add_910b_nodes(ascend_cluster, 1)
    status = jobs.wait_running("big", timeout=60)
    assert len(set(status["placement"]["nodes"])) == free_nodes + 1


def test_node_not_ready_restarts_the_job_elsewhere(jobs):
    jobs.create(job_manifest("survivor", data=2, tensor=8, per_pod=8))
    status = jobs.wait_running("survivor")
    doomed = status["placement"]["nodes"][1]
    fleet.set_node_ready(jobs.core, doomed, False)
    try:
        status = jobs.wait_running("survivor", timeout=60, attempt=2)
        assert doomed in status["avoidedNodes"] and doomed not in status["placement"]["nodes"]
        warnings = [e for e in jobs.events("survivor") if e[:2] == ("Warning", "NodeNotReady")]
        assert len(warnings) == 1 and doomed in warnings[0][2]
        assert status["restarts"] == 1 and status["disruptions"] == 1  # a disruption: off the backoffLimit
    finally:
        fleet.set_node_ready(jobs.core, doomed, True)


def test_suspend_and_resume(jobs):
    jobs.create(job_manifest("pausable"))
    jobs.wait_running("pausable")
    jobs.patch_spec("pausable", {"runPolicy": {"suspend": True}})
    jobs.wait_phase("pausable", "Suspended")
    wait_for(lambda: not jobs.pods("pausable"), 30, "the pods to go")
    jobs.patch_spec("pausable", {"runPolicy": {"suspend": False}})
    status = jobs.wait_running("pausable")
    assert status["attempt"] == 2 and status["restarts"] == 0


@pytest.mark.parametrize("kill_after_pods", [0, 3, 7])
def test_operator_killed_during_pod_creation_leaves_no_duplicates(jobs, kill_after_pods):
    name = f"crash-{kill_after_pods}"
    jobs.create(job_manifest(name, data=8, tensor=4, per_pod=4))  # 8 pods
    wait_for(lambda: len(jobs.pods(name)) >= kill_after_pods and jobs.status(name).get("placement"), 30,
             f"{kill_after_pods} pods", lambda: jobs.describe(name), interval=0.02)
    jobs.operator.kill()
    jobs.operator.start()
    status = jobs.wait_running(name, timeout=60)
    pods = jobs.pods(name)
    assert sorted(p["metadata"]["name"] for p in pods) == [f"{name}-a1-{i}" for i in range(8)]
    assert status["attempt"] == 1


def test_two_jobs_that_cannot_both_fit(jobs):
    free = len(schedulable_910b_nodes(jobs.core))
    size = free // 2 + 1
    manifests = [job_manifest(f"rival-{i}", data=size, tensor=8, per_pod=8) for i in range(2)]
    threads = [threading.Thread(target=jobs.create, args=(m,)) for m in manifests]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    def settled():
        phases = sorted(jobs.status(m["metadata"]["name"]).get("phase") or "" for m in manifests)
        return phases == ["Pending", "Running"]
    wait_for(settled, 60, "one Running and one Pending", lambda: jobs.describe("rival-0") + jobs.describe("rival-1"))
    loser = next(m["metadata"]["name"] for m in manifests if jobs.status(m["metadata"]["name"])["phase"] == "Pending")
    assert jobs.status(loser)["placement"]["reason"]
    assert not jobs.pods(loser)
    chips: dict[str, int] = {}
    for pod in jobs.core.list_pod_for_all_namespaces().items:
        if pod.spec.node_name and pod.status.phase in ("Pending", "Running"):
            for container in pod.spec.containers:
                chips[pod.spec.node_name] = chips.get(pod.spec.node_name, 0) + int(
                    (container.resources.limits or {}).get("huawei.com/Ascend910", 0))
    assert max(chips.values()) <= 8


def test_deleting_the_job_removes_its_children(jobs):
    jobs.create(job_manifest("ephemeral"))
    jobs.wait_running("ephemeral")
    jobs.delete("ephemeral")
    wait_for(lambda: not jobs.pods("ephemeral"), 60, "the pods to be garbage-collected")
    wait_for(lambda: not [s for s in jobs.core.list_namespaced_service(jobs.namespace).items
                          if s.metadata.name.startswith("ephemeral")], 60, "the services to go")
    wait_for(lambda: not [c for c in jobs.core.list_namespaced_config_map(jobs.namespace).items
                          if "ephemeral" in c.metadata.name], 60, "the config maps to go")


def test_the_headless_services_records_are_the_operators_alone(kube_api, namespace):
    """The slices the operator writes with each rank table, through its own shell: the apiserver accepts them
    (addresses are data here, never reached). A headless Service an older operator made with a selector loses it,
    and the slice Kubernetes' EndpointSlice controller wrote for it then goes (the controller leaves it); the
    controller writes none again."""
    kube, uid = Kube(kube_api), "00000000-0000-4000-8000-000000000027"
    discovery = client.DiscoveryV1Api(kube_api)

    def records() -> list[tuple[str, str, list[tuple[str, list[str]]]]]:
        return sorted((s.metadata.name, s.metadata.labels["endpointslice.kubernetes.io/managed-by"],
                       [(e.hostname, e.addresses) for e in s.endpoints or ()])
                      for s in discovery.list_namespaced_endpoint_slice(namespace).items)
    headless = render.services("dns", namespace, uid)[1]
    headless["metadata"]["ownerReferences"] = []  # no job object here: the garbage collector would delete them
    kube.apply({**headless, "spec": {**headless["spec"], "selector": {names.JOB_LABEL: "dns"}}})
    wait_for(lambda: [r[1] for r in records()] == ["endpointslice-controller.k8s.io"], 30, "the controller's slice")
    kube.apply(headless)
    assert client.CoreV1Api(kube_api).read_namespaced_service("dns", namespace).spec.selector is None
    pods = [PodBuilder("dns", index, namespace=namespace).uid(f"uid-{index}")
            .running(pod_ip=f"10.244.0.{index + 1}").build() for index in range(3)]
    for dns in render.dns_slices("dns", namespace, uid, render.pod_endpoints(pods), pod_count=3):
        dns["metadata"]["ownerReferences"] = []
        kube.apply(dns)
    kube.delete_controller_slices(namespace, "dns")
    ours = [("dns-dns-0", render.SLICE_MANAGER, [(f"dns-a1-{i}", [f"10.244.0.{i + 1}"]) for i in range(3)])]
    wait_for(lambda: records() == ours, 30, "the operator's slice alone", lambda: str(records()))
    time.sleep(3)  # a controller that still took the Service for its own would write its slice again by now
    assert records() == ours


def test_invalid_spec_is_refused_at_admission_with_the_operators_message(jobs):
    bad = job_manifest("bad", data=2, tensor=3, per_pod=4)
    with pytest.raises(client.ApiException) as refused:
        jobs.create(bad)
    assert "spec.parallelism.tensor=3 must divide spec.npu.perPod=4" in refused.value.body


def test_namespaced_operator_counts_npus_that_other_namespaces_hold(ascend_cluster, namespace, tmp_path):
    """With --namespace, kopf sees pods of the watched namespace only; placement must still see every NPU taken."""
    core = ascend_cluster.core
    busy = f"{namespace}-busy"
    core.create_namespace({"metadata": {"name": busy}})
    wait_for(lambda: core.list_namespaced_service_account(busy).items, 30, "the busy namespace's ServiceAccount")
    nodes = schedulable_910b_nodes(core)
    keep_free = nodes[-1]
    operator = OperatorProcess(str(ascend_cluster.kubeconfig), tmp_path / "operator.log",
                               extra_args=("--namespace", namespace)).start()
    try:
        for index, node in enumerate(nodes[:-1]):
            core.create_namespaced_pod(busy, pod_manifest(f"holder-{index}", node=node, chips=8),
                                       _preload_content=False)
        wait_for(lambda: sum(1 for p in core.list_namespaced_pod(busy).items if p.status.phase == "Running")
                 == len(nodes) - 1, 60, "the holder pods to run")
        jobs = Jobs(ascend_cluster.api, namespace, operator)
        jobs.create(job_manifest("squeezed", data=1, tensor=8, per_pod=8))
        status = jobs.wait_running("squeezed", timeout=60)
        assert status["placement"]["nodes"] == [keep_free]
        jobs.delete_all()
    finally:
        operator.stop()
        core.delete_namespace(busy)
        wait_for(lambda: not core.list_namespaced_pod(busy).items, 60, "the holder pods to go")
