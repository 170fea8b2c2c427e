"""The telemetry helper's IO shell without a cluster: pods handed in as the informer would, real listeners on
loopback addresses of a range the dev clusters' pods never reach (127.16.255.x), HTTP as Prometheus does it."""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
import threading
import urllib.error
import urllib.request

import pytest

from ascend_hybrid.devcluster import cli, paths
from ascend_hybrid.devcluster.kube import processes
from ascend_hybrid.devcluster.kube.waiting import wait_until
from ascend_hybrid.devcluster.nodes.manifests import SimNode, node_manifest
from ascend_hybrid.devcluster.telemetry import exporter, figures, prometheus
from support.builders import telemetry_pod as pod_manifest


def get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=3) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read().decode()


def refused(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    with socket.socket() as probe:
        probe.settimeout(2)
        return probe.connect_ex((host, int(port))) != 0


class Running:
    """A TelemetrySimulation on its own asyncio loop in a thread, as the helper's main() runs it."""

    def __init__(self, state):
        self.messages: list[str] = []
        self.simulation = exporter.TelemetrySimulation(state, exporter_host="127.0.0.1", log=self.messages.append)
        self.ready = state / "ready"
        self.ready.unlink(missing_ok=True)  # as the helper's main() does: ready means this run is
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stop_event: asyncio.Event | None = None
        started = threading.Event()

        async def main():
            self.loop, self.stop_event = asyncio.get_running_loop(), asyncio.Event()
            started.set()
            await self.simulation.run(self.stop_event, lambda: True, self.ready)
        self.thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
        self.thread.start()
        started.wait(5)
        wait_until(self.ready.exists, 10, "the simulation to be ready")

    def stop(self):
        self.loop.call_soon_threadsafe(self.stop_event.set)
        self.thread.join(10)
        assert not self.thread.is_alive()

    def exporter(self) -> str:
        return f"127.0.0.1:{self.simulation.exporter_port}"


@pytest.fixture
def running(tmp_path, monkeypatch):
    monkeypatch.setattr(exporter, "RETRY_SECONDS", 0.2)
    helper = Running(tmp_path)
    helper.simulation.sync_nodes([node_manifest(SimNode(2, "910B", 0, 1))])
    yield helper
    helper.stop()


SIMULATED = dict(name="sim-a1-0", ip="127.16.255.201", annotations={figures.UTILIZATION_ANNOTATION: "64"})
REAL = dict(name="real-a1-0", ip="127.16.255.202", job="real",
            annotations={figures.RUNTIME_ANNOTATION: figures.PROCESS_RUNTIME})


def trainer_target_pods(state) -> list[str]:
    groups = json.loads((state / "targets" / "trainers.json").read_text())
    return [group["labels"]["__meta_ahj_pod"] for group in groups]


def test_simulated_pods_are_served_until_they_end_and_the_targets_follow(running, tmp_path):
    running.simulation.sync_pods([pod_manifest(**SIMULATED), pod_manifest(**REAL)])
    status, content_type, text = wait_until(lambda: not refused("127.16.255.201:9400") and
                                            get("http://127.16.255.201:9400/metrics"), 10, "the trainer endpoint")
    assert status == 200 and content_type.startswith("text/plain; version=0.0.4")
    assert "ascend_trainer_step " in text and 'ascend_trainer_npu_utilization_percent{device="0"} 64.0' in text
    assert get("http://127.16.255.201:9400/healthz")[0] == 404
    assert refused("127.16.255.202:9400"), "a pod running the real trainer serves its own endpoint"
    wait_until(lambda: trainer_target_pods(tmp_path) == ["real-a1-0", "sim-a1-0"], 5, "both pods as targets")

    exported = get(f"http://{running.exporter()}/metrics")[2]
    assert exported.count("npu_chip_info_utilization{") == 4  # two chips each, the real trainer's pod included
    assert 'pod_name="sim-a1-0"} 64.0' in exported
    exporter_groups = json.loads((tmp_path / "targets" / "npu-exporter.json").read_text())
    assert exporter_groups == [{"labels": {}, "targets": [running.exporter()]}]

    ended = pod_manifest(**SIMULATED)
    ended["status"]["phase"] = "Succeeded"
    running.simulation.pod_event("MODIFIED", ended)
    wait_until(lambda: refused("127.16.255.201:9400"), 5, "the ended pod's endpoint to close")
    wait_until(lambda: trainer_target_pods(tmp_path) == ["real-a1-0"], 5, "the ended pod to leave the targets")
    running.simulation.pod_event("DELETED", pod_manifest(**REAL))
    wait_until(lambda: trainer_target_pods(tmp_path) == [], 5, "the deleted pod to leave the targets")
    assert "sim-a1-0" not in get(f"http://{running.exporter()}/metrics")[2]


def test_an_address_in_use_is_retried_until_it_frees(running):
    squatter = socket.socket()
    squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    squatter.bind(("127.16.255.203", 9400))
    squatter.listen()
    try:
        running.simulation.sync_pods([pod_manifest(name="late-a1-0", ip="127.16.255.203")])
        wait_until(lambda: any("cannot serve ns/late-a1-0" in m for m in running.messages), 5, "the refusal")
    finally:
        squatter.close()
    wait_until(lambda: get("http://127.16.255.203:9400/metrics")[0] == 200, 5, "the retried endpoint")
    assert sum("cannot serve" in m for m in running.messages) == 1, "a refusal is logged once, not every retry"


def test_a_restarted_helper_keeps_its_exporter_port(tmp_path):
    first = Running(tmp_path)
    port = first.simulation.exporter_port
    first.stop()
    second = Running(tmp_path)
    try:
        assert second.simulation.exporter_port == port
    finally:
        second.stop()


def test_target_files_are_rewritten_only_on_change(tmp_path):
    target = tmp_path / "targets" / "x.json"
    assert exporter.write_atomically(target, "[]\n") is True
    assert exporter.write_atomically(target, "[]\n") is False
    assert exporter.write_atomically(target, "[1]\n") is True and target.read_text() == "[1]\n"
    assert [p.name for p in target.parent.iterdir()] == ["x.json"]


# `dev-cluster` flags and the helpers' control (no cluster) ------------------------------------------------------
def parse(*argv):
    parser = argparse.ArgumentParser(prog="ascend-hybrid")
    cli.register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["dev-cluster", *argv])


def test_up_takes_telemetry_and_prometheus_flags_off_by_default():
    assert (parse("up").telemetry, parse("up").prometheus) == (False, False)
    args = parse("up", "--telemetry", "--prometheus")
    assert (args.telemetry, args.prometheus) == (True, True)
    assert parse("build", "--with-prometheus").with_prometheus is True
    assert parse("prometheus-url", "--name", "x").func is cli.handle_prometheus_url


def test_prometheus_url_without_a_running_prometheus_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(paths.CLUSTERS_ENV, str(tmp_path))
    cluster_paths = paths.cluster_paths("c1")
    prometheus.home(cluster_paths).mkdir(parents=True)
    (prometheus.home(cluster_paths) / "port.json").write_text('{"port": 45678}\n')
    assert prometheus.url(cluster_paths) is None  # a port on record, but no process
    assert cli.main(["dev-cluster", "prometheus-url", "--name", "c1"]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "--prometheus" in error


def test_a_running_prometheus_is_reported_by_url(tmp_path, monkeypatch, capsys):
    """A stand-in process whose command line names the cluster directory, as Prometheus' --config.file does."""
    monkeypatch.setenv(paths.CLUSTERS_ENV, str(tmp_path))
    cluster_paths = paths.cluster_paths("c2")
    prometheus.home(cluster_paths).mkdir(parents=True)
    (prometheus.home(cluster_paths) / "port.json").write_text('{"port": 45679}\n')
    cluster_paths.helpers_dir.mkdir()
    stand_in = processes.start_detached([sys.executable, "-c", "import time; time.sleep(60)", str(cluster_paths.root)],
                                        tmp_path / "stand-in.log", prometheus.pid_file(cluster_paths))
    try:
        assert prometheus.url(cluster_paths) == "http://127.0.0.1:45679"
        assert cli.main(["dev-cluster", "prometheus-url", "--name", "c2"]) == 0
        assert capsys.readouterr().out.strip() == "http://127.0.0.1:45679"
        assert cluster_paths.helper_pid_files() == [prometheus.pid_file(cluster_paths)]  # so `down` stops it
    finally:
        assert prometheus.stop(cluster_paths)
    assert not processes.is_alive(stand_in) and prometheus.url(cluster_paths) is None


def test_the_rendered_config_is_what_prometheus_gets(tmp_path, monkeypatch):
    monkeypatch.setenv(paths.CLUSTERS_ENV, str(tmp_path))
    cluster_paths = paths.cluster_paths("c3")
    assert prometheus._write_config(cluster_paths) is True
    assert prometheus._write_config(cluster_paths) is False  # unchanged: no reload
    text = prometheus.config_file(cluster_paths).read_text()
    assert f"{exporter.targets_dir(cluster_paths)}/trainers.json" in text


def test_a_pod_asking_for_the_prediction_serves_steps_at_its_jobs_predicted_pace(running):
    """The helper keeps each job's status.plan prediction from the jobs' watch and applies it at scrape time; the
    operator's measured step seconds (the histogram's sum / count) then read within the declared noise of it."""
    pod = pod_manifest(name="pred-a1-0", ip="127.16.255.203",
                       annotations={figures.STEP_SECONDS_ANNOTATION: figures.PREDICTED})
    job = {"metadata": {"namespace": "ns", "name": "job"}, "status": {"plan": {"time": {"stepSeconds": 0.2}}}}
    running.simulation.sync_jobs([job])
    running.simulation.sync_pods([pod])

    def measured():
        found = not refused("127.16.255.203:9400") and get("http://127.16.255.203:9400/metrics")
        if not found:
            return None
        values = {row.split()[0]: float(row.split()[1]) for row in found[2].splitlines()
                  if row.startswith("ascend_trainer_step_seconds_")}
        count = values.get("ascend_trainer_step_seconds_count", 0)
        return values["ascend_trainer_step_seconds_sum"] / count if count else None
    seconds = wait_until(measured, 10, "the predicted pod's first steps")
    assert abs(seconds / 0.2 - 1) <= figures.PREDICTION_NOISE
    running.simulation.job_event("DELETED", job)
    assert running.simulation.with_prediction(figures.sim_pod(pod)).predicted_step_seconds is None
