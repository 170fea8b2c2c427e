"""Every tunable of the operator process, built once from the command line (`ascend-hybrid run`)."""

from __future__ import annotations

from dataclasses import dataclass

from ..reconcile import NODE_NOT_READY_GRACE_SECONDS


@dataclass(frozen=True)
class OperatorSettings:
    namespaces: tuple[str, ...] = ()           # empty: every namespace
    kubeconfig: str | None = None
    metrics_port: int = 8080                   # 0: off
    health_port: int = 8081                    # 0: off
    bind_address: str = "0.0.0.0"
    workers: int = 4                           # reconcile worker threads
    node_grace_seconds: float = NODE_NOT_READY_GRACE_SECONDS
    prometheus_url: str | None = None
    telemetry_interval: float = 30.0
    hardware_profiles: str | None = None       # a YAML file of planner hardware profiles (--hardware-profiles)
    log_level: str = "INFO"
    # reconcile loop
    max_steps_per_pass: int = 6                # decide → execute rounds per pass before waiting for the watch
    error_backoff_seconds: tuple[float, ...] = (1, 2, 5, 10, 30, 60)
    in_flight_seconds: float = 15.0            # how long a just-created or just-released pod may stay unseen
    # API calls
    api_attempts: int = 6
    parallel_calls: int = 16                   # pod creations / gate removals in flight at once
    first_backoff_seconds: float = 0.2
    # telemetry
    telemetry_http_timeout: float = 3.0

    @property
    def watches_cluster(self) -> bool:
        return not self.namespaces
