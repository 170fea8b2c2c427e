"""The dev cluster's Prometheus: a helper process `dev-cluster up --prometheus` starts (and `down` stops by its
pid file in helpers/), scraping the simulated trainer endpoints and npu-exporter of the telemetry helper.

It listens on 127.0.0.1 on a port chosen once and kept: an operator started with --prometheus-url finds it again
after a restart. Its data and config live under <cluster>/prometheus/.
"""

from __future__ import annotations

import json
import os
import signal
import urllib.error
import urllib.request
from pathlib import Path

from ..controlplane import ports, toolchain
from ..kube import processes
from ..kube.waiting import wait_until
from ..paths import ClusterPaths
from . import exporter as telemetrysim
from .scrape import prometheus_config_text

HOST = "127.0.0.1"
READY_TIMEOUT_SECONDS = 60.0
RETENTION = "1d"


def home(paths: ClusterPaths) -> Path:
    return paths.root / "prometheus"


def config_file(paths: ClusterPaths) -> Path:
    return home(paths) / "prometheus.yml"


def pid_file(paths: ClusterPaths) -> Path:
    return paths.helpers_dir / "prometheus.pid"


def log_file(paths: ClusterPaths) -> Path:
    return home(paths) / "prometheus.log"


def _port_file(paths: ClusterPaths) -> Path:
    return home(paths) / "port.json"


def recorded_port(paths: ClusterPaths) -> int | None:
    try:
        return int(json.loads(_port_file(paths).read_text())["port"])
    except (FileNotFoundError, ValueError, KeyError):
        return None


def url_for(port: int) -> str:
    return f"http://{HOST}:{port}"


def is_running(paths: ClusterPaths) -> bool:
    pid = processes.read_pid(pid_file(paths))
    return bool(pid) and processes.is_ours(pid, str(paths.root))


def url(paths: ClusterPaths) -> str | None:
    """The URL of the cluster's Prometheus while it runs, else None."""
    port = recorded_port(paths)
    return url_for(port) if port and is_running(paths) else None


def is_ready(base_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base_url}/-/ready", timeout=2) as response:
            return response.status == 200
    except (OSError, urllib.error.URLError):
        return False


def _write_config(paths: ClusterPaths) -> bool:
    """(Re)writes prometheus.yml; True when its text changed."""
    return telemetrysim.write_atomically(config_file(paths), prometheus_config_text(str(telemetrysim.targets_dir(paths))))


def ensure_running(paths: ClusterPaths, log=print) -> str:
    """Builds Prometheus if it is missing, starts the telemetry helper and Prometheus unless they run, and
    returns Prometheus' URL once it answers /-/ready."""
    binary = toolchain.ensure(with_prometheus=True, log=log) / "prometheus"
    telemetrysim.ensure_running(paths)
    home(paths).mkdir(parents=True, exist_ok=True)
    changed = _write_config(paths)
    pid = processes.read_pid(pid_file(paths))
    port = recorded_port(paths)
    running = bool(pid) and processes.is_ours(pid, str(paths.root))
    if running and port is None:  # its port unknown: no URL to hand out, so start it afresh
        if not stop(paths):
            raise RuntimeError(f"could not stop Prometheus (pid {pid}) to restart it")
        running = False
    if running:
        if changed:
            os.kill(pid, signal.SIGHUP)  # Prometheus re-reads its config on SIGHUP
    else:
        if port is None or not ports.port_is_free(port, HOST):
            port = ports.free_server_port(HOST)
            _port_file(paths).write_text(json.dumps({"port": port}) + "\n")
        command = [str(binary), f"--config.file={config_file(paths)}", f"--storage.tsdb.path={home(paths) / 'data'}",
                   f"--storage.tsdb.retention.time={RETENTION}", f"--web.listen-address={HOST}:{port}",
                   "--log.level=warn"]
        paths.helpers_dir.mkdir(parents=True, exist_ok=True)
        pid = processes.start_detached(command, log_file(paths), pid_file(paths))
    base_url = url_for(port)
    wait_until(lambda: is_ready(base_url) or not processes.is_alive(pid), READY_TIMEOUT_SECONDS,
               f"Prometheus at {base_url} to be ready")
    if not processes.is_alive(pid):
        raise RuntimeError(f"Prometheus exited; see {log_file(paths)}")
    return base_url


def stop(paths: ClusterPaths) -> bool:
    """Stops Prometheus (its data stays for the next start); True when it is not running."""
    pid = processes.read_pid(pid_file(paths))
    stopped = processes.stop(pid, marker=str(paths.root)) if pid else True
    if stopped:
        pid_file(paths).unlink(missing_ok=True)
    return stopped
