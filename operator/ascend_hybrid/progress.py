"""Training progress and NPU utilization: from scraped figures to status.training / status.utilization (pure).

Two sources give the same `Sample`: the trainer pods' own :9400 endpoints (Prometheus text format), or a
Prometheus server holding the trainer's series and the npu-exporter's `npu_chip_info_*` series.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from prometheus_client.parser import text_string_to_metric_families

from .conditions import timestamp


@dataclass(frozen=True)
class Sample:
    source: str                      # "trainer" | "prometheus"
    sampled_at: datetime
    step: float | None = None
    loss: float | None = None
    tokens_per_second: float | None = None
    step_seconds: float | None = None
    npu_percent: float | None = None
    hbm_percent: float | None = None
    error: str | None = None         # why nothing could be read (the figures are then None)
    no_data_yet: bool = False        # the source answered but has nothing for this job yet: not a fault

    @property
    def ok(self) -> bool:
        return self.error is None


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def from_trainer_text(texts: dict[int, str], sampled_at: datetime) -> Sample:
    """Pod index → the text of its :9400/metrics. Training figures are job-wide in every pod's endpoint (the
    trainer exports the global-batch loss and job throughput); pod 0's are used, utilization is averaged."""
    first = min(texts) if texts else None
    step = loss = tokens = step_sum = step_count = None
    utilization: list[float] = []
    for index, text in sorted(texts.items()):
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "ascend_trainer_npu_utilization_percent":
                    utilization.append(sample.value)
                if index != first:
                    continue
                if sample.name == "ascend_trainer_step":
                    step = sample.value
                elif sample.name == "ascend_trainer_loss":
                    loss = sample.value
                elif sample.name == "ascend_trainer_tokens_per_second":
                    tokens = sample.value
                elif sample.name == "ascend_trainer_step_seconds_sum":
                    step_sum = sample.value
                elif sample.name == "ascend_trainer_step_seconds_count":
                    step_count = sample.value
    step_seconds = step_sum / step_count if step_sum is not None and step_count else None
    return Sample("trainer", sampled_at, step=step, loss=loss, tokens_per_second=tokens, step_seconds=step_seconds,
                  npu_percent=_mean(utilization))


def prometheus_queries(namespace: str, pod_regex: str, first_pod: str) -> dict[str, str]:
    """PromQL for each figure; npu-exporter labels pods `pod_name`, scraped trainer endpoints `pod`."""
    exporter = f'namespace="{namespace}",pod_name=~"{pod_regex}"'
    trainer = f'namespace="{namespace}",pod="{first_pod}"'
    return {
        "step": f"max(ascend_trainer_step{{{trainer}}})",
        "loss": f"max(ascend_trainer_loss{{{trainer}}})",
        "tokens_per_second": f"max(ascend_trainer_tokens_per_second{{{trainer}}})",
        "step_seconds": (f"sum(rate(ascend_trainer_step_seconds_sum{{{trainer}}}[2m])) / "
                         f"sum(rate(ascend_trainer_step_seconds_count{{{trainer}}}[2m]))"),
        "npu_percent": f"avg(npu_chip_info_utilization{{{exporter}}})",
        "hbm_percent": (f"100 * sum(npu_chip_info_hbm_used_memory{{{exporter}}}) / "
                        f"sum(npu_chip_info_hbm_total_memory{{{exporter}}})"),
    }


def from_prometheus(values: dict[str, float | None], sampled_at: datetime) -> Sample:
    return Sample("prometheus", sampled_at, **{key: values.get(key) for key in (
        "step", "loss", "tokens_per_second", "step_seconds", "npu_percent", "hbm_percent")})


def _rounded(value: float | None, digits: int) -> float | None:
    return None if value is None or value != value else round(value, digits)  # NaN (no data) → None


def training_status(sample: Sample, total_steps: int) -> dict:
    step = int(sample.step) if sample.step is not None else None
    status = {"step": step, "loss": _rounded(sample.loss, 6), "tokensPerSecond": _rounded(sample.tokens_per_second, 1),
              "stepSeconds": _rounded(sample.step_seconds, 4)}
    if step is not None:
        status["progressPercentage"] = round(100.0 * min(step, total_steps) / total_steps, 2)
        if sample.step_seconds:
            status["estimatedRemainingSeconds"] = round(max(total_steps - step, 0) * sample.step_seconds, 1)
    return {key: value for key, value in status.items() if value is not None}


def utilization_status(sample: Sample) -> dict:
    status = {"npuPercent": _rounded(sample.npu_percent, 1), "hbmPercent": _rounded(sample.hbm_percent, 1),
              "source": sample.source, "sampledAt": timestamp(sample.sampled_at)}
    return {key: value for key, value in status.items() if value is not None}
