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
RACE_TIMEOUT_SECONDS = 45  # past the scheduler's down time and its new lease, before the race is decided


def test_a_rival_pod_the_default_scheduler_binds_first_takes_the_node_and_the_gang_is_placed_anew(
        jobs, fault_cluster, report):
    """The placement race: the operator's inventory sees no claim on node A (the rival is pending, selected there by
    nodeSelector only), places the one-pod gang there and creates its pod pinned and schedulable; the default
    scheduler, stopped meanwhile, comes back and binds the rival (higher priority) to A first. The gang's pod is
    refused (PodScheduled=False, Unschedulable), named in the job's message, and past schedulingTimeoutSeconds
    the gang is placed anew on B: the rival keeps its chips, no pod is doubled or lost, no restart is counted."""
    core, name = fault_cluster.core, "raced"
    node_a, node_b = sorted(node["metadata"]["name"] for node in fleet.simulated_nodes(core))[-2:]
    priority = client.SchedulingV1Api(fault_cluster.api)
    priority_class = f"ahj-race-{jobs.namespace}"[:63]
    scheduler = threading.Thread(target=fault_cluster.control_plane.restart, daemon=True,
                                 args=("kube-scheduler", SCHEDULER_DOWN_SECONDS))
    try:
        for node in (node_a, node_b):  # the gang may go to A or B; the rival is selected to A
            core.patch_node(node, {"metadata": {"labels": {RACE_LABEL: "true"}}})
        priority.create_priority_class({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                        "metadata": {"name": priority_class}, "value": 1000})
        with Monitor(core) as monitor:
            started = time.monotonic()
            scheduler.start()
            wait_until(lambda: fault_cluster.control_plane.pid("kube-scheduler") is None, 30, "the scheduler to stop")
            rival = pod_manifest("rival", chips=8)
            rival["spec"].update(nodeSelector={HOSTNAME_LABEL: node_a}, priorityClassName=priority_class)
            core.create_namespaced_pod(jobs.namespace, rival)
            jobs.create(job_manifest(name, data=1, tensor=8, per_pod=8,
                                     template={"nodeSelector": {RACE_LABEL: "true"}},
                                     runPolicy={"schedulingTimeoutSeconds": RACE_TIMEOUT_SECONDS}))
            wait_for(lambda: jobs.pods(name, attempt=1), SCHEDULER_DOWN_SECONDS, "the gang's pod, created while the "
                     "scheduler is down", lambda: jobs.describe(name), interval=0.1)
            placed = jobs.status(name)["placement"]["nodes"]
            assert placed == [node_a], f"placed on {placed}: the race this case needs did not happen"
            scheduler.join(timeout=60)
            wait_for(lambda: core.read_namespaced_pod("rival", jobs.namespace).spec.node_name == node_a, 60,
                     "the default scheduler to bind the rival to node A", lambda: jobs.describe(name))
            wait_for(lambda: "refused by the scheduler" in (jobs.status(name).get("message") or ""), 60,
                     "the job to name the refusal", lambda: jobs.describe(name))
            status = converge(jobs, name, attempt=2, timeout=RACE_TIMEOUT_SECONDS + 90)
            seconds = time.monotonic() - started
        assert status["placement"]["nodes"] == [node_b] and status["restarts"] == 0, jobs.describe(name)
        assert ("Warning", "SchedulingTimeout") in [event[:2] for event in jobs.events(name)]
        rival_now = core.read_namespaced_pod("rival", jobs.namespace)
        assert rival_now.spec.node_name == node_a and rival_now.status.phase == "Running"
        duplicated, lost = check_job(jobs, name, 1)
        assert (duplicated, lost, monitor.max_duplicates, monitor.double_booked) == (0, 0, 0, [])
    finally:
        scheduler.join(timeout=60)
        try:
            core.delete_namespaced_pod("rival", jobs.namespace, grace_period_seconds=0, _request_timeout=10)
        except client.ApiException as error:
            if error.status != 404:
                raise
        for node in (node_a, node_b):
            core.patch_node(node, {"metadata": {"labels": {RACE_LABEL: None}}})
        priority.delete_priority_class(priority_class)
    report.add(CaseResult("a rival pod bound by the default scheduler takes the placed node first", 1, duplicated,
                          lost, seconds, "the gang's pod refused as Unschedulable, named, placed anew on another "
                          "node after schedulingTimeoutSeconds; no restart counted"))
