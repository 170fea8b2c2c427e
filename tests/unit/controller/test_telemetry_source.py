"""TelemetrySource over canned HTTP answers: the scalar figures and the per-chip, per-pod series of one attempt."""

from __future__ import annotations

import json
import urllib.parse

from prometheus_client import CollectorRegistry, Gauge, Histogram, generate_latest

from ascend_hybrid.controller.telemetry import TelemetrySource


def vector(*series) -> str:
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": labels, "value": [0, str(value)]} for labels, value in series]}})


def prometheus_answers(url: str) -> str:
    query = urllib.parse.parse_qs(urllib.parse.urlparse(url).query)["query"][0]
    if query.startswith("npu_chip_info_utilization{"):
        return vector(({"pod_name": "job-a2-0", "id": "0"}, 91), ({"pod_name": "job-a2-1", "id": "5"}, 14))
    if query.startswith("sum by (pod)"):
        return vector(({"pod": "job-a2-0"}, 0.5), ({"pod": "job-a2-1"}, 0.75))
    if "ascend_trainer_step{" in query:
        return vector(({}, 42))
    return vector()


def test_prometheus_gives_the_attempts_chips_and_pod_step_times(monkeypatch):
    source = TelemetrySource("http://127.0.0.1:9")
    asked = []
    monkeypatch.setattr(source, "_get", lambda url, limit=0: asked.append(url) or prometheus_answers(url))
    sample = source.sample("ns", "job", 2, [])
    assert sample.ok and sample.step == 42
    assert [(c.pod, c.chip, c.percent) for c in sample.chips] == [("job-a2-0", "0", 91.0), ("job-a2-1", "5", 14.0)]
    assert sample.pod_step_seconds == (("job-a2-0", 0.5), ("job-a2-1", 0.75))
    assert all("job-a2-" in urllib.parse.unquote(url) for url in asked)


def trainer_text(step_times: list[float], utilization: float) -> str:
    registry = CollectorRegistry()
    Gauge("ascend_trainer_step", "", registry=registry).set(len(step_times))
    histogram = Histogram("ascend_trainer_step_seconds", "", registry=registry)
    for seconds in step_times:
        histogram.observe(seconds)
    Gauge("ascend_trainer_npu_utilization_percent", "", ["device"], registry=registry).labels(device="3").set(utilization)
    return generate_latest(registry).decode()


def test_trainer_endpoints_name_their_pods(monkeypatch):
    pods = [{"metadata": {"name": f"job-a1-{i}", "labels": {"hybrid.ascend.dev/pod-index": str(i)}},
             "status": {"phase": "Running", "podIP": f"127.16.0.{i + 1}"}} for i in range(2)]
    texts = {"127.16.0.1": trainer_text([1.0, 1.0], 88), "127.16.0.2": trainer_text([3.0, 3.0], 12)}
    source = TelemetrySource()
    monkeypatch.setattr(source, "_get", lambda url, limit=0: texts[urllib.parse.urlparse(url).hostname])
    sample = source.sample("ns", "job", 1, pods)
    assert [(c.pod, c.chip, c.percent) for c in sample.chips] == [("job-a1-0", "3", 88.0), ("job-a1-1", "3", 12.0)]
    assert sample.pod_step_seconds == (("job-a1-0", 1.0), ("job-a1-1", 3.0))


def test_a_pod_whose_endpoint_does_not_answer_is_named_and_the_others_are_read(monkeypatch):
    pods = [{"metadata": {"name": f"job-a1-{i}", "labels": {"hybrid.ascend.dev/pod-index": str(i)}},
             "status": {"phase": "Running", "podIP": f"127.16.0.{i + 1}"}} for i in range(2)]

    def get(url, limit=0):
        if urllib.parse.urlparse(url).hostname == "127.16.0.2":
            raise TimeoutError("timed out")
        return trainer_text([1.0, 1.0], 88)
    source = TelemetrySource()
    monkeypatch.setattr(source, "_get", get)
    sample = source.sample("ns", "job", 1, pods)
    assert sample.ok and sample.step == 2 and sample.unread == ("job-a1-1: 127.16.0.2:9400: timed out",)
