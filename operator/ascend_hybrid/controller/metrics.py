"""The operator's Prometheus metrics (served on --metrics-port, default :8080/metrics)."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

from prometheus_client import Counter, Gauge, Histogram

from ascend_hybrid.contracts.conditions import parse_time
from ascend_hybrid.spec.causes import CAUSES

SECONDS_BUCKETS = (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800)

JOBS = Gauge("ascend_hybrid_jobs", "AscendHybridJobs by phase", ["namespace", "phase"])
JOBS_PENDING = Gauge("ascend_hybrid_jobs_pending", "Jobs waiting for placement, by reason", ["reason"])
TIME_TO_RUNNING = Histogram("ascend_hybrid_job_time_to_running_seconds",
                            "From the job's creation (or its attempt's placement) to Running with the rank table completed",
                            buckets=SECONDS_BUCKETS)
PLACEMENT_SECONDS = Histogram("ascend_hybrid_placement_seconds", "Time to compute one gang placement",
                              buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.2, 0.5, 1, 2, 5))
RANK_TABLE_SECONDS = Histogram("ascend_hybrid_rank_table_seconds",
                               "From the gang's release to the rank table completed", buckets=SECONDS_BUCKETS)
RESTARTS = Counter("ascend_hybrid_job_restarts_total", "Whole-gang restarts", ["namespace", "reason"])
FAILURES = Counter("ascend_hybrid_job_failures_total",
                   "Failed attempts by cause (status.lastFailure.cause), whatever the failure policy did", ["namespace", "cause"])
RECONCILE_SECONDS = Histogram("ascend_hybrid_reconcile_seconds",
                              "One reconcile pass of one job (observe, decide, execute, status write), by outcome",
                              ["outcome"], buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
RECONCILE_ERRORS = Counter("ascend_hybrid_reconcile_errors_total", "Reconcile passes that raised", ["namespace"])
POD_WATCH_RESTARTS = Counter("ascend_hybrid_pod_watch_restarts_total",
                             "Pod watches started again: gone (410, listed again) or error (retried with backoff)",
                             ["reason"])
API_CALLS = Counter("ascend_hybrid_api_calls_total", "Kubernetes API calls made by the operator", ["verb", "resource"])
PODS_CREATED = Counter("ascend_hybrid_pods_created_total", "Pods the operator created")
RECOVERY_SECONDS = Histogram("ascend_hybrid_recovery_seconds",
                             "From a failure's detection to the first training step after its recovery "
                             "(status.recoveries[].seconds), by the rung that brought training back and the cause",
                             ["rung", "cause"], buckets=SECONDS_BUCKETS)
GOODPUT_RATIO = Gauge("ascend_hybrid_goodput_ratio",
                      "Fraction of wall time since each running job first ran that went to steps that were kept "
                      "(status.goodput)", ["namespace", "job"])
REJECTED_INPUTS = Counter("ascend_hybrid_rejected_inputs_total",
                          "Inputs from pods and ConfigMaps ignored: launcher reports (malformed, or not of a pod of "
                          "the current attempt), rank tables, trainer metrics pages and lines, Prometheus answers; "
                          "by kind and reason", ["kind", "reason"])
GOODPUT_SECONDS = Gauge("ascend_hybrid_goodput_seconds",
                        "Wall time since each running job first started, by bucket (status.goodputAccount.seconds: "
                        "productive, slowSteps, redoneSteps, checkpointSaves, startsAndRestarts, "
                        "waitingForPlacement); the buckets add up to the wall time accounted", ["namespace", "job",
                                                                                                 "bucket"])
SLOW_NODE = Gauge("ascend_hybrid_slow_node_compute_ratio",
                  "The node each running job's condition SlowNode names: its ranks' compute over their peers' "
                  "median (status.slowness.confirmed.ratio)", ["namespace", "job", "node"])
PLAN_STEP_TIME_RATIO = Gauge("ascend_hybrid_plan_step_time_ratio",
                             "Measured / predicted step seconds of each running job (status.plan.stepTimeRatio)",
                             ["namespace", "job"])


def record_transition(namespace: str, job: dict, old: dict, new: dict) -> None:
    """Failures, counted when status.lastFailure changes; time to running, rank-table latency and restarts, when a
    job's phase changes."""
    failure = new.get("lastFailure")
    if failure and failure != old.get("lastFailure"):
        cause = failure.get("cause")
        FAILURES.labels(namespace=namespace, cause=cause if cause in CAUSES else "Unknown").inc()
    for record in newly_recovered(old.get("recoveries") or [], new.get("recoveries") or []):
        RECOVERY_SECONDS.labels(rung=record["recoveredBy"], cause=record.get("cause", "Unknown")).observe(
            float(record["seconds"]))
    before, after = old.get("phase"), new.get("phase")
    if after == before:
        return
    conditions = {c["type"]: c for c in new.get("conditions", [])}
    if after == "Running":
        now = datetime.now(UTC)
        created = parse_time(job["metadata"].get("creationTimestamp"))
        if created and int(new.get("attempt") or 1) == 1:
            TIME_TO_RUNNING.observe((now - created).total_seconds())
        placed = conditions.get("Placed")
        released = parse_time(placed.get("lastTransitionTime")) if placed else None
        if released:
            RANK_TABLE_SECONDS.observe((now - released).total_seconds())
    if after == "Restarting":
        RESTARTS.labels(namespace=namespace, reason=(conditions.get("Restarting") or {}).get("reason", "Unknown")).inc()


def newly_recovered(old: list[dict], new: list[dict]) -> list[dict]:
    """Incidents of the ledger that this status change saw recovered (matched by their detection time and cause:
    the ledger only appends and drops its oldest)."""
    before = {(r.get("detected"), r.get("cause")) for r in old if r.get("outcome") == "Recovered"}
    return [r for r in new if r.get("outcome") == "Recovered" and r.get("seconds") is not None
            and r.get("recoveredBy") and (r.get("detected"), r.get("cause")) not in before]


def publish_job_gauges(records) -> None:
    """`ascend_hybrid_jobs{namespace,phase}` and `ascend_hybrid_jobs_pending{reason}` from (key, JobRecord) pairs."""
    counts: dict[tuple[str, str], int] = {}
    pending: dict[str, int] = {}
    for (namespace, _), record in records:
        counts[(namespace, record.phase)] = counts.get((namespace, record.phase), 0) + 1
        if record.phase == "Pending":
            pending[record.pending_reason] = pending.get(record.pending_reason, 0) + 1
    JOBS.clear()
    for (namespace, phase), count in counts.items():
        JOBS.labels(namespace=namespace, phase=phase).set(count)
    JOBS_PENDING.clear()
    for reason, count in pending.items():
        JOBS_PENDING.labels(reason=reason).set(count)
    PLAN_STEP_TIME_RATIO.clear()
    GOODPUT_RATIO.clear()
    GOODPUT_SECONDS.clear()
    SLOW_NODE.clear()
    for (namespace, name), record in records:
        if record.step_time_ratio is not None and record.phase == "Running":
            PLAN_STEP_TIME_RATIO.labels(namespace=namespace, job=name).set(record.step_time_ratio)
        if record.goodput is not None and record.phase in ("Running", "Restarting"):
            GOODPUT_RATIO.labels(namespace=namespace, job=name).set(record.goodput)
        slow = record.slow_node or {}
        if slow.get("node") and slow.get("ratio") is not None and record.phase in ("Running", "Restarting"):
            SLOW_NODE.labels(namespace=namespace, job=name, node=slow["node"]).set(float(slow["ratio"]))
        if record.goodput_seconds and record.phase in ("Running", "Restarting"):
            for bucket, seconds in record.goodput_seconds.items():
                GOODPUT_SECONDS.labels(namespace=namespace, job=name, bucket=bucket).set(float(seconds))


def publishing_loop(controller, interval: float = 5.0) -> Callable[[], None]:
    def metrics() -> None:
        while not controller.queue.closed:
            publish_job_gauges(list(controller.jobs.items()))
            time.sleep(interval)
    return metrics
