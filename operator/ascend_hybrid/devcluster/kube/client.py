"""The simulation's thin layer over the Kubernetes client: clients from a kubeconfig file, retries with backoff,
raw JSON lists (the client's model deserialisation costs ~1 ms an object), and idempotent creates."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from typing import TypeVar

import urllib3
from kubernetes import client, config
from kubernetes.client.rest import ApiException

T = TypeVar("T")
RETRYABLE_STATUS = {429, 500, 502, 503, 504}


def api_client(kubeconfig: str) -> client.ApiClient:
    api = config.new_client_from_config(config_file=str(kubeconfig))
    # Large clusters: many concurrent requests from the plugin's patch pool and the node creator.
    api.rest_client.pool_manager.connection_pool_kw["maxsize"] = 32
    return api


def is_retryable(error: BaseException) -> bool:
    if isinstance(error, ApiException):
        return error.status in RETRYABLE_STATUS or error.status == 0
    return isinstance(error, (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError))


def backoff_delays(first: float = 0.1, factor: float = 2.0, cap: float = 5.0):
    """Exponential delays with jitter, forever; callers bound them by a deadline."""
    delay = first
    while True:
        yield delay * random.uniform(0.5, 1.0)
        delay = min(cap, delay * factor)


def with_retries(call: Callable[[], T], what: str, timeout: float = 60.0) -> T:
    """Runs call(), retrying transient API and connection errors with backoff until `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    for delay in backoff_delays():
        try:
            return call()
        except Exception as error:
            if not is_retryable(error) or time.monotonic() + delay > deadline:
                raise RuntimeError(f"{what}: {describe(error)}") from error
            time.sleep(delay)
    raise AssertionError("unreachable")


def describe(error: BaseException) -> str:
    """One line for an API error: status and the server's message rather than the whole HTTP dump."""
    if isinstance(error, ApiException):
        try:
            message = json.loads(error.body or "{}").get("message")
        except ValueError:
            message = None
        return f"{error.status} {error.reason}: {message or (error.body or '').strip()[:200]}"
    lines = str(error).strip().splitlines() or [""]
    more = f" (+{len(lines) - 1} more lines)" if len(lines) > 1 else ""
    return f"{type(error).__name__}: {lines[0]}{more}"


def raw_list(list_call: Callable, **params) -> dict:
    """A list as plain JSON (items, metadata.resourceVersion), paging through large results."""
    items: list[dict] = []
    token = None
    while True:
        page_params = dict(params, limit=500, _preload_content=False)
        if token:
            page_params["_continue"] = token
        response = list_call(**page_params)
        page = json.loads(response.data)
        items.extend(page.get("items") or [])
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            page["items"] = items
            return page


def read_raw(read_call: Callable, *args) -> dict:
    """One object as plain JSON, with retries."""
    response = with_retries(lambda: read_call(*args, _preload_content=False), f"read {' '.join(map(str, args))}")
    return json.loads(response.data)


def create_if_absent(create_call: Callable[[], object], what: str) -> bool:
    """Creates an object; True when created, False when it already existed (so `up` never resets state)."""
    try:
        with_retries(create_call, f"create {what}")
        return True
    except RuntimeError as error:
        cause = error.__cause__
        if isinstance(cause, ApiException) and cause.status == 409:
            return False
        raise
