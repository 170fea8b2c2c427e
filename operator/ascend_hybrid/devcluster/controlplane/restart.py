"""Restart one control-plane component of a running cluster (a fault to inject): stop the process kwokctl started,
optionally stay down a while, start it again with the same command line, working directory, environment and log,
and record its new pid where kwokctl (and `down`) look for it. `kwokctl stop/start cluster` restarts every
component at once; this restarts exactly one (kube-apiserver, etcd, kube-scheduler, …)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from ..kube import processes
from ..paths import ClusterPaths

COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok-controller")


def _read(path: Path) -> bytes:
    return path.read_bytes()


def restart_component(paths: ClusterPaths, component: str, down_seconds: float = 0.0, grace: float = 15.0) -> int:
    """Stops `component` (SIGTERM, then SIGKILL after `grace`), waits `down_seconds`, starts it again; the new pid."""
    if component not in COMPONENTS:
        raise ValueError(f"unknown component {component!r}: expected one of {', '.join(COMPONENTS)}")
    pid_file = paths.kwok_cluster / "pids" / f"{component}.pid"
    pid = processes.read_pid(pid_file)
    if pid is None or not processes.is_ours(pid, str(paths.kwok_cluster)):
        raise RuntimeError(f"{component} of cluster {paths.name} is not running (pid file {pid_file})")
    proc = Path("/proc") / str(pid)
    argv = [part.decode() for part in _read(proc / "cmdline").split(b"\0") if part]
    environ = dict(entry.decode(errors="replace").split("=", 1)
                   for entry in _read(proc / "environ").split(b"\0") if b"=" in entry)
    cwd = os.readlink(proc / "cwd")
    if not processes.stop(pid, marker=str(paths.kwok_cluster), grace=grace):
        raise RuntimeError(f"{component} (pid {pid}) did not stop")
    if down_seconds > 0:
        time.sleep(down_seconds)
    log_file = paths.kwok_cluster / "logs" / f"{component}.log"
    with open(log_file, "ab") as log:
        started = subprocess.Popen(argv, cwd=cwd, env=environ, stdin=subprocess.DEVNULL, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
    pid_file.write_text(f"{started.pid}\n")
    return started.pid
