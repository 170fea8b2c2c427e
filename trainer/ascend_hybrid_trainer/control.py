"""The launcher's end of the recovery channel: the job's LauncherChannel `<job>-recovery` (a kind of the operator's
API group), reached with the pod's own ServiceAccount token (docs/reliability.md, "The launchers' channel").

The operator writes the key `generation` of its `data`: the rank generation every pod must run, once a restart
needs one (no channel, or no key, is generation 0). Each launcher watches the channel (a watch on that one object:
a new generation arrives within a second) and writes the key of its own pod, a JSON report: its ranks of a
generation `Started` (with the checkpoint step they resume from), `Stepping` (they trained a step) or `Failed` (the
pod's cause, rank and step). Beside the generation, while pods an elastic shrink or growth kept run, the operator
writes `world`: the index each pod runs as now, the world size, degrees and job.json (generations.py moves a kept
pod into it). The operator makes the channel before the pods; the apiserver authenticates the token, and its RBAC
(the job's `<job>-launcher` Role) lets the pod's ServiceAccount get, watch and patch that one channel by name and
nothing else — no other job's channel, no list, no create. Standard library only: the trainer image needs no
Kubernetes client.
"""

from __future__ import annotations

import json
import os
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from datetime import UTC, datetime

GENERATION_KEY = "generation"
WORLD_KEY = "world"  # only while pods an elastic shrink kept run: the world they run in now (generations.py)
CHECKPOINT_KEY = "checkpoint"  # everySteps: auto: the operator's interval, handed to the ranks (generations.py)
STARTED, STEPPING, FAILED = "Started", "Stepping", "Failed"
FIELD_MANAGER = "ascend-hybrid-trainer"
REQUEST_TIMEOUT_SECONDS = 10.0
WATCH_SECONDS = 300           # the apiserver ends a watch after this; it is started again from where it was
RETRY_SECONDS = 1.0
PRESENT_SECONDS = 30.0        # how long a refused or unreachable channel is tried at start
# The channel's kind (the operator's contracts/names.py and spec/api.py spell it again: the wire is the contract)
CHANNEL_API = "/apis/hybrid.ascend.dev/v1alpha1"
CHANNEL_PLURAL = "launcherchannels"


def now_text() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class ChannelUnavailable(Exception):
    """The channel cannot be used (no token, forbidden, unreachable): the launcher ends its pod on the first
    failure, as without a channel, and the operator restarts the whole gang."""


class Channel:
    def __init__(self, base_url: str, token_file: str, context: ssl.SSLContext | None, namespace: str,
                 channel: str, pod_name: str, pod_uid: str, log: Callable[[str], None]):
        self.base_url, self.token_file, self.context = base_url.rstrip("/"), token_file, context
        self.namespace, self.channel, self.pod_name, self.pod_uid, self.log = (namespace, channel, pod_name,
                                                                                pod_uid, log)
        self.data: dict[str, str] = {}
        self.changed = threading.Condition()
        self.closed = False

    @classmethod
    def from_env(cls, env: Mapping[str, str], log: Callable[[str], None]) -> Channel | None:
        """The channel the operator's env describes, or None (with the reason logged) where a piece is missing:
        an operator without it, a pod without a ServiceAccount token, no apiserver address."""
        channel, pod_name, pod_uid = (env.get("AHJ_LAUNCHER_CHANNEL"), env.get("POD_NAME"), env.get("POD_UID"))
        account = env.get("AHJ_SERVICE_ACCOUNT_DIR") or "/var/run/secrets/kubernetes.io/serviceaccount"
        host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
        namespace = env.get("POD_NAMESPACE")
        token = os.path.join(account, "token")
        missing = [name for name, value in (("AHJ_LAUNCHER_CHANNEL", channel), ("POD_NAME", pod_name),
                                            ("POD_UID", pod_uid), ("POD_NAMESPACE", namespace),
                                            ("KUBERNETES_SERVICE_HOST", host)) if not value]
        if not os.path.exists(token):
            missing.append(f"a ServiceAccount token at {token}")
        if missing or not (channel and pod_name and pod_uid and namespace and host):
            log(f"no recovery channel ({', '.join(missing)} missing): a failure ends this pod")
            return None
        ca = os.path.join(account, "ca.crt")
        context = ssl.create_default_context(cafile=ca if os.path.exists(ca) else None)
        address = f"[{host}]" if ":" in host else host
        return cls(f"https://{address}:{port or 443}", token, context, namespace, channel, pod_name, pod_uid, log)

    # -- HTTP ----------------------------------------------------------------------------------------------------
    def _path(self, query: dict | None = None) -> str:
        """The channel's own URL; with a query, the collection's (a watch narrowed to the channel by its name, which
        the apiserver authorizes as a watch of that one object)."""
        path = f"{self.base_url}{CHANNEL_API}/namespaces/{self.namespace}/{CHANNEL_PLURAL}"
        if query is None:
            return f"{path}/{self.channel}"
        return f"{path}?{urllib.parse.urlencode(query)}"

    def _open(self, request: urllib.request.Request, timeout: float):
        with open(self.token_file, encoding="utf-8") as handle:  # projected tokens rotate: read at every call
            request.add_header("Authorization", f"Bearer {handle.read().strip()}")
        request.add_header("Accept", "application/json")
        return urllib.request.urlopen(request, timeout=timeout, context=self.context)

    def read(self) -> dict[str, str] | None:
        """The channel's data; None when it does not exist (an operator that made none: generation 0)."""
        try:
            with self._open(urllib.request.Request(self._path()), REQUEST_TIMEOUT_SECONDS) as reply:
                return dict(json.loads(reply.read()).get("data") or {})
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return None
            if error.code in (401, 403):
                raise ChannelUnavailable(f"the apiserver refused to read LauncherChannel {self.channel} "
                                         f"({error.code}): {error.read()[:200]!r}") from None
            raise

    def start(self) -> int:
        """Reads the channel and starts watching it; the generation to run now. A channel not found (404) is
        generation 0. A refusal is tried again for PRESENT_SECONDS: the apiserver's authorizer learns the job's
        RoleBinding from a watch that can lag behind its creation."""
        deadline = time.monotonic() + PRESENT_SECONDS
        while True:
            try:
                data = self.read()
            except (OSError, ValueError, ChannelUnavailable) as error:  # unreachable, TLS, not JSON, refused
                if time.monotonic() > deadline:
                    raise ChannelUnavailable(f"LauncherChannel {self.channel} unreadable for "
                                             f"{PRESENT_SECONDS:.0f}s: {error}") from None
                time.sleep(RETRY_SECONDS)
                continue
            break
        if data is not None:
            self._set(data)
        threading.Thread(target=self._watch, name="ahj-recovery-watch", daemon=True).start()
        return self.generation()

    def _set(self, data: dict[str, str]) -> None:
        with self.changed:
            self.data = data
            self.changed.notify_all()

    def _watch(self) -> None:
        """Keeps `data` current: a watch on the one channel, started again after it ends or breaks."""
        version = ""
        while not self.closed:
            query = {"fieldSelector": f"metadata.name={self.channel}", "watch": "1",
                     "timeoutSeconds": str(WATCH_SECONDS)}
            if version:
                query["resourceVersion"] = version
            try:
                with self._open(urllib.request.Request(self._path(query)), WATCH_SECONDS + 30) as stream:
                    for line in stream:
                        event = json.loads(line)
                        kind, body = event.get("type"), event.get("object") or {}
                        if kind == "ERROR":  # e.g. 410 Gone: the version is too old; read afresh
                            version = ""
                            break
                        version = (body.get("metadata") or {}).get("resourceVersion") or version
                        if kind in ("ADDED", "MODIFIED"):
                            self._set(dict(body.get("data") or {}))
            except (OSError, ValueError, urllib.error.URLError) as error:
                if not self.closed:
                    self.log(f"recovery channel watch broke ({error}); watching again")
                version = ""
                time.sleep(RETRY_SECONDS)
                try:
                    data = self.read()
                    if data is not None:
                        self._set(data)
                except (OSError, ValueError, urllib.error.URLError, ChannelUnavailable):
                    pass

    def close(self) -> None:
        self.closed = True
        with self.changed:
            self.changed.notify_all()

    # -- what the operator and pod 0 say -------------------------------------------------------------------------
    def generation(self) -> int:
        try:
            return int(self.data.get(GENERATION_KEY) or 0)
        except ValueError:
            return 0

    def world(self) -> dict | None:
        """The world the operator wrote beside the generation (None when there is none, or it is unreadable)."""
        try:
            world = json.loads(self.data.get(WORLD_KEY) or "null")
        except ValueError:
            return None
        return world if isinstance(world, dict) and isinstance(world.get("pods"), dict) else None

    def checkpoint_interval(self) -> str | None:
        """The operator's checkpoint interval (JSON), for a job whose everySteps is auto."""
        return self.data.get(CHECKPOINT_KEY)

    def report_of(self, pod_name: str) -> dict:
        try:
            report = json.loads(self.data.get(pod_name) or "{}")
        except ValueError:
            return {}
        return report if isinstance(report, dict) else {}

    def wait(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Blocks until `predicate()` holds on the latest data, the timeout passes, or the channel closes."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while not predicate() and not self.closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.changed.wait(min(left, 0.5))
        return predicate()

    # -- this pod's report -----------------------------------------------------------------------------------------
    def report(self, state: str, generation: int, **fields) -> bool:
        """Writes this pod's report (a merge patch of its one key of the channel the operator made); tried for a
        while, never raises: a report that cannot be written makes the operator's rung time out and escalate."""
        report = {"uid": self.pod_uid, "generation": generation, "state": state, "time": now_text(),
                  **{key: value for key, value in fields.items() if value is not None}}
        data = {self.pod_name: json.dumps(report, sort_keys=True)}
        for attempt in range(10):
            try:
                self._write(data)
                return True
            except (OSError, urllib.error.URLError) as error:
                self.log(f"report {state} of generation {generation} not written ({error}); trying again")
                time.sleep(min(RETRY_SECONDS * 2 ** attempt, 5.0))
        return False

    def _write(self, data: dict[str, str]) -> None:
        """A merge patch of `data` into the channel: this pod's own key, nothing else."""
        query = urllib.parse.urlencode({"fieldManager": FIELD_MANAGER})
        request = urllib.request.Request(f"{self._path()}?{query}", data=json.dumps({"data": data}).encode(),
                                         method="PATCH", headers={"Content-Type": "application/merge-patch+json"})
        with self._open(request, REQUEST_TIMEOUT_SECONDS):
            pass
