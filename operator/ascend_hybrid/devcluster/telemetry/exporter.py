"""The simulated telemetry helper: a process `dev-cluster up --telemetry` (or `--prometheus`) starts and `down`
stops by its pid file in helpers/.

It watches nodes and pods. For each Running pod that holds NPUs and does not run the real trainer
(figures.RUNTIME_ANNOTATION), it serves the trainer series of design §9 on <podIP>:9400/metrics, and stops
listening when the pod ends. One npu-exporter endpoint (127.15.0.1:<port>, the port kept across restarts) lists
every allocated chip of every pod. It keeps the file_sd target lists of the cluster's Prometheus up to date.
Figures are computed at scrape time from the pod (figures.py), so the helper holds no state worth saving.

    python -m ascend_hybrid.devcluster.telemetry.exporter --kubeconfig FILE --cluster-dir DIR
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path

from kubernetes import client
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from ascend_hybrid.devcluster.files import replace_file
from ascend_hybrid.devcluster.helpers import Helper
from ascend_hybrid.devcluster.kube import processes
from ascend_hybrid.devcluster.kube.client import api_client
from ascend_hybrid.devcluster.kube.informer import Source, start_informers
from ascend_hybrid.devcluster.kube.processes import helper_main, log, run_until_signalled
from ascend_hybrid.devcluster.nodes.manifests import SIMULATED_LABEL, profile_of_node
from ascend_hybrid.devcluster.paths import ClusterPaths
from ascend_hybrid.devcluster.telemetry import coupled
from ascend_hybrid.devcluster.telemetry.figures import (
    JOBS_RESOURCE,
    TRAINER_PORT,
    SimPod,
    exporter_text,
    predicted_step_seconds,
    sim_pod,
    trainer_text,
)
from ascend_hybrid.devcluster.telemetry.scrape import (
    EXPORTER_TARGETS_FILE,
    TRAINER_TARGETS_FILE,
    exporter_targets,
    targets_text,
    trainer_targets,
)

MODULE = "ascend_hybrid.devcluster.telemetry.exporter"
EXPORTER_HOST = "127.15.0.1"  # the first simulated node's address: where a node-level exporter would listen
RETRY_SECONDS = 5.0            # binds that failed (an address still in use) are tried again this often
REQUEST_TIMEOUT_SECONDS = 5.0
# The classic text format: what every Prometheus (and the operator's own parser) reads, whatever it negotiates.
METRICS_CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4


# Where the helper keeps its files ------------------------------------------------------------------------------
def state_dir(paths: ClusterPaths) -> Path:
    return paths.root / "telemetry"


def targets_dir(paths: ClusterPaths) -> Path:
    return state_dir(paths) / "targets"


def helper(paths: ClusterPaths) -> Helper:
    return Helper("telemetry-sim", paths)


def pid_file(paths: ClusterPaths) -> Path:
    return helper(paths).pid_file


def log_file(paths: ClusterPaths) -> Path:
    return helper(paths).log_file


def exporter_address(paths: ClusterPaths) -> str | None:
    """host:port of the simulated npu-exporter, once the helper has bound it."""
    try:
        return json.loads((state_dir(paths) / "exporter.json").read_text())["address"]
    except (FileNotFoundError, ValueError, KeyError):
        return None


def write_atomically(path: Path, text: str) -> bool:
    """Replaces the file in one rename (Prometheus must never read half a list); False when unchanged."""
    try:
        if path.read_text() == text:
            return False
    except FileNotFoundError:
        pass
    replace_file(path, text.encode())
    return True


# The helper process -------------------------------------------------------------------------------------------
class TelemetrySimulation:
    """Pod and node state from the informer threads; the listeners live on one asyncio loop."""

    def __init__(self, state: Path, exporter_host: str = EXPORTER_HOST, log: Callable[[str], None] = log):
        self.state, self.exporter_host, self.log = state, exporter_host, log
        self.lock = threading.Lock()
        self.pods: dict[str, SimPod] = {}           # uid → a Running pod holding chips
        self.predictions: dict[tuple[str, str], float] = {}  # (namespace, job) → predicted step seconds
        self.chip_of_node: dict[str, str] = {}      # node name → chip generation (910A, 910B, A3)
        self.faults_of_node: dict[str, dict[str, str]] = {}  # node name → its slow-compute and slow-links annotations
        self.listeners: dict[str, tuple[str, asyncio.AbstractServer]] = {}  # uid → (ip, server on ip:9400)
        self.refused: dict[str, str] = {}           # uid → why its bind failed (logged once)
        self.exporter: asyncio.Server | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.changed: asyncio.Event | None = None

    # Informer callbacks (other threads) ---------------------------------------------------------------------
    def sync_pods(self, items: list[dict]) -> None:
        with self.lock:
            self.pods = {pod.uid: pod for pod in map(sim_pod, items) if pod is not None}
        self._wake()

    def pod_event(self, kind: str, manifest: dict) -> None:
        uid = (manifest.get("metadata") or {}).get("uid", "")
        pod = None if kind == "DELETED" else sim_pod(manifest)
        with self.lock:
            if pod is None:
                self.pods.pop(uid, None)
            else:
                self.pods[uid] = pod
        self._wake()

    def sync_jobs(self, items: list[dict]) -> None:
        with self.lock:
            self.predictions = {key: seconds for key, seconds in map(_prediction, items) if seconds}

    def job_event(self, kind: str, manifest: dict) -> None:
        key, seconds = _prediction(manifest)
        with self.lock:
            if kind == "DELETED" or not seconds:
                self.predictions.pop(key, None)
            else:
                self.predictions[key] = seconds

    def with_prediction(self, pod: SimPod) -> SimPod:
        """The pod with its job's predicted step time (read at scrape time: the plan may come after the pod) and
        its job's coupling: the nodes of the job's pods and their faults (coupled.py)."""
        with self.lock:
            seconds = self.predictions.get((pod.namespace, pod.job))
            nodes = {other.node for other in self.pods.values() if other.training_key == pod.training_key}
            compute, links = coupled.node_histories(dict(self.faults_of_node))
        pod = replace(pod, coupling=coupled.Job(nodes | {pod.node}, compute, links))
        return replace(pod, predicted_step_seconds=seconds) if seconds else pod

    def sync_nodes(self, items: list[dict]) -> None:
        with self.lock:
            self.chip_of_node, self.faults_of_node = {}, {}
        for node in items:
            self.node_event("ADDED", node)

    def node_event(self, kind: str, node: dict) -> None:
        chip = profile_of_node(node)
        name = node["metadata"]["name"]
        annotations = node["metadata"].get("annotations") or {}
        faults = {key: annotations[key] for key in (coupled.SLOW_COMPUTE_ANNOTATION, coupled.SLOW_LINKS_ANNOTATION)
                  if annotations.get(key)}
        with self.lock:
            if kind == "DELETED" or chip is None:
                self.chip_of_node.pop(name, None)
                self.faults_of_node.pop(name, None)
            else:
                self.chip_of_node[name] = chip.chip
                self.faults_of_node[name] = faults
        self._wake()

    def _wake(self) -> None:
        if self.loop is not None and self.changed is not None:
            self.loop.call_soon_threadsafe(self.changed.set)

    # The loop -----------------------------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event, synced: Callable[[], bool], ready: Path | None) -> None:
        self.loop, self.changed = asyncio.get_running_loop(), asyncio.Event()
        await self.open_exporter()
        announced = False
        while not stop.is_set():
            self.changed.clear()  # before reading the pods: an event that lands during reconcile wakes the next pass
            if synced():
                await self.reconcile()
                if not announced:
                    announced = True
                    if ready:
                        ready.write_text(f"{os.getpid()}\n")
                    self.log(f"telemetry ready: {len(self.listeners)} trainer endpoints, exporter "
                             f"{self.exporter_host}:{self.exporter_port}")
            waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self.changed.wait())]
            await asyncio.wait(waiters, timeout=RETRY_SECONDS if synced() else 0.1,
                               return_when=asyncio.FIRST_COMPLETED)
            for waiter in waiters:
                waiter.cancel()
        for uid in list(self.listeners):
            await self.close_listener(uid)
        if self.exporter:
            self.exporter.close()

    @property
    def exporter_port(self) -> int | None:
        return self.exporter.sockets[0].getsockname()[1] if self.exporter and self.exporter.sockets else None

    async def open_exporter(self) -> None:
        """Binds the exporter on the port it had before (Prometheus' target list names it), else a free one."""
        recorded = self.state / "exporter.json"
        try:
            port = int(json.loads(recorded.read_text())["port"])
        except (FileNotFoundError, ValueError, KeyError):
            port = 0
        serve = self._handler(lambda: exporter_text(*self._exporter_view(), time.time()))
        try:
            self.exporter = await asyncio.start_server(serve, self.exporter_host, port)
        except OSError as error:
            self.log(f"exporter port {port} is taken ({error}); taking a free one")
            self.exporter = await asyncio.start_server(serve, self.exporter_host, 0)
        address = f"{self.exporter_host}:{self.exporter_port}"
        write_atomically(recorded, json.dumps({"address": address, "port": self.exporter_port}) + "\n")
        write_atomically(self.state / "targets" / EXPORTER_TARGETS_FILE, targets_text(exporter_targets(address)))

    def _exporter_view(self) -> tuple[list[SimPod], dict[str, str]]:
        with self.lock:
            return list(self.pods.values()), dict(self.chip_of_node)

    async def reconcile(self) -> None:
        """Listeners for exactly the simulated pods that are Running, and their target list."""
        with self.lock:
            pods = dict(self.pods)
        wanted = {uid: pod.ip for uid, pod in pods.items() if pod.serves_trainer_metrics}
        for uid, (ip, _) in list(self.listeners.items()):
            if wanted.get(uid) != ip:
                await self.close_listener(uid)
        for uid in set(self.refused) - set(wanted):
            del self.refused[uid]
        for uid in wanted:
            if uid not in self.listeners:
                await self.open_listener(pods[uid])
        write_atomically(self.state / "targets" / TRAINER_TARGETS_FILE, targets_text(trainer_targets(pods.values())))

    async def open_listener(self, pod: SimPod) -> None:
        def body() -> bytes | None:
            with self.lock:
                current = self.pods.get(pod.uid)
            return trainer_text(self.with_prediction(current), time.time()) if current else None
        try:
            server = await asyncio.start_server(self._handler(body), pod.ip, TRAINER_PORT)
        except OSError as error:
            if self.refused.get(pod.uid) != str(error):
                self.refused[pod.uid] = str(error)
                self.log(f"cannot serve {pod.namespace}/{pod.name} on {pod.trainer_address}: {error}; retrying")
            return
        self.refused.pop(pod.uid, None)
        self.listeners[pod.uid] = (pod.ip, server)
        self.log(f"serving {pod.namespace}/{pod.name} on {pod.trainer_address}")

    async def close_listener(self, uid: str) -> None:
        ip, server = self.listeners.pop(uid)
        server.close()
        await server.wait_closed()
        self.log(f"stopped serving {ip} (pod {uid} ended)")

    @staticmethod
    def _handler(body: Callable[[], bytes | None]):
        """A minimal HTTP/1.1 responder: GET /metrics → body() (404 when None), one request per connection."""
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), REQUEST_TIMEOUT_SECONDS)
                method, path = (head.split(b"\r\n", 1)[0].decode("latin-1").split() + ["", ""])[:2]
                text = body() if method in ("GET", "HEAD") and path.split("?")[0] == "/metrics" else None
                status, content_type = ("200 OK", METRICS_CONTENT_TYPE) if text is not None else \
                    ("404 Not Found", "text/plain; charset=utf-8")
                payload = text if text is not None else b"not found\n"
                writer.write(f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(payload)}"
                             f"\r\nConnection: close\r\n\r\n".encode() + (b"" if method == "HEAD" else payload))
                await writer.drain()
            except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                pass
            finally:
                writer.close()
        return handle


def _prediction(job: dict) -> tuple[tuple[str, str], float | None]:
    metadata = job.get("metadata") or {}
    return (metadata.get("namespace", ""), metadata.get("name", "")), predicted_step_seconds(job)


def run(kubeconfig: str, state: Path, ready: Path | None, stop: threading.Event) -> None:
    api = api_client(kubeconfig)
    core = client.CoreV1Api(api)
    simulation = TelemetrySimulation(state)
    # The jobs' predictions are not waited for: the CRD may not be installed yet (the informer retries until it is).
    start_informers((Source("ascendhybridjobs", partial(client.CustomObjectsApi(api).list_cluster_custom_object,
                                                        *JOBS_RESOURCE),
                            simulation.sync_jobs, simulation.job_event),), stop, log)
    synced = start_informers((
        Source("nodes", core.list_node, simulation.sync_nodes, simulation.node_event,
               {"label_selector": f"{SIMULATED_LABEL}=true"}),
        Source("pods", core.list_pod_for_all_namespaces, simulation.sync_pods, simulation.pod_event,
               {"field_selector": "spec.nodeName!="})), stop, log)

    async def main() -> None:
        stop_serving = asyncio.Event()
        loop = asyncio.get_running_loop()
        threading.Thread(target=lambda: (stop.wait(), loop.call_soon_threadsafe(stop_serving.set)),
                         name="stop-watch", daemon=True).start()
        await simulation.run(stop_serving, lambda: all(event.is_set() for event in synced), ready)

    asyncio.run(main())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ascend-hybrid-sim-telemetry", description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--cluster-dir", required=True, type=Path,
                        help="the cluster's directory: state under telemetry/ (also marks the process as its own)")
    parser.add_argument("--ready-file", type=Path, help="written once the first lists are in and it serves")
    args = parser.parse_args(argv)
    run_until_signalled(lambda stop: run(args.kubeconfig, args.cluster_dir / "telemetry", args.ready_file, stop),
                        args.ready_file)
    log("telemetry simulation stopped")
    return 0


# Control from `dev-cluster up` --------------------------------------------------------------------------------
def ensure_running(paths: ClusterPaths, timeout: float = 60.0) -> int:
    """Starts the helper unless it runs already; returns its pid once it serves. A helper started before the
    kubeconfig was last written (the control plane was re-created) holds stale credentials: it is restarted."""
    telemetry = helper(paths)

    def still_good(_pid: int) -> bool:
        return (telemetry.pid_file.stat().st_mtime >= paths.kubeconfig.stat().st_mtime
                and telemetry.ready_file.exists())

    command = processes.python_module_command(MODULE, "--kubeconfig", str(paths.kubeconfig), "--cluster-dir",
                                              str(paths.root), "--ready-file", str(telemetry.ready_file))
    return telemetry.ensure(command, timeout=timeout, still_good=still_good)


def is_running(paths: ClusterPaths) -> bool:
    return helper(paths).running()


def stop(paths: ClusterPaths) -> bool:
    return helper(paths).stop()


if __name__ == "__main__":
    helper_main(main)  # informer threads may sit in a watch against an apiserver that is gone
