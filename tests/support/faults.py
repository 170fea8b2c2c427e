"""The fault matrix's instruments: what every case checks at its end, a monitor that checks the same invariants all
along, the per-case report, and a TCP proxy that can cut the operator off from the apiserver.

Invariants (on the real objects):
- converged: the job is in the expected phase (Running with its rank table completed, or a terminal phase);
- no pod duplicated: never two live pods (not terminal, not being deleted) with the same pod index — of one
  attempt, or of an old attempt next to the new one;
- no pod lost: a Running job has one live pod per index of its current attempt;
- no chip double-booked: no two live pods on one node name the same device in their device-plugin annotation, and
  no node gives out more chips than it has;
- every child present: both Services, both ConfigMaps (the rank table completed and listing the running pods).
"""

from __future__ import annotations

import ipaddress
import json
import re
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from kubernetes import client

from ascend_hybrid.contracts import names
from ascend_hybrid.contracts.ascend import DEVICE_ANNOTATION, RESOURCE
from support.operator_harness import Jobs, wait_for

REPORT_FILE = Path(__file__).resolve().parents[2] / "build" / "fault-matrix.json"
CHIPS_PER_NODE = 8


@dataclass
class CaseResult:
    case: str
    faults: int
    duplicated: int
    lost: int
    converge_seconds: float
    notes: str = ""


@dataclass
class Report:
    results: list[CaseResult] = field(default_factory=list)

    def add(self, result: CaseResult) -> None:
        self.results.append(result)
        print(f"\n[fault matrix] {result.case}: faults injected {result.faults}, pods duplicated {result.duplicated}, "
              f"pods lost {result.lost}, converged in {result.converge_seconds:.1f}s"
              + (f" ({result.notes})" if result.notes else ""))

    def write(self) -> None:
        if not self.results:
            return
        REPORT_FILE.parent.mkdir(parents=True, exist_ok=True)
        REPORT_FILE.write_text(json.dumps([vars(r) for r in self.results], indent=1) + "\n")

    def table(self) -> str:
        lines = ["| case | faults injected | pods duplicated | pods lost | time to converge | notes |",
                 "|---|---|---|---|---|---|"]
        lines += [f"| {r.case} | {r.faults} | {r.duplicated} | {r.lost} | {r.converge_seconds:.1f} s | {r.notes} |"
                  for r in self.results]
        return "\n".join(lines)


def _raw(api_client: client.ApiClient, call, *args, **kwargs) -> dict:
    answer = call(*args, _preload_content=False, _request_timeout=10, **kwargs)
    return json.loads(answer.data)


LEADS = re.compile(r"^ascend_hybrid_leader (\S+)$", re.M)


def leads(operator) -> bool | None:
    """Whether a replica started with --leader-elect leads (its metric); None while it does not answer."""
    try:
        found = LEADS.search(operator.metrics())
    except OSError:
        return None
    return found is not None and float(found.group(1)) == 1.0


def live(pod: dict) -> bool:
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed") and \
        not pod["metadata"].get("deletionTimestamp")


def device_ids(pod: dict) -> list[int]:
    text = (pod["metadata"].get("annotations") or {}).get(DEVICE_ANNOTATION)
    if not text:
        return []
    return [int(device["device_id"]) for device in json.loads(text).get("devices", [])]


def duplicates_of(pods: list[dict]) -> int:
    """Live pods beyond one per (namespace, job, pod index), whatever their attempt."""
    counts = Counter((p["metadata"].get("namespace"), p["metadata"]["labels"].get(names.JOB_LABEL),
                      p["metadata"]["labels"].get(names.POD_INDEX_LABEL))
                     for p in pods if live(p) and names.JOB_LABEL in (p["metadata"].get("labels") or {}))
    return sum(count - 1 for count in counts.values() if count > 1)


def double_booked(pods: list[dict]) -> list[str]:
    """Nodes where live pods name one device twice, or hold more chips than the node has. A pod holds chips once
    its node admitted it (the device plugin's annotation): two pods bound to one node's last chips by two schedulers
    that raced are not a double booking until both are admitted (the node refuses the second)."""
    by_node: dict[str, list[int]] = {}
    requested: Counter = Counter()
    for pod in pods:
        node = pod["spec"].get("nodeName")
        if not node or not live(pod) or not device_ids(pod):
            continue
        by_node.setdefault(node, []).extend(device_ids(pod))
        for container in pod["spec"].get("containers") or ():
            requested[node] += int(((container.get("resources") or {}).get("limits") or {}).get(RESOURCE, 0))
    bad = [f"{node}: device {chip} twice" for node, chips in by_node.items()
           for chip, count in Counter(chips).items() if count > 1]
    return bad + [f"{node}: {count} chips requested" for node, count in requested.items() if count > CHIPS_PER_NODE]


class BackgroundLoop:
    """A daemon thread running `_run` from `with` to its end; `_stop` tells it to end."""

    def _start_loop(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        raise NotImplementedError


class Monitor(BackgroundLoop):
    """Samples every pod of the cluster twice a second while a fault runs; keeps the worst it saw."""

    def __init__(self, core: client.CoreV1Api, interval: float = 0.5):
        self.core, self.interval = core, interval
        self.max_duplicates, self.double_booked, self.samples = 0, [], 0
        self._start_loop()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                pods = _raw(self.core.api_client, self.core.list_pod_for_all_namespaces)["items"]
            except Exception:  # noqa: BLE001 - the apiserver may be down on purpose: sample again later
                self._stop.wait(self.interval)
                continue
            self.samples += 1
            self.max_duplicates = max(self.max_duplicates, duplicates_of(pods))
            self.double_booked.extend(bad for bad in double_booked(pods) if bad not in self.double_booked)
            self._stop.wait(self.interval)


def converge(jobs: Jobs, name: str, *, phase: str = "Running", timeout: float = 120, attempt: int | None = None) -> dict:
    if phase == "Running":
        return jobs.wait_running(name, timeout=timeout, attempt=attempt)
    return jobs.wait_phase(name, phase, timeout=timeout)


def dns_records(jobs: Jobs, name: str) -> tuple[set[str], set[tuple[str, str]]]:
    """The headless `<job>`'s EndpointSlices by name, and (hostname, address) of every endpoint they list."""
    slices = client.DiscoveryV1Api(jobs.core.api_client).list_namespaced_endpoint_slice(
        jobs.namespace, label_selector=f"kubernetes.io/service-name={names.headless_service(name)}").items
    return ({dns.metadata.name for dns in slices},
            {(endpoint.hostname, address) for dns in slices for endpoint in dns.endpoints or ()
             for address in endpoint.addresses})


def check_job(jobs: Jobs, name: str, pod_count: int, *, phase: str = "Running") -> tuple[int, int]:
    """(duplicated, lost) of a converged job, with every other invariant asserted; waits briefly for old attempts'
    pods to finish going (they are deleting, not live) before it counts."""
    status = jobs.status(name)
    assert status.get("phase") == phase, f"{name} is {status.get('phase')}, not {phase}\n{jobs.describe(name)}"
    attempt = status["attempt"]
    ns = jobs.namespace

    def pods() -> list[dict]:
        return _raw(jobs.core.api_client, jobs.core.list_namespaced_pod, ns,
                    label_selector=f"{names.JOB_LABEL}={name}")["items"]
    duplicated = duplicates_of(pods())
    current = [p for p in pods() if live(p) and p["metadata"]["labels"].get(names.ATTEMPT_LABEL) == str(attempt)]
    indices = {int(p["metadata"]["labels"][names.POD_INDEX_LABEL]) for p in current}
    lost = len(set(range(pod_count)) - indices) if phase == "Running" else 0
    everything = _raw(jobs.core.api_client, jobs.core.list_pod_for_all_namespaces)["items"]
    assert not double_booked(everything), double_booked(everything)
    if pod_count > 1:  # a job of one pod has no Service (render.needs_services)
        services = {s.metadata.name for s in jobs.core.list_namespaced_service(ns).items}
        assert {names.sched_service(name), names.headless_service(name)} <= services, services
    config_maps = {c.metadata.name for c in jobs.core.list_namespaced_config_map(ns).items}
    assert names.rank_table_config_map(name) in config_maps, config_maps
    if phase == "Running":
        table = jobs.rank_table(name)
        assert table["status"] == "completed", table
        ips = {p["status"].get("podIP") for p in current}
        assert {server["container_ip"] for server in table["server_list"]} == ips, (table, ips)
        if pod_count > 1:  # the headless Service's slice, written with the table: its pods (loopback ones aside)
            slices, records = dns_records(jobs, name)
            assert slices == {names.dns_endpoint_slice(name, 0)}, slices
            assert records == {(p["metadata"]["name"], p["status"]["podIP"]) for p in current
                               if not ipaddress.ip_address(p["status"]["podIP"]).is_loopback}, records
    wait_for(lambda: duplicates_of(pods()) == 0, 30, f"{name}: old attempts' pods to go", lambda: jobs.describe(name))
    return duplicated, lost


class Supervisor(BackgroundLoop):
    """Every second, starts again any control-plane component that died (devcluster ControlPlane.revive)."""

    def __init__(self, control_plane, interval: float = 1.0):
        self.control_plane, self.interval, self.revived = control_plane, interval, []
        self._start_loop()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.revived += self.control_plane.revive()


class Proxy:
    """A TCP relay 127.0.0.1:port → the apiserver. `cut()` stops relaying (connections hang, as on a partition);
    `heal()` drops every held connection and relays again."""

    def __init__(self, target: tuple[str, int]):
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._cut = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                downstream, _ = self.listener.accept()
            except OSError:
                return
            if self._cut.is_set():
                with self._lock:
                    self._sockets.append(downstream)  # accepted, never answered: a black hole
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                downstream.close()
                continue
            with self._lock:
                self._sockets += [downstream, upstream]
            for a, b in ((downstream, upstream), (upstream, downstream)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                while self._cut.is_set() and not self._closed:
                    time.sleep(0.05)  # hold the bytes: the peer sees a silent connection
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                try:
                    end.close()
                except OSError:
                    pass

    def cut(self) -> None:
        self._cut.set()

    def heal(self) -> None:
        with self._lock:
            held, self._sockets = self._sockets, []
        self._cut.clear()
        for sock in held:
            try:
                sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            except OSError:
                pass

    def close(self) -> None:
        self._closed = True
        self.heal()
        self.listener.close()


def kubeconfig_through(kubeconfig: str, port: int, path: Path) -> Path:
    """A copy of `kubeconfig` whose server is the proxy (TLS passes through; the certificate names 127.0.0.1)."""
    import yaml

    config = yaml.safe_load(Path(kubeconfig).read_text())
    for entry in config["clusters"]:
        scheme, _, rest = entry["cluster"]["server"].partition("://")
        entry["cluster"]["server"] = f"{scheme}://127.0.0.1:{port}"
    path.write_text(yaml.safe_dump(config))
    return path


def server_address(kubeconfig: str) -> tuple[str, int]:
    import yaml

    server = yaml.safe_load(Path(kubeconfig).read_text())["clusters"][0]["cluster"]["server"]
    host, _, port = server.partition("://")[2].rstrip("/").rpartition(":")
    return host, int(port)
