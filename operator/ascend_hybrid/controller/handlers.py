"""The only kopf decorators of the operator. Each handler is plain `def` and only indexes or enqueues: all
reconcile work happens in the `Controller`'s worker threads. Pods are not watched by kopf but by the operator's
own lean watch (podwatch.py), which keeps a projection of each pod and wakes the same passes; nodes and
deviceinfo ConfigMaps by the same watch (clusterwatch.py).

The controller arrives through kopf's operator memo (`kopf.run(memo=…)`, set by `main.py`); the indexes are
handed to it by the startup handler `bind_indexes`. That is safe because kopf runs no resource handler before
every index is fully populated, and the workers only act on keys those handlers enqueue.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

import kopf

from ascend_hybrid.contracts import names
from ascend_hybrid.contracts.ascend import device_infos_by_node, device_plugins
from ascend_hybrid.contracts.names import GROUP
from ascend_hybrid.controller.loop import Controller, Indexes, JobKey
from ascend_hybrid.controller.records import nodes_by_name
from ascend_hybrid.gang import backlog
from ascend_hybrid.spec.api import CHANNEL_KIND, CHANNEL_PLURAL, PLURAL, VERSION

SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"
COPY_RETRIES = 5
T = TypeVar("T")


def _copy(index: Mapping[Any, Iterable[T]], key: Any = None) -> list[T]:
    """Copies an index (or one key of it); kopf mutates indexes on its loop thread while workers read them."""
    for _ in range(COPY_RETRIES):
        try:
            if key is not None:
                return list(index.get(key, ()))
            return [value for store in list(index.values()) for value in store]
        except RuntimeError:  # "changed size during iteration": copy again
            continue
    raise RuntimeError(f"index kept changing during {COPY_RETRIES} copies")


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


# kopf passes each index by its name (ahj_jobs) as a keyword argument; its ActivityFn protocol cannot name it
@kopf.on.startup()  # type: ignore[arg-type]
def bind_indexes(memo, ahj_jobs, **_) -> None:
    """kopf's job index, and the stores of the operator's own watches, started by main: memo.pods
    (podwatch.PodStore), memo.nodes, memo.device_infos and memo.daemonsets (clusterwatch.NamedStore)."""
    controller = controller_of(memo)
    mode = controller.settings.device_plugin_mode
    forced = None if mode == "auto" else mode
    controller.indexes = Indexes(
        nodes=memo.nodes.values, npu_pods=memo.pods.npu_pods, job_pods=memo.pods.job_pods,
        device_infos=memo.device_infos.values, jobs=lambda: _copy(ahj_jobs), evicted_pods=memo.pods.evicted_pods,
        node_map=lambda: memo.nodes.derived("by name", nodes_by_name),
        device_info_map=lambda: memo.device_infos.derived("by node", device_infos_by_node),
        device_plugins=lambda: memo.daemonsets.derived("plugins", lambda items: device_plugins(items, forced)))


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


@kopf.index(GROUP, VERSION, PLURAL)
def ahj_jobs(namespace, name, body, **_):
    """Each job's placement as its status holds it (backlog.Entry): chips promised to pods not created yet."""
    return {(namespace, name): backlog.entry(body)}


@kopf.on.event(GROUP, VERSION, PLURAL)
def job_changed(namespace, name, type, meta, body, memo, **_) -> None:
    key: JobKey = (namespace, name)
    controller_of(memo).job_changed(key, meta.get("resourceVersion"), deleted=type == "DELETED", body=body)


@kopf.on.event("configmaps", labels={names.JOB_LABEL: kopf.PRESENT})
def job_config_map_changed(namespace, name, labels, type, body, memo, **_) -> None:
    """A child changed or went (a user deleted it, a rival rewrote the rank table): the job's next pass repairs it."""
    controller_of(memo).child_changed((namespace, labels[names.JOB_LABEL]), "ConfigMap", name, type, body)


@kopf.on.event(GROUP, VERSION, CHANNEL_PLURAL, labels={names.JOB_LABEL: kopf.PRESENT})
def launcher_channel_changed(namespace, name, labels, type, body, memo, **_) -> None:
    """A launcher reported (or the channel went): the job's next pass reads it (children.py)."""
    controller_of(memo).child_changed((namespace, labels[names.JOB_LABEL]), CHANNEL_KIND, name, type, body)


@kopf.on.event("services", labels={names.JOB_LABEL: kopf.PRESENT})
def job_service_changed(namespace, name, labels, type, body, memo, **_) -> None:
    controller_of(memo).child_changed((namespace, labels[names.JOB_LABEL]), "Service", name, type, body)
