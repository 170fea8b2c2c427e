"""Other writers on the operator's objects: a rival rewriting the job's status and the rank table in a loop
(read-modify-write with resourceVersions, so it meets 409 Conflicts whenever the operator wrote in between); a
rival pod the default scheduler binds onto the chips the operator has just placed a gang on."""

from __future__ import annotations

import json
import threading
import time

from kubernetes import client

from ascend_hybrid.contracts import names
from ascend_hybrid.contracts.names import GROUP, HOSTNAME_LABEL
from ascend_hybrid.devcluster import cluster
from ascend_hybrid.devcluster.kube.waiting import wait_until
from ascend_hybrid.devcluster.nodes import fleet
from ascend_hybrid.devcluster.testing.pods import pod_manifest
from ascend_hybrid.spec.api import PLURAL, VERSION
from support.faults import CaseResult, Monitor, check_job, converge
from support.operator_harness import job_manifest, wait_for

RIVAL_SECONDS = 10


class Rival(threading.Thread):
    def __init__(self, api: client.ApiClient, namespace: str, job: str):
        super().__init__(daemon=True)
        self.custom, self.core = client.CustomObjectsApi(api), client.CoreV1Api(api)
        self.namespace, self.job = namespace, job
        self.writes = self.conflicts = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for write in (self.status, self.rank_table):
                try:
                    write()
                    self.writes += 1
                except client.ApiException as error:
                    if error.status != 409:
                        raise
                    self.conflicts += 1
            time.sleep(0.05)

    def status(self) -> None:
        job = self.custom.get_namespaced_custom_object_status(GROUP, VERSION, self.namespace, PLURAL, self.job)
        job["status"].update(phase="Pending", message="rival", rankTable={"status": "initializing"})
        self.custom.replace_namespaced_custom_object_status(GROUP, VERSION, self.namespace, PLURAL, self.job, job)

    def rank_table(self) -> None:
        config_map = self.core.read_namespaced_config_map(names.rank_table_config_map(self.job), self.namespace)
        config_map.data["hccl.json"] = json.dumps({"status": "initializing", "rival": True})
        self.core.replace_namespaced_config_map(config_map.metadata.name, self.namespace, config_map)


def test_a_rival_rewriting_status_and_rank_table_loses_every_time(jobs, fault_cluster, report):
    name = "contested"
    jobs.create(job_manifest_of(name))
    converge(jobs, name)
    table = jobs.rank_table(name)
    rival = Rival(fault_cluster.api, jobs.namespace, name)
    with Monitor(fault_cluster.core) as monitor:
        started = time.monotonic()
        rival.start()
        time.sleep(RIVAL_SECONDS)
        rival.stop.set()
        rival.join(timeout=30)
        # the operator's table back, byte for byte the same content (its repair follows the rival's last write's
        # watch event: converge may return on the Running the rival left before that)
        wait_for(lambda: jobs.rank_table(name) == table, 30, "the operator's rank table back",
                 lambda: jobs.describe(name))
        seconds = time.monotonic() - started - RIVAL_SECONDS
    status = converge(jobs, name, timeout=60)
    assert status["attempt"] == 1 and status["restarts"] == 0 and status["message"] != "rival"
    duplicated, lost = check_job(jobs, name, 2)
    assert (duplicated, lost, monitor.max_duplicates, monitor.double_booked) == (0, 0, 0, [])
    report.add(CaseResult(f"rival rewrites status + rank table for {RIVAL_SECONDS} s", rival.writes, duplicated,
                          lost, seconds, f"time after the rival stopped; {rival.writes} rival writes, {rival.conflicts} of its writes met 409"))


def job_manifest_of(name: str) -> dict:
    from support.operator_harness import job_manifest

    return job_manifest(name, data=2, tensor=4, per_pod=4)


RACE_LABEL = "sim.hybrid.ascend.dev/race"
SCHEDULER_DOWN_SECONDS = 12.0


class RaceNodes:
    """The last two simulated nodes, A and B, labelled for the race: the gang is selected to both, a rival to A;
    the labels and the rival go at the end."""

    def __init__(self, fault_cluster, jobs):
        self.core, self.namespace = fault_cluster.core, jobs.namespace
        self.a, self.b = sorted(node["metadata"]["name"] for node in fleet.simulated_nodes(self.core))[-2:]

    def __enter__(self) -> RaceNodes:
        for node in (self.a, self.b):
            self.core.patch_node(node, {"metadata": {"labels": {RACE_LABEL: "true"}}})
        return self

    def rival(self, **spec) -> dict:
        """A bare 8-chip pod selected to node A, created now (a pod of another team, not the operator's)."""
        rival = pod_manifest("rival", chips=8)
        rival["spec"].update(nodeSelector={HOSTNAME_LABEL: self.a}, **spec)
        self.core.create_namespaced_pod(self.namespace, rival)
        return rival

    def gang(self, jobs, name: str) -> None:
        jobs.create(job_manifest(name, data=1, tensor=8, per_pod=8, template={"nodeSelector": {RACE_LABEL: "true"}}))
        pods = wait_for(lambda: jobs.pods(name, attempt=1), 30, "the gang's pod", lambda: jobs.describe(name),
                        interval=0.1)
        # the pod, bound at creation, is where the placement is (a one-pod job's status says it with its next step)
        placed = [pod["spec"].get("nodeName") for pod in pods]
        assert placed == [self.a], f"placed on {placed}: the race this case needs did not happen"

    def __exit__(self, *exc) -> None:
        try:
            self.core.delete_namespaced_pod("rival", self.namespace, grace_period_seconds=0, _request_timeout=10)
        except client.ApiException as error:
            if error.status != 404:
                raise
        for node in (self.a, self.b):
            self.core.patch_node(node, {"metadata": {"labels": {RACE_LABEL: None}}})


def test_a_rival_pod_the_default_scheduler_meets_after_the_placement_waits_and_the_gang_keeps_its_node(
        jobs, fault_cluster, report):
    """The placement race with the default scheduler: the operator's inventory sees no claim on node A (the rival
    is pending, selected there by nodeSelector only, the scheduler stopped), places the one-pod gang there and
    creates its pod bound to A. The scheduler, back, counts the gang's pod on A: the rival stays Pending
    (Unschedulable), the gang runs on A in its first attempt, no chip is held twice, no restart is counted."""
    core, name = fault_cluster.core, "raced"
    scheduler = threading.Thread(target=fault_cluster.control_plane.restart, daemon=True,
                                 args=("kube-scheduler", SCHEDULER_DOWN_SECONDS))
    with RaceNodes(fault_cluster, jobs) as race, Monitor(core) as monitor:
        started = time.monotonic()
        scheduler.start()
        wait_until(lambda: fault_cluster.control_plane.pid("kube-scheduler") is None, 30, "the scheduler to stop")
        race.rival()
        race.gang(jobs, name)
        scheduler.join(timeout=60)

        def rival_refused() -> bool:
            rival = core.read_namespaced_pod("rival", jobs.namespace)
            return any(c.type == "PodScheduled" and c.reason == "Unschedulable" for c in rival.status.conditions or ())
        wait_for(rival_refused, 60, "the default scheduler to find no room for the rival on node A",
                 lambda: jobs.describe(name))
        status = converge(jobs, name, attempt=1, timeout=60)
        seconds = time.monotonic() - started
        rival_now = core.read_namespaced_pod("rival", jobs.namespace)
        assert rival_now.spec.node_name is None and rival_now.status.phase == "Pending"
        assert status["placement"]["nodes"] == [race.a] and status["restarts"] == 0, jobs.describe(name)
        duplicated, lost = check_job(jobs, name, 1)
        assert (duplicated, lost, monitor.max_duplicates, monitor.double_booked) == (0, 0, 0, [])
    report.add(CaseResult("the default scheduler meets a rival for the placed node after the gang's pod", 1,
                          duplicated, lost, seconds, "the gang's pod bound at creation keeps node A; the rival "
                          "waits Unschedulable; no restart counted"))


def test_a_pod_the_node_refuses_at_admission_is_placed_anew_without_a_restart(jobs, fault_cluster, report):
    """The race the scheduler cannot see: another scheduler binds a rival to node A after the operator's inventory
    was read (here: the rival of a scheduler that does not exist, bound by this test through the Binding API once
    the gang's pod is bound to A). Node A's kubelet (the simulated device plugin, stopped meanwhile so both pods
    wait for it) admits them by creation time, as a kubelet does: the rival gets the chips, the gang's pod is
    Failed with `OutOfhuawei.com/Ascend910`. The operator tells that from a training failure: the refusal named,
    the gang placed anew on B at once, no restart counted, the rival untouched, no pod doubled or lost."""
    core, name = fault_cluster.core, "refused"
    plugin = cluster.device_plugin(fault_cluster.paths)
    with RaceNodes(fault_cluster, jobs) as race, Monitor(core) as monitor:
        started = time.monotonic()
        assert plugin.stop(), "the device plugin did not stop"
        try:
            race.rival(schedulerName="another-scheduler")
            time.sleep(1.1)  # creation times have whole seconds: the rival is the older pod
            race.gang(jobs, name)
            core.create_namespaced_binding(jobs.namespace, {
                "apiVersion": "v1", "kind": "Binding", "metadata": {"name": "rival"},
                "target": {"apiVersion": "v1", "kind": "Node", "name": race.a}}, _preload_content=False)
        finally:
            plugin.wait_ready(cluster.ensure_device_plugin(fault_cluster.paths), timeout=60)
        wait_for(lambda: "RefusedByNode" in [event[1] for event in jobs.events(name)], 60,
                 "the job to name the node's refusal", lambda: jobs.describe(name))
        status = converge(jobs, name, attempt=2, timeout=90)
        seconds = time.monotonic() - started
        assert status["placement"]["nodes"] == [race.b] and status["restarts"] == 0, jobs.describe(name)
        assert "lastFailure" not in status, status.get("lastFailure")
        refusal = next(event for event in jobs.events(name) if event[1] == "RefusedByNode")
        assert f"refused by node {race.a}: OutOfhuawei.com/Ascend910" in refusal[2], refusal
        rival_now = core.read_namespaced_pod("rival", jobs.namespace)
        assert rival_now.spec.node_name == race.a and rival_now.status.phase == "Running"
        duplicated, lost = check_job(jobs, name, 1)
        assert (duplicated, lost, monitor.max_duplicates, monitor.double_booked) == (0, 0, 0, [])
    report.add(CaseResult("a pod its node refuses at admission (a rival bound there first)", 1, duplicated, lost,
                          seconds, "Failed OutOfhuawei.com/Ascend910, named, placed anew on another node at once; "
                          "no restart counted"))
