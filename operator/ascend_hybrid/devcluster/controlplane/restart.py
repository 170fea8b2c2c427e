"""Restart one control-plane component of a running cluster (a fault to inject), and start again whatever died of
it, as a kubelet restarts static pods.

`ControlPlane(paths)` records each component's command line, working directory and environment while they run.
`restart(component)` stops that one process (SIGTERM, then SIGKILL), optionally stays down a while, starts it again
with the same command, log and pid file (where kwokctl and `down` look). kube-scheduler and kube-controller-manager
exit when they cannot renew their own leader lease through a stopped apiserver: `revive()` starts every component
whose process is gone. (`kwokctl stop/start cluster` restarts every component at once.)
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ascend_hybrid.devcluster.kube import processes
from ascend_hybrid.devcluster.paths import ClusterPaths

COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok-controller")


@dataclass(frozen=True)
class Launch:
    argv: tuple[str, ...]
    cwd: str
    env: dict


class ControlPlane:
    def __init__(self, paths: ClusterPaths):
        self.paths = paths
        self.launches = {name: self._launch_of(name) for name in COMPONENTS}
        self._lock = threading.Lock()  # a restart's down time is not a death for revive() to mend

    def pid_file(self, component: str) -> Path:
        return self.paths.kwok_cluster / "pids" / f"{component}.pid"

    def pid(self, component: str) -> int | None:
        pid = processes.read_pid(self.pid_file(component))
        return pid if pid is not None and processes.is_ours(pid, str(self.paths.kwok_cluster)) else None

    def _launch_of(self, component: str) -> Launch:
        pid = self.pid(component)
        if pid is None:
            raise RuntimeError(f"{component} of cluster {self.paths.name} is not running")
        proc = Path("/proc") / str(pid)
        argv = tuple(part.decode() for part in (proc / "cmdline").read_bytes().split(b"\0") if part)
        env = dict(entry.decode(errors="replace").split("=", 1)
                   for entry in (proc / "environ").read_bytes().split(b"\0") if b"=" in entry)
        return Launch(argv, os.readlink(proc / "cwd"), env)

    def restart(self, component: str, down_seconds: float = 0.0, grace: float = 15.0) -> int:
        """Stops `component`, waits `down_seconds`, starts it again; returns the new pid."""
        if component not in COMPONENTS:
            raise ValueError(f"unknown component {component!r}: expected one of {', '.join(COMPONENTS)}")
        with self._lock:
            pid = self.pid(component)
            if pid is not None and not processes.stop(pid, marker=str(self.paths.kwok_cluster), grace=grace):
                raise RuntimeError(f"{component} (pid {pid}) did not stop")
            if down_seconds > 0:
                time.sleep(down_seconds)
            return self._start(component)

    def revive(self) -> list[str]:
        """Starts every component whose process is gone; their names."""
        with self._lock:
            dead = [name for name in COMPONENTS if self.pid(name) is None]
            for name in dead:
                self._start(name)
            return dead

    def _start(self, component: str) -> int:
        launch = self.launches[component]
        log_file = self.paths.kwok_cluster / "logs" / f"{component}.log"
        with open(log_file, "ab") as log:
            started = subprocess.Popen(launch.argv, cwd=launch.cwd, env=launch.env, stdin=subprocess.DEVNULL,
                                       stdout=log, stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
        self.pid_file(component).write_text(f"{started.pid}\n")
        return started.pid
