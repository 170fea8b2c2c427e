"""The control plane fails under the operator: kube-apiserver and etcd stopped and started again, the operator's
connection silenced for longer than its watch timeout."""

from __future__ import annotations

import time

from ascend_hybrid.devcluster.kube.waiting import wait_until
from support.faults import CaseResult, Monitor, Proxy, check_job, converge, kubeconfig_through, server_address
from support.operator_harness import Jobs, job_manifest, wait_for

FAIL = {"sim.hybrid.ascend.dev/outcome": "fail", "sim.hybrid.ascend.dev/exit-code": "3"}
DOWN_SECONDS = 2.0


def api_answers(cluster) -> bool:
    try:
        cluster.core.list_namespace(limit=1, _request_timeout=3)
        return True
    except Exception:  # noqa: BLE001 - not answering yet
        return False


def restart(cluster, component: str) -> None:
    cluster.control_plane.restart(component, down_seconds=DOWN_SECONDS)
    wait_until(lambda: api_answers(cluster), 90, f"the apiserver to answer after {component} restarted")


def test_apiserver_restarted_during_gang_creation(jobs, fault_cluster, report):
    name = "gang"
    jobs.create(job_manifest(name, data=8, tensor=4, per_pod=4))  # 8 pods on 4 nodes
    wait_for(lambda: jobs.status(name).get("placement", {}).get("nodes") and jobs.pods(name), 30,
             "the first pods", lambda: jobs.describe(name), interval=0.02)
    with Monitor(fault_cluster.core) as monitor:
        started = time.monotonic()
        restart(fault_cluster, "kube-apiserver")
        converge(jobs, name, timeout=120)
        seconds = time.monotonic() - started
    duplicated, lost = check_job(jobs, name, 8)
    assert (duplicated, lost, monitor.max_duplicates, monitor.double_booked) == (0, 0, 0, [])
    assert jobs.status(name)["restarts"] == 0
    report.add(CaseResult("kube-apiserver restarted during gang creation", 1, duplicated, lost, seconds,
                          f"attempt {jobs.status(name)['attempt']}"))


def test_apiserver_and_etcd_restarted_while_running(jobs, fault_cluster, report):
    name = "steady"
    jobs.create(job_manifest(name, data=4, tensor=4, per_pod=4))
    converge(jobs, name)
    with Monitor(fault_cluster.core) as monitor:
        started = time.monotonic()
        restart(fault_cluster, "kube-apiserver")
        restart(fault_cluster, "etcd")
        # the operator reconnects and keeps reconciling: a pod that fails after the restarts restarts the gang
        victim = jobs.pods(name, attempt=1)[0]["metadata"]["name"]
        wait_for(lambda: _patched(jobs, victim), 30, "the victim pod to be failed")
        status = converge(jobs, name, timeout=120, attempt=2)
        seconds = time.monotonic() - started
    duplicated, lost = check_job(jobs, name, 4)
    assert (duplicated, lost, monitor.max_duplicates, monitor.double_booked) == (0, 0, 0, [])
    assert status["restarts"] == 1  # the restarts themselves cost the job nothing
    report.add(CaseResult("kube-apiserver and etcd restarted while Running (then a pod fails)", 3, duplicated, lost,
                          seconds, "no restart from the outage; the failed pod's restart counted once"))


def _patched(jobs: Jobs, pod: str) -> bool:
    try:
        jobs.core.patch_namespaced_pod(pod, jobs.namespace, {"metadata": {"annotations": FAIL}}, _request_timeout=5)
        return True
    except Exception:  # noqa: BLE001 - the apiserver may still be settling
        return False


def test_watch_silenced_longer_than_its_timeout_relists_and_converges(fault_cluster, namespace, start_operator,
                                                                     tmp_path, report):
    """The operator reaches the apiserver through a relay that goes silent for 3 × the watch timeout: its watches
    time out, it cannot list, its writes fail; meanwhile a pod fails and a new job arrives. Healed, it relists
    and converges on both."""
    proxy = Proxy(server_address(fault_cluster.kubeconfig))
    kubeconfig = kubeconfig_through(fault_cluster.kubeconfig, proxy.port, tmp_path / "through-proxy.kubeconfig")
    operator = start_operator("--watch-timeout-seconds", "5", kubeconfig=str(kubeconfig))
    jobs = Jobs(fault_cluster.api, namespace, operator)
    try:
        jobs.create(job_manifest("before", data=2, tensor=4, per_pod=4))
        converge(jobs, "before")
        with Monitor(fault_cluster.core) as monitor:
            started = time.monotonic()
            proxy.cut()
            victim = jobs.pods("before", attempt=1)[1]["metadata"]["name"]
            jobs.core.patch_namespaced_pod(victim, namespace, {"metadata": {"annotations": FAIL}})
            jobs.create(job_manifest("during", data=2, tensor=4, per_pod=4))
            time.sleep(15)  # 3 × the watch's server timeout, past its client timeout (10 s)
            proxy.heal()
            before = converge(jobs, "before", timeout=120, attempt=2)
            converge(jobs, "during", timeout=120)
            seconds = time.monotonic() - started
        results = [check_job(jobs, "before", 2), check_job(jobs, "during", 2)]
        duplicated, lost = sum(r[0] for r in results), sum(r[1] for r in results)
        assert (duplicated, lost, monitor.max_duplicates, monitor.double_booked) == (0, 0, 0, [])
        assert before["restarts"] == 1
        report.add(CaseResult("watch silenced 15 s, 3 × its timeout (a pod fails, a job arrives meanwhile)", 1,
                              duplicated, lost, seconds, "relisted: the failure and the new job both handled"))
        jobs.delete_all(timeout=120)
    finally:
        proxy.close()
