"""The only kopf decorators of the operator. Each handler is plain `def` and only indexes or enqueues: all
reconcile work happens in the `Controller`'s worker threads. Pods are not watched by kopf but by the operator's
own lean watch (podwatch.py), which keeps a projection of each pod and wakes the same passes.

The controller arrives through kopf's operator memo (`kopf.run(memo=…)`, set by `main.py`); the indexes are
handed to it by the startup handler `bind_indexes`. That is safe because kopf runs no resource handler before
every index is fully populated, and the workers only act on keys those handlers enqueue.
"""

from __future__ import annotations

import logging
import os

import kopf

from .. import backlog, names
from ..api import GROUP, PLURAL, VERSION
from ..ascend import DEVICEINFO_LABEL, parse_deviceinfo
from ..podview import ready_condition
from .reconciler import Controller, Indexes, JobKey

SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"
COPY_RETRIES = 5


def _copy(index, key=None) -> list[dict]:
    """Copies an index (or one key of it); kopf mutates indexes on its loop thread while workers read them."""
    for _ in range(COPY_RETRIES):
        try:
            if key is not None:
                return list(index.get(key, ()))
            return [value for store in list(index.values()) for value in store]
        except RuntimeError:  # "changed size during iteration": copy again
            continue
    raise RuntimeError(f"index kept changing during {COPY_RETRIES} copies")


def _indexed(body) -> dict:
    """An object as the indexes keep it: kopf's parse of the event, without metadata.managedFields.

    Not copied: kopf parses every event into new dicts and never writes to them, and nothing here writes to
    an indexed object (planning is pure). A JSON round-trip per event was an eighth of the operator's CPU while
    a 128-pod gang started; managedFields are about half of a pod and nothing here reads them."""
    indexed = dict(body)
    metadata = indexed.get("metadata")
    if isinstance(metadata, dict) and "managedFields" in metadata:
        indexed["metadata"] = {key: value for key, value in metadata.items() if key != "managedFields"}
    return indexed


class EventHandlersOnlyDiffBase(kopf.AnnotationsDiffBaseStorage):
    """kopf builds a diff base for every event of every watched kind by deep-copying the whole object, but only
    changing handlers (on.create/update/delete/resume/field) read it. This operator has none: it reacts to
    events and reconciles desired against observed state. So the essence stays empty, which removes a tenth
    of the operator's CPU under load. A changing handler would need kopf's own storage back: a test fails
    when one is registered."""

    def build(self, *, body, extra_fields=None) -> kopf.BodyEssence:
        return kopf.BodyEssence()


def controller_of(memo) -> Controller:
    return memo.controller


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo, **_) -> None:
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = EventHandlersOnlyDiffBase(prefix=GROUP)
    settings.posting.level = logging.WARNING
    # A watch ends after `server_timeout` (the apiserver closes it; kopf watches again from its resourceVersion),
    # and a connection that went silent is given up after `client_timeout` (then kopf relists).
    watch_seconds = controller_of(memo).settings.watch_timeout_seconds
    settings.watching.server_timeout = watch_seconds
    settings.watching.client_timeout = watch_seconds + max(5, watch_seconds // 10)
    settings.watching.connect_timeout = 10
    settings.peering.standalone = True
    settings.execution.max_workers = 16


@kopf.on.startup()
def bind_indexes(memo, ahj_nodes, ahj_device_infos, ahj_jobs, **_) -> None:
    """kopf's indexes, and the pods of the operator's own watch (memo.pods: podwatch.PodStore, started by main)."""
    controller_of(memo).indexes = Indexes(
        nodes=lambda: _copy(ahj_nodes), npu_pods=memo.pods.npu_pods, job_pods=memo.pods.job_pods,
        device_infos=lambda: _copy(ahj_device_infos), jobs=lambda: _copy(ahj_jobs))


@kopf.on.login()
def login(**kwargs):
    """An explicit --kubeconfig (exported as KUBECONFIG) wins; in a pod, the ServiceAccount; else ~/.kube/config.
    In a pod the apiserver is KUBERNETES_SERVICE_HOST:PORT, as client-go's in-cluster config and Kube (the
    client's load_incluster_config) find it: kopf's login_with_service_account would use
    https://kubernetes.default.svc, which only resolves where the pod has cluster DNS."""
    if not os.environ.get("KUBECONFIG") and os.path.exists(SERVICE_ACCOUNT_TOKEN):
        return kopf.login_via_client(**kwargs)
    return kopf.login_with_kubeconfig(**kwargs)


@kopf.on.cleanup()
def stop(memo, **_) -> None:
    controller_of(memo).stop()


@kopf.index("nodes")
def ahj_nodes(name, body, **_):
    return {name: _indexed(body)}


@kopf.index("configmaps", labels={DEVICEINFO_LABEL: "true"})
def ahj_device_infos(name, body, **_):
    return {name: _indexed(body)}


@kopf.index(GROUP, VERSION, PLURAL)
def ahj_jobs(namespace, name, body, **_):
    """Each job's placement as its status holds it (backlog.Entry): chips promised to pods not created yet."""
    return {(namespace, name): backlog.entry(body)}


@kopf.on.event(GROUP, VERSION, PLURAL)
def job_changed(namespace, name, type, meta, memo, **_) -> None:
    key: JobKey = (namespace, name)
    controller_of(memo).job_changed(key, meta.get("resourceVersion"), deleted=type == "DELETED")


@kopf.on.event("configmaps", labels={names.JOB_LABEL: kopf.PRESENT})
def job_config_map_changed(namespace, name, labels, type, body, memo, **_) -> None:
    """A child changed or went (a user deleted it, a rival rewrote the rank table): the job's next pass repairs it."""
    controller_of(memo).child_changed((namespace, labels[names.JOB_LABEL]), "ConfigMap", name, type, body)


@kopf.on.event("services", labels={names.JOB_LABEL: kopf.PRESENT})
def job_service_changed(namespace, name, labels, type, body, memo, **_) -> None:
    controller_of(memo).child_changed((namespace, labels[names.JOB_LABEL]), "Service", name, type, body)


@kopf.on.event("nodes")
def node_changed(name, type, body, memo, **_) -> None:
    """Wakes jobs only when something placement or failure handling reads has changed (not on heartbeats)."""
    controller = controller_of(memo)
    status, spec = body.get("status") or {}, body.get("spec") or {}
    ready = (ready_condition(body) or {}).get("status")
    signature = (type == "DELETED", ready, spec.get("unschedulable"), repr(spec.get("taints")),
                 repr(status.get("allocatable")), repr(dict(body.get("metadata", {}).get("labels") or {})))
    if memo.node_signatures.get(name) == signature:
        return
    memo.node_signatures[name] = signature
    controller.wake_pending()
    if ready != "True":
        controller.wake_all()


@kopf.on.event("configmaps", labels={DEVICEINFO_LABEL: "true"})
def device_info_changed(name, type, body, memo, **_) -> None:
    """A node's chip health changed: a waiting job may fit now, and a running gang may hold a chip that broke
    (ChipUnhealthy). The device plugin rewrites its ConfigMap with every UpdateTime: only the unusable chips count."""
    info = None if type == "DELETED" else parse_deviceinfo(body)
    signature = (type == "DELETED", tuple(sorted(info.unusable)) if info else ())
    signatures = memo.setdefault("device_signatures", {})
    if signatures.get(name) == signature:
        return
    signatures[name] = signature
    controller = controller_of(memo)
    controller.wake_pending()
    if info is not None and info.unusable:
        controller.wake_all()
