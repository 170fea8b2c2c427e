"""The fault matrix: the operator against a real control plane while it is broken on purpose (docs/reliability.md).

Every test here is marked `faults`. The suite owns its cluster, `ahj-faults` (10 × 910B nodes of 8 chips, racks
of 5), since its cases restart the apiserver and etcd; it is brought up once and torn down at the end. With
AHJ_FAULTS_KUBECONFIG=<kubeconfig of a dev cluster> that cluster is used and left running (`ascend-hybrid
dev-cluster up --name rel-test --nodes 10`, then `AHJ_FAULTS_KUBECONFIG=$(ascend-hybrid dev-cluster kubeconfig
--name rel-test | tail -1) pytest tests/faults`). Like tests/integration, these tests fail, never skip, when the
toolchain is missing.

Each case reports faults injected, pods duplicated, pods lost and the time to converge: printed as it ends,
collected at the end of the run into build/fault-matrix.json and the terminal summary.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client

from ascend_hybrid.devcluster import cluster
from ascend_hybrid.devcluster.controlplane import toolchain
from ascend_hybrid.devcluster.controlplane.restart import ControlPlane
from ascend_hybrid.devcluster.kube.client import api_client
from ascend_hybrid.devcluster.paths import ClusterPaths
from support.faults import Report, Supervisor
from support.namespaces import namespace_name, scratch_namespace
from support.operator_harness import Jobs, OperatorProcess, install_crd

# several checkouts on one machine each name their own clusters (AHJ_CLUSTER_SUFFIX=-mine)
FAULTS_CLUSTER = "ahj-faults" + os.environ.get("AHJ_CLUSTER_SUFFIX", "")
REUSE_ENV = "AHJ_FAULTS_KUBECONFIG"
NODES = 10
REPORT = Report()


@dataclass
class FaultCluster:
    name: str
    kubeconfig: str
    paths: ClusterPaths
    api: client.ApiClient
    core: client.CoreV1Api
    control_plane: ControlPlane


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.faults)


def pytest_terminal_summary(terminalreporter):
    if REPORT.results:
        REPORT.write()
        terminalreporter.write_sep("=", "fault matrix")
        terminalreporter.write_line(REPORT.table())


@pytest.fixture(scope="package")
def fault_cluster() -> FaultCluster:
    # Package scope (this folder has an __init__.py): the cluster goes down after the folder's last test, so
    # the suites that follow (the MindSpore trainer tests) do not share the two cores with an idle cluster.
    reused = os.environ.get(REUSE_ENV)
    if reused:
        root = Path(reused).parent
        if not (root / "cluster.json").exists():
            pytest.fail(f"{REUSE_ENV}={reused}: not the kubeconfig of a dev cluster (no cluster.json beside it)",
                        pytrace=False)
        paths = ClusterPaths(name=root.name, root=root)
    else:
        missing = toolchain.missing()
        if missing:
            pytest.fail(f"the toolchain lacks {', '.join(missing)}: run `ascend-hybrid dev-cluster build`", pytrace=False)
        # a cluster left by an interrupted run holds its jobs and pods: the suite starts from an empty one
        cluster.down(FAULTS_CLUSTER)
        paths = cluster.up(FAULTS_CLUSTER, nodes=NODES, chip="910B", racks=2)
    api = api_client(str(paths.kubeconfig))
    control_plane = ControlPlane(paths)
    handle = FaultCluster(paths.name, str(paths.kubeconfig), paths, api, client.CoreV1Api(api), control_plane)
    install_crd(handle)
    # as a kubelet: a component that exits (the scheduler and controller-manager do when their own lease cannot be
    # renewed through a stopped apiserver) is started again
    with Supervisor(control_plane):
        yield handle
    if not reused:
        cluster.down(FAULTS_CLUSTER)


@pytest.fixture(scope="session")
def report() -> Report:
    return REPORT


@pytest.fixture
def namespace(request, fault_cluster) -> str:
    with scratch_namespace(fault_cluster.core, namespace_name("f", request.node.name, 36, 5)) as name:
        yield name


@pytest.fixture
def start_operator(fault_cluster, tmp_path):
    """start_operator(*extra_args, kubeconfig=None, log_name=…) → a running OperatorProcess; all stopped after."""
    started: list[OperatorProcess] = []

    def start(*extra_args, kubeconfig: str | None = None, log_name: str | None = None) -> OperatorProcess:
        log = tmp_path / (log_name or f"operator-{len(started)}.log")
        process = OperatorProcess(kubeconfig or fault_cluster.kubeconfig, log, extra_args=extra_args).start()
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()


@pytest.fixture
def jobs(fault_cluster, namespace, start_operator):
    """Jobs in the test's namespace, watched by one operator (started here); every job deleted after."""
    handle = Jobs(fault_cluster.api, namespace, start_operator())
    yield handle
    handle.delete_all(timeout=120)
