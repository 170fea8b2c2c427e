"""The process runtime (service.py) as a helper of a dev cluster: `up` starts it in every cluster whose kwok stages
leave process pods to it (and container pods, in clusters whose stages know them), `down` stops it (its own
shutdown stops the pods' processes and containers first; what a killed runtime left is removed after it)."""

from __future__ import annotations

from pathlib import Path

from ascend_hybrid.devcluster.helpers import Helper
from ascend_hybrid.devcluster.kube import processes
from ascend_hybrid.devcluster.paths import ClusterPaths
from ascend_hybrid.devcluster.runtime.kubelet import ContainerMode
from ascend_hybrid.devcluster.runtime.service import RUNTIME_DIR, SHUTDOWN_GRACE_SECONDS

MODULE = "ascend_hybrid.devcluster.runtime.service"
STAGE_MARKER = "ahj-pod-process-address"  # clusters created before the runtime lack this stage
CONTAINER_STAGE_MARKER = "values: ['process', 'container']"  # … and those created before the container runtime


def helper(paths: ClusterPaths) -> Helper:
    return Helper("process-runtime", paths, stop_grace=SHUTDOWN_GRACE_SECONDS + 10)


def runtime_root(paths: ClusterPaths) -> Path:
    return paths.root / RUNTIME_DIR


def pid_file(paths: ClusterPaths) -> Path:
    return helper(paths).pid_file


def log_file(paths: ClusterPaths) -> Path:
    return helper(paths).log_file


def supported(paths: ClusterPaths, marker: str = STAGE_MARKER) -> bool:
    """The cluster's kwok stages leave process pods alone (clusters created before the runtime do not)."""
    try:
        return marker in paths.kwokctl_config.read_text()
    except FileNotFoundError:
        return False


def runs_containers(paths: ClusterPaths) -> bool:
    """The cluster's kwok stages leave container pods to the runtime as well."""
    return supported(paths, CONTAINER_STAGE_MARKER)


def ensure_running(paths: ClusterPaths, capacity: int = 0, timeout: float = 60) -> int | None:
    """Starts the runtime unless it runs; its pid, or None for a cluster whose stages predate it."""
    if not supported(paths):
        return None
    runtime = helper(paths)
    command = processes.python_module_command(
        MODULE, "--kubeconfig", str(paths.kubeconfig), "--cluster-dir", str(paths.root),
        "--ready-file", str(runtime.ready_file), "--capacity", str(capacity),
        *(["--containers"] if runs_containers(paths) else []))
    return runtime.ensure(command, timeout=timeout)


def stop_running(paths: ClusterPaths) -> bool:
    stopped = helper(paths).stop()
    if stopped and runs_containers(paths):
        ContainerMode.sweep_root(runtime_root(paths))  # a runtime that had to be killed leaves its containers
    return stopped
