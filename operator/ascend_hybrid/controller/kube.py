"""The only module of the operator that talks to the Kubernetes API.

Blocking calls of the official client, made from worker threads (never from the event loop). Transient
errors (409 on updates, 429, 5xx, connection resets) are retried with exponential backoff; the rest raise, a
refusal no retry can fix (400, 403, 422) as `Refused`, which names the call. With leader election on, `fence`
is checked before every attempt of every mutating call: a replica that is not leading writes nothing.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, TypedDict, TypeVar, cast

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from ascend_hybrid.contracts import kueue, names, volcano
from ascend_hybrid.contracts.podview import holds_npus, project_pod
from ascend_hybrid.controller.metrics import API_CALLS
from ascend_hybrid.controller.refused import Refused, is_refusal
from ascend_hybrid.spec import api

log = logging.getLogger(__name__)
T = TypeVar("T")

RETRIED_STATUSES = frozenset({409, 429, 500, 502, 503, 504})
MUTATING_VERBS = frozenset({"create", "apply", "patch", "update", "delete", "deletecollection"})
WATCH_CONNECTIONS = 4


class _ApplyOptions(TypedDict):
    field_manager: str
    force: bool
    _content_type: str


class _ListOptions(TypedDict, total=False):
    _continue: str
    label_selector: str


# typed, not a plain dict: its values unpacked into `_call` would otherwise be checked against `ok`
APPLY: _ApplyOptions = {"field_manager": names.FIELD_MANAGER, "force": True,
                        "_content_type": "application/apply-patch+yaml"}


def merge_patch(old: dict, new: dict) -> dict:
    """The JSON merge patch (RFC 7386) from `old` to `new`: changed keys, objects diffed key by key, dropped keys
    as null; lists are replaced whole."""
    patch: dict = {}
    for key in set(old) | set(new):
        before, after = old.get(key), new.get(key)
        if before == after:
            continue
        if isinstance(before, dict) and isinstance(after, dict):
            patch[key] = merge_patch(before, after)
        else:
            patch[key] = after
    return patch


# the fewest pods one collection delete of an attempt selects: below it, single calls cost more than they overlap
COLLECTION_CHUNK_MIN = 8


def collection_chunks(indexes: Sequence[int], parallel: int) -> list[tuple[int, ...]]:
    """An attempt's collection delete split into at most `parallel` calls of at least COLLECTION_CHUNK_MIN pods by
    index. The apiserver deletes the pods of one collection one after another (its --delete-collection-workers
    is 1 by default): one call for a 128-pod gang held the restart's pass 2 s, one for 2 048 pods would
    take about 30 s at that pace.
    No indexes (a pod without an index label): the whole attempt in one call."""
    if not indexes:
        return [()]
    size = max(COLLECTION_CHUNK_MIN, -(-len(indexes) // max(parallel, 1)))
    return [tuple(indexes[start:start + size]) for start in range(0, len(indexes), size)]


RESOURCES = {"ServiceAccount": "serviceaccounts", "Role": "roles", "RoleBinding": "rolebindings"}


class Kube:
    def __init__(self, api_client: client.ApiClient | None = None, *, attempts: int = 6,
                 first_backoff_seconds: float = 0.2, fence: Callable[[], None] | None = None):
        self.attempts, self.first_backoff_seconds = attempts, first_backoff_seconds
        self.fence = fence  # raises when this replica must not write (leader.LeaderElector.fence)
        self.client = api_client or client.ApiClient()
        self.core = client.CoreV1Api(self.client)
        self.custom = client.CustomObjectsApi(self.client)
        self.apps = client.AppsV1Api(self.client)
        self.extensions = client.ApiextensionsV1Api(self.client)
        self.networking = client.NetworkingV1Api(self.client)
        self.discovery = client.DiscoveryV1Api(self.client)
        self.rbac = client.RbacAuthorizationV1Api(self.client)

    @classmethod
    def from_environment(cls, kubeconfig: str | None = None, *, parallel_calls: int = 16, workers: int = 0,
                         **options) -> Kube:
        if kubeconfig:
            config.load_kube_config(config_file=kubeconfig)
        else:
            try:
                config.load_incluster_config()
            except config.ConfigException:
                config.load_kube_config()
        configuration = client.Configuration.get_default_copy()
        # one connection per concurrent pod call and per reconcile worker, plus the watches' long-lived ones
        # (listwatch.py): a pool smaller than that drops connections and pays a TLS handshake for each new one
        configuration.connection_pool_maxsize = parallel_calls + workers + WATCH_CONNECTIONS
        return cls(client.ApiClient(configuration), **options)

    def _call(self, verb: str, resource: str, fn: Callable[..., T], *args, ok: tuple[int, ...] = (), **kwargs) -> T | None:
        """One API call with retries; statuses in `ok` mean "already done" and return None."""
        delay = self.first_backoff_seconds
        for attempt in range(1, self.attempts + 1):
            if self.fence is not None and verb in MUTATING_VERBS:
                self.fence()
            API_CALLS.labels(verb=verb, resource=resource).inc()
            try:
                return fn(*args, **kwargs)
            except ApiException as error:
                if error.status in ok:
                    return None
                if is_refusal(error):
                    raise Refused(error, verb, resource, args, kwargs) from error
                if error.status not in RETRIED_STATUSES or attempt == self.attempts:
                    raise
                retry_after = (error.headers or {}).get("Retry-After") if error.headers else None
                wait = float(retry_after) if retry_after and retry_after.isdigit() else delay
                log.info("%s %s: %s %s; retry %d in %.1fs", verb, resource, error.status, error.reason, attempt, wait)
            except (urllib3.exceptions.HTTPError, ConnectionError) as error:
                if attempt == self.attempts:
                    raise
                wait = delay
                log.info("%s %s: %s; retry %d in %.1fs", verb, resource, error, attempt, wait)
            time.sleep(wait)
            delay = min(delay * 2, 5.0)
        raise AssertionError("unreachable")

    # -- the job ---------------------------------------------------------------------------------------------
    def missing_crd(self) -> str | None:
        """The first of the operator's CRDs (AscendHybridJob, LauncherChannel) the API does not serve; None when
        both are installed."""
        for plural in (api.PLURAL, api.CHANNEL_PLURAL):
            try:
                self.extensions.read_custom_resource_definition(f"{plural}.{names.GROUP}")
            except ApiException as error:
                if error.status == 404:
                    return f"{plural}.{names.GROUP}"
                raise
        return None

    def get_job(self, namespace: str, name: str) -> dict | None:
        return cast("dict | None", self._call("get", api.PLURAL, self.custom.get_namespaced_custom_object,
                                              names.GROUP, api.VERSION, namespace, api.PLURAL, name, ok=(404,)))

    def patch_job_status(self, namespace: str, name: str, old: dict, new: dict) -> dict | None:
        """Merge-patches the status; keys the new status dropped are sent as null so they really go, nested ones
        too (a merge patch merges objects: status.recovery without its `rung` would keep it otherwise)."""
        patch = merge_patch(old, new)
        if not patch:
            return None
        return cast("dict | None", self._call(
            "patch", f"{api.PLURAL}/status", self.custom.patch_namespaced_custom_object_status,
            names.GROUP, api.VERSION, namespace, api.PLURAL, name, {"status": patch}, ok=(404,)))

    def set_node_condition(self, name: str, condition: dict) -> None:
        """One condition of a Node's status (a strategic merge patch: the conditions merge by type)."""
        self._call("patch", "nodes/status", self.core.patch_node_status, name, {"status": {"conditions": [condition]}},
                   ok=(404,))

    def delete_job(self, namespace: str, name: str) -> None:
        self._call("delete", api.PLURAL, self.custom.delete_namespaced_custom_object,
                   names.GROUP, api.VERSION, namespace, api.PLURAL, name,
                   body=client.V1DeleteOptions(propagation_policy="Background"), ok=(404,))

    # -- children --------------------------------------------------------------------------------------------
    def apply(self, manifest: dict) -> dict:
        """Server-side apply of a Service, ConfigMap, EndpointSlice, NetworkPolicy, Role, RoleBinding or
        LauncherChannel with our field manager; returns the live object."""
        kind, meta = manifest["kind"], manifest["metadata"]
        if kind == api.CHANNEL_KIND:
            live = self._call(
                "apply", api.CHANNEL_PLURAL, self.custom.patch_namespaced_custom_object, names.GROUP, api.VERSION,
                meta["namespace"], api.CHANNEL_PLURAL, meta["name"], manifest, field_manager=names.FIELD_MANAGER,
                force=True, _content_type=APPLY["_content_type"])
            # The client decodes only a 200 of a custom object's patch: an apply that created the channel (201)
            # comes back as None. A new channel holds exactly what was applied.
            return manifest if live is None else cast(dict, live)
        patch = {"Service": self.core.patch_namespaced_service,
                 "ConfigMap": self.core.patch_namespaced_config_map,
                 "EndpointSlice": self.discovery.patch_namespaced_endpoint_slice,
                 "NetworkPolicy": self.networking.patch_namespaced_network_policy}[kind]
        result = self._call("apply", kind.lower() + "s", patch, meta["name"], meta["namespace"], manifest, **APPLY)
        return self.client.sanitize_for_serialization(result)

    def create(self, manifest: dict) -> None:
        """Creates a ServiceAccount, Role, RoleBinding or LauncherChannel of a job's launchers' grant; one that
        exists is left as it is (409): their names fix what they hold, so the operator never needs to change one,
        nor the right to."""
        kind, namespace = manifest["kind"], manifest["metadata"]["namespace"]
        if kind == api.CHANNEL_KIND:
            self._call("create", api.CHANNEL_PLURAL, self.custom.create_namespaced_custom_object, names.GROUP,
                       api.VERSION, namespace, api.CHANNEL_PLURAL, manifest, field_manager=names.FIELD_MANAGER,
                       ok=(409,))
            return
        create = cast(Callable[..., object], {"ServiceAccount": self.core.create_namespaced_service_account,
                                              "Role": self.rbac.create_namespaced_role,
                                              "RoleBinding": self.rbac.create_namespaced_role_binding}[kind])
        self._call("create", RESOURCES[kind], create, namespace, manifest, field_manager=names.FIELD_MANAGER,
                   ok=(409,))

    def delete_legacy_launcher_role(self, namespace: str) -> None:
        """The namespace-wide launcher Role of operators before per-job grants (names.LEGACY_LAUNCHER_ROLE); its
        RoleBindings then grant nothing. Gone already: fine."""
        self._call("delete", "roles", self.rbac.delete_namespaced_role, names.LEGACY_LAUNCHER_ROLE, namespace,
                   ok=(404,))

    def delete_controller_slices(self, namespace: str, service: str) -> None:
        """The EndpointSlices Kubernetes' controller wrote for `service` (one collection delete by their labels)."""
        selector = (f"kubernetes.io/service-name={service},"
                    "endpointslice.kubernetes.io/managed-by=endpointslice-controller.k8s.io")
        self._call("deletecollection", "endpointslices", self.discovery.delete_collection_namespaced_endpoint_slice,
                   namespace, label_selector=selector)

    def create_service(self, manifest: dict) -> None:
        """Creates a Service that must keep a given clusterIP (a deleted `<job>-sched` whose IP the pods' env holds);
        one that exists is fine. A create, not an apply: the IP is then not a field the later applies own."""
        self._call("create", "services", self.core.create_namespaced_service, manifest["metadata"]["namespace"],
                   manifest, field_manager=names.FIELD_MANAGER, ok=(409,))

    def read_launcher_channel(self, namespace: str, name: str) -> dict | None:
        return cast("dict | None", self._call("get", api.CHANNEL_PLURAL, self.custom.get_namespaced_custom_object,
                                              names.GROUP, api.VERSION, namespace, api.CHANNEL_PLURAL, name,
                                              ok=(404,)))

    def read_config_map(self, namespace: str, name: str) -> dict | None:
        result = self._call("get", "configmaps", self.core.read_namespaced_config_map, name, namespace, ok=(404,))
        return None if result is None else self.client.sanitize_for_serialization(result)

    def create_pod(self, manifest: dict) -> None:
        """Creates a pod; one that already exists (an earlier pass or operator process made it) is fine."""
        self._call("create", "pods", self._send, "POST", f"/api/v1/namespaces/{manifest['metadata']['namespace']}/pods",
                   manifest, query=[("fieldManager", names.FIELD_MANAGER)], ok=(409,))

    def remove_gate(self, namespace: str, name: str, gates: list[str]) -> None:
        """Removes the gang gate (one call): the scheduler may then bind the pod to the node its affinity names.

        The JSON patch first tests that the gates are still the ones observed, so a concurrent change makes it
        fail (422) instead of dropping someone else's gate; the next pass reads the pod again."""
        kept = [{"name": gate} for gate in gates if gate != names.GANG_GATE]
        patch = [{"op": "test", "path": "/spec/schedulingGates", "value": [{"name": gate} for gate in gates]},
                 {"op": "replace", "path": "/spec/schedulingGates", "value": kept}]
        self.patch_pod(namespace, name, patch)

    def patch_pod(self, namespace: str, name: str, patch: list[dict]) -> None:
        """A JSON patch the core computed (kueue.release_patch: pin and release); 422 = a test op failed, i.e.
        the pod changed since it was observed: the next pass reads it again."""
        self._call("patch", "pods", self._send, "PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}", patch,
                   content_type="application/json-patch+json", ok=(404, 422))

    def delete_pod(self, namespace: str, name: str, force: bool = False) -> None:
        """force: grace period 0, for a pod whose node is lost (its kubelet would never confirm the end)."""
        query = [("gracePeriodSeconds", "0")] if force else None
        self._call("delete", "pods", self._send, "DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}", ok=(404,),
                   query=query)

    def delete_attempt_pods(self, namespace: str, job: str, attempt: int, indexes: Sequence[int] = (),
                            force: bool = False) -> None:
        """The pods of one attempt of a job in one call (the job and attempt labels select them), only those of
        `indexes` when given (their index label)."""
        selector = f"{names.JOB_LABEL}={job},{names.ATTEMPT_LABEL}={attempt}"
        if indexes:
            selector += f",{names.POD_INDEX_LABEL} in ({','.join(str(index) for index in indexes)})"

        def delete() -> None:
            # the answer lists every deleted pod whole: read to its end (the connection goes back to the pool),
            # never turned into models nobody reads
            answer = self.core.delete_collection_namespaced_pod(
                namespace, label_selector=selector, grace_period_seconds=0 if force else None, _preload_content=False)
            cast(urllib3.HTTPResponse, answer).read()
        self._call("deletecollection", "pods", delete)

    def _send(self, method: str, path: str, body=None, *, content_type: str = "application/json",
              query: list[tuple[str, str]] | None = None) -> None:
        """A pod write past the client's models: they validate every field of a pod body (a third of the CPU of
        a pod's creation) and build a V1Pod of the answer, which nobody reads (the watch shows the pod). Errors
        raise the client's own ApiException."""
        request = self.client.param_serialize(method=method, resource_path=path, query_params=query or [],
                                              header_params={"Accept": "application/json", "Content-Type": content_type},
                                              body=body, auth_settings=["BearerToken"])
        response = self.client.call_api(*request)
        response.read()  # to its end: the connection goes back to the pool
        if not 200 <= response.status <= 299:
            raw = cast(bytes, response.data)  # read() above filled it (the client declares None until then)
            raise ApiException.from_response(http_resp=response, body=raw.decode(errors="replace"), data=None)

    # -- Kueue (queued jobs; the chart grants these with kueue.enabled) -----------------------------------------
    def get_workload(self, namespace: str, name: str) -> dict | None:
        """The Workload of a pod group; None when there is none (yet, or any more, or Kueue is not installed) and
        when RBAC forbids it (the pods' gates still tell admission; the Workload adds Kueue's message)."""
        try:
            return cast("dict | None", self._call("get", kueue.WORKLOADS, self.custom.get_namespaced_custom_object,
                                                  kueue.GROUP, kueue.WORKLOAD_VERSION, namespace, kueue.WORKLOADS, name,
                                                  ok=(404,)))
        except ApiException as error:
            if error.status != 403:
                raise
            _warn_once("cannot read Kueue Workloads (403): install the chart with kueue.enabled=true")
            return None

    def delete_workload(self, namespace: str, name: str) -> None:
        try:
            self._call("delete", kueue.WORKLOADS, self.custom.delete_namespaced_custom_object, kueue.GROUP,
                       kueue.WORKLOAD_VERSION, namespace, kueue.WORKLOADS, name, ok=(404,))
        except ApiException as error:
            if error.status != 403:
                raise
            _warn_once("cannot delete Kueue Workloads (403): install the chart with kueue.enabled=true")

    # -- Volcano (jobs it schedules; the chart grants these with volcano.enabled) -------------------------------
    def apply_podgroup(self, manifest: dict) -> None:
        """Server-side apply of an attempt's PodGroup (render.pod_group); an object that does not exist yet is
        created by the patch."""
        meta = manifest["metadata"]
        self._call("apply", volcano.PODGROUPS, self.custom.patch_namespaced_custom_object, volcano.GROUP,
                   volcano.VERSION, meta["namespace"], volcano.PODGROUPS, meta["name"], manifest,
                   field_manager=names.FIELD_MANAGER, force=True, _content_type=APPLY["_content_type"])

    def get_podgroup(self, namespace: str, name: str) -> dict | None:
        """The PodGroup; None when there is none (yet, or any more)."""
        return cast("dict | None", self._call("get", volcano.PODGROUPS, self.custom.get_namespaced_custom_object,
                                              volcano.GROUP, volcano.VERSION, namespace, volcano.PODGROUPS, name,
                                              ok=(404,)))

    def delete_podgroup(self, namespace: str, name: str) -> None:
        self._call("delete", volcano.PODGROUPS, self.custom.delete_namespaced_custom_object, volcano.GROUP,
                   volcano.VERSION, namespace, volcano.PODGROUPS, name, ok=(404,))

    # -- cluster-wide reads for placement when kopf watches only some namespaces -------------------------------
    def list_npu_pods(self) -> list[dict]:
        """Every non-terminal pod of the cluster that asks for NPUs (one list per placement, not per pass)."""
        # _preload_content=False: the raw response, not the model the client declares; without `ok`, never None
        answer = cast(urllib3.HTTPResponse, self._call(
            "list", "pods", self.core.list_pod_for_all_namespaces,
            field_selector="status.phase!=Succeeded,status.phase!=Failed", _preload_content=False))
        return [project_pod(pod) for pod in json.loads(answer.data)["items"] if holds_npus(pod.get("spec") or {})]

    def list_nodes(self) -> list[dict]:
        answer = cast(urllib3.HTTPResponse, self._call("list", "nodes", self.core.list_node, _preload_content=False))
        return json.loads(answer.data)["items"]

    def list_device_infos(self, namespace: str, label_selector: str) -> list[dict]:
        answer = cast(urllib3.HTTPResponse, self._call("list", "configmaps", self.core.list_namespaced_config_map,
                                                       namespace, label_selector=label_selector,
                                                       _preload_content=False))
        return json.loads(answer.data)["items"]

    # -- the watches (listwatch.py): raw JSON, never the client's models -------------------------------------------
    def _lister(self, resource: str, namespace: str | None) -> tuple[Callable[..., Any], tuple[str, ...]]:
        listers: dict[str, tuple[Callable[..., Any] | None, Callable[..., Any] | None]] = {
            "pods": (self.core.list_pod_for_all_namespaces, self.core.list_namespaced_pod),
            "nodes": (self.core.list_node, None),
            "configmaps": (None, self.core.list_namespaced_config_map),
            "daemonsets": (None, self.apps.list_namespaced_daemon_set)}
        cluster_wide, namespaced = listers[resource]
        # the watches (main.py) list nodes only cluster-wide, ConfigMaps and DaemonSets only in a namespace
        if namespace is None:
            return cast("Callable[..., Any]", cluster_wide), ()
        return cast("Callable[..., Any]", namespaced), (namespace,)

    def list_page(self, resource: str, namespace: str | None, limit: int, continue_token: str | None = None,
                  label_selector: str | None = None) -> dict:
        """One page of a list (every namespace when `namespace` is None) as parsed JSON: items, and
        metadata.resourceVersion / metadata.continue."""
        fn, args = self._lister(resource, namespace)
        extra: _ListOptions = {"_continue": continue_token} if continue_token else {}
        if label_selector:
            extra["label_selector"] = label_selector
        answer = cast(urllib3.HTTPResponse,  # _preload_content=False, no `ok`: the raw response, never None
                      self._call("list", resource, fn, *args, limit=limit, _preload_content=False, **extra))
        return json.loads(answer.data)

    def watch(self, resource: str, namespace: str | None, resource_version: str, timeout_seconds: int,
              label_selector: str | None = None) -> Iterator[dict]:
        """The events after `resource_version` (bookmarks included), each parsed as it arrives, until the
        apiserver ends the watch after `timeout_seconds`. A connection gone silent for longer raises."""
        fn, args = self._lister(resource, namespace)
        extra: _ListOptions = {"label_selector": label_selector} if label_selector else {}
        response = cast(urllib3.HTTPResponse, self._call(  # _preload_content=False, no `ok`: the raw response
            "watch", resource, fn, *args, watch=True, resource_version=resource_version,
            allow_watch_bookmarks=True, timeout_seconds=timeout_seconds, _preload_content=False,
            _request_timeout=(10, timeout_seconds + max(5, timeout_seconds // 10)), **extra))
        try:
            pending = b""
            for chunk in response.stream(amt=None, decode_content=False):
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    if line.strip():
                        yield json.loads(line)
        finally:  # a watch left mid-stream leaves unread bytes: its connection is closed, not reused
            response.close()
            response.release_conn()

    # -- events ----------------------------------------------------------------------------------------------
    def post_event(self, job: dict, event_type: str, reason: str, message: str) -> None:
        meta = job["metadata"]
        now = datetime.now(UTC)
        body = {
            "metadata": {"name": f"{meta['name']}.{now.strftime('%Y%m%d%H%M%S%f')}.{reason.lower()}"[:253],
                         "namespace": meta["namespace"]},
            "involvedObject": {"apiVersion": f"{names.GROUP}/{api.VERSION}", "kind": api.KIND, "name": meta["name"],
                               "namespace": meta["namespace"], "uid": meta["uid"],
                               "resourceVersion": meta.get("resourceVersion")},
            "reason": reason, "message": message[:1024], "type": event_type, "count": 1,
            "firstTimestamp": now.isoformat(), "lastTimestamp": now.isoformat(),
            "source": {"component": names.FIELD_MANAGER},
            "reportingComponent": names.FIELD_MANAGER, "reportingInstance": names.FIELD_MANAGER,
        }
        self._call("create", "events", self.core.create_namespaced_event, meta["namespace"], body, ok=(409,))


_warned: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        log.warning(message)


def service_ip(service: dict | None) -> str | None:
    ip = ((service or {}).get("spec") or {}).get("clusterIP")
    return ip if ip and ip != "None" else None
