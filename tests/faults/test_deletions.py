"""A user deleting the operator's children: the rank-table ConfigMap and the Services are put back without touching
the gang; a deleted pod is a whole-gang restart counted once with a PodDeleted warning — also for a one-pod job."""

from __future__ import annotations

import time

from ascend_hybrid.contracts import names
from support.faults import CaseResult, Monitor, check_job, converge
from support.operator_harness import job_manifest, wait_for


def test_deleted_rank_table_and_services_come_back_with_the_gang_untouched(jobs, fault_cluster, report):
    name = "kept"
    jobs.create(job_manifest(name, data=2, tensor=4, per_pod=4))
    converge(jobs, name)
    sched_ip = jobs.core.read_namespaced_service(names.sched_service(name), jobs.namespace).spec.cluster_ip
    table = jobs.rank_table(name)
    with Monitor(fault_cluster.core) as monitor:
        started = time.monotonic()
        jobs.core.delete_namespaced_service(names.sched_service(name), jobs.namespace)
        wait_for(lambda: _ip(jobs, names.sched_service(name)) == sched_ip, 60, f"{name}-sched back on {sched_ip}",
                 lambda: jobs.describe(name))
        jobs.core.delete_namespaced_service(names.headless_service(name), jobs.namespace)
        wait_for(lambda: _ip(jobs, names.headless_service(name)) == "None", 60, "the headless Service back")
        jobs.core.delete_namespaced_config_map(names.rank_table_config_map(name), jobs.namespace)
        wait_for(lambda: _table(jobs, name) == table, 60, "the rank table back, completed", lambda: jobs.describe(name))
        seconds = time.monotonic() - started
    status = converge(jobs, name)
    assert status["attempt"] == 1 and status["restarts"] == 0  # the running gang was never touched
    duplicated, lost = check_job(jobs, name, 2)
    assert (duplicated, lost, monitor.max_duplicates, monitor.double_booked) == (0, 0, 0, [])
    report.add(CaseResult("user deletes the rank-table ConfigMap and both Services", 3, duplicated, lost, seconds,
                          f"restored; {name}-sched keeps ClusterIP {sched_ip} (the pods' MS_SCHED_HOST); no restart"))


def _table(jobs, name):
    try:
        return jobs.rank_table(name)
    except Exception:  # noqa: BLE001 - not back yet
        return None


def _ip(jobs, service):
    try:
        return jobs.core.read_namespaced_service(service, jobs.namespace).spec.cluster_ip
    except Exception:  # noqa: BLE001 - not back yet
        return None


def test_a_deleted_pod_restarts_the_whole_gang_once_for_multi_and_one_pod_jobs(jobs, fault_cluster, report):
    shapes = {"multi": 4, "single": 1}
    jobs.create(job_manifest("multi", data=4, tensor=4, per_pod=4))
    jobs.create(job_manifest("single", data=1, tensor=4, per_pod=4))
    for name in shapes:
        converge(jobs, name)
    with Monitor(fault_cluster.core) as monitor:
        started = time.monotonic()
        for name in shapes:
            victim = jobs.pods(name, attempt=1)[-1]["metadata"]["name"]
            jobs.core.delete_namespaced_pod(victim, jobs.namespace)
        statuses = {name: converge(jobs, name, attempt=2, timeout=90) for name in shapes}
        seconds = time.monotonic() - started
    for name, status in statuses.items():
        assert status["restarts"] == 1, (name, status)
        warnings = [e for e in jobs.events(name) if e[:2] == ("Warning", "PodDeleted")]
        assert len(warnings) == 1 and f"{name}-a1-" in warnings[0][2], (name, warnings)
        assert not jobs.pods(name, attempt=1)
    results = [check_job(jobs, name, pods) for name, pods in shapes.items()]
    duplicated, lost = sum(r[0] for r in results), sum(r[1] for r in results)
    assert (duplicated, lost, monitor.max_duplicates, monitor.double_booked) == (0, 0, 0, [])
    report.add(CaseResult("user deletes one pod of a 4-pod and of a 1-pod job", 2, duplicated, lost, seconds,
                          "each: one PodDeleted warning, restarts 1, attempt 2 Running"))
