"""Progress and utilization parsing (pure): trainer exposition text and Prometheus answers → status fields."""

from datetime import UTC, datetime

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from pydantic import BaseModel

from ascend_hybrid.monitoring.progress import (
    from_prometheus,
    from_trainer_text,
    prometheus_queries,
    prometheus_vector_queries,
    training_status,
    utilization_status,
)

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def exposition(step, loss, tokens, step_times, utilization=None) -> str:
    """The trainer's metrics as its endpoint serves them (same names and types as design §9)."""
    registry = CollectorRegistry()
    Gauge("ascend_trainer_step", "", registry=registry).set(step)
    Gauge("ascend_trainer_loss", "", registry=registry).set(loss)
    Gauge("ascend_trainer_tokens_per_second", "", registry=registry).set(tokens)
    histogram = Histogram("ascend_trainer_step_seconds", "", registry=registry)
    for seconds in step_times:
        histogram.observe(seconds)
    Counter("ascend_trainer_samples", "", registry=registry).inc(step * 16)
    if utilization:
        gauge = Gauge("ascend_trainer_npu_utilization_percent", "", ["device"], registry=registry)
        for device, value in utilization.items():
            gauge.labels(device=device).set(value)
    return generate_latest(registry).decode()


def test_trainer_text_gives_pod_zero_training_figures_and_mean_utilization():
    texts = {1: exposition(9, 9.9, 1.0, [9.0], {"0": 50.0, "1": 70.0}),
             0: exposition(40, 2.25, 4096.0, [0.5, 0.7], {"0": 90.0, "1": 94.0})}
    sample = from_trainer_text(texts, NOW)
    assert (sample.step, sample.loss, sample.tokens_per_second) == (40, 2.25, 4096.0)
    assert abs(sample.step_seconds - 0.6) < 1e-9
    assert sample.npu_percent == (50 + 70 + 90 + 94) / 4
    assert sample.ok and sample.source == "trainer"


def shown(model: BaseModel) -> dict:
    """A status field as the operator writes it."""
    return model.model_dump(by_alias=True, exclude_unset=True, exclude_none=True)


def test_training_status_progress_and_eta():
    sample = from_trainer_text({0: exposition(150, 1.5, 100.0, [2.0])}, NOW)
    assert shown(training_status(sample, 200)) == {
        "step": 150, "loss": 1.5, "tokensPerSecond": 100.0, "stepSeconds": 2.0, "progressPercentage": 75.0,
        "estimatedRemainingSeconds": 100.0}
    done = from_trainer_text({0: exposition(250, 1.0, 100.0, [2.0])}, NOW)
    assert training_status(done, 200).progress_percentage == 100.0
    assert training_status(done, 200).estimated_remaining_seconds == 0.0


def test_prometheus_answers_and_missing_series():
    sample = from_prometheus({"step": 12.0, "loss": 3.0, "npu_percent": 61.24, "hbm_percent": float("nan")}, NOW)
    assert shown(utilization_status(sample)) == {"npuPercent": 61.2, "source": "prometheus",
                                                 "sampledAt": "2026-11-29T12:00:00Z"}
    assert shown(training_status(sample, 100)) == {"step": 12, "loss": 3.0, "progressPercentage": 12.0}


def test_prometheus_queries_select_the_attempts_pods():
    queries = prometheus_queries("ns", "job-a2-[0-9]+", "job-a2-0")
    assert 'namespace="ns",pod_name=~"job-a2-[0-9]+"' in queries["npu_percent"]
    assert 'pod="job-a2-0"' in queries["step"]
    assert "npu_chip_info_hbm_used_memory" in queries["hbm_percent"]


def test_trainer_text_keeps_each_chip_and_each_pods_step_time_by_pod_name():
    texts = {0: exposition(40, 2.25, 4096.0, [0.5, 0.7], {"0": 90.0, "1": 94.0}),
             1: exposition(40, 2.25, 4096.0, [1.5, 1.7], {"0": 20.0, "1": 70.0})}
    sample = from_trainer_text(texts, NOW, {0: "job-a1-0", 1: "job-a1-1"})
    assert sorted((c.pod, c.chip, c.percent) for c in sample.chips) == [
        ("job-a1-0", "0", 90.0), ("job-a1-0", "1", 94.0), ("job-a1-1", "0", 20.0), ("job-a1-1", "1", 70.0)]
    assert [(pod, round(seconds, 6)) for pod, seconds in sample.pod_step_seconds] == [("job-a1-0", 0.6),
                                                                                      ("job-a1-1", 1.6)]
    unnamed = from_trainer_text(texts, NOW)
    assert {c.pod for c in unnamed.chips} == {"0", "1"}


def test_prometheus_vectors_give_chips_and_pod_step_times_and_drop_what_is_not_a_number():
    vectors = {"chips": [({"pod_name": "job-a1-0", "id": "3"}, 88.0), ({"pod_name": "job-a1-1", "id": "0"}, 9.0),
                         ({"pod_name": "job-a1-1", "id": "1"}, float("nan"))],
               "pod_step_seconds": [({"pod": "job-a1-1"}, 0.75), ({"pod": "job-a1-0"}, 0.5),
                                    ({"pod": "job-a1-2"}, float("nan"))]}
    sample = from_prometheus({"step": 3.0}, NOW, vectors)
    assert [(c.pod, c.chip, c.percent) for c in sample.chips] == [("job-a1-0", "3", 88.0), ("job-a1-1", "0", 9.0)]
    assert sample.pod_step_seconds == (("job-a1-0", 0.5), ("job-a1-1", 0.75))
    queries = prometheus_vector_queries("ns", "job-a2-[0-9]+")
    assert queries["chips"] == 'npu_chip_info_utilization{namespace="ns",pod_name=~"job-a2-[0-9]+"}'
    assert "sum by (pod)" in queries["pod_step_seconds"] and 'pod=~"job-a2-[0-9]+"' in queries["pod_step_seconds"]


def test_prometheus_vectors_give_each_ranks_step_compute_and_wait():
    from ascend_hybrid.monitoring.progress import RankReading

    def series(name, values):
        return [({"pod": pod, "rank": str(rank), "__name__": name}, value) for (pod, rank), value in values.items()]
    vectors = {"ascend_trainer_rank_step_seconds": series("s", {("p0", 0): 0.5, ("p1", 1): 0.5, ("p1", 2): float("nan")}),
               "ascend_trainer_rank_compute_seconds": series("c", {("p0", 0): 0.4, ("p1", 1): 0.2}),
               "ascend_trainer_rank_wait_seconds": series("w", {("p0", 0): 0.1, ("p1", 1): 0.3}),
               "ascend_trainer_rank_step": series("n", {("p0", 0): 12, ("p1", 1): 12})}
    queries = prometheus_vector_queries("ns", "job-a1-.*")
    assert set(vectors) <= set(queries)
    sample = from_prometheus({"step": 12.0}, NOW, vectors)
    assert sample.ranks == (RankReading("p0", 0, 0.5, 0.4, 0.1, 12), RankReading("p1", 1, 0.5, 0.2, 0.3, 12))
