"""Reads training progress and NPU utilization over HTTP: from Prometheus when --prometheus-url is set, else from
the trainer pods' own :9400 endpoints. Never raises: an unreachable source gives a Sample with `error`."""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone

from . import names
from .progress import Sample, from_prometheus, from_trainer_text, prometheus_queries
from .ranktable import pod_index

HTTP_TIMEOUT_SECONDS = 3.0


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_SECONDS) as response:
        return response.read().decode()


class TelemetrySource:
    def __init__(self, prometheus_url: str | None = None, trainer_port: int = names.METRICS_PORT):
        self.prometheus_url = prometheus_url.rstrip("/") if prometheus_url else None
        self.trainer_port = trainer_port
        self.pool = ThreadPoolExecutor(8, "ahj-telemetry")

    def sample(self, namespace: str, job: str, attempt: int, pods: list[dict]) -> Sample:
        now = datetime.now(timezone.utc)
        if self.prometheus_url:
            return self._from_prometheus(namespace, job, attempt, now)
        return self._from_trainers(pods, now)

    def _from_prometheus(self, namespace: str, job: str, attempt: int, now: datetime) -> Sample:
        pod_prefix = names.pod_name(job, attempt, 0)[:-1]
        queries = prometheus_queries(namespace, f"{pod_prefix}[0-9]+", f"{pod_prefix}0")
        values: dict[str, float | None] = {}
        try:
            for key, query in queries.items():
                url = f"{self.prometheus_url}/api/v1/query?{urllib.parse.urlencode({'query': query})}"
                answer = json.loads(_get(url))
                if answer.get("status") != "success":
                    return Sample("prometheus", now, error=f"Prometheus refused {key}: {answer.get('error')}")
                result = answer["data"]["result"]
                value = float(result[0]["value"][1]) if result else None
                values[key] = None if value is None or math.isnan(value) else value
        except (OSError, ValueError, KeyError, urllib.error.URLError) as error:
            return Sample("prometheus", now, error=f"Prometheus at {self.prometheus_url} unreachable: {error}")
        if all(value is None for value in values.values()):
            return Sample("prometheus", now, error="Prometheus has no series for this job yet", no_data_yet=True)
        return from_prometheus(values, now)

    def _from_trainers(self, pods: list[dict], now: datetime) -> Sample:
        targets = {pod_index(pod): (pod.get("status") or {}).get("podIP") for pod in pods
                   if (pod.get("status") or {}).get("phase") == "Running"}
        targets = {index: ip for index, ip in targets.items() if index is not None and ip}
        if not targets:
            return Sample("trainer", now, error="no running trainer pod to read")

        def read(item):
            index, ip = item
            try:
                return index, _get(f"http://{ip}:{self.trainer_port}/metrics"), None
            except (OSError, urllib.error.URLError, ValueError) as error:
                return index, None, f"{ip}:{self.trainer_port}: {error}"
        results = list(self.pool.map(read, sorted(targets.items())))
        texts = {index: text for index, text, _ in results if text is not None}
        if not texts:
            errors = [error for _, _, error in results if error]
            return Sample("trainer", now, error=f"trainer metrics unreachable ({errors[0]})")
        return from_trainer_text(texts, now)
