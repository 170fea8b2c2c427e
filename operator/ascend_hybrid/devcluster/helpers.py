"""The dev cluster's helper processes (device plugin, process runtime, telemetry, Prometheus, the demo's operator):
their pid, ready and log files, and ensure / stop / status, written once.

Every helper's pid file is helpers/<name>.pid under the cluster's directory, so `down` and `status` treat them
all alike. A pid is trusted only while the process's command line still carries the cluster's directory (see
kube/processes.py), so a recycled pid is never signalled.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ascend_hybrid.devcluster.kube import processes
from ascend_hybrid.devcluster.kube.waiting import WaitTimeout, wait_until
from ascend_hybrid.devcluster.paths import ClusterPaths

LOG_TAIL_LINES = 5


@dataclass(frozen=True)
class Helper:
    name: str
    paths: ClusterPaths
    stop_grace: float = 10.0
    log_name: str | None = None   # default <name>.log in the cluster's directory

    @property
    def pid_file(self) -> Path:
        return self.paths.helpers_dir / f"{self.name}.pid"

    @property
    def ready_file(self) -> Path:
        return self.paths.helpers_dir / f"{self.name}.ready"

    @property
    def log_file(self) -> Path:
        return self.paths.root / (self.log_name or f"{self.name}.log")

    @property
    def marker(self) -> str:
        return str(self.paths.root)

    def pid(self) -> int | None:
        """The helper's pid while it runs (and is provably this cluster's), else None."""
        pid = processes.read_pid(self.pid_file)
        return pid if pid and processes.is_ours(pid, self.marker) else None

    def running(self) -> bool:
        return self.pid() is not None

    def start(self, command: Sequence[str], env: dict | None = None) -> int:
        self.paths.helpers_dir.mkdir(parents=True, exist_ok=True)
        self.ready_file.unlink(missing_ok=True)
        return processes.start_detached(list(command), self.log_file, self.pid_file, env=env)

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    def wait_ready(self, pid: int, ready: Callable[[], bool] | None = None, timeout: float = 60.0) -> None:
        """Until `ready()` (default: the ready file exists); a helper that exits or stays unready is an error
        naming its log's last lines."""
        ready = ready or self.ready_file.exists
        try:
            wait_until(lambda: ready() or not processes.is_alive(pid), timeout, f"the {self.name} to get ready")
        except WaitTimeout:
            raise RuntimeError(f"the {self.name} did not get ready in {timeout:.0f}s; its log "
                               f"({self.log_file}) ends:\n{self.log_tail()}") from None
        if not processes.is_alive(pid):
            raise RuntimeError(f"the {self.name} exited; its log ({self.log_file}) ends:\n{self.log_tail()}")

    def ensure(self, command: Sequence[str], *, ready: Callable[[], bool] | None = None, wait: bool = True,
               timeout: float = 60.0, still_good: Callable[[int], bool] | None = None, env: dict | None = None) -> int:
        """Starts the helper unless it runs already (and `still_good(pid)` holds); with `wait`, returns once
        it is ready."""
        pid = self.pid()
        if pid is not None and (still_good is None or still_good(pid)):
            return pid
        if pid is not None and not self.stop():
            raise RuntimeError(f"could not stop the {self.name} (pid {pid}) to restart it")
        pid = self.start(command, env=env)
        if wait:
            self.wait_ready(pid, ready, timeout)
        return pid

    def stop(self) -> bool:
        """SIGTERM (SIGKILL after the grace); True when it is not running any more."""
        pid = processes.read_pid(self.pid_file)
        stopped = processes.stop(pid, marker=self.marker, grace=self.stop_grace) if pid else True
        if stopped:
            self.pid_file.unlink(missing_ok=True)
            self.ready_file.unlink(missing_ok=True)
        return stopped


def recorded_helpers(paths: ClusterPaths) -> list[Helper]:
    """Every helper with a pid file in the cluster (whatever started it), in name order."""
    return [Helper(pid_file.stem, paths) for pid_file in paths.helper_pid_files()]
