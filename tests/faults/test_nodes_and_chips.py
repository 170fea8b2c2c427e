"""Hardware faults: a node flapping NotReady/Ready around the grace period, a chip turning unhealthy mid-run."""

from __future__ import annotations

import time

from ascend_hybrid.devcluster.nodes import fleet
from support.faults import CaseResult, Monitor, check_job, converge
from support.operator_harness import Jobs, job_manifest, wait_for

GRACE = 10.0


def job_warnings(jobs: Jobs, name: str) -> list[str]:
    """Warning reasons posted on the job itself (not on its Services, which share its name)."""
    items = jobs.core.list_namespaced_event(
        jobs.namespace, field_selector=f"involvedObject.name={name},involvedObject.kind=AscendHybridJob").items
    return [event.reason for event in items if event.type == "Warning"]


def test_a_node_flapping_around_the_grace_period(fault_cluster, namespace, start_operator, report):
    jobs = Jobs(fault_cluster.api, namespace, start_operator("--node-grace-seconds", str(GRACE)))
    name = "flapped"
    jobs.create(job_manifest(name, data=2, tensor=8, per_pod=8))
    status = converge(jobs, name)
    node = status["placement"]["nodes"][1]
    flaps = 0
    with Monitor(fault_cluster.core) as monitor:
        started = time.monotonic()
        try:
            for _ in range(3):  # NotReady for less than the grace period: nothing happens
                fleet.set_node_ready(jobs.core, node, False)
                fleet.set_node_ready(jobs.core, node, True)
                flaps += 1
            assert jobs.status(name)["attempt"] == 1
            fleet.set_node_ready(jobs.core, node, False)  # then past it: one restart, away from the node
            flaps += 1
            status = converge(jobs, name, attempt=2, timeout=GRACE + 60)
        finally:
            fleet.set_node_ready(jobs.core, node, True)
        seconds = time.monotonic() - started
    assert status["restarts"] == 1 and node in status["avoidedNodes"] and node not in status["placement"]["nodes"]
    assert job_warnings(jobs, name) == ["NodeNotReady"]
    duplicated, lost = check_job(jobs, name, 2)
    assert (duplicated, lost, monitor.max_duplicates, monitor.double_booked) == (0, 0, 0, [])
    report.add(CaseResult(f"node flaps NotReady/Ready 3 × under the {GRACE:.0f} s grace, then stays NotReady", flaps,
                          duplicated, lost, seconds, "short flaps: no restart; the long one: one NodeNotReady restart"))
    jobs.delete_all(timeout=120)


def test_a_chip_turning_unhealthy_mid_run_is_never_handed_out(jobs, fault_cluster, report):
    name = "on-a-chip"
    jobs.create(job_manifest(name, data=1, tensor=8, per_pod=8))
    node = converge(jobs, name)["placement"]["nodes"][0]
    pinned = {"template": {"nodeSelector": {"kubernetes.io/hostname": node}}}
    with Monitor(fault_cluster.core) as monitor:
        started = time.monotonic()
        try:
            fleet.set_chip_health(jobs.core, node, 3, healthy=False)
            # the default failure policy: a disruption (restart avoiding the node, backoffLimit untouched)
            running = converge(jobs, name, attempt=2, timeout=90)
            assert running["lastFailure"]["cause"] == "ChipUnhealthy", jobs.describe(name)
            assert node not in running["placement"]["nodes"], running["placement"]
            jobs.delete(name)
            wait_for(lambda: not jobs.pods(name), 60, "the first job's pods to go")
            # the node now has 7 healthy chips: a gang that needs all 8 of them waits, and says why
            jobs.create(job_manifest("refill", data=2, tensor=4, per_pod=4, **pinned))
            wait_for(lambda: "found 1" in ((jobs.status("refill").get("placement") or {}).get("reason") or ""), 60,
                     "refill to wait: one pod slot left beside the unhealthy chip", lambda: jobs.describe("refill"))
            assert not jobs.pods("refill")
            fleet.set_chip_health(jobs.core, node, 3, healthy=True)
            converge(jobs, "refill", timeout=90)
        finally:
            fleet.set_chip_health(jobs.core, node, 3, healthy=True)
        seconds = time.monotonic() - started
    duplicated, lost = check_job(jobs, "refill", 2)
    assert (duplicated, lost, monitor.max_duplicates, monitor.double_booked) == (0, 0, 0, [])
    report.add(CaseResult("a chip of a running pod turns unhealthy, then healthy", 2, duplicated, lost, seconds,
                          "running job restarted as ChipUnhealthy on another node; the chip handed to no new "
                          "pod until healthy"))
