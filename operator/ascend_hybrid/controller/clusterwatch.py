"""The cluster objects placement reads, watched by the operator itself like its pods (listwatch.ListWatch): Nodes,
the deviceinfo ConfigMaps of MindCluster's device plugin, and its DaemonSets (which tell each node's plugin mode).

kopf indexed them before. Until every index is complete kopf gives each new object a readiness toggle, and each
toggle wakes every worker still waiting: on 4 096 nodes and their 4 096 ConfigMaps its start took minutes of the
operator's CPU before any job was looked at. Here a list is one request a page, and the workers wait for it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from ascend_hybrid.contracts.ascend import parse_deviceinfo, plugin_daemonset
from ascend_hybrid.contracts.podview import ready_condition
from ascend_hybrid.controller.listwatch import SYNC_TIMEOUT_SECONDS
from ascend_hybrid.controller.roles import ClusterListener

Change = Callable[[str, dict | None, dict | None], None]
T = TypeVar("T")


class NamedStore:
    """Cluster-scoped objects by name as the watch shows them, without managedFields (half of a node; unread)."""

    def __init__(self, on_change: Change | None = None, sources: int = 1):
        self.on_change = on_change
        self._lock = threading.Lock()
        self._objects: dict[str, dict] = {}
        self._sources = sources
        self._listed: set[object] = set()  # the sources that have listed
        self._synced = threading.Event()
        if sources == 0:
            self._synced.set()  # nothing to watch in this scope: empty, and complete
        self._version = 0  # counts changes: what derived() keeps is good while it stays
        self._derived: dict[str, tuple[int, Any]] = {}

    def values(self) -> list[dict]:
        if not self._synced.wait(SYNC_TIMEOUT_SECONDS):
            raise RuntimeError(f"not listed after {SYNC_TIMEOUT_SECONDS:g} s (see the watch's errors)")
        with self._lock:
            return list(self._objects.values())

    def derived(self, name: str, build: Callable[[list[dict]], T]) -> T:
        """`build(values())`, kept until the store changes: every pass of every job reads every node (
        1 000 nodes and their deviceinfo rebuilt into dicts per pass were 14 % of the operator's samples).
        Callers must not mutate it."""
        with self._lock:
            version, kept = self._version, self._derived.get(name)
        if kept is not None and kept[0] == version:
            return kept[1]
        value = build(self.values())  # read after `version`: a change meanwhile makes the next call build again
        with self._lock:
            self._derived[name] = (version, value)
        return value

    @staticmethod
    def project(item: dict) -> dict:
        metadata = item.get("metadata") or {}
        if "managedFields" not in metadata:
            return item
        return {**item, "metadata": {key: value for key, value in metadata.items() if key != "managedFields"}}

    def apply(self, event_type: str, item: dict) -> None:
        projected = self.project(item)
        name = projected["metadata"]["name"]
        with self._lock:
            old = self._objects.pop(name, None)
            if event_type != "DELETED":
                self._objects[name] = projected
            self._version += 1
        self._notify([(name, old, None if event_type == "DELETED" else projected)])

    def replace(self, scope: str | None, items: list[dict], source: object) -> None:
        fresh = {item["metadata"]["name"]: item for item in items}
        with self._lock:
            changes: list[tuple[str, dict | None, dict | None]] = [
                (name, old, fresh.get(name)) for name, old in self._objects.items() if name not in fresh]
            changes += [(name, self._objects.get(name), item) for name, item in fresh.items()]
            self._objects = fresh
            self._version += 1
            self._listed.add(source)
            if len(self._listed) >= self._sources:
                self._synced.set()
        self._notify(changes)

    def _notify(self, changes) -> None:
        if self.on_change is None:
            return
        for name, old, new in changes:
            if old != new:
                self.on_change(name, old, new)


def node_signature(node: dict | None) -> tuple | None:
    """What placement and failure handling read of a node (not its heartbeats)."""
    if node is None:
        return None
    status, spec = node.get("status") or {}, node.get("spec") or {}
    return ((ready_condition(node) or {}).get("status"), spec.get("unschedulable"), repr(spec.get("taints")),
            repr(status.get("allocatable")), repr(dict((node.get("metadata") or {}).get("labels") or {})))


def node_reaction(controller: ClusterListener) -> Change:
    """A node changed what placement reads: the waiting jobs try again; not Ready: every job looks (its pods)."""
    def changed(name: str, old: dict | None, new: dict | None) -> None:
        if node_signature(old) == node_signature(new):
            return
        controller.wake_pending()
        if (ready_condition(new or old) or {}).get("status") != "True":
            controller.wake_all()
    return changed


def device_reaction(controller: ClusterListener) -> Change:
    """A node's chip health changed: a waiting job may fit now, and a running gang may hold a chip that broke
    (ChipUnhealthy). The device plugin rewrites its ConfigMap with every UpdateTime: only the unusable chips count."""
    def unusable(item: dict | None) -> frozenset[int] | None:
        info = None if item is None else parse_deviceinfo(item)
        return None if info is None else info.unusable

    def changed(name: str, old: dict | None, new: dict | None) -> None:
        before, after = unusable(old), unusable(new)
        if before == after:
            return
        controller.wake_pending()
        if after:
            controller.wake_all()
    return changed


def plugin_reaction(controller: ClusterListener) -> Change:
    """A device-plugin DaemonSet changed its mode or its nodes: the waiting jobs try again (a node may take them
    now, or no longer)."""
    def changed(name: str, old: dict | None, new: dict | None) -> None:
        if (old and plugin_daemonset(old)) != (new and plugin_daemonset(new)):
            controller.wake_pending()
    return changed
