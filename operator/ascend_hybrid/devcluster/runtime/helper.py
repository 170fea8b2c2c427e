"""Starting and stopping the process runtime (runtime.py) as a helper of a dev cluster: `up` starts it in every
cluster whose kwok stages leave process pods to it, `down` stops it through its pid file in helpers/."""

from __future__ import annotations

import time
from pathlib import Path

from ..kube import processes
from ..paths import ClusterPaths
from .service import RUNTIME_DIR, SHUTDOWN_GRACE_SECONDS

MODULE = "ascend_hybrid.devcluster.runtime.service"
STAGE_MARKER = "ahj-pod-process-address"  # clusters created before the runtime lack this stage


def runtime_root(paths: ClusterPaths) -> Path:
    return paths.root / RUNTIME_DIR


def pid_file(paths: ClusterPaths) -> Path:
    return paths.helpers_dir / "process-runtime.pid"


def ready_file(paths: ClusterPaths) -> Path:
    return paths.helpers_dir / "process-runtime.ready"


def log_file(paths: ClusterPaths) -> Path:
    return paths.root / "process-runtime.log"


def supported(paths: ClusterPaths) -> bool:
    """The cluster's kwok stages leave process pods alone (clusters created before the runtime do not)."""
    try:
        return STAGE_MARKER in paths.kwokctl_config.read_text()
    except FileNotFoundError:
        return False


def ensure_running(paths: ClusterPaths, capacity: int = 0, timeout: float = 60) -> int | None:
    """Starts the runtime unless it runs; its pid, or None for a cluster whose stages predate it."""
    if not supported(paths):
        return None
    pid = processes.read_pid(pid_file(paths))
    if pid and processes.is_ours(pid, str(paths.root)):
        return pid
    paths.helpers_dir.mkdir(parents=True, exist_ok=True)
    ready_file(paths).unlink(missing_ok=True)
    command = processes.python_module_command(
        MODULE, "--kubeconfig", str(paths.kubeconfig), "--cluster-dir", str(paths.root),
        "--ready-file", str(ready_file(paths)), "--capacity", str(capacity))
    pid = processes.start_detached(command, log_file(paths), pid_file(paths))
    deadline = time.monotonic() + timeout
    while not ready_file(paths).exists():
        if not processes.is_alive(pid) or time.monotonic() > deadline:
            tail = "\n".join(log_file(paths).read_text(errors="replace").splitlines()[-5:])
            raise RuntimeError(f"the process runtime did not get ready; its log ends:\n{tail}")
        time.sleep(0.1)
    return pid


def stop_running(paths: ClusterPaths) -> bool:
    pid = processes.read_pid(pid_file(paths))
    # Its own shutdown stops the pods' processes (SIGTERM, SIGKILL after SHUTDOWN_GRACE_SECONDS) first.
    stopped = processes.stop(pid, marker=str(paths.root), grace=SHUTDOWN_GRACE_SECONDS + 10) if pid else True
    ready_file(paths).unlink(missing_ok=True)
    return stopped
