"""A minimal list-then-watch loop over raw JSON objects.

The client's Watch(deserialize=False) neither tracks resourceVersion nor survives an expired watch, so the
simulation runs its own: list (→ on_sync), watch from that resourceVersion (→ on_event), relist when the server
answers 410 Gone, back off on any other error. It never returns until `stop` is set.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from kubernetes.watch.watch import iter_resp_lines

from ascend_hybrid.devcluster.kube.client import backoff_delays, describe, raw_list

WATCH_SECONDS = 120


class _Expired(Exception):
    pass


def run_informer(list_call: Callable, *, name: str, on_sync: Callable[[list[dict]], None],
                 on_event: Callable[[str, dict], None], stop: threading.Event, log: Callable[[str], None],
                 **params) -> None:
    delays = backoff_delays(first=0.2, cap=10.0)
    while not stop.is_set():
        try:
            listing = raw_list(list_call, **params)
            resource_version = listing["metadata"]["resourceVersion"]
            on_sync(listing["items"])
            delays = backoff_delays(first=0.2, cap=10.0)
            while not stop.is_set():
                resource_version = _watch_once(list_call, resource_version, on_event, stop, params)
        except _Expired:
            log(f"{name}: watch expired, relisting")
        except Exception as error:  # noqa: BLE001 - the loop must outlive any API hiccup
            delay = next(delays)
            log(f"{name}: {describe(error)}; retrying in {delay:.1f}s")
            stop.wait(delay)


def _watch_once(list_call: Callable, resource_version: str, on_event, stop: threading.Event, params) -> str:
    response = list_call(watch=True, resource_version=resource_version, allow_watch_bookmarks=True,
                         timeout_seconds=WATCH_SECONDS, _preload_content=False,
                         _request_timeout=(5, WATCH_SECONDS + 30), **params)
    try:
        for line in iter_resp_lines(response):
            if stop.is_set():
                break
            event = json.loads(line)
            kind, obj = event.get("type"), event.get("object") or {}
            if kind == "ERROR":
                if obj.get("code") == 410:
                    raise _Expired()
                raise RuntimeError(f"watch error {obj.get('code')}: {obj.get('message')}")
            resource_version = (obj.get("metadata") or {}).get("resourceVersion") or resource_version
            if kind != "BOOKMARK":
                on_event(kind, obj)
    finally:
        response.close()
        response.release_conn()
    return resource_version


@dataclass(frozen=True)
class Source:
    """One informer: what to list and watch, and what to call with the first list and each later event."""

    name: str
    list_call: Callable
    on_sync: Callable[[list[dict]], None]
    on_event: Callable[[str, dict], None]
    params: Mapping = field(default_factory=dict)


def start_informers(sources: Iterable[Source], stop: threading.Event,
                    log: Callable[[str], None]) -> list[threading.Event]:
    """One daemon thread per source; each returned event is set once its source's first list was handled."""
    synced = []
    for source in sources:
        done = threading.Event()
        synced.append(done)

        def first_sync_then(items, on_sync=source.on_sync, done=done):
            on_sync(items)
            done.set()
        threading.Thread(target=run_informer, name=source.name, daemon=True, kwargs=dict(
            list_call=source.list_call, name=source.name, on_sync=first_sync_then, on_event=source.on_event,
            stop=stop, log=log, **source.params)).start()
    return synced


def wait_synced(synced: Iterable[threading.Event], stop: threading.Event) -> bool:
    """Until every first list is in; False when `stop` came first."""
    synced = list(synced)
    while not stop.is_set() and not all(event.is_set() for event in synced):
        stop.wait(0.1)
    return not stop.is_set()
