"""Where `status.training` and `status.utilization` come from: every running job's progress and NPU utilization,
read over HTTP every --telemetry-interval seconds — from Prometheus when --prometheus-url is set, else from the
trainer pods' own :9400 endpoints — and offered to the job's next reconcile pass (`progress.py` turns a Sample
into status). Never raises: an unreachable source gives a Sample with `error`."""

from __future__ import annotations

import logging
import math
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import cast

from ascend_hybrid.contracts import names, untrusted
from ascend_hybrid.contracts.podview import attempt_of, pod_index
from ascend_hybrid.controller.metrics import REJECTED_INPUTS
from ascend_hybrid.monitoring.progress import (
    Sample,
    from_prometheus,
    from_trainer_text,
    prometheus_queries,
    prometheus_vector_queries,
)

log = logging.getLogger(__name__)


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


# What one answer may hold: a trainer's page is a few KiB (its figures and one line per chip); Prometheus answers
# one series per chip of the job (16 384 chips ≈ 3 MB). Read no further: a larger answer is refused, not parsed.
PAGE_LIMIT = 1024 * 1024
PROMETHEUS_LIMIT = 16 * 1024 * 1024


class NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is refused (an HTTPError): a pod's endpoint must not send the operator to another address — the
    apiserver's, a cloud's metadata service — with the operator's network position."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


class PageRefused(Exception):
    """An answer refused whole; `reason` is the metric's label (untrusted.REASONS or "redirect")."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


class TelemetrySource:
    def __init__(self, prometheus_url: str | None = None, trainer_port: int = names.METRICS_PORT,
                 timeout_seconds: float = 3.0):
        self.prometheus_url = prometheus_url.rstrip("/") if prometheus_url else None
        self.trainer_port = trainer_port
        self.timeout_seconds = timeout_seconds
        self.pool = ThreadPoolExecutor(8, "ahj-telemetry")
        self.opener = urllib.request.build_opener(NoRedirects)

    def _get(self, url: str, limit: int = PAGE_LIMIT) -> str:
        """The answer's text, at most `limit` bytes of UTF-8, never through a redirect (PageRefused)."""
        try:
            with self.opener.open(url, timeout=self.timeout_seconds) as response:
                body = response.read(limit + 1)
        except urllib.error.HTTPError as error:
            if 300 <= error.code < 400:
                raise PageRefused("redirect", f"{url} answered a redirect ({error.code}), which is not followed") \
                    from None
            raise
        if len(body) > limit:
            raise PageRefused(untrusted.TOO_LARGE, f"{url} answered more than {limit} bytes")
        try:
            return body.decode()
        except UnicodeDecodeError:
            raise PageRefused(untrusted.MALFORMED, f"{url} answered text that is not UTF-8") from None

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
                answer = untrusted.json_value(self._get(url, PROMETHEUS_LIMIT), PROMETHEUS_LIMIT, "answer")
                if answer.get("status") != "success":
                    return Sample("prometheus", now, error=f"Prometheus refused {key}: {str(answer.get('error'))[:200]}")
                result = answer["data"]["result"]
                if key not in queries:
                    vectors[key] = [(dict(series.get("metric") or {}), float(series["value"][1])) for series in result]
                    continue
                value = float(result[0]["value"][1]) if result else None
                values[key] = None if value is None or math.isnan(value) else value
        except PageRefused as refused:
            REJECTED_INPUTS.labels(kind="prometheus-answer", reason=refused.reason).inc()
            return Sample("prometheus", now, error=f"Prometheus at {self.prometheus_url}: {refused}")
        except untrusted.Rejected as rejected:
            REJECTED_INPUTS.labels(kind="prometheus-answer", reason=rejected.reason).inc()
            return Sample("prometheus", now, error=f"Prometheus at {self.prometheus_url}: {rejected}")
        except (OSError, ValueError, KeyError, IndexError, TypeError, AttributeError, urllib.error.URLError) as error:
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
                return index, self._get(f"http://{ip}:{self.trainer_port}/metrics"), None, False
            except PageRefused as refused:
                REJECTED_INPUTS.labels(kind="metrics-page", reason=refused.reason).inc()
                return index, None, f"{ip}:{self.trainer_port}: {refused}", True
            except (OSError, urllib.error.URLError, ValueError) as error:
                return index, None, f"{ip}:{self.trainer_port}: {error}", False
        results = list(self.pool.map(read, sorted(targets.items())))
        texts = {index: text for index, text, _, _ in results if text is not None}
        refused = tuple(error for _, _, error, whole in results if whole)
        if not texts:
            errors = [error for _, _, error, _ in results if error]
            return Sample("trainer", now, error=f"trainer metrics unreachable ({errors[0]})", rejected=refused)
        # the filter drops the pods without an index, which mypy cannot see through the second call
        pod_names = cast("dict[int, str]",
                         {pod_index(pod): pod["metadata"]["name"] for pod in pods if pod_index(pod) is not None})
        unread = tuple(f"{pod_names.get(index, index)}: {error}" for index, text, error, whole in results
                       if text is None and not whole)
        sample = from_trainer_text(texts, now, pod_names, refused, unread)
        if sample.rejected_lines > len(refused):
            REJECTED_INPUTS.labels(kind="metrics-page", reason=untrusted.MALFORMED).inc(
                sample.rejected_lines - len(refused))
        return sample


def sampling_loop(controller, source: TelemetrySource, interval: float) -> Callable[[], None]:
    """The loop that reads every running job's figures off the event loop and the workers."""

    def telemetry() -> None:
        while not controller.queue.closed:
            for key, attempt in controller.running_jobs():
                controller.offer_sample(key, attempt, one_job(controller, source, key, attempt))
            time.sleep(interval)
    return telemetry


def one_job(controller, source: TelemetrySource, key, attempt: int) -> Sample:
    """One job's reading. Whatever its pods answer, it ends as a Sample: an error here is that job's alone and
    never stops the loop that reads every other job."""
    try:
        pods = [pod for pod in controller.indexes.job_pods(key) if attempt_of(pod) == attempt]
        return source.sample(key[0], key[1], attempt, pods)
    except Exception as error:  # one job's telemetry must not end every job's (logged with its trace)
        log.exception("%s/%s: telemetry failed", *key)
        return Sample("trainer", datetime.now(UTC), error=f"telemetry failed: {type(error).__name__}: {error}"[:300])
