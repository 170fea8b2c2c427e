"""Two replicas behind the leader Lease (default settings: lease 10 s, renew deadline 7 s, retry 2 s): the leader is
SIGKILLed in the middle of a gang's creation, the standby takes the Lease and finishes the gang — no pod
duplicated, none missing, still attempt 1. Three rounds; the failover times (kill → the standby leads) are reported,
not asserted (docs/reliability.md has the last run's)."""

from __future__ import annotations

import statistics
import time
import urllib.request

from support.faults import CaseResult, Monitor, check_job, converge, leads
from support.operator_harness import Jobs, job_manifest, wait_for

ROUNDS = 3
PODS = 20
def healthy(operator) -> bool:
    with urllib.request.urlopen(f"http://127.0.0.1:{operator.health_port}/healthz", timeout=5) as answer:
        return answer.status == 200


def test_the_standby_takes_over_a_gang_the_leader_died_creating(fault_cluster, namespace, start_operator, report):
    election = ("--leader-elect", "--lease-namespace", namespace, "--lease-name", "ahj-failover")
    replicas = [start_operator(*election, log_name="replica-a.log"), start_operator(*election, log_name="replica-b.log")]
    jobs = Jobs(fault_cluster.api, namespace, replicas[0])
    failovers, to_running, created_at_kill = [], [], []
    with Monitor(fault_cluster.core) as monitor:
        for round_ in range(ROUNDS):
            wait_for(lambda: sorted(map(leads, replicas)) == [False, True], 60, "one leader and one standby",
                     lambda: "\n".join(r.log_tail(15) for r in replicas))
            leader = next(r for r in replicas if leads(r))
            standby = next(r for r in replicas if r is not leader)
            assert healthy(standby), "a standby must stay healthy (its liveness probe would restart it)"
            jobs.operator = standby
            name = f"gang-{round_}"
            jobs.create(job_manifest(name, data=PODS, tensor=2, per_pod=2))
            wait_for(lambda name=name: jobs.pods(name), 60, f"{name}'s first pods",
                     lambda name=name: jobs.describe(name), interval=0.01)
            leader.kill()
            killed = time.monotonic()
            created_at_kill.append(len(jobs.pods(name)))
            wait_for(lambda standby=standby: leads(standby), 30, "the standby to lead",
                     lambda standby=standby: standby.log_tail(20), interval=0.1)
            failovers.append(time.monotonic() - killed)
            status = converge(jobs, name, timeout=120)
            to_running.append(time.monotonic() - killed)
            assert status["attempt"] == 1 and status["restarts"] == 0
            assert sorted(p["metadata"]["name"] for p in jobs.pods(name)) == sorted(
                f"{name}-a1-{index}" for index in range(PODS))
            duplicated, lost = check_job(jobs, name, PODS)
            assert (duplicated, lost) == (0, 0)
            leader.start()  # the killed replica comes back (as the kubelet would restart it), as a standby
            jobs.delete_all(timeout=120)
    assert monitor.max_duplicates == 0 and monitor.double_booked == []
    median = statistics.median(failovers)
    times = ", ".join(f"{seconds:.1f}" for seconds in failovers)
    report.add(CaseResult(f"leader SIGKILLed mid gang creation, {ROUNDS} rounds of {PODS} pods", ROUNDS, 0, 0,
                          max(to_running), f"failover (kill → the standby leads) median {median:.1f} s (rounds: {times} s); pods already "
                          f"created at the kill: {created_at_kill}"))
