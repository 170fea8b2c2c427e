"""The chart on the simulated cluster: `helm install`, then the operator runs with nothing but the chart's
ServiceAccount token (so its RBAC is exactly enough to take deploy/examples/job.yaml to Running with a completed
rank table) and that token is refused what the operator never does. Also `kubectl apply --server-side -f
deploy/operator.yaml`, the install for users without Helm.

The Deployment's pod never runs a container here (kwok has no images): the operator runs as a local process.
"""

from __future__ import annotations

import base64
import os
import re
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config

from ascend_hybrid.contracts.names import GROUP
from ascend_hybrid.devcluster.controlplane import toolchain
from ascend_hybrid.devcluster.testing.pods import pod_manifest
from ascend_hybrid.devtools import chartgen
from ascend_hybrid.spec.api import PLURAL, VERSION
from support.operator_harness import REPO, Jobs, OperatorProcess, example, wait_for

CHART = REPO / "charts" / "ascend-hybrid-operator"
TOKEN_SECONDS = 3600
FORBIDDEN_IN_LOG = ("Forbidden", "forbidden", "Not enough permissions", " 403")
# A 403 that is no permission problem: another test's namespace is being deleted while a cluster-wide operator
# still writes an event there ("unable to create new content in namespace … because it is being terminated").
NOT_RBAC = "because it is being terminated"


def permission_problems(log: str) -> list[str]:
    """Log records (a timestamped line and its traceback) that show a refused call."""
    records, current = [], []
    for line in log.splitlines():
        if re.match(r"^\d{4}-\d{2}-\d{2} ", line) and current:
            records.append("\n".join(current))
            current = []
        current.append(line)
    records.append("\n".join(current))
    return [record for record in records
            if any(marker in record for marker in FORBIDDEN_IN_LOG) and NOT_RBAC not in record]


class ChartOperator(OperatorProcess):
    """The operator through its console script (the image's entrypoint), with the chart's namespace flags."""

    def __init__(self, kubeconfig: str, log_path: Path, namespaces: list[str], own_namespace: str):
        super().__init__(kubeconfig, log_path)
        # in its pod the operator finds its namespace (the release's) in its ServiceAccount's files; here it is told
        self.namespaces, self.own_namespace = namespaces, own_namespace

    def healthz(self) -> int:
        """What the chart's liveness and readiness probes ask."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/healthz", timeout=5) as response:
            return response.status

    def command(self) -> list[str]:
        return [str(Path(sys.executable).parent / "ascend-hybrid"), "run", "--kubeconfig", self.kubeconfig,
                "--metrics-port", str(self.metrics_port), "--health-port", str(self.health_port),
                "--bind-address", "127.0.0.1", "--lease-namespace", self.own_namespace,
                *[f"--namespace={namespace}" for namespace in self.namespaces]]


def run_tool(command: list[str], kubeconfig: str, helm_home: Path | None = None, timeout: float = 60) -> str:
    env = {**os.environ, "KUBECONFIG": kubeconfig}
    if helm_home is not None:  # never the user's Helm repositories or registry logins
        env.update(HELM_CACHE_HOME=str(helm_home / "cache"), HELM_CONFIG_HOME=str(helm_home / "config"),
                   HELM_DATA_HOME=str(helm_home / "data"))
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{' '.join(command)} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def service_account_kubeconfig(admin_kubeconfig: str, token: str, path: Path) -> Path:
    """A kubeconfig with the cluster's server and CA (from the admin one) and only the ServiceAccount's token."""
    admin = yaml.safe_load(Path(admin_kubeconfig).read_text())
    context = next(c["context"] for c in admin["contexts"] if c["name"] == admin["current-context"])
    cluster = next(c["cluster"] for c in admin["clusters"] if c["name"] == context["cluster"])
    ca_data = cluster.get("certificate-authority-data") or base64.b64encode(
        Path(cluster["certificate-authority"]).read_bytes()).decode()
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "operator",
        "clusters": [{"name": "sim", "cluster": {"server": cluster["server"], "certificate-authority-data": ca_data}}],
        "users": [{"name": "operator", "user": {"token": token}}],
        "contexts": [{"name": "operator", "context": {"cluster": "sim", "user": "operator"}}],
    }))
    return path


def assert_forbidden(call, what: str) -> None:
    with pytest.raises(client.ApiException) as refused:
        call()
    assert refused.value.status == 403, f"{what}: expected 403, got {refused.value.status} {refused.value.reason}"


@pytest.fixture
def install_chart(dev_cluster, tmp_path):
    """install_chart(values) → the release: a unique name (its cluster-scoped RBAC names cannot collide) in its own
    namespace. Uninstalled afterwards; Helm leaves the CRD, as it always does."""
    helm, helm_home, releases = toolchain.binary("helm"), tmp_path / "helm", []

    def install(values: dict) -> dict:
        name = f"ahj-e2e-{uuid.uuid4().hex[:6]}"
        values_file = tmp_path / f"{name}-values.yaml"
        values_file.write_text(yaml.safe_dump(values))
        run_tool([helm, "install", name, str(CHART), "--namespace", name, "--create-namespace",
                  "--values", str(values_file)], dev_cluster.kubeconfig, helm_home)
        releases.append(name)
        return {"name": name, "namespace": name, "service_account": f"{name}-ascend-hybrid-operator"}

    yield install
    for name in releases:
        run_tool([helm, "uninstall", name, "--namespace", name, "--wait", "--timeout", "60s"],
                 dev_cluster.kubeconfig, helm_home)
        dev_cluster.core.delete_namespace(name, propagation_policy="Background")


def run_example_job_as_the_service_account(dev_cluster, release: dict, namespace: str, tmp_path: Path,
                                           watched: list[str]) -> client.ApiClient:
    """Runs the operator with the release's ServiceAccount token, takes deploy/examples/job.yaml to Running with a
    completed rank table, and returns an API client holding that same token."""
    token = dev_cluster.core.create_namespaced_service_account_token(
        release["service_account"], release["namespace"],
        client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(
            audiences=[], expiration_seconds=TOKEN_SECONDS))).status.token
    kubeconfig = service_account_kubeconfig(dev_cluster.kubeconfig, token, tmp_path / "operator.kubeconfig")
    operator = ChartOperator(str(kubeconfig), tmp_path / "operator.log", watched, release["namespace"]).start()
    jobs = Jobs(dev_cluster.api, namespace, operator)
    job = example("job.yaml")
    name = job["metadata"]["name"]
    try:
        jobs.create(job)
        status = jobs.wait_running(name, timeout=60)
        assert status["rankTable"]["status"] == "completed" and status["pods"]["running"] >= 1
        assert jobs.rank_table(name)["status"] == "completed"
        assert operator.healthz() == 200
        # This process (not some other operator on a shared cluster) did the work, with the token alone.
        created = re.search(r"^ascend_hybrid_pods_created_total ([0-9.]+)$", operator.metrics(), re.MULTILINE)
        assert created and float(created.group(1)) >= 1, "the operator under test created no pod"
        # Any refused call shows up in the log: kopf warns "Not enough permissions", the client logs 403s.
        log = operator.log_tail(10_000)
        assert not permission_problems(log), "permission problems:\n" + "\n".join(permission_problems(log))
    finally:
        operator.stop()
        jobs.delete(name)
    return config.new_client_from_config(config_file=str(kubeconfig))


def assert_refused_what_the_operator_never_does(api: client.ApiClient, namespace: str, node: str) -> None:
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    assert_forbidden(lambda: core.list_namespaced_secret(namespace), "list Secrets")
    assert_forbidden(lambda: core.read_namespaced_secret("anything", namespace), "read a Secret")
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "not-allowed"},
                  "spec": {"selector": {"matchLabels": {"app": "x"}}, "template": {
                      "metadata": {"labels": {"app": "x"}},
                      "spec": {"containers": [{"name": "x", "image": "x"}]}}}}
    assert_forbidden(lambda: apps.create_namespaced_deployment(namespace, deployment), "create a Deployment")
    assert_forbidden(lambda: core.delete_node(node), "delete a Node")
    assert_forbidden(lambda: core.patch_node(node, {"spec": {"unschedulable": True}}), "cordon a Node")


def test_cluster_wide_release_runs_the_example_with_only_its_service_account(dev_cluster, install_chart, namespace,
                                                                            tmp_path):
    release = install_chart({})
    api = run_example_job_as_the_service_account(dev_cluster, release, namespace, tmp_path, watched=[])
    assert_refused_what_the_operator_never_does(api, namespace, dev_cluster.nodes("910B")[0])


def test_namespaced_release_runs_the_example_with_roles_only_in_its_namespace(dev_cluster, install_chart, namespace,
                                                                             tmp_path):
    release = install_chart({"watchNamespaces": [namespace]})
    api = run_example_job_as_the_service_account(dev_cluster, release, namespace, tmp_path, watched=[namespace])
    assert_refused_what_the_operator_never_does(api, namespace, dev_cluster.nodes("910B")[0])
    # Outside the watched namespaces the token may only list pods (placement counts every NPU in use); it may not
    # create or delete them, nor touch jobs.
    outside = release["namespace"]
    client.CoreV1Api(api).list_namespaced_pod(outside)
    assert_forbidden(lambda: client.CoreV1Api(api).create_namespaced_pod(outside, pod_manifest("intruder")),
                     "create pods outside")
    assert_forbidden(lambda: client.CoreV1Api(api).delete_collection_namespaced_pod(outside), "delete pods outside")
    assert_forbidden(lambda: client.CustomObjectsApi(api).list_namespaced_custom_object(
        GROUP, VERSION, outside, PLURAL), "list jobs outside")


def test_kubectl_only_install_applies_on_the_cluster(dev_cluster, tmp_path):
    """`kubectl apply --server-side -f deploy/operator.yaml` creates every object; the restricted Pod Security of
    its namespace admits the operator's pod. Cleaned up afterwards, except the CRD (other tests' jobs use it)."""
    kubectl, kubeconfig = toolchain.binary("kubectl"), dev_cluster.kubeconfig
    objects = [o for o in yaml.safe_load_all(chartgen.deploy_manifest_path().read_text()) if o]
    removable = tmp_path / "without-crd.yaml"
    removable.write_text(yaml.safe_dump_all([o for o in objects if o["kind"] != "CustomResourceDefinition"]))
    try:
        # --force-conflicts as docs/install.md says for a CRD another tool (Helm, in this module) created first:
        # a reused cluster may hold an older CRD from it.
        run_tool([kubectl, "apply", "--server-side", "--force-conflicts", "-f", str(chartgen.deploy_manifest_path())],
                 kubeconfig)
        run_tool([kubectl, "wait", "--for=condition=Established", "--timeout=30s",
                  f"customresourcedefinition/{PLURAL}.{GROUP}"], kubeconfig)
        for obj in objects:
            scope = ["--namespace", obj["metadata"]["namespace"]] if "namespace" in obj["metadata"] else []
            run_tool([kubectl, "get", obj["kind"].lower(), obj["metadata"]["name"], *scope, "-o", "name"], kubeconfig)
        selector = ",".join(f"{key}={value}" for key, value in next(
            o for o in objects if o["kind"] == "Deployment")["spec"]["selector"]["matchLabels"].items())
        wait_for(lambda: dev_cluster.core.list_namespaced_pod(chartgen.NAMESPACE, label_selector=selector).items,
                 30, "the ReplicaSet to create the operator's pod (restricted Pod Security admits it)",
                 lambda: run_tool([kubectl, "get", "events", "-n", chartgen.NAMESPACE], kubeconfig))
        privileged = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "privileged-probe"},
                      "spec": {"containers": [{"name": "x", "image": "x", "securityContext": {"privileged": True}}]}}
        assert_forbidden(lambda: dev_cluster.core.create_namespaced_pod(chartgen.NAMESPACE, privileged, dry_run="All"),
                         "a privileged pod in the restricted namespace")
    finally:
        run_tool([kubectl, "delete", "--ignore-not-found", "--wait=false", "-f", str(removable)], kubeconfig)
