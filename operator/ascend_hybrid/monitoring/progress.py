"""Training progress and NPU utilization: from scraped figures to status.training / status.utilization (pure).

Two sources give the same `Sample`: the trainer pods' own :9400 endpoints (Prometheus text format), or a
Prometheus server holding the trainer's series and the npu-exporter's `npu_chip_info_*` series. Besides the job-wide
figures, a Sample carries each chip's utilization and each pod's step time, which the anomaly conditions read
(anomalies.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from prometheus_client.parser import text_string_to_metric_families

from ascend_hybrid.contracts.conditions import timestamp
from ascend_hybrid.spec.api import TrainingStatus, UtilizationStatus


@dataclass(frozen=True)
class ChipReading:
    pod: str
    chip: str       # the chip's id on its node, as npu-smi and the exporter's `id` label give it
    percent: float  # AI-core utilization


@dataclass(frozen=True)
class RankReading:
    """One rank's recent steps as its trainer timed them (ascend_trainer_rank_* of its pod's endpoint)."""

    pod: str
    rank: int
    step_seconds: float
    compute_seconds: float | None = None  # its own forward and backward; None where the trainer cannot split it
    wait_seconds: float | None = None     # the collectives' wait and the update
    step: int | None = None


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
    chips: tuple[ChipReading, ...] = ()                 # every chip of the job that reported utilization
    pod_step_seconds: tuple[tuple[str, float], ...] = ()  # (pod, seconds per step) where a pod says
    step_seconds_sum: float | None = None  # the lead pod's cumulative step time and step count (this process):
    step_count: float | None = None        # steps after a mark of them exclude warm-up (strategy.measured)
    rejected_lines: int = 0                # lines or pages of the source refused (read_page; the shell's caps)
    rejected: tuple[str, ...] = ()         # the first of them, for a person
    checkpoint_seconds_sum: float | None = None  # the lead pod's checkpoint saves (this process): seconds, count
    checkpoint_count: float | None = None
    ranks: tuple[RankReading, ...] = ()    # every rank's recent step, compute and wait, where pods report them
    unread: tuple[str, ...] = ()           # "pod: why" for each pod whose endpoint did not answer (the rest read)

    @property
    def ok(self) -> bool:
        return self.error is None


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    return numerator / denominator if numerator is not None and denominator else None


# The series read off a trainer's page; every other line is skipped unparsed.
UTILIZATION = "ascend_trainer_npu_utilization_percent"
FIGURES = ("ascend_trainer_step", "ascend_trainer_loss", "ascend_trainer_tokens_per_second",
           "ascend_trainer_step_seconds_sum", "ascend_trainer_step_seconds_count",
           "ascend_trainer_checkpoint_seconds_sum", "ascend_trainer_checkpoint_seconds_count")
RANK_FIGURES = {"ascend_trainer_rank_step_seconds": "step_seconds", "ascend_trainer_rank_compute_seconds":
                "compute_seconds", "ascend_trainer_rank_wait_seconds": "wait_seconds",
                "ascend_trainer_rank_step": "step"}
READ_SERIES = frozenset({UTILIZATION, *FIGURES, *RANK_FIGURES})
# A figure beyond this is refused: a step or count past it cannot be written into the status (int64, JSON's exact
# integers), and no utilization, loss or throughput means it.
MAX_FIGURE = 2.0 ** 53
KEPT_REJECTIONS = 3  # what a Sample says of its rejected lines (all are counted)


def _series_of(line: str) -> str:
    """The metric name a line starts with; "" for a line with none (blank, or one that opens with its labels)."""
    words = line.split("{", 1)[0].split(None, 1)
    return words[0] if words else ""


def read_page(text: str, pod: str) -> tuple[list[tuple[str, dict[str, str], float]], list[str]]:
    """The samples of the series this reads (READ_SERIES) on one page, one line at a time, and the lines refused:
    a line that does not parse, or whose value is out of range, is skipped alone (the page's other lines count).
    NaN and ±Inf, which the format allows, are read as no value."""
    samples: list[tuple[str, dict[str, str], float]] = []
    rejected: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if line.startswith("#") or _series_of(line) not in READ_SERIES:
            continue
        try:
            parsed = [(sample.name, dict(sample.labels), float(sample.value))
                      for family in text_string_to_metric_families(line + "\n") for sample in family.samples]
        except (ValueError, TypeError, IndexError, KeyError) as error:  # the parser's word for a malformed line
            rejected.append(f"{pod} line {number}: {str(error)[:80] or 'malformed'}")
            continue
        for name, labels, value in parsed:
            if not _finite(value):
                continue
            if abs(value) > MAX_FIGURE:
                rejected.append(f"{pod} line {number}: {name}={value:g} out of range")
                continue
            samples.append((name, labels, value))
    return samples, rejected


def rank_readings(figures: dict[tuple[str, int], dict[str, float]]) -> tuple[RankReading, ...]:
    """(pod, rank) → its figures by field → the readings that have a step time, by rank."""
    readings = []
    for (pod, rank), values in sorted(figures.items(), key=lambda item: item[0][1]):
        seconds = values.get("step_seconds")
        if seconds is None or not _finite(seconds) or seconds <= 0:
            continue
        compute, wait, step = values.get("compute_seconds"), values.get("wait_seconds"), values.get("step")
        readings.append(RankReading(pod, rank, seconds, compute if compute is not None and _finite(compute) else None,
                                    wait if wait is not None and _finite(wait) else None,
                                    int(step) if step is not None and _finite(step) else None))
    return tuple(readings)


def _rank_label(labels: dict) -> int | None:
    try:
        return int(labels.get("rank", ""))
    except ValueError:
        return None


def from_trainer_text(texts: dict[int, str], sampled_at: datetime, pod_names: dict[int, str] | None = None,
                      rejected: tuple[str, ...] = (), unread: tuple[str, ...] = ()) -> Sample:
    """Pod index → the text of its :9400/metrics. Training figures are job-wide in every pod's endpoint (the
    trainer exports the global-batch loss and job throughput); pod 0's are used, utilization is averaged. Each
    chip's utilization and each pod's mean step time are kept too, named by `pod_names` (else the index). Lines
    refused (read_page) are skipped and said in `rejected`, after the pages the shell refused whole; `unread`
    names the pods whose endpoints did not answer."""
    first = min(texts) if texts else None
    figures: dict[int, dict[str, float]] = {}
    chips: list[ChipReading] = []
    refused = list(rejected)
    ranks: dict[tuple[str, int], dict[str, float]] = {}
    for index, text in sorted(texts.items()):
        pod = (pod_names or {}).get(index, str(index))
        mine = figures.setdefault(index, {})
        samples, bad = read_page(text, pod)
        refused += bad
        for name, labels, value in samples:
            if name == UTILIZATION:
                chips.append(ChipReading(pod, str(labels.get("device", "?"))[:64], value))
            elif name in RANK_FIGURES:
                if (rank := _rank_label(labels)) is not None:
                    ranks.setdefault((pod, rank), {})[RANK_FIGURES[name]] = value
            else:
                mine[name.removeprefix("ascend_trainer_")] = value
    lead = figures.get(first, {}) if first is not None else {}
    per_pod = tuple(((pod_names or {}).get(index, str(index)), seconds) for index, values in sorted(figures.items())
                    if (seconds := _ratio(values.get("step_seconds_sum"), values.get("step_seconds_count"))))
    return Sample("trainer", sampled_at, step=lead.get("step"), loss=lead.get("loss"),
                  tokens_per_second=lead.get("tokens_per_second"),
                  step_seconds=_ratio(lead.get("step_seconds_sum"), lead.get("step_seconds_count")),
                  step_seconds_sum=lead.get("step_seconds_sum"), step_count=lead.get("step_seconds_count"),
                  checkpoint_seconds_sum=lead.get("checkpoint_seconds_sum"),
                  checkpoint_count=lead.get("checkpoint_seconds_count"),
                  npu_percent=_mean([chip.percent for chip in chips]), chips=tuple(chips), pod_step_seconds=per_pod,
                  ranks=rank_readings(ranks), rejected_lines=len(refused), rejected=tuple(refused[:KEPT_REJECTIONS]),
                  unread=unread[:KEPT_REJECTIONS])


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
        "step_seconds_sum": f"max(ascend_trainer_step_seconds_sum{{{trainer}}})",
        "step_count": f"max(ascend_trainer_step_seconds_count{{{trainer}}})",
        "checkpoint_seconds_sum": f"max(ascend_trainer_checkpoint_seconds_sum{{{trainer}}})",
        "checkpoint_count": f"max(ascend_trainer_checkpoint_seconds_count{{{trainer}}})",
        "npu_percent": f"avg(npu_chip_info_utilization{{{exporter}}})",
        "hbm_percent": (f"100 * sum(npu_chip_info_hbm_used_memory{{{exporter}}}) / "
                        f"sum(npu_chip_info_hbm_total_memory{{{exporter}}})"),
    }


def prometheus_vector_queries(namespace: str, pod_regex: str) -> dict[str, str]:
    """PromQL answered with one series per chip (npu-exporter: labels `pod_name`, `id`) or per pod (`pod`)."""
    exporter = f'namespace="{namespace}",pod_name=~"{pod_regex}"'
    trainer = f'namespace="{namespace}",pod=~"{pod_regex}"'
    return {
        "chips": f"npu_chip_info_utilization{{{exporter}}}",
        "pod_step_seconds": (f"sum by (pod) (rate(ascend_trainer_step_seconds_sum{{{trainer}}}[2m])) / "
                             f"sum by (pod) (rate(ascend_trainer_step_seconds_count{{{trainer}}}[2m]))"),
        **{name: f"{name}{{{trainer}}}" for name in RANK_FIGURES},
    }


def _finite(value: float) -> bool:
    return value == value and value not in (float("inf"), float("-inf"))


def _readable(value: float) -> bool:
    return _finite(value) and abs(value) <= MAX_FIGURE


def from_prometheus(values: dict[str, float | None], sampled_at: datetime,
                    vectors: dict[str, list[tuple[dict, float]]] | None = None) -> Sample:
    """Scalar answers by figure, and the (labels, value) series of prometheus_vector_queries; a value that is not
    finite, or past MAX_FIGURE, is no value."""
    vectors = vectors or {}
    values = {key: value if value is not None and _readable(value) else None for key, value in values.items()}
    chips = tuple(ChipReading(labels.get("pod_name", "?"), labels.get("id", "?"), value)
                  for labels, value in vectors.get("chips", ()) if _readable(value))
    per_pod = tuple(sorted((labels.get("pod", "?"), value) for labels, value in vectors.get("pod_step_seconds", ())
                           if _readable(value) and value > 0))
    ranks: dict[tuple[str, int], dict[str, float]] = {}
    for name, field in RANK_FIGURES.items():
        for labels, value in vectors.get(name, ()):
            if _readable(value) and (rank := _rank_label(labels)) is not None:
                ranks.setdefault((labels.get("pod", "?"), rank), {})[field] = value
    return Sample("prometheus", sampled_at, step=values.get("step"), loss=values.get("loss"),
                  tokens_per_second=values.get("tokens_per_second"), step_seconds=values.get("step_seconds"),
                  npu_percent=values.get("npu_percent"), hbm_percent=values.get("hbm_percent"),
                  step_seconds_sum=values.get("step_seconds_sum"), step_count=values.get("step_count"),
                  checkpoint_seconds_sum=values.get("checkpoint_seconds_sum"),
                  checkpoint_count=values.get("checkpoint_count"), chips=chips, pod_step_seconds=per_pod,
                  ranks=rank_readings(ranks))


def _rounded(value: float | None, digits: int) -> float | None:
    return None if value is None or value != value else round(value, digits)  # NaN (no data) → None


def training_status(sample: Sample, total_steps: int) -> TrainingStatus:
    """status.training from a reading: the figures it has (none is written as null), the progress against
    spec.training.steps and the time left at the reading's step time."""
    step = int(sample.step) if sample.step is not None else None
    figures: dict[str, float | int | None] = {
        "step": step, "loss": _rounded(sample.loss, 6), "tokens_per_second": _rounded(sample.tokens_per_second, 1),
        "step_seconds": _rounded(sample.step_seconds, 4)}
    if step is not None:
        figures["progress_percentage"] = round(100.0 * min(step, total_steps) / total_steps, 2)
        if sample.step_seconds:
            figures["estimated_remaining_seconds"] = round(max(total_steps - step, 0) * sample.step_seconds, 1)
    return TrainingStatus(**{name: value for name, value in figures.items() if value is not None})


def utilization_status(sample: Sample) -> UtilizationStatus:
    """status.utilization from a reading: the figures it has, where they came from and when."""
    figures = {"npu_percent": _rounded(sample.npu_percent, 1), "hbm_percent": _rounded(sample.hbm_percent, 1)}
    return UtilizationStatus(source=sample.source, sampled_at=timestamp(sample.sampled_at),
                             **{name: value for name, value in figures.items() if value is not None})
