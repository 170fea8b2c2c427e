"""Other writers on the operator's objects: a rival rewriting the job's status and the rank table in a loop
(read-modify-write with resourceVersions, so it meets 409 Conflicts whenever the operator wrote in between)."""

from __future__ import annotations

import json
import threading
import time

from kubernetes import client

from ascend_hybrid.contracts import names
from ascend_hybrid.contracts.names import GROUP
from ascend_hybrid.spec.api import PLURAL, VERSION
from support.faults import CaseResult, Monitor, check_job, converge
from support.operator_harness import wait_for

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
