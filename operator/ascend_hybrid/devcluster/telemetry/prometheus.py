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

from ascend_hybrid.devcluster.controlplane import ports, toolchain
from ascend_hybrid.devcluster.helpers import Helper
from ascend_hybrid.devcluster.paths import ClusterPaths
from ascend_hybrid.devcluster.telemetry import exporter
from ascend_hybrid.devcluster.telemetry.scrape import prometheus_config_text

HOST = "127.0.0.1"
READY_TIMEOUT_SECONDS = 60.0
RETENTION = "1d"


def home(paths: ClusterPaths) -> Path:
    return paths.root / "prometheus"


def config_file(paths: ClusterPaths) -> Path:
    return home(paths) / "prometheus.yml"


def helper(paths: ClusterPaths) -> Helper:
    return Helper("prometheus", paths, log_name="prometheus/prometheus.log")


def pid_file(paths: ClusterPaths) -> Path:
    return helper(paths).pid_file


def log_file(paths: ClusterPaths) -> Path:
    return helper(paths).log_file


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
    return helper(paths).running()


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
    return exporter.write_atomically(config_file(paths), prometheus_config_text(str(exporter.targets_dir(paths))))


def ensure_running(paths: ClusterPaths, log=print) -> str:
    """Builds Prometheus if it is missing, starts the telemetry helper and Prometheus unless they run, and
    returns Prometheus' URL once it answers /-/ready."""
    binary = toolchain.ensure(with_prometheus=True, log=log) / "prometheus"
    exporter.ensure_running(paths)
    home(paths).mkdir(parents=True, exist_ok=True)
    changed = _write_config(paths)
    server = helper(paths)
    pid, port = server.pid(), recorded_port(paths)
    if pid is not None and port is not None:
        if changed:
            os.kill(pid, signal.SIGHUP)  # Prometheus re-reads its config on SIGHUP
    else:
        if port is None or not ports.port_is_free(port, HOST):
            port = ports.free_server_port(HOST)
            _port_file(paths).write_text(json.dumps({"port": port}) + "\n")
        command = [str(binary), f"--config.file={config_file(paths)}", f"--storage.tsdb.path={home(paths) / 'data'}",
                   f"--storage.tsdb.retention.time={RETENTION}", f"--web.listen-address={HOST}:{port}",
                   "--log.level=warn"]
        # one running with an unknown port has no URL to hand out: ensure() restarts it
        pid = server.ensure(command, wait=False, still_good=lambda _pid: False)
    base_url = url_for(port)
    server.wait_ready(pid, lambda: is_ready(base_url), READY_TIMEOUT_SECONDS)
    return base_url


def stop(paths: ClusterPaths) -> bool:
    """Stops Prometheus (its data stays for the next start); True when it is not running."""
    return helper(paths).stop()
