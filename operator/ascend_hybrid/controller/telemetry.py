"""Where `status.training` and `status.utilization` come from: every running job's progress and NPU utilization,
read over HTTP every --telemetry-interval seconds — from Prometheus when --prometheus-url is set, else from the
trainer pods' own :9400 endpoints — and offered to the job's next reconcile pass (`progress.py` turns a Sample
into status). Never raises: an unreachable source gives a Sample with `error`."""

from __future__ import annotations

import json
import math
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import cast

from ascend_hybrid.contracts import names
from ascend_hybrid.contracts.podview import attempt_of, pod_index
from ascend_hybrid.monitoring.progress import (
    Sample,
    from_prometheus,
    from_trainer_text,
    prometheus_queries,
    prometheus_vector_queries,
)


def literal(name: str) -> str:
    """A pod name as a PromQL regex (RE2 inside a string literal, where a backslash would need escaping too)."""
    return name.replace(".", "[.]")


def pod_selection(job: str, attempt: int, pods: list[dict]) -> tuple[str, str]:
    """(the PromQL regex of the attempt's pod names, pod 0's name). The attempt's pods are named by it, but for
    those an elastic shrink kept (made in an earlier attempt): their names are listed then."""
    prefix = names.pod_name(job, attempt, 0)[:-1]
    named = {pod_index(pod): pod["metadata"]["name"] for pod in pods}
    first = named.get(0) or f"{prefix}0"
    others = sorted(literal(name) for name in named.values() if not name.startswith(prefix))
    regex = f"{literal(prefix)}[0-9]+"
    return (f"{regex}|{'|'.join(others)}" if others else regex), first


class TelemetrySource:
    def __init__(self, prometheus_url: str | None = None, trainer_port: int = names.METRICS_PORT,
                 timeout_seconds: float = 3.0):
        self.prometheus_url = prometheus_url.rstrip("/") if prometheus_url else None
        self.trainer_port = trainer_port
        self.timeout_seconds = timeout_seconds
        self.pool = ThreadPoolExecutor(8, "ahj-telemetry")

    def _get(self, url: str) -> str:
        with urllib.request.urlopen(url, timeout=self.timeout_seconds) as response:
            return response.read().decode()

    def sample(self, namespace: str, job: str, attempt: int, pods: list[dict]) -> Sample:
        now = datetime.now(UTC)
        if self.prometheus_url:
            return self._from_prometheus(namespace, *pod_selection(job, attempt, pods), now)
        return self._from_trainers(pods, now)

    def _from_prometheus(self, namespace: str, pod_regex: str, first_pod: str, now: datetime) -> Sample:
        queries = prometheus_queries(namespace, pod_regex, first_pod)
        values: dict[str, float | None] = {}
        vectors: dict[str, list[tuple[dict, float]]] = {}
        try:
            for key, query in {**queries, **prometheus_vector_queries(namespace, pod_regex)}.items():
                url = f"{self.prometheus_url}/api/v1/query?{urllib.parse.urlencode({'query': query})}"
                answer = json.loads(self._get(url))
                if answer.get("status") != "success":
                    return Sample("prometheus", now, error=f"Prometheus refused {key}: {answer.get('error')}")
                result = answer["data"]["result"]
                if key not in queries:
                    vectors[key] = [(series.get("metric") or {}, float(series["value"][1])) for series in result]
                    continue
                value = float(result[0]["value"][1]) if result else None
                values[key] = None if value is None or math.isnan(value) else value
        except (OSError, ValueError, KeyError, urllib.error.URLError) as error:
            return Sample("prometheus", now, error=f"Prometheus at {self.prometheus_url} unreachable: {error}")
        if all(value is None for value in values.values()):
            return Sample("prometheus", now, error="Prometheus has no series for this job yet", no_data_yet=True)
        return from_prometheus(values, now, vectors)

    def _from_trainers(self, pods: list[dict], now: datetime) -> Sample:
        targets = {pod_index(pod): (pod.get("status") or {}).get("podIP") for pod in pods
                   if (pod.get("status") or {}).get("phase") == "Running"}
        targets = {index: ip for index, ip in targets.items() if index is not None and ip}
        if not targets:
            return Sample("trainer", now, error="no running trainer pod to read")

        def read(item):
            index, ip = item
            try:
                return index, self._get(f"http://{ip}:{self.trainer_port}/metrics"), None
            except (OSError, urllib.error.URLError, ValueError) as error:
                return index, None, f"{ip}:{self.trainer_port}: {error}"
        results = list(self.pool.map(read, sorted(targets.items())))
        texts = {index: text for index, text, _ in results if text is not None}
        if not texts:
            errors = [error for _, _, error in results if error]
            return Sample("trainer", now, error=f"trainer metrics unreachable ({errors[0]})")
        # the filter drops the pods without an index, which mypy cannot see through the second call
        pod_names = cast("dict[int, str]",
                         {pod_index(pod): pod["metadata"]["name"] for pod in pods if pod_index(pod) is not None})
        return from_trainer_text(texts, now, pod_names)


def sampling_loop(controller, source: TelemetrySource, interval: float) -> Callable[[], None]:
    """The loop that reads every running job's figures off the event loop and the workers."""

    def telemetry() -> None:
        while not controller.queue.closed:
            for key, attempt in controller.running_jobs():
                pods = [pod for pod in controller.indexes.job_pods(key) if attempt_of(pod) == attempt]
                controller.offer_sample(key, attempt, source.sample(key[0], key[1], attempt, pods))
            time.sleep(interval)
    return telemetry
