"""The recovery ladder under faults (docs/reliability.md, "The recovery ladder"): the operator killed in the middle
of RestartRanks, the leader replica killed in the middle of ReplacePod (its standby finishes it), a second fault
while a rung runs, a rung past its timeout. The simulated pods
run no trainer: the test plays every launcher on the job's `<job>-recovery` ConfigMap (the real launcher is
tested on real MindSpore in tests/integration/test_process_runtime.py). Each case ends with the common checks: 0
pods duplicated, 0 lost, and a ledger of one incident with the rungs expected."""

from __future__ import annotations

import time

from support.faults import CaseResult, Monitor, check_job, converge, leads
from support.launchers import ledger, recovered, started
from support.operator_harness import Jobs, job_manifest, wait_for


def test_the_operator_killed_in_the_middle_of_restart_ranks(jobs, fault_cluster, report):
    name = "rung-kill"
    with Monitor(fault_cluster.core) as monitor:
        jobs.create(job_manifest(name, data=2, tensor=4, per_pod=4))
        launchers = started(jobs, name, 2)
        uids = launchers.pods()
        victim = sorted(uids)[1]
        began = time.monotonic()
        launchers.fail(victim, 0)
        launchers.wait_generation(1)
        jobs.operator.kill()  # between the generation's write and the launchers' restart
        launchers.all(1, "Started", resumedFrom=4)
        jobs.operator.start()
        wait_for(lambda: "ranksRelaunched" in (ledger(jobs, name) or [{}])[-1], 60, "ranks relaunched noted",
                 lambda: jobs.describe(name))
        jobs.operator.kill()  # and again before the first step after
        launchers.all(1, "Stepping", resumedFrom=4, step=5)
        jobs.operator.start()
        wait_for(lambda: recovered(jobs, name), 60, "the incident recovered", lambda: jobs.describe(name))
        seconds = time.monotonic() - began
    duplicated, lost = check_job(jobs, name, 2)
    status = jobs.status(name)
    (entry,) = status["recoveries"]
    assert (entry["rungs"], entry["recoveredBy"], status["restarts"], status["attempt"]) == (
        ["RestartRanks"], "RestartRanks", 1, 1), status
    assert launchers.pods() == uids and launchers.generation() == 1  # the same pods; the generation written once
    assert (duplicated, lost, monitor.max_duplicates, monitor.double_booked) == (0, 0, 0, [])
    report.add(CaseResult("operator SIGKILLed twice in the middle of RestartRanks", 2, duplicated, lost, seconds,
                          "one incident, Recovered by RestartRanks, same pod UIDs, attempt 1"))


def test_a_second_fault_during_restart_ranks_replaces_that_pod_and_the_leader_changes_meanwhile(
        fault_cluster, namespace, start_operator, report):
    election = ("--leader-elect", "--lease-namespace", namespace, "--lease-name", "ahj-rungs")
    replicas = [start_operator(*election, log_name="replica-a.log"), start_operator(*election, log_name="replica-b.log")]
    wait_for(lambda: sorted(map(leads, replicas)) == [False, True], 60, "one leader and one standby",
             lambda: "\n".join(r.log_tail(15) for r in replicas))
    leader = next(r for r in replicas if leads(r))
    standby = next(r for r in replicas if r is not leader)
    jobs = Jobs(fault_cluster.api, namespace, leader)
    name = "rung-twice"
    with Monitor(fault_cluster.core) as monitor:
        jobs.create(job_manifest(name, data=2, tensor=4, per_pod=4))
        launchers = started(jobs, name, 2)
        uids = launchers.pods()
        keeper, victim = sorted(uids)
        began = time.monotonic()
        launchers.fail(victim, 0)
        launchers.wait_generation(1)
        launchers.say({keeper: {"uid": uids[keeper], "generation": 1, "state": "Started"}})
        launchers.fail(victim, 1, cause="HCCLExecTimeout")  # the same pod fails again: ReplacePod of it
        launchers.wait_generation(2)
        leader.kill()  # while its pod is made again: the standby takes the Lease and carries ReplacePod on
        jobs.operator = standby
        wait_for(lambda: leads(standby), 30, "the standby to lead", lambda: standby.log_tail(20), interval=0.1)
        wait_for(lambda: launchers.pods().get(victim) not in (None, uids[victim]), 90, "the replacement pod",
                 lambda: jobs.describe(name))
        # the phase stays Restarting until the launchers step: the table complete again is the pods' cue
        wait_for(lambda: all(p["status"].get("phase") == "Running" for p in jobs.pods(name, attempt=1))
                 and (jobs.rank_table(name) or {}).get("status") == "completed"
                 and jobs.status(name).get("phase") == "Restarting", 90, "the replacement running, the table again",
                 lambda: jobs.describe(name))
        launchers.all(2, "Stepping", resumedFrom=4, step=5)
        wait_for(lambda: recovered(jobs, name), 60, "the incident recovered", lambda: jobs.describe(name))
        seconds = time.monotonic() - began
    duplicated, lost = check_job(jobs, name, 2)
    status = jobs.status(name)
    (entry,) = status["recoveries"]
    assert (entry["rungs"], entry["recoveredBy"], status["restarts"], status["attempt"]) == (
        ["RestartRanks", "ReplacePod"], "ReplacePod", 1, 1), status
    now = launchers.pods()
    assert now[keeper] == uids[keeper] and now[victim] != uids[victim]  # only the failed pod made again
    assert launchers.generation() == 2  # the new leader wrote no other generation
    assert (duplicated, lost, monitor.max_duplicates, monitor.double_booked) == (0, 0, 0, [])
    report.add(CaseResult("a second fault during RestartRanks, the leader SIGKILLed during the ReplacePod it led to "
                          "(the standby takes over)", 3, duplicated, lost, seconds,
                          "RestartRanks → ReplacePod of that pod only; attempt 1"))
    jobs.delete_all(timeout=120)


def test_a_rung_past_its_timeout_restarts_the_gang(jobs, fault_cluster, report):
    name = "rung-late"
    with Monitor(fault_cluster.core) as monitor:
        jobs.create(job_manifest(name, data=2, tensor=4, per_pod=4,
                                 runPolicy={"recovery": {"restartRanksTimeoutSeconds": 10}}))
        launchers = started(jobs, name, 2)
        began = time.monotonic()
        launchers.fail(sorted(launchers.pods())[0], 0)
        launchers.wait_generation(1)
        launchers.all(1, "Started", resumedFrom=4)  # and never a step: the rung times out
        converge(jobs, name, attempt=2, timeout=90)
        seconds = time.monotonic() - began
    duplicated, lost = check_job(jobs, name, 2)
    status = jobs.status(name)
    (entry,) = status["recoveries"]
    assert entry["rungs"] == ["RestartRanks", "RestartGang"] and "timeout of 10s" in entry["why"], entry
    assert (status["restarts"], status["attempt"]) == (1, 2), status
    # the rung waited for its timeout: 10 s from the decision, whose time the status keeps in whole seconds (so the
    # escalation may come up to 1 s early), and a gang restart of two pods takes about a second more
    assert 9 <= seconds < 60, seconds
    assert (duplicated, lost, monitor.max_duplicates, monitor.double_booked) == (0, 0, 0, [])
    report.add(CaseResult("RestartRanks past its timeout (10 s)", 1, duplicated, lost, seconds,
                          "RestartRanks → RestartGang, counted once, attempt 2"))


def test_a_node_lost_under_pod_one_replaces_only_that_pod(fault_cluster, namespace, start_operator, report):
    from ascend_hybrid.devcluster.nodes import fleet

    grace = 5.0
    jobs = Jobs(fault_cluster.api, namespace, start_operator("--node-grace-seconds", str(grace)))
    name = "rung-node"
    with Monitor(fault_cluster.core) as monitor:
        jobs.create(job_manifest(name, data=2, tensor=8, per_pod=8))  # one pod per node
        launchers = started(jobs, name, 2)
        uids = launchers.pods()
        keeper, victim = sorted(uids)
        node = jobs.status(name)["placement"]["nodes"][1]
        began = time.monotonic()
        try:
            fleet.set_node_ready(jobs.core, node, False)
            launchers.wait_generation(1, timeout=grace + 60)
            wait_for(lambda: launchers.pods().get(victim) not in (None, uids[victim]), 90, "the replacement pod",
                     lambda: jobs.describe(name))
            wait_for(lambda: all(p["status"].get("phase") == "Running" for p in jobs.pods(name, attempt=1))
                     and (jobs.rank_table(name) or {}).get("status") == "completed", 90,
                     "the replacement running, the table again", lambda: jobs.describe(name))
            launchers.all(1, "Stepping", resumedFrom=4, step=5)
            wait_for(lambda: recovered(jobs, name), 60, "the incident recovered", lambda: jobs.describe(name))
        finally:
            fleet.set_node_ready(jobs.core, node, True)
        seconds = time.monotonic() - began
    duplicated, lost = check_job(jobs, name, 2)
    status = jobs.status(name)
    (entry,) = status["recoveries"]
    assert (entry["cause"], entry["rungs"], entry["recoveredBy"]) == ("NodeNotReady", ["ReplacePod"], "ReplacePod")
    assert (status["attempt"], status["restarts"], status["disruptions"]) == (1, 1, 1), status
    now = launchers.pods()
    assert now[keeper] == uids[keeper] and now[victim] != uids[victim]  # pod 0 kept its UID
    assert node in status["avoidedNodes"] and node not in status["placement"]["nodes"]
    assert (duplicated, lost, monitor.max_duplicates, monitor.double_booked) == (0, 0, 0, [])
    report.add(CaseResult("the node under pod 1 NotReady past its grace", 1, duplicated, lost, seconds,
                          "ReplacePod: only pod 1 made again (on another node), pod 0 kept its UID; attempt 1"))
    jobs.delete_all(timeout=120)
