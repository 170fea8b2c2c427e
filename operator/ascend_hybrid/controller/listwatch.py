"""List + watch of one resource into a store, as client-go's reflector does: list with a resourceVersion, then watch
with bookmarks from it. A watch the apiserver ends is resumed from the last resourceVersion it showed (bookmarks keep
that recent); "410 Gone" (too old) lists again; any other error is logged, counted and retried with backoff.
The operator runs one per scope for pods (podwatch.PodStore) and one each for Nodes and the device plugin's
ConfigMaps (clusterwatch.NamedStore)."""

from __future__ import annotations

import logging
import threading

import urllib3
from kubernetes.client.exceptions import ApiException

from ascend_hybrid.controller import metrics

log = logging.getLogger(__name__)
BACKOFF_SECONDS = (0.5, 1, 2, 5, 10, 30)
SYNC_TIMEOUT_SECONDS = 60.0


class Gone(Exception):
    """The resourceVersion is too old to watch from (410): list again."""


class ListWatch:
    """list + watch of one resource in one scope into a store (PodStore, NamedStore), on a thread of its own
    (`watch_forever` is its loop)."""

    def __init__(self, kube, store, namespace: str | None = None, *, resource: str = "pods",
                 label_selector: str | None = None, timeout_seconds: int = 300, page_size: int = 500,
                 stop: threading.Event | None = None, backoff: tuple[float, ...] = BACKOFF_SECONDS):
        self.kube, self.store, self.namespace = kube, store, namespace
        self.resource, self.label_selector = resource, label_selector
        self.timeout_seconds, self.page_size, self.backoff = timeout_seconds, page_size, backoff
        self.stop = stop or threading.Event()

    @property
    def scope(self) -> str:
        return f"{self.resource} in {self.namespace or 'every namespace'}"

    def watch_forever(self) -> None:
        resource_version, failures = None, 0
        while not self.stop.is_set():
            try:
                if resource_version is None:
                    resource_version = self.relist()
                resource_version = self.follow(resource_version)
                failures = 0
                continue
            except Gone:
                metrics.POD_WATCH_RESTARTS.labels(reason="gone").inc()
                log.info("watch (%s): resourceVersion %s is too old; listing again", self.scope, resource_version)
                resource_version = None
                continue
            except ApiException as error:
                if error.status == 410:
                    metrics.POD_WATCH_RESTARTS.labels(reason="gone").inc()
                    resource_version = None
                    continue
                reason = f"HTTP {error.status} {error.reason}"
            except (urllib3.exceptions.HTTPError, OSError, ValueError) as error:  # connection lost, bad JSON
                reason = f"{type(error).__name__}: {error}"
            except Exception as error:  # a dead watch thread would leave the store stale for good
                log.exception("watch (%s): unexpected error", self.scope)
                reason = f"{type(error).__name__}: {error}"
            wait = self.backoff[min(failures, len(self.backoff) - 1)]
            failures += 1
            metrics.POD_WATCH_RESTARTS.labels(reason="error").inc()
            log.warning("watch (%s): %s; watching again in %.1fs", self.scope, reason, wait)
            self.stop.wait(wait)

    def relist(self) -> str:
        """Every object of the scope, page by page (a page's full objects are dropped once projected)."""
        items: list[dict] = []
        token = None
        while True:
            page = self.kube.list_page(self.resource, self.namespace, self.page_size, token, self.label_selector)
            projected = (self.store.project(item) for item in page.get("items") or ())
            items += [item for item in projected if item is not None]
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                self.store.replace(self.namespace, items, self)
                return page["metadata"]["resourceVersion"]

    def follow(self, resource_version: str) -> str:
        """Applies the watch's events until the apiserver ends it; returns the last resourceVersion seen."""
        for event in self.kube.watch(self.resource, self.namespace, resource_version, self.timeout_seconds,
                                     self.label_selector):
            kind, item = event.get("type"), event.get("object") or {}
            if kind == "ERROR":
                if item.get("code") == 410:
                    raise Gone(item.get("message"))
                raise ValueError(f"watch error {item.get('code')}: {item.get('message')}")
            resource_version = (item.get("metadata") or {}).get("resourceVersion") or resource_version
            if kind != "BOOKMARK":
                self.store.apply(kind, item)
            if self.stop.is_set():
                break
        return resource_version
