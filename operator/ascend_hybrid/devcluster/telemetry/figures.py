"""Pure side of the simulated telemetry: which pods the simulation serves metrics for, the figures a simulated
trainer (design §9) and the npu-exporter report at a given moment, and their Prometheus text.

Every figure is a function of (pod, time since the pod started): nothing is stored, so a restarted helper
serves the same numbers, and two helpers would agree. Defaults differ from pod to pod but are fixed by the pod's
namespace/name (a hash); tests pin them with the pod annotations below.

    sim.hybrid.ascend.dev/utilization        AI Core utilization of each chip, percent (default 70..95, wobbling)
    sim.hybrid.ascend.dev/chip-utilization   some chips' own utilization, e.g. "3=20,5=10" (chip id=percent): skews
                                             them against the others (LoadImbalanced)
    sim.hybrid.ascend.dev/step-seconds       seconds per training step (default 0.4..1.2), or "predicted": the job's
                                             predicted step (status.plan.time.stepSeconds) within ±PREDICTION_NOISE
    sim.hybrid.ascend.dev/slow-after-seconds + …/slow-step-seconds
                                             from that many seconds after the start, each step takes slow-step-seconds
                                             (Straggling)
    sim.hybrid.ascend.dev/stall-after-seconds  no step completes after that many seconds from the start
                                             (TrainingStalled)
    sim.hybrid.ascend.dev/hbm-used-percent   HBM in use on each chip, percent (default 55..85)
    sim.hybrid.ascend.dev/runtime: process or container   the pod runs the real trainer, which serves :9400 itself
The annotations are read at scrape time, so patching them on a running pod changes its figures from then on.

A slow node or link (`dev-cluster fault NODE --slow F`, `--slow-link PEER F`: annotations of the nodes) slows the
whole job the pod belongs to, as a synchronous job slows (coupled.py): its steps come at the pace of its slowest node
and link, and each rank's figures (ascend_trainer_rank_*: step, compute, wait) show whose compute it is.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from datetime import datetime

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString

from ascend_hybrid.devcluster.deviceplugin.allocation import held_chips
from ascend_hybrid.devcluster.telemetry import coupled

ANNOTATION_PREFIX = "sim.hybrid.ascend.dev/"
UTILIZATION_ANNOTATION = ANNOTATION_PREFIX + "utilization"
CHIP_UTILIZATION_ANNOTATION = ANNOTATION_PREFIX + "chip-utilization"
STEP_SECONDS_ANNOTATION = ANNOTATION_PREFIX + "step-seconds"
SLOW_AFTER_ANNOTATION = ANNOTATION_PREFIX + "slow-after-seconds"
SLOW_STEP_SECONDS_ANNOTATION = ANNOTATION_PREFIX + "slow-step-seconds"
STALL_AFTER_ANNOTATION = ANNOTATION_PREFIX + "stall-after-seconds"
HBM_USED_PERCENT_ANNOTATION = ANNOTATION_PREFIX + "hbm-used-percent"
PREDICTED = "predicted"  # step-seconds follow the planner's prediction for the job
# The declared noise of a simulated step time that follows the prediction: each job attempt runs at a fixed factor
# within ±5 % of it, so measured / predicted (the StepRatio column) reads 0.95-1.05 for a simulated job.
PREDICTION_NOISE = 0.05
RUNTIME_ANNOTATION = ANNOTATION_PREFIX + "runtime"
PROCESS_RUNTIME = "process"
CONTAINER_RUNTIME = "container"
REAL_RUNTIMES = (PROCESS_RUNTIME, CONTAINER_RUNTIME)  # the trainer really runs and serves its own endpoint
JOB_LABEL = "hybrid.ascend.dev/job"
# (group, version, plural) of the AscendHybridJobs whose predictions the simulation reads; devcluster imports nothing
# of the operator (tests/contract/test_layering.py), so the API's names are repeated here.
JOBS_RESOURCE = ("hybrid.ascend.dev", "v1alpha1", "ascendhybridjobs")
ATTEMPT_LABEL = "hybrid.ascend.dev/attempt"
POD_INDEX_LABEL = "hybrid.ascend.dev/pod-index"

TRAINER_PORT = 9400  # design §9; names.METRICS_PORT on the operator side
# The bundled trainer's buckets (ascend_hybrid_trainer.metrics, which the operator package must not import).
STEP_SECONDS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
CHECKPOINT_SECONDS_BUCKETS = (0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
HBM_TOTAL_MB = {"910A": 32768, "910B": 65536, "A3": 65536}  # per chip (A3: per die, as npu-smi lists them)
CHIP_MODEL = {"910A": "Ascend910A", "910B": "Ascend910B3", "A3": "Ascend910_9391"}
DEFAULT_CHIP = "910B"

SAMPLES_PER_STEP = 32             # global batch
TOKENS_PER_STEP = 32 * 2048       # global batch × sequence length
INITIAL_LOSS = math.log(32000)    # cross-entropy of a uniform guess over a 32k vocabulary
UTILIZATION_WOBBLE = 3.0          # ± percent around the default, so unpinned charts move
WOBBLE_PERIOD_SECONDS = 60.0


@dataclass(frozen=True)
class SimPod:
    """What the simulation needs of a Running pod that holds NPUs."""

    namespace: str
    name: str
    uid: str
    ip: str
    node: str
    container: str
    started_at: float                     # epoch seconds (status.startTime)
    chips: tuple[int, ...]
    annotations: dict = field(default_factory=dict, compare=False, hash=False)
    training_key: str = ""                # pods of one job attempt share their training figures
    job: str = ""                         # the AscendHybridJob's name (its pods' label)
    predicted_step_seconds: float | None = field(default=None, compare=False)  # the job's status.plan, if known
    index: int = 0                        # its pod index: its ranks are index × chips … + chips − 1
    coupling: coupled.Job | None = field(default=None, compare=False)  # its job's nodes and their faults, if known

    @property
    def serves_trainer_metrics(self) -> bool:
        """False when the real trainer runs (in a process or a container) and serves its own endpoint."""
        return self.annotations.get(RUNTIME_ANNOTATION) not in REAL_RUNTIMES

    @property
    def trainer_address(self) -> str:
        return f"{self.ip}:{TRAINER_PORT}"


def _epoch(timestamp: str | None) -> float | None:
    if not timestamp:
        return None
    try:
        return datetime.fromisoformat(timestamp).timestamp()
    except ValueError:
        return None


def sim_pod(pod: dict) -> SimPod | None:
    """The SimPod of a Running pod with an IP and allocated chips, else None (it gets no metrics)."""
    metadata, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    chips = held_chips(pod)
    started_at = _epoch(status.get("startTime"))
    if status.get("phase") != "Running" or not status.get("podIP") or not chips or started_at is None \
            or metadata.get("deletionTimestamp"):
        return None
    containers = spec.get("containers") or [{}]
    labels = metadata.get("labels") or {}
    job = labels.get(JOB_LABEL)
    namespace, name = metadata.get("namespace", ""), metadata.get("name", "")
    training_key = f"{namespace}/{job}/{labels.get(ATTEMPT_LABEL, '')}" if job else f"{namespace}/{name}"
    try:
        index = int(labels.get(POD_INDEX_LABEL, "0"))
    except ValueError:
        index = 0
    return SimPod(namespace=namespace, name=name, uid=metadata.get("uid", ""), ip=status["podIP"],
                  node=spec.get("nodeName", ""), container=containers[0].get("name", ""), started_at=started_at,
                  chips=chips, annotations=dict(metadata.get("annotations") or {}), training_key=training_key,
                  job=job or "", index=index)


# Figures ------------------------------------------------------------------------------------------------------
def _unit(*parts: object) -> float:
    """A number in [0, 1) fixed by `parts`: the simulation's only source of variety."""
    digest = hashlib.sha256("\0".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2 ** 64


def _pinned(annotations: dict, key: str, low: float, high: float) -> float | None:
    """An annotation's number, clamped to [low, high]; None when absent or not a number."""
    try:
        value = float(annotations[key])
    except (KeyError, TypeError, ValueError):
        return None
    return min(max(value, low), high) if math.isfinite(value) else None


def step_seconds(pod: SimPod) -> float:
    if pod.annotations.get(STEP_SECONDS_ANNOTATION) == PREDICTED and pod.predicted_step_seconds:
        factor = 1.0 + PREDICTION_NOISE * (2 * _unit(pod.training_key, "prediction-noise") - 1)
        return pod.predicted_step_seconds * factor
    pinned = _pinned(pod.annotations, STEP_SECONDS_ANNOTATION, 0.01, 3600.0)
    return pinned if pinned is not None else round(0.4 + 0.8 * _unit(pod.training_key, "step-seconds"), 3)


def predicted_step_seconds(job: dict) -> float | None:
    """status.plan.time.stepSeconds of an AscendHybridJob, when the operator has planned it."""
    value = (((job.get("status") or {}).get("plan") or {}).get("time") or {}).get("stepSeconds")
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def chip_pins(annotations: dict) -> dict[int, float]:
    """chip-utilization "3=20, 5=10" → {3: 20.0, 5: 10.0}, clamped to [0, 100]; unreadable items are skipped."""
    pins: dict[int, float] = {}
    for item in str(annotations.get(CHIP_UTILIZATION_ANNOTATION) or "").split(","):
        chip, _, value = item.partition("=")
        try:
            number = float(value)
        except ValueError:
            continue
        if chip.strip().isdigit() and math.isfinite(number):
            pins[int(chip)] = min(max(number, 0.0), 100.0)
    return pins


def chip_utilization(pod: SimPod, chip: int, now: float) -> float:
    """Percent, an integer as npu-smi reports it. A pinned value is exact (a chip's own pin first); a default one
    wobbles with time."""
    pinned = chip_pins(pod.annotations).get(chip)
    if pinned is None:
        pinned = _pinned(pod.annotations, UTILIZATION_ANNOTATION, 0.0, 100.0)
    if pinned is not None:
        return float(round(pinned))
    base = 70.0 + 25.0 * _unit(pod.namespace, pod.name, "utilization")
    phase = 2 * math.pi * _unit(pod.namespace, pod.name, chip, "phase")
    wobble = UTILIZATION_WOBBLE * math.sin(2 * math.pi * (now - pod.started_at) / WOBBLE_PERIOD_SECONDS + phase)
    return float(round(min(max(base + wobble, 0.0), 100.0)))


def chip_hbm_used_mb(pod: SimPod, chip: int, total_mb: int) -> int:
    pinned = _pinned(pod.annotations, HBM_USED_PERCENT_ANNOTATION, 0.0, 100.0)
    percent = pinned if pinned is not None else 55.0 + 30.0 * _unit(pod.namespace, pod.name, chip, "hbm")
    return round(total_mb * percent / 100.0)


def loss_at(training_key: str, step: int) -> float:
    """Falls from ln(vocab) towards a floor, exponentially in steps, with ±2% step-to-step noise."""
    floor = 1.8 + 0.6 * _unit(training_key, "floor")
    steps_to_settle = 200.0 + 400.0 * _unit(training_key, "tau")
    noise = 1.0 + 0.04 * (_unit(training_key, "noise", step) - 0.5)
    return (floor + (INITIAL_LOSS - floor) * math.exp(-step / steps_to_settle)) * noise


def grad_norm_at(training_key: str, step: int) -> float:
    """Settles with the loss from about 2 towards a floor of 0.3-0.6, with ±10% noise: far inside the trainer's
    divergence check (100 × the running median), as a healthy run is."""
    floor = 0.3 + 0.3 * _unit(training_key, "grad-floor")
    steps_to_settle = 200.0 + 400.0 * _unit(training_key, "tau")
    noise = 1.0 + 0.2 * (_unit(training_key, "grad-noise", step) - 0.5)
    return (floor + (2.0 - floor) * math.exp(-step / steps_to_settle)) * noise


@dataclass(frozen=True)
class TrainerFigures:
    step: int
    loss: float
    grad_norm: float
    tokens_per_second: float
    step_seconds: float
    samples_total: int
    npu_utilization: dict[str, float]  # device (chip id as text) → percent
    phases: tuple[tuple[int, float], ...] = ()  # (steps, seconds each): what the step-time histogram observed
    ranks: tuple[tuple[int, float, float, float], ...] = ()  # (rank, step, compute, wait) of its recent steps


def step_phases(pod: SimPod, now: float) -> tuple[tuple[int, float], ...]:
    """(steps, seconds each) completed by `now`: at step-seconds, then at slow-step-seconds from slow-after-seconds
    on; none after stall-after-seconds."""
    base = step_seconds(pod)
    elapsed = max(now - pod.started_at, 0.0)
    stall = _pinned(pod.annotations, STALL_AFTER_ANNOTATION, 0.0, 1e9)
    if stall is not None:
        elapsed = min(elapsed, stall)
    slow_after = _pinned(pod.annotations, SLOW_AFTER_ANNOTATION, 0.0, 1e9)
    slow = _pinned(pod.annotations, SLOW_STEP_SECONDS_ANNOTATION, 0.01, 3600.0)
    if (slow_after is None or slow is None) and pod.coupling is not None and not pod.coupling.healthy:
        return coupled_phases(pod.coupling, base, pod.started_at, elapsed)
    if slow_after is None or slow is None or elapsed <= slow_after:
        return ((int(elapsed // base), base),)
    first = int(slow_after // base)
    return ((first, base), (int((elapsed - first * base) // slow), slow))


def coupled_phases(job: coupled.Job, base: float, start: float, elapsed: float) -> tuple[tuple[int, float], ...]:
    """(steps, seconds each) of a job whose pace changed with its nodes' and links' faults: whole steps, the
    fraction of one carried from piece to piece."""
    phases, done = [], 0.0
    for seconds, factor in job.segments(start, start + elapsed):
        each = base * factor
        before, done = done, done + seconds / each
        phases.append((int(done) - int(before), each))
    return tuple(phases) or ((0, base),)


def rank_figures(pod: SimPod, now: float) -> tuple[tuple[int, float, float, float], ...]:
    """(rank, step, compute, wait) of each of the pod's ranks (one per chip): coupled with its job's other nodes."""
    job = pod.coupling or coupled.Job((pod.node,), {}, {})
    base = step_seconds(pod)
    first = pod.index * len(pod.chips)
    return tuple((rank, *job.rank(pod.training_key, rank, pod.node, base, now))
                 for rank in range(first, first + len(pod.chips)))


def trainer_figures(pod: SimPod, now: float) -> TrainerFigures:
    """What the pod's trainer reports `now`: one step every step_seconds since the pod started (slower, or none,
    where the annotations say)."""
    phases = step_phases(pod, now)
    step = sum(count for count, _ in phases)
    seconds = phases[-1][1]
    jitter = 1.0 + 0.04 * (_unit(pod.training_key, "throughput", step) - 0.5)
    return TrainerFigures(step=step, loss=loss_at(pod.training_key, step),
                          grad_norm=grad_norm_at(pod.training_key, step),
                          tokens_per_second=TOKENS_PER_STEP / seconds * jitter, step_seconds=seconds,
                          samples_total=step * SAMPLES_PER_STEP,
                          npu_utilization={str(c): chip_utilization(pod, c, now) for c in pod.chips},
                          phases=phases, ranks=rank_figures(pod, now))


@dataclass(frozen=True)
class ChipReading:
    """One npu-exporter row: an allocated chip and its figures."""

    pod: SimPod
    chip: int
    model: str
    utilization: float
    hbm_used_mb: int
    hbm_total_mb: int


def exporter_readings(pods: list[SimPod], chip_of_node: dict[str, str], now: float) -> list[ChipReading]:
    rows = []
    for pod in sorted(pods, key=lambda p: (p.node, p.namespace, p.name)):
        chip_kind = chip_of_node.get(pod.node, DEFAULT_CHIP)
        total = HBM_TOTAL_MB.get(chip_kind, HBM_TOTAL_MB[DEFAULT_CHIP])
        for chip in pod.chips:
            rows.append(ChipReading(pod, chip, CHIP_MODEL.get(chip_kind, CHIP_MODEL[DEFAULT_CHIP]),
                                    chip_utilization(pod, chip, now), chip_hbm_used_mb(pod, chip, total), total))
    return rows


# Prometheus text ---------------------------------------------------------------------------------------------
class _Families:
    def __init__(self, families: list):
        self.families = families

    def collect(self):
        return self.families


def exposition(families: list) -> bytes:
    """Prometheus text format (what prometheus_client serves, content type CONTENT_TYPE_LATEST)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(families))
    return generate_latest(registry)


def histogram_buckets(observations: int, each_seconds: float, *more: tuple[int, float]) -> list[tuple[str, float]]:
    """Cumulative buckets of `observations` steps that all took `each_seconds` (and of each (steps, seconds) more)."""
    phases = ((observations, each_seconds), *more)
    buckets: list[tuple[str, float]] = [
        (floatToGoString(bound), sum(count for count, seconds in phases if seconds <= bound))
        for bound in STEP_SECONDS_BUCKETS]
    return buckets + [("+Inf", sum(count for count, _ in phases))]


def trainer_families(figures: TrainerFigures) -> list:
    step = GaugeMetricFamily("ascend_trainer_step", "Last completed training step.", value=figures.step)
    loss = GaugeMetricFamily("ascend_trainer_loss", "Loss of the whole global batch at the last step.",
                             value=figures.loss)
    grad_norm = GaugeMetricFamily("ascend_trainer_grad_norm", "Global L2 norm of the gradients of the whole global "
                                  "batch at the last step, before clipping.", value=figures.grad_norm)
    tokens = GaugeMetricFamily("ascend_trainer_tokens_per_second",
                               "Tokens of the global batch per second of step time, last step.",
                               value=figures.tokens_per_second)
    phases = figures.phases or ((figures.step, figures.step_seconds),)
    seconds = HistogramMetricFamily("ascend_trainer_step_seconds", "Wall time of a training step.",
                                    buckets=histogram_buckets(*phases[0], *phases[1:]),
                                    sum_value=sum(count * each for count, each in phases))
    # the simulated trainer saves no checkpoint: the series is there, empty, as the real one's before its first save
    saves = HistogramMetricFamily("ascend_trainer_checkpoint_seconds", "Wall time of a checkpoint save that blocked "
                                  "training (the save and its commit).",
                                  buckets=[(floatToGoString(bound), 0) for bound in CHECKPOINT_SECONDS_BUCKETS]
                                  + [("+Inf", 0)], sum_value=0.0)
    samples = CounterMetricFamily("ascend_trainer_samples", "Samples of the global batch trained on since this "
                                  "process started.", value=figures.samples_total)
    utilization = GaugeMetricFamily("ascend_trainer_npu_utilization_percent",
                                    "AI Core utilization of each NPU of this pod, from npu-smi.", labels=["device"])
    for device, value in sorted(figures.npu_utilization.items(), key=lambda item: int(item[0])):
        utilization.add_metric([device], value)
    return [step, loss, grad_norm, tokens, seconds, saves, samples, utilization, *rank_families(figures)]


def rank_families(figures: TrainerFigures) -> list:
    """The trainer's per-rank timing series (ascend_hybrid_trainer.metrics.RankTimingCollector's names)."""
    step = GaugeMetricFamily("ascend_trainer_rank_step_seconds", "Mean wall time of this rank's recent steps.",
                             labels=["rank"])
    compute = GaugeMetricFamily("ascend_trainer_rank_compute_seconds", "Mean seconds of this rank's own compute "
                                "(forward and backward) in its recent steps.", labels=["rank"])
    wait = GaugeMetricFamily("ascend_trainer_rank_wait_seconds", "Mean seconds of its recent steps spent in the "
                             "collectives and the update (waiting for the slowest rank).", labels=["rank"])
    last = GaugeMetricFamily("ascend_trainer_rank_step", "The last step this rank completed.", labels=["rank"])
    for rank, seconds, own, waited in figures.ranks:
        label = [str(rank)]
        step.add_metric(label, seconds)
        compute.add_metric(label, own)
        wait.add_metric(label, waited)
        last.add_metric(label, figures.step)
    return [step, compute, wait, last] if figures.ranks else []


EXPORTER_LABELS = ["id", "model_name", "namespace", "pod_name", "container_name"]


def exporter_families(readings: list[ChipReading]) -> list:
    utilization = GaugeMetricFamily("npu_chip_info_utilization", "the ai core utilization", labels=EXPORTER_LABELS)
    used = GaugeMetricFamily("npu_chip_info_hbm_used_memory", "the npu hbm used memory (MB)", labels=EXPORTER_LABELS)
    total = GaugeMetricFamily("npu_chip_info_hbm_total_memory", "the npu hbm total memory (MB)",
                              labels=EXPORTER_LABELS)
    for row in readings:
        labels = [str(row.chip), row.model, row.pod.namespace, row.pod.name, row.pod.container]
        utilization.add_metric(labels, row.utilization)
        used.add_metric(labels, row.hbm_used_mb)
        total.add_metric(labels, row.hbm_total_mb)
    return [utilization, used, total]


def trainer_text(pod: SimPod, now: float) -> bytes:
    return exposition(trainer_families(trainer_figures(pod, now)))


def exporter_text(pods: list[SimPod], chip_of_node: dict[str, str], now: float) -> bytes:
    return exposition(exporter_families(exporter_readings(pods, chip_of_node, now)))
