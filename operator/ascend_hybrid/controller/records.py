"""What the controller keeps per job beyond the API objects (`JobRecord`), and the watched state it reads
(`Indexes`: kopf's indexes and the pod watch's store, as plain lists)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from ascend_hybrid.contracts.ascend import DeviceInfo, DevicePlugins, device_infos_by_node
from ascend_hybrid.diagnosis.refusals import Refusal
from ascend_hybrid.gang import backlog
from ascend_hybrid.monitoring.progress import Sample
from ascend_hybrid.planner.observed import Reading
from ascend_hybrid.reconcile.actions import PostEvent

JobKey = tuple[str, str]


@dataclass
class JobRecord:
    """What this process knows of one job beyond the API objects; dropped when the job goes."""

    phase: str = "Pending"
    attempt: int = 1
    step_time_ratio: float | None = None        # status.plan.stepTimeRatio, for the metric
    goodput: float | None = None                # status.goodput, for the metric
    goodput_seconds: dict | None = None         # status.goodputAccount.seconds: the buckets, for the metric
    slow_node: dict | None = None               # status.slowness.confirmed: the node SlowNode names, for the metric
    reading: Reading | None = None              # steady measured / predicted step (the observed-efficiency book)
    pending_reason: str = "Waiting"
    failures: int = 0                           # consecutive passes that raised
    last_written: str | None = None             # resourceVersion of our last status patch
    job: dict | None = None                     # the job as our last write left it, until anyone else changes it
    job_since: float = 0.0                      # when `job` was read or written (monotonic)
    written_at: float = 0.0                     # when our last status patch was made (monotonic)
    unwritten: dict | None = None               # a one-pod job's status decided since its placement, not written yet
    unwritten_since: float = 0.0                # when it was placed (monotonic; Controller.defer_placement)
    unwritten_uid: str | None = None            # the uid of the job it was decided for
    events: list[PostEvent] = field(default_factory=list)  # this pass's events, posted when it ends
    sample: Sample | None = None                # latest telemetry of the current attempt
    promised: dict[str, tuple[str, int]] = field(default_factory=dict)  # pod name → (node, chips) not yet seen
    children_generation: int | None = None      # generation whose Services and ConfigMaps are applied
    children_data: int | None = None            # the data degree job.json was applied for (elastic jobs change it)
    sched_ip: str | None = None
    rank_table: dict | None = None
    rank_table_revision: int = 0                # the rank-table ConfigMap's `version` counter, as last seen
    rank_table_read: bool = False
    job_config: str | None = None               # job.json as last applied beside the table (rings-config-<job>)
    recovery_data: dict | None = None           # data of LauncherChannel <job>-recovery (recovery.py)
    recovery_read: bool = False
    granted: tuple[str, float] | None = None    # (job uid, when) its launchers' grant was last created (children.py)
    old_slices_gone: bool = False               # Kubernetes' slices of a headless <job> that had a selector: deleted
    in_flight: dict[str, float] = field(default_factory=dict)  # pod name → when this process created/released it
    refusal: Refusal | None = None              # the apiserver's last refusal of a write, until one succeeds
    lost_sched_ip: str | None = None            # <job>-sched was deleted: create it again with this IP
    children_epoch: int = 0                     # counts children deleted; a pass that saw one applies again
    waiting: bool = False                       # Pending for chips that others hold: younger jobs wait behind it
    held_since: float | None = None             # held back behind an older job since (monotonic), none tried since
    pass_cpu: float = 0.0                       # CPU seconds its last pass took in its worker (thread time)
    unready: frozenset[str] = frozenset()       # a starting attempt's pods not yet ready for the rank table
    ready_seen: set[str] = field(default_factory=set)  # pods seen ready since the last pass that waited for none
    chip: str = ""
    queue_key: backlog.QueueKey = ("", "", "")

    def recent(self, horizon_seconds: float) -> frozenset[str]:
        horizon = time.monotonic() - horizon_seconds
        for name, since in list(self.in_flight.items()):
            if since < horizon:
                del self.in_flight[name]
        return frozenset(self.in_flight)

    def touched(self, pod_names: Iterable[str]) -> None:
        now = time.monotonic()
        self.in_flight.update((name, now) for name in pod_names)


@dataclass
class Indexes:
    """The kopf indexes as plain lists (copied: kopf writes them on its loop thread while workers read)."""

    nodes: Callable[[], list[dict]]
    npu_pods: Callable[[], list[dict]]
    job_pods: Callable[[JobKey], list[dict]]
    device_infos: Callable[[], list[dict]]
    jobs: Callable[[], list[backlog.Entry]] = list  # every job's placement as its status says (handlers.ahj_jobs)
    evicted_pods: Callable[[JobKey], list[dict]] = lambda key: []  # gone pods Kueue evicted (podwatch.PodStore)
    # node name → Node and → DeviceInfo, read by every pass: the stores keep them until they change
    # (handlers.bind_indexes); built anew each call where no store is bound (tests)
    node_map: Callable[[], Mapping[str, dict]] | None = None
    device_info_map: Callable[[], Mapping[str, DeviceInfo]] | None = None
    # each node's device-plugin mode (the DaemonSets' flags, or the operator's setting)
    device_plugins: Callable[[], DevicePlugins] = DevicePlugins

    def nodes_by_name(self) -> Mapping[str, dict]:
        return self.node_map() if self.node_map is not None else nodes_by_name(self.nodes())

    def device_infos_by_node(self) -> Mapping[str, DeviceInfo]:
        return self.device_info_map() if self.device_info_map is not None else \
            device_infos_by_node(self.device_infos())


def nodes_by_name(nodes: Iterable[dict]) -> dict[str, dict]:
    return {node["metadata"]["name"]: node for node in nodes}
