"""Integration fixtures: a real control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler) with
simulated Ascend nodes, kwok stages and the simulated device plugin (`ascend_hybrid.devcluster`).

Every test in tests/integration is marked `integration`. Tests FAIL, never skip, when the toolchain or the
cluster is missing: build it first with `ascend-hybrid dev-cluster build` (CI: .ci/run does).

The session cluster is `ahj-test`, brought up once and torn down (`down`) at the end of the session. With
AHJ_KUBECONFIG=<file> that cluster is used instead and left running (`ascend-hybrid dev-cluster up --name ahj-test`
then `AHJ_KUBECONFIG=$(ascend-hybrid dev-cluster kubeconfig --name ahj-test | tail -1) pytest -m integration`
makes reruns fast). Its nodes (no taints):
    node-001 … node-004   910B, 8 chips each (accelerator-type module-910b-8); rack 0: 001, 002; rack 1: 003, 004
    node-005 … node-006   910A, 8 chips in two HCCS rings (accelerator-type module); rack 2
A test that faults a node or a chip must undo it (try/finally), since the cluster is shared.

Fixtures
    dev_cluster  (session)  DevCluster: .name, .kubeconfig (path), .paths (ClusterPaths, None when reused),
                            .api (ApiClient), .core (CoreV1Api), .nodes(chip) → names, .pod(ns, name) → dict,
                            .wait_pod(ns, name, predicate, what, timeout) → dict, .wait_phase(ns, name, phase)
    kube_api     (session)  kubernetes.client.ApiClient of the cluster (CustomObjectsApi(kube_api), …)
    core_v1      (session)  kubernetes.client.CoreV1Api of the cluster
    namespace    (function) a fresh namespace whose `default` ServiceAccount exists (pods are refused before);
                            deleted after the test
    create_pod   (function) create_pod(name, node=None, chips=0, annotations=None, gated=False, owner=None,
                            labels=None) → the created pod (plain dict) in `namespace`; the manifest is
                            ascend_hybrid.devcluster.pods.pod_manifest (outcome_annotations() builds the sim ones)
    wait_until   the function ascend_hybrid.devcluster.waiting.wait_until(condition, timeout, what, …): polls
                 until condition() is truthy, returns it; on timeout an AssertionError naming `what`
Faults from a test: ascend_hybrid.devcluster.fleet.set_node_ready(core, node, ready) and
set_chip_health(core, node, chip_id, healthy). Pod outcomes: annotations sim.hybrid.ascend.dev/outcome
(run|succeed|fail), …/exit-code, …/after-seconds (see ascend_hybrid/sim/kwok-stages.yaml).
When a test that uses the cluster fails, its report carries the tails of every component's log and of the
device plugin's log.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client

from ascend_hybrid.devcluster import cluster
from ascend_hybrid.devcluster.controlplane import toolchain
from ascend_hybrid.devcluster.kube.client import api_client, read_raw
from ascend_hybrid.devcluster.kube.waiting import wait_until as _wait_until
from ascend_hybrid.devcluster.nodes import fleet
from ascend_hybrid.devcluster.nodes.manifests import ACCELERATOR_TYPE_LABEL, PROFILES, plan_nodes
from ascend_hybrid.devcluster.paths import ClusterPaths, load_settings
from ascend_hybrid.devcluster.testing.pods import pod_manifest
from support.namespaces import namespace_name, scratch_namespace

# several checkouts on one machine each name their own clusters (AHJ_CLUSTER_SUFFIX=-mine)
TEST_CLUSTER = "ahj-test" + os.environ.get("AHJ_CLUSTER_SUFFIX", "")
REUSE_ENV = "AHJ_KUBECONFIG"
LOG_TAIL_LINES = 25
_active_paths: list[ClusterPaths] = []


@dataclass
class DevCluster:
    name: str
    kubeconfig: str
    paths: ClusterPaths | None
    api: client.ApiClient
    core: client.CoreV1Api

    def nodes(self, chip: str) -> list[str]:
        accelerator_type = PROFILES[chip].accelerator_type
        return sorted(n["metadata"]["name"] for n in fleet.simulated_nodes(self.core)
                      if n["metadata"]["labels"].get(ACCELERATOR_TYPE_LABEL) == accelerator_type)

    def pod(self, namespace: str, name: str) -> dict:
        return read_raw(self.core.read_namespaced_pod, name, namespace)

    def wait_pod(self, namespace: str, name: str, predicate, what: str, timeout: float = 30) -> dict:
        return _wait_until(lambda: (lambda p: predicate(p) and p)(self.pod(namespace, name)), timeout,
                           f"pod {namespace}/{name} {what}", describe=lambda: _pod_summary(self, namespace, name))

    def wait_phase(self, namespace: str, name: str, phase: str, timeout: float = 30) -> dict:
        return self.wait_pod(namespace, name, lambda p: p.get("status", {}).get("phase") == phase,
                             f"to be {phase}", timeout)


def _pod_summary(dev: DevCluster, namespace: str, name: str) -> str:
    try:
        pod = dev.pod(namespace, name)
    except Exception as error:  # noqa: BLE001 - only for a failure message
        return f"pod unreadable: {error}"
    status = pod.get("status") or {}
    return (f"phase={status.get('phase')} node={pod['spec'].get('nodeName')} podIP={status.get('podIP')} "
            f"conditions={[(c['type'], c['status'], c.get('reason')) for c in status.get('conditions') or []]}")


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)


def _bring_up_test_cluster() -> ClusterPaths:
    missing = toolchain.missing()
    if missing:
        pytest.fail(f"the simulated cluster's toolchain lacks {', '.join(missing)} in {toolchain.bin_dir()}: "
                    "run `ascend-hybrid dev-cluster build` first", pytrace=False)
    # a cluster left by an interrupted run holds its jobs and pods: the suite starts from an empty one
    cluster.down(TEST_CLUSTER)
    return cluster.up(TEST_CLUSTER, nodes=4, chip="910B", racks=2)


def _ensure_ring_nodes(core: client.CoreV1Api, paths: ClusterPaths | None) -> None:
    """node-005 and node-006 (910A, rack 2) complete the test topology; created when absent (also in a reused
    cluster, e.g. one from `dev-cluster up --name ahj-test`)."""
    settings = load_settings(paths) if paths else None
    existing = fleet.existing_sim_nodes(core)
    wanted = plan_nodes(5, 2, "910A", settings.nodes_per_rack if settings else 2)
    fleet.create_nodes(core, [n for n in wanted if n.index not in existing])
    fleet.wait_nodes_ready(core, {n.name for n in wanted}, timeout=60)


@pytest.fixture(scope="package")
def dev_cluster() -> DevCluster:
    # Package scope (this folder has an __init__.py): the cluster goes down after the folder's last test, so
    # the suites that follow (the MindSpore trainer tests) do not share the two cores with an idle cluster.
    reused = os.environ.get(REUSE_ENV)
    if reused:
        if not Path(reused).is_file():
            pytest.fail(f"{REUSE_ENV}={reused} is not a file", pytrace=False)
        candidate = Path(reused).parent
        paths = ClusterPaths(name=candidate.name, root=candidate) if (candidate / "cluster.json").exists() else None
        kubeconfig = reused
    else:
        paths = _bring_up_test_cluster()
        kubeconfig = str(paths.kubeconfig)
    if paths:
        _active_paths.append(paths)
    api = api_client(kubeconfig)
    core = client.CoreV1Api(api)
    try:
        core.list_namespace(limit=1, _request_timeout=5)
    except Exception as error:  # noqa: BLE001
        pytest.fail(f"the cluster at {kubeconfig} does not answer: {error}", pytrace=False)
    _ensure_ring_nodes(core, paths)
    yield DevCluster(name=paths.name if paths else "reused", kubeconfig=kubeconfig, paths=paths, api=api, core=core)
    if not reused:
        _active_paths.clear()
        cluster.down(TEST_CLUSTER)


@pytest.fixture(scope="package")
def kube_api(dev_cluster) -> client.ApiClient:
    return dev_cluster.api


@pytest.fixture(scope="package")
def core_v1(dev_cluster) -> client.CoreV1Api:
    return dev_cluster.core


@pytest.fixture
def wait_until():
    return _wait_until


@pytest.fixture
def namespace(request, dev_cluster) -> str:
    with scratch_namespace(dev_cluster.core, namespace_name("t", request.node.name, 40, 6)) as name:
        yield name


@pytest.fixture
def create_pod(dev_cluster, namespace):
    """create_pod(name, node=None, chips=0, annotations=None, gated=False, owner=None, labels=None) → pod dict."""
    def create(name: str, **options) -> dict:
        dev_cluster.core.create_namespaced_pod(namespace, pod_manifest(name, **options), _preload_content=False)
        return dev_cluster.pod(namespace, name)
    return create


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed and _active_paths and "dev_cluster" in getattr(item, "fixturenames", ()):
        for paths in _active_paths:
            for log_file in paths.log_files():
                report.sections.append((f"{paths.name}: tail of {log_file.name}",
                                        cluster.log_tail(log_file, LOG_TAIL_LINES)))

