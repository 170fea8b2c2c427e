"""Leader election on a coordination.k8s.io/v1 Lease: one replica reconciles, the others stand by warm.

The algorithm is client-go's (and the official Python client's `kubernetes.leaderelection`): a candidate takes the
Lease when it is free or its holder has not renewed it for `lease_seconds` of the candidate's own clock; the
holder renews every `retry_seconds`; writes carry the Lease's resourceVersion, so of two candidates only one
wins. What this module adds, and why it does not use that package (docs/reliability.md):

- a fence: `leading()` is true only until `renew_deadline_seconds` after the start of the last renewal that
  succeeded, measured on the monotonic clock, whatever the renewing thread is doing (a renewal may hang on a
  dead connection). `Kube` checks it before every mutating call, so a replica that may have lost the Lease
  writes nothing even before it notices. renew deadline < lease duration: the holder's fence closes before any
  standby may take the Lease (a standby counts the lease duration from when it saw the last renewal, later
  than that renewal started);
- losing the Lease ends the process (`on_lost`, as controller-runtime's managers do): no reconcile pass, API
  call or cached state of this leadership survives into another; the Deployment starts it again as a standby;
- a graceful stop releases the Lease (empty holder), so a rolling update hands over within one retry period;
- every request has a timeout, the clock and the API are injected (unit-tested without a cluster), and the
  gauge `ascend_hybrid_leader` says 1 on the leader, 0 on a standby.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, cast

from kubernetes.client.exceptions import ApiException
from prometheus_client import Gauge

if TYPE_CHECKING:
    from kubernetes import client

log = logging.getLogger(__name__)

LEADER = Gauge("ascend_hybrid_leader", "1 while this replica holds the leader Lease and reconciles, 0 on a standby")
DEFAULT_LEASE_NAME = "ascend-hybrid-operator"
SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


class NotLeader(RuntimeError):
    """A write was attempted by a replica that does not (or may no longer) hold the Lease."""


@dataclass(frozen=True)
class LeaseSettings:
    """Defaults meet a failover goal of 15 s after the leader dies without a word (SIGKILL, node lost): a standby
    takes over at most lease + 2 × retry = 14 s after the last renewal (it sees a renewal up to one retry late
    and polls once per retry); 3 s between the fence closing and the earliest takeover absorb clock-rate
    differences and a write already on the wire."""

    name: str = DEFAULT_LEASE_NAME
    namespace: str = "default"
    identity: str = ""
    lease_seconds: int = 10
    renew_deadline_seconds: float = 7.0
    retry_seconds: float = 2.0

    def __post_init__(self) -> None:
        if not self.identity:
            raise ValueError("a leader election candidate needs an identity")
        if not 0 < self.retry_seconds * 1.2 < self.renew_deadline_seconds < self.lease_seconds:
            raise ValueError("leader election needs 1.2 × retry < renew deadline < lease duration, got "
                             f"{self.retry_seconds}, {self.renew_deadline_seconds}, {self.lease_seconds}")

    @property
    def request_timeout(self) -> float:
        return max(1.0, min(self.retry_seconds, self.renew_deadline_seconds / 3))


def candidate_identity() -> str:
    """Unique per process: the pod's name (downward API) or the host's, and a random suffix, as client-go does —
    a restarted container never mistakes its previous life's Lease for its own."""
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def default_lease_namespace(kubeconfig: str | None = None) -> str:
    """The namespace the operator runs in (POD_NAMESPACE, else the in-cluster ServiceAccount's), else the
    kubeconfig context's, else `default`."""
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    namespace: str | None
    try:
        with open(SERVICE_ACCOUNT_NAMESPACE) as handle:
            namespace = handle.read().strip()
        if namespace:
            return namespace
    except OSError:
        pass
    try:
        from kubernetes import config

        _, active = config.list_kube_config_contexts(config_file=kubeconfig)
        namespace = ((active or {}).get("context") or {}).get("namespace")
    except Exception:  # noqa: BLE001 - no or broken kubeconfig: in-cluster, or the default namespace
        namespace = None
    return namespace or "default"


def _now_utc() -> datetime:
    return datetime.now(UTC)


class LeaderElector:
    def __init__(self, coordination, settings: LeaseSettings, *, on_lost: Callable[[], None],
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], datetime] = _now_utc,
                 sleep: Callable[[float], object] | None = None):
        self.api, self.s, self.on_lost = coordination, settings, on_lost
        self.clock, self.wall = clock, wall
        self._stop = threading.Event()
        self._sleep = sleep or self._stop.wait
        self._leading = threading.Event()
        self._renewed_at: float | None = None   # monotonic start of the last successful acquire/renew
        self._observed: tuple | None = None     # (holder, renewTime, resourceVersion) last seen
        self._observed_at = 0.0                 # monotonic time that record was first seen
        self._lease: client.V1Lease | None = None  # the Lease as last read or written
        self.acquired_at: float | None = None
        LEADER.set(0)

    # -- what the rest of the operator asks ---------------------------------------------------------------------
    def leading(self) -> bool:
        renewed = self._renewed_at
        return (self._leading.is_set() and renewed is not None
                and self.clock() - renewed < self.s.renew_deadline_seconds)

    def fence(self) -> None:
        if not self.leading():
            raise NotLeader(f"{self.s.identity} does not hold Lease {self.s.namespace}/{self.s.name}")

    def wait_leading(self, timeout: float | None = None) -> bool:
        return self._leading.wait(timeout)

    # -- the loop ----------------------------------------------------------------------------------------------
    def run(self) -> None:
        """Campaigns until it leads, then renews until it stops or loses the Lease (then `on_lost`)."""
        log.info("leader election: %s campaigns for Lease %s/%s", self.s.identity, self.s.namespace, self.s.name)
        while not self._stop.is_set():
            won = self._attempt()
            if self._leading.is_set() and not self.leading():
                self._lose("could not renew within the renew deadline" if not won else "renewal came too late")
                return
            self._sleep(self.s.retry_seconds)

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.run, name="ahj-leader-election", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        self._stop.set()

    def release(self) -> None:
        """Graceful stop: hand the Lease back (empty holder) so a standby takes it at its next retry."""
        self.stop()
        if not self.leading():
            return
        self._leading.clear()
        LEADER.set(0)
        # leading() holds only after _won, which follows storing the Lease written: not None, and with the spec
        # this replica wrote (a None would fail below, inside the best effort, as before)
        lease = cast("client.V1Lease", self._lease)
        try:
            now = self.wall()
            spec = cast("client.V1LeaseSpec", lease.spec)
            spec.holder_identity = None
            spec.lease_duration_seconds = 1
            spec.renew_time = now
            spec.acquire_time = now
            self.api.replace_namespaced_lease(self.s.name, self.s.namespace, lease,
                                              _request_timeout=self.s.request_timeout)
            log.info("leader election: %s released Lease %s/%s", self.s.identity, self.s.namespace, self.s.name)
        except Exception as error:  # noqa: BLE001 - best effort: the Lease then expires by itself
            log.warning("leader election: could not release the Lease: %s", error)

    def _lose(self, why: str) -> None:
        self._leading.clear()
        LEADER.set(0)
        log.error("leader election: %s lost Lease %s/%s (%s)", self.s.identity, self.s.namespace, self.s.name, why)
        self.on_lost()

    # -- one try -----------------------------------------------------------------------------------------------
    def _attempt(self) -> bool:
        try:
            return self._try_acquire_or_renew()
        except Exception as error:  # noqa: BLE001 - any failure is a failed try; the deadline decides
            log.info("leader election: %s", str(error).splitlines()[0] if str(error) else type(error).__name__)
            return False

    def _try_acquire_or_renew(self) -> bool:
        from kubernetes import client

        started = self.clock()
        now = self.wall()
        timeout = self.s.request_timeout
        try:
            lease = self.api.read_namespaced_lease(self.s.name, self.s.namespace, _request_timeout=timeout)
        except ApiException as error:
            if error.status != 404:
                raise
            body = client.V1Lease(metadata=client.V1ObjectMeta(name=self.s.name, namespace=self.s.namespace),
                                  spec=client.V1LeaseSpec(holder_identity=self.s.identity,
                                                          lease_duration_seconds=self.s.lease_seconds,
                                                          acquire_time=now, renew_time=now, lease_transitions=0))
            self._lease = self.api.create_namespaced_lease(self.s.namespace, body, _request_timeout=timeout)
            self._won(started)
            return True
        spec = lease.spec or client.V1LeaseSpec()
        holder = spec.holder_identity or ""
        record = (holder, spec.renew_time, lease.metadata.resource_version)
        if record != self._observed:
            self._observed, self._observed_at = record, started
        duration = spec.lease_duration_seconds or self.s.lease_seconds
        if holder and holder != self.s.identity and self._observed_at + duration > started:
            if self._leading.is_set():  # someone else holds it now: we lost it
                self._renewed_at = None
            return False
        mine = holder == self.s.identity
        lease.spec = spec
        spec.holder_identity = self.s.identity
        spec.lease_duration_seconds = self.s.lease_seconds
        spec.renew_time = now
        if not mine:
            spec.acquire_time = now
            spec.lease_transitions = (spec.lease_transitions or 0) + 1
        self._lease = self.api.replace_namespaced_lease(self.s.name, self.s.namespace, lease,
                                                        _request_timeout=timeout)
        self._won(started)
        return True

    def _won(self, started: float) -> None:
        self._renewed_at = started
        lease = self._lease
        if lease is not None and lease.spec is not None:
            meta = cast("client.V1ObjectMeta", lease.metadata)  # the apiserver's answer: metadata always set
            self._observed = (lease.spec.holder_identity, lease.spec.renew_time, meta.resource_version)
            self._observed_at = started
        if not self._leading.is_set():
            self.acquired_at = self.clock()
            log.info("leader election: %s leads (Lease %s/%s)", self.s.identity, self.s.namespace, self.s.name)
            self._leading.set()
            LEADER.set(1)
