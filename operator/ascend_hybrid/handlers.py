"""The only kopf decorators of the operator. Each handler is plain `def` and only indexes or enqueues:
all reconcile work happens in `controller.Controller`'s worker threads.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

import kopf

from . import names
from .api import GROUP, PLURAL, VERSION
from .controller import DEVICE_INFO_LABEL, Controller, JobKey, Snapshot
from .kube import plain
from .topology import RESOURCE

SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"
CONTROLLER: Controller | None = None
_indexes: dict[str, Any] = {}
_indexes_bound = threading.Event()
_node_signatures: dict[str, tuple] = {}


def _copy(index_name: str, key=None) -> list[dict]:
    """Copies an index (or one key of it); kopf mutates indexes on its loop thread while workers read them."""
    _indexes_bound.wait(timeout=30)
    index = _indexes.get(index_name)
    if index is None:
        return []
    for _ in range(5):
        try:
            if key is not None:
                return list(index.get(key, ()))
            return [value for store in list(index.values()) for value in store]
        except RuntimeError:  # "changed size during iteration": copy again
            continue
    return [value for store in list(index.values()) for value in store]


def snapshot() -> Snapshot:
    return Snapshot(nodes=lambda: _copy("ahj_nodes"), npu_pods=lambda: _copy("ahj_npu_pods"),
                    job_pods=lambda key: _copy("ahj_job_pods", key), device_infos=lambda: _copy("ahj_device_infos"))


def _bind(kwargs: dict) -> None:
    if not _indexes_bound.is_set():
        for name in ("ahj_nodes", "ahj_npu_pods", "ahj_job_pods", "ahj_device_infos"):
            _indexes[name] = kwargs[name]
        _indexes_bound.set()


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


def _holds_npu(spec, **_) -> bool:
    return any(RESOURCE in ((container.get("resources") or {}).get("limits") or {})
               or RESOURCE in ((container.get("resources") or {}).get("requests") or {})
               for container in (spec.get("containers") or []))


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_) -> None:
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = EventHandlersOnlyDiffBase(prefix=GROUP)
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 10
    settings.peering.standalone = True
    settings.execution.max_workers = 16


@kopf.on.login()
def login(**kwargs):
    """An explicit --kubeconfig (exported as KUBECONFIG) wins; in a pod, the ServiceAccount; else ~/.kube/config."""
    if not os.environ.get("KUBECONFIG") and os.path.exists(SERVICE_ACCOUNT_TOKEN):
        return kopf.login_with_service_account(**kwargs)
    return kopf.login_with_kubeconfig(**kwargs)


@kopf.on.cleanup()
def stop(**_) -> None:
    if CONTROLLER is not None:
        CONTROLLER.stop()


@kopf.index("nodes")
def ahj_nodes(name, body, **_):
    return {name: _indexed(body)}


@kopf.index("pods", when=_holds_npu)
def ahj_npu_pods(namespace, name, body, **_):
    return {(namespace, name): _indexed(body)}


@kopf.index("pods", labels={names.JOB_LABEL: kopf.PRESENT})
def ahj_job_pods(namespace, labels, body, **_):
    return {(namespace, labels[names.JOB_LABEL]): _indexed(body)}


@kopf.index("configmaps", labels={DEVICE_INFO_LABEL: "true"})
def ahj_device_infos(name, body, **_):
    return {name: plain(body)}


@kopf.on.event(GROUP, VERSION, PLURAL)
def job_changed(namespace, name, type, meta, **kwargs) -> None:
    _bind(kwargs)
    key: JobKey = (namespace, name)
    if type != "DELETED" and CONTROLLER.wrote_last(key, meta.get("resourceVersion")):
        return  # the echo of a status this process just wrote: the pass that wrote it has decided after it
    CONTROLLER.enqueue(key, delay=0.0)


@kopf.on.event("pods", labels={names.JOB_LABEL: kopf.PRESENT})
def job_pod_changed(namespace, labels, **kwargs) -> None:
    _bind(kwargs)
    CONTROLLER.enqueue((namespace, labels[names.JOB_LABEL]))


@kopf.on.event("pods", when=_holds_npu)
def npu_pod_changed(type, status, **kwargs) -> None:
    _bind(kwargs)
    if type == "DELETED" or (status or {}).get("phase") in ("Succeeded", "Failed"):
        CONTROLLER.wake_pending()


@kopf.on.event("nodes")
def node_changed(name, type, body, **kwargs) -> None:
    """Wakes jobs only when something placement or failure handling reads has changed (not on heartbeats)."""
    _bind(kwargs)
    status, spec = body.get("status") or {}, body.get("spec") or {}
    ready = next((c.get("status") for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    signature = (type == "DELETED", ready, spec.get("unschedulable"), repr(spec.get("taints")),
                 repr(status.get("allocatable")), repr(dict(body.get("metadata", {}).get("labels") or {})))
    if _node_signatures.get(name) == signature:
        return
    _node_signatures[name] = signature
    CONTROLLER.wake_pending()
    if ready != "True":
        CONTROLLER.wake_all()
