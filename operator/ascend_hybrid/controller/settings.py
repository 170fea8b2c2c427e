"""Every tunable of the operator process, built once from the command line (`ascend-hybrid run`)."""

from __future__ import annotations

from dataclasses import dataclass

from ascend_hybrid.contracts.ascend import DEVICE_PLUGIN_NAMESPACE
from ascend_hybrid.contracts.names import DEFAULT_EXPANDER_IMAGE
from ascend_hybrid.reconcile.state import NODE_NOT_READY_GRACE_SECONDS


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
    # each node's device-plugin mode: auto (from the device plugin's DaemonSets in that namespace), kubelet or
    # volcano for every node (contracts/ascend.DevicePlugins)
    device_plugin_mode: str = "auto"
    device_plugin_namespace: str = DEVICE_PLUGIN_NAMESPACE
    # the scheduler of jobs that name none (spec.scheduling.schedulerName): None binds them itself, "volcano" runs
    # them through Volcano (contracts/volcano.py)
    default_scheduler: str | None = None
    log_level: str = "INFO"
    log_format: str = "text"                   # or json: one object per line (controller/logs.py)
    watch_timeout_seconds: int = 300           # the watches' server timeout (client timeout: +10 %, ≥ 5 s)
    # reconcile loop
    max_steps_per_pass: int = 6                # decide → execute rounds per pass before waiting for the watch
    error_backoff_seconds: tuple[float, ...] = (1, 2, 5, 10, 30, 60)
    in_flight_seconds: float = 15.0            # how long a just-created or just-released pod may stay unseen
    job_cache_seconds: float = 30.0            # a job our last write returned is read again after this, at most
    status_coalesce_seconds: float = 5.0       # pod counts, messages, a gang's start: written at most this often
    # API calls
    api_attempts: int = 6
    parallel_calls: int = 16                   # pod creations / gate removals in flight at once
    first_backoff_seconds: float = 0.2
    # telemetry
    telemetry_http_timeout: float = 3.0
    # leader election (leader.py): off unless --leader-elect; the namespace defaults to the operator's own
    leader_elect: bool = False
    lease_name: str = "ascend-hybrid-operator"
    lease_namespace: str | None = None
    lease_seconds: int = 10
    lease_renew_deadline_seconds: float = 7.0
    lease_retry_seconds: float = 2.0
    # security (metrics_auth.py, network policies)
    metrics_auth: bool = False                 # /metrics only for a token allowed to get it (TokenReview + SAR)
    metrics_cert_dir: str | None = None        # tls.crt + tls.key for the metrics endpoint; default: self-signed
    network_policy: bool = False               # one NetworkPolicy per job (render.network_policy)
    ranktable_expander_image: str = DEFAULT_EXPANDER_IMAGE  # the rank-table expander of large jobs' pods
    metrics_peers: tuple = ()                  # NetworkPolicyPeers admitted to the trainers' :9400
    mark_slow_nodes: bool = False              # the node condition AscendSlowNode on a node found slow twice

    @property
    def watches_cluster(self) -> bool:
        return not self.namespaces
