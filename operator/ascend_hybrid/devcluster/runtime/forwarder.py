"""kube-proxy for the simulated cluster: every ClusterIP Service with a selector gets a TCP listener on
ClusterIP:port that forwards each connection to a ready pod's podIP:targetPort.

The kube-controller-manager refuses loopback addresses in EndpointSlices, so the backends come straight from
the Service's selector and the pods' status (Running, Ready, not being deleted, with a podIP). Routes follow the
pods: when a restart moves pod 0, new connections to `<job>-sched` reach the new pod. service_routes() is pure;
Forwarder runs the listeners on one asyncio loop in its own thread.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass

RETRY_BIND_SECONDS = 5.0
CONNECT_TIMEOUT_SECONDS = 5.0
CHUNK = 64 * 1024


@dataclass(frozen=True, order=True)
class Address:
    ip: str
    port: int

    def __str__(self) -> str:
        return f"{self.ip}:{self.port}"


def is_ready(pod: dict) -> bool:
    status = pod.get("status") or {}
    if pod["metadata"].get("deletionTimestamp") or status.get("phase") != "Running" or not status.get("podIP"):
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def _selects(selector: dict, pod: dict) -> bool:
    labels = pod["metadata"].get("labels") or {}
    return all(labels.get(key) == value for key, value in selector.items())


def _target_port(port: dict, pod: dict) -> int | None:
    target = port.get("targetPort", port["port"])
    if isinstance(target, int) or str(target).isdigit():
        return int(target)
    for container in (pod.get("spec") or {}).get("containers") or []:
        for declared in container.get("ports") or []:
            if declared.get("name") == target:
                return int(declared["containerPort"])
    return None  # this pod does not name the port: not a backend of it


def service_routes(services: list[dict], pods: list[dict]) -> dict[Address, tuple[Address, ...]]:
    """ClusterIP:port → the ready backends (podIP:targetPort, sorted), for TCP ports of Services with a
    selector. A listener with no ready backend stays (connections are refused by closing them)."""
    ready_by_namespace: dict[str, list[dict]] = {}
    for pod in pods:
        if is_ready(pod):
            ready_by_namespace.setdefault(pod["metadata"]["namespace"], []).append(pod)
    routes: dict[Address, tuple[Address, ...]] = {}
    for service in services:
        spec = service.get("spec") or {}
        cluster_ip, selector = spec.get("clusterIP"), spec.get("selector")
        if not selector or not cluster_ip or cluster_ip == "None":
            continue
        members = [pod for pod in ready_by_namespace.get(service["metadata"]["namespace"], [])
                   if _selects(selector, pod)]
        for port in spec.get("ports") or []:
            if port.get("protocol", "TCP") != "TCP":
                continue
            backends = set()
            for pod in members:
                target = _target_port(port, pod)
                if target is not None:
                    backends.add(Address(pod["status"]["podIP"], target))
            routes[Address(cluster_ip, int(port["port"]))] = tuple(sorted(backends))
    return routes


class Forwarder:
    def __init__(self, log: Callable[[str], None]):
        self.log = log
        self.routes: dict[Address, tuple[Address, ...]] = {}
        self.servers: dict[Address, asyncio.AbstractServer] = {}
        self.bind_failed: dict[Address, str] = {}
        self.turn = itertools.count()
        self.retrying: asyncio.Task | None = None
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, name="forwarder", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.retrying = self.loop.create_task(self._retry_failed_binds())
        self.loop.run_forever()
        self.loop.close()

    def update(self, routes: dict[Address, tuple[Address, ...]]) -> None:
        """Thread-safe: the listeners follow `routes` (new ones opened, gone ones closed)."""
        asyncio.run_coroutine_threadsafe(self._apply(dict(routes)), self.loop)

    def stop(self) -> None:
        """Closes every listener (connections in flight end with the process) and the loop."""
        future = asyncio.run_coroutine_threadsafe(self._shutdown(), self.loop)
        try:
            future.result(timeout=5)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=5)

    async def _shutdown(self) -> None:
        if self.retrying is not None:
            self.retrying.cancel()
        await self._apply({})

    async def _apply(self, routes: dict[Address, tuple[Address, ...]]) -> None:
        self.routes = routes
        for listen in [a for a in self.servers if a not in routes]:
            self.servers.pop(listen).close()
            self.log(f"forwarder: closed {listen}")
        for listen in [a for a in self.bind_failed if a not in routes]:
            del self.bind_failed[listen]
        for listen in routes:
            if listen not in self.servers:
                await self._listen(listen)

    async def _listen(self, listen: Address) -> None:
        try:
            self.servers[listen] = await asyncio.start_server(
                lambda reader, writer: self._connect(listen, reader, writer), listen.ip, listen.port,
                reuse_address=True)
            self.bind_failed.pop(listen, None)
            self.log(f"forwarder: listening on {listen}")
        except OSError as error:
            if self.bind_failed.get(listen) != str(error):
                self.log(f"forwarder: cannot listen on {listen} ({error}); retrying every {RETRY_BIND_SECONDS:g}s")
            self.bind_failed[listen] = str(error)

    async def _retry_failed_binds(self) -> None:
        while True:
            await asyncio.sleep(RETRY_BIND_SECONDS)
            for listen in list(self.bind_failed):
                if listen in self.routes and listen not in self.servers:
                    await self._listen(listen)

    async def _connect(self, listen: Address, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        backends = self.routes.get(listen) or ()
        if not backends:
            writer.close()  # no ready endpoint: as kube-proxy rejects, the client sees the connection end
            return
        backend = backends[next(self.turn) % len(backends)]
        try:
            upstream_reader, upstream_writer = await asyncio.wait_for(
                asyncio.open_connection(backend.ip, backend.port), CONNECT_TIMEOUT_SECONDS)
        except (TimeoutError, OSError):
            writer.close()
            return
        try:
            await asyncio.gather(self._pipe(reader, upstream_writer), self._pipe(upstream_reader, writer))
        finally:
            writer.close()
            upstream_writer.close()

    @staticmethod
    async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        """Copies one direction. EOF half-closes the other side (TCP semantics); an error closes it, which ends
        the opposite direction's read too."""
        try:
            while data := await source.read(CHUNK):
                sink.write(data)
                await sink.drain()
            if sink.can_write_eof():
                sink.write_eof()
        except (OSError, RuntimeError):
            sink.close()
