"""Prometheus metrics of design §9, served by rank 0 of each pod (the operator scrapes them on :9400)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily

STEP_SECONDS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
CHECKPOINT_SECONDS_BUCKETS = (0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)


class NpuUtilizationCollector:
    """Reads npu-smi at scrape time, so the figure is current and nothing polls when nobody scrapes."""

    def __init__(self, read: Callable[[], dict[str, float]]):
        self.read = read

    def collect(self) -> Iterable[GaugeMetricFamily]:
        readings = self.read()
        if not readings:
            return []
        family = GaugeMetricFamily("ascend_trainer_npu_utilization_percent", "AI Core utilization of each NPU "
                                   "of this pod, from npu-smi.", labels=["device"])
        for device, value in sorted(readings.items()):
            family.add_metric([device], value)
        return [family]


class RankTimingCollector:
    """Each local rank's recent step, compute and wait means (timing.py), read from their files at scrape time."""

    def __init__(self, read: Callable[[], list]):
        self.read = read

    def collect(self) -> Iterable[GaugeMetricFamily]:
        figures = self.read()
        if not figures:
            return []
        step = GaugeMetricFamily("ascend_trainer_rank_step_seconds", "Mean wall time of this rank's recent steps.",
                                 labels=["rank"])
        compute = GaugeMetricFamily("ascend_trainer_rank_compute_seconds", "Mean seconds of this rank's own "
                                    "compute (forward and backward) in its recent steps.", labels=["rank"])
        wait = GaugeMetricFamily("ascend_trainer_rank_wait_seconds", "Mean seconds of its recent steps spent in "
                                 "the collectives and the update (waiting for the slowest rank).", labels=["rank"])
        last = GaugeMetricFamily("ascend_trainer_rank_step", "The last step this rank completed.", labels=["rank"])
        for item in sorted(figures, key=lambda f: f.rank):
            label = [str(item.rank)]
            step.add_metric(label, item.step_seconds)
            last.add_metric(label, item.step)
            if item.compute_seconds is not None and item.wait_seconds is not None:
                compute.add_metric(label, item.compute_seconds)
                wait.add_metric(label, item.wait_seconds)
        return [step, compute, wait, last]


class TrainerMetrics:
    """Job-wide figures as this pod sees them: the loss of the whole global batch and the throughput of the
    whole job (global batch tokens / step time), so any one pod's endpoint tells the job's progress."""

    def __init__(self, npu_reader: Callable[[], dict[str, float]] | None = None,
                 rank_timings: Callable[[], list] | None = None):
        self.registry = CollectorRegistry()
        self.step = Gauge("ascend_trainer_step", "Last completed training step.", registry=self.registry)
        self.loss = Gauge("ascend_trainer_loss", "Loss of the whole global batch at the last step.",
                          registry=self.registry)
        self.tokens_per_second = Gauge("ascend_trainer_tokens_per_second", "Tokens of the global batch per "
                                       "second of step time, last step.", registry=self.registry)
        self.step_seconds = Histogram("ascend_trainer_step_seconds", "Wall time of a training step.",
                                      buckets=STEP_SECONDS_BUCKETS, registry=self.registry)
        self.grad_norm = Gauge("ascend_trainer_grad_norm", "Global L2 norm of the gradients of the whole global "
                               "batch at the last step, before clipping.", registry=self.registry)
        self.checkpoint_seconds = Histogram("ascend_trainer_checkpoint_seconds", "Wall time of a checkpoint save "
                                            "that blocked training (the save and its commit).",
                                            buckets=CHECKPOINT_SECONDS_BUCKETS, registry=self.registry)
        self.samples = Counter("ascend_trainer_samples", "Samples of the global batch trained on since this "
                               "process started.", registry=self.registry)
        if npu_reader is not None:
            self.registry.register(NpuUtilizationCollector(npu_reader))
        if rank_timings is not None:
            self.registry.register(RankTimingCollector(rank_timings))

    def serve(self, address: str, port: int) -> int:
        """Start the endpoint; returns the port it listens on (the kernel's choice when `port` is 0)."""
        server, _thread = start_http_server(port, addr=address, registry=self.registry)
        return server.server_port

    def record_save(self, seconds: float) -> None:
        self.checkpoint_seconds.observe(seconds)

    def record_step(self, step: int, loss: float, seconds: float, samples: int, tokens: int,
                    grad_norm: float) -> None:
        self.step.set(step)
        self.loss.set(loss)
        self.grad_norm.set(grad_norm)
        self.step_seconds.observe(seconds)
        self.samples.inc(samples)
        if seconds > 0:
            self.tokens_per_second.set(tokens / seconds)
