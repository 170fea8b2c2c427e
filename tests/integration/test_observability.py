"""Training progress and NPU utilization end to end: the simulated trainer endpoints and npu-exporter
(devcluster.exporter), a real Prometheus scraping them (devcluster.prometheus), the operator reading either.

Needs the prometheus binary: `ascend-hybrid dev-cluster build --with-prometheus` (CI does it before the tests).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from kubernetes import client

from ascend_hybrid.contracts import names
from ascend_hybrid.devcluster.controlplane import toolchain
from ascend_hybrid.devcluster.kube import processes
from ascend_hybrid.devcluster.paths import CLUSTERS_ENV
from ascend_hybrid.devcluster.telemetry import exporter, figures, prometheus
from ascend_hybrid.planner import observed as observed_model
from support.operator_harness import REPO, Jobs, OperatorProcess, install_crd, job_manifest, kubectl, wait_for

pytestmark = pytest.mark.integration

INTERVAL = 2  # the operator's --telemetry-interval, seconds
DASHBOARD = REPO / "charts" / "ascend-hybrid-operator" / "dashboards" / "ascend-hybrid.json"




@pytest.fixture(scope="module")
def observed(dev_cluster):
    """The session cluster with the CRD, the telemetry simulation and Prometheus; what this module started is
    stopped afterwards, so the shared cluster is left as it was found."""
    if dev_cluster.paths is None:
        pytest.fail("Prometheus runs as a helper of a dev cluster: point AHJ_KUBECONFIG at a dev cluster's "
                    "kubeconfig (its directory holds cluster.json)", pytrace=False)
    if toolchain.missing(("prometheus",)):
        pytest.fail(f"prometheus is not built in {toolchain.bin_dir()}: run "
                    "`ascend-hybrid dev-cluster build --with-prometheus` first", pytrace=False)
    paths = dev_cluster.paths
    install_crd(dev_cluster)
    had_telemetry, had_prometheus = exporter.is_running(paths), prometheus.is_running(paths)
    url = prometheus.ensure_running(paths, log=lambda line: None)
    yield dev_cluster, url
    if not had_prometheus:
        prometheus.stop(paths)
    if not had_telemetry:
        exporter.stop(paths)


def start_operator(cluster, log: Path, *extra) -> OperatorProcess:
    return OperatorProcess(str(cluster.kubeconfig), log, extra_args=("--telemetry-interval", INTERVAL, *extra)).start()


@pytest.fixture
def operator_factory(tmp_path):
    started: list[OperatorProcess] = []

    def start(cluster, *extra) -> OperatorProcess:
        started.append(start_operator(cluster, tmp_path / f"operator-{len(started)}.log", *extra))
        return started[-1]
    yield start
    for process in started:
        process.stop()


def helper_logs(cluster) -> str:
    tails = [f"--- {path.name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-15:])
             for path in (exporter.log_file(cluster.paths), prometheus.log_file(cluster.paths)) if path.exists()]
    return "\n".join(tails)


def telemetry_job(name: str, utilization: int) -> dict:
    annotations = {figures.UTILIZATION_ANNOTATION: str(utilization), figures.STEP_SECONDS_ANNOTATION: "0.25"}
    return job_manifest(name, data=2, tensor=4, per_pod=4, annotations=annotations, training={"steps": 100000})


def wait_figures(jobs: Jobs, name: str, source: str, utilization: int, cluster, timeout: float = 60) -> dict:
    def arrived():
        status = jobs.status(name)
        used, training = status.get("utilization") or {}, status.get("training") or {}
        return (used.get("source") == source and abs(used.get("npuPercent", -10) - utilization) <= 1
                and training.get("step", 0) > 0 and status)
    return wait_for(arrived, timeout, f"{name}'s figures from {source}",
                    lambda: jobs.describe(name) + "\n" + helper_logs(cluster), interval=0.5)


def condition(status: dict, kind: str) -> dict:
    return next((c for c in status.get("conditions", []) if c["type"] == kind), {})


def unavailable_events(jobs: Jobs, name: str) -> list[tuple[str, str, str]]:
    """MetricsUnavailable events of the job, oldest first (event names end in their creation time)."""
    items = jobs.core.list_namespaced_event(jobs.namespace, field_selector=f"involvedObject.name={name}").items
    return [(e.type, e.reason, e.message) for e in sorted(items, key=lambda e: e.metadata.name)
            if e.reason == "MetricsUnavailable"]


def query(url: str, expr: str) -> dict:
    with urllib.request.urlopen(f"{url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}", timeout=5) as reply:
        return json.loads(reply.read())


def assert_dashboard_queries_run(url: str, namespace: str, job: str, utilization: int) -> None:
    """Every panel's PromQL runs on the real Prometheus; the per-job NPU chart shows the job at its figure."""
    dashboard = json.loads(DASHBOARD.read_text())
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"].replace("$namespace", namespace).replace("$__rate_interval", "10s")
            answer = query(url, expr)
            assert answer["status"] == "success", f"{panel['title']}: {answer}"
            if panel["title"] == "NPU utilization per job":
                shown = {s["metric"].get("ahj"): float(s["value"][1]) for s in answer["data"]["result"]}
                assert shown == {job: utilization}, f"{panel['title']}: {answer['data']['result']}"


def printed_columns(cluster, namespace: str, name: str) -> dict[str, str]:
    header, row = kubectl(cluster, "get", "ahj", name, "-n", namespace).splitlines()[:2]
    starts = {column: header.index(column) for column in header.split()}
    ordered = sorted(starts.items(), key=lambda item: item[1])
    return {column: row[start:(ordered[i + 1][1] if i + 1 < len(ordered) else None)].strip()
            for i, (column, start) in enumerate(ordered)}


def test_prometheus_figures_reach_the_status_and_an_outage_is_reported_once(observed, namespace, operator_factory):
    cluster, url = observed
    operator = operator_factory(cluster, "--prometheus-url", url)
    jobs = Jobs(cluster.api, namespace, operator)
    jobs.create(telemetry_job("observed", utilization=73))
    jobs.wait_running("observed")

    status = wait_figures(jobs, "observed", "prometheus", 73, cluster)
    assert condition(status, "MetricsAvailable")["status"] == "True"
    assert status["training"]["loss"] > 0 and status["utilization"]["hbmPercent"] > 0
    columns = printed_columns(cluster, namespace, "observed")
    assert abs(float(columns["UTIL"]) - 73) <= 1 and int(columns["STEP"]) > 0, columns
    assert_dashboard_queries_run(url, namespace, "observed", 73)

    # Prometheus dies: the job keeps running, the figures go stale, and that is said once. (A job's first reading
    # may already have said "no series yet", before Prometheus first scraped its pods: count the outage's own.)
    before = len(unavailable_events(jobs, "observed"))
    pid = processes.read_pid(prometheus.pid_file(cluster.paths))
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not processes.is_alive(pid), 10, "Prometheus to die")
    stale = wait_for(lambda: (lambda s: condition(s, "MetricsAvailable").get("status") == "False" and s)(
        jobs.status("observed")), 20, "MetricsAvailable=False", lambda: jobs.describe("observed"))
    assert url.split("//")[1] in condition(stale, "MetricsAvailable")["message"]
    frozen = stale["utilization"]["sampledAt"]
    for _ in range(3 * INTERVAL * 2):  # three readings' worth of time
        current = jobs.status("observed")
        assert current["phase"] == "Running" and current["utilization"]["sampledAt"] == frozen
        time.sleep(0.5)
    outage = unavailable_events(jobs, "observed")[before:]
    assert len(outage) == 1 and outage[0][0] == "Warning" and "unreachable" in outage[0][2], outage

    # `dev-cluster up --prometheus` brings it back on the same URL and the figures move again.
    env = dict(os.environ, **{CLUSTERS_ENV: str(cluster.paths.root.parent)})
    name = cluster.paths.name
    for command in (["up", "--name", name, "--nodes", "1", "--prometheus"], ["prometheus-url", "--name", name]):
        done = subprocess.run([sys.executable, "-m", "ascend_hybrid.devcluster", *command], env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"dev-cluster {' '.join(command)}:\n{done.stdout}{done.stderr}"
    assert done.stdout.strip().splitlines()[-1] == url
    fresh = wait_for(lambda: (lambda s: s["utilization"]["sampledAt"] != frozen
                              and condition(s, "MetricsAvailable").get("status") == "True" and s)(
        jobs.status("observed")), 30, "fresh figures after the restart", lambda: jobs.describe("observed"))
    assert fresh["utilization"]["source"] == "prometheus" and fresh["training"]["step"] >= stale["training"]["step"]


# The built-in 910B predicts the tiny job's step at 0.24 ms, 1000× under the simulation's pinned 0.25 s, a ratio the
# observed-efficiency book reads as a broken measurement: this profile (replacing 910B for this operator only)
# predicts about 0.2 s, so the job's reading counts.
SLOW_910B = {"name": "910B", "chipsPerNode": 8, "hbmGiB": 64, "usableFraction": 0.9, "peakTflops": 0.01,
             "computeEfficiency": 0.5, "intraNode": {"gbps": 56, "topology": "mesh"}, "interNode": {"gbps": 25}}


def test_without_prometheus_the_operator_reads_the_trainer_endpoints(observed, namespace, operator_factory,
                                                                      tmp_path):
    cluster, _ = observed
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text(json.dumps(SLOW_910B))
    # the book lives in the operator's namespace (the Lease's): this test's own, so no other operator shares it
    operator = operator_factory(cluster, "--hardware-profiles", profiles, "--lease-namespace", namespace)
    jobs = Jobs(cluster.api, namespace, operator)
    jobs.create(telemetry_job("scraped", utilization=41))
    jobs.wait_running("scraped")
    status = wait_figures(jobs, "scraped", "trainer", 41, cluster)
    assert status["training"]["stepSeconds"] == 0.25 and status["training"]["tokensPerSecond"] > 0, status
    pods = jobs.pods("scraped", attempt=status["attempt"])
    assert len(pods) == 2, jobs.describe("scraped")
    for pod in pods:  # the operator needs one pod's endpoint; each pod gets one (bound as its events arrive)
        endpoint = f"http://{pod['status']['podIP']}:{figures.TRAINER_PORT}/metrics"
        wait_for(lambda endpoint=endpoint: 'ascend_trainer_npu_utilization_percent{device="' in fetch(endpoint), 10,
                 f"{pod['metadata']['name']}'s trainer endpoint {endpoint}", lambda: helper_logs(cluster))

    # past its warm-up the job's steady step (0.25 s, pinned) is measured against the prediction, and the leader
    # keeps it in the observed-efficiency ConfigMap by server-side apply: one job, so its reading is the factor
    def steady():
        plan = jobs.status("scraped").get("plan") or {}
        return (plan.get("measured") or {}).get("steadySteps", 0) >= observed_model.MIN_STEADY_STEPS and plan
    plan = wait_for(steady, 60, "a steady step time past the warm-up", lambda: jobs.describe("scraped"))
    assert plan["measured"]["steadyStepSeconds"] == 0.25
    ratio = 0.25 / plan["time"]["stepSeconds"]
    assert plan["stepTimeRatio"] == round(ratio, 3) and observed_model.PLAUSIBLE[0] < ratio < 1.5, plan

    def book():
        config_map = jobs.core.read_namespaced_config_map(names.OBSERVED_EFFICIENCY_CONFIG_MAP, namespace)
        return observed_model.observe(observed_model.from_data(config_map.data), "910B")
    seen = wait_for(lambda: _or_none(book), 30, "the observed-efficiency ConfigMap", lambda: operator.log_tail())
    assert seen.jobs == (f"{namespace}/scraped",) and seen.factor == pytest.approx(ratio, rel=1e-4)
    managers = {entry.manager for entry in jobs.core.read_namespaced_config_map(
        names.OBSERVED_EFFICIENCY_CONFIG_MAP, namespace).metadata.managed_fields}
    assert managers == {names.FIELD_MANAGER}, managers  # applied server-side, by the operator alone


def _or_none(read):
    try:
        return read()
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise


def fetch(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=3) as reply:
            return reply.read().decode()
    except OSError as error:  # refused, or 404 from a listener of an ended pod that held the same address
        return str(error)
