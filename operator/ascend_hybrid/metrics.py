"""The operator's Prometheus metrics (served on --metrics-port, default :8080/metrics)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

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
RECONCILE_ERRORS = Counter("ascend_hybrid_reconcile_errors_total", "Reconcile passes that raised", ["namespace"])
API_CALLS = Counter("ascend_hybrid_api_calls_total", "Kubernetes API calls made by the operator", ["verb", "resource"])
PODS_CREATED = Counter("ascend_hybrid_pods_created_total", "Pods the operator created")
