"""One reconcile pass's state (pure): what it observed (Observed), what it decides (Decision), and the Pass the
steps share — its helpers write conditions, the phase, requeues, the attempt's endings and the terminal outcomes.
The steps themselves are functions of a Pass: decision.py (the main flow), queue_steps.py, failure_steps.py,
telemetry_steps.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Concatenate, ParamSpec

from ascend_hybrid.contracts import kueue, names
from ascend_hybrid.contracts import volcano as volcanos
from ascend_hybrid.contracts.ascend import DeviceInfo
from ascend_hybrid.contracts.chips import CHIPS
from ascend_hybrid.contracts.conditions import parse_time, timestamp
from ascend_hybrid.contracts.podview import (
    TERMINAL_POD_PHASES,
    attempt_of,
    is_deleting,
    live_names,
    phase_of,
    pod_counts,
    pod_index,
)
from ascend_hybrid.diagnosis import recovery
from ascend_hybrid.diagnosis.checkpointing import NodeFaults
from ascend_hybrid.diagnosis.recovery import LauncherReport
from ascend_hybrid.diagnosis.refusals import Refusal
from ascend_hybrid.gang import ranktable, render
from ascend_hybrid.gang.placement import GangRequest
from ascend_hybrid.monitoring import anomalies
from ascend_hybrid.monitoring.progress import Sample
from ascend_hybrid.planner.hardware import Hardware
from ascend_hybrid.planner.observed import Observed as ObservedFactor
from ascend_hybrid.reconcile import status_edge
from ascend_hybrid.reconcile.actions import (
    Action,
    DeleteJob,
    DeletePodGroups,
    DeletePods,
    DeleteWorkloads,
    PostEvent,
    WriteRankTable,
)
from ascend_hybrid.spec import conditions
from ascend_hybrid.spec.api import (
    AscendHybridJobStatus,
    Condition,
    PlacementStatus,
    PodCounts,
    RankTableStatus,
    RecoveryState,
)
from ascend_hybrid.spec.resolved import ResolvedJob

Params = ParamSpec("Params")
NODE_NOT_READY_GRACE_SECONDS = 30.0
SLOW_REQUEUE_SECONDS = 30.0
FAST_REQUEUE_SECONDS = 2.0


@dataclass(frozen=True)
class Observed:
    job: dict
    resolved: ResolvedJob | None
    spec_problems: tuple[str, ...]
    pods: tuple[dict, ...]          # every pod labelled with this job, all attempts
    rank_table: dict | None         # hccl.json now in the ConfigMap; None when the ConfigMap is missing
    children_ready: bool            # Services and ConfigMaps applied for this generation
    sched_ip: str | None
    nodes: Mapping[str, dict]       # node name → Node, for NotReady detection and super-pod ids
    now: datetime
    node_grace_seconds: float = NODE_NOT_READY_GRACE_SECONDS
    in_flight: frozenset[str] = frozenset()  # pods this process just created or released; the watch may lag
    telemetry: Sample | None = None           # latest progress/utilization reading of the current attempt
    device_infos: Mapping[str, DeviceInfo] = field(default_factory=dict)  # node → MindCluster deviceinfo
    hardware_profiles: Mapping[str, Hardware] = field(default_factory=dict)  # the planner's, by name (--hardware-profiles)
    observed_efficiency: Mapping[str, ObservedFactor] = field(default_factory=dict)  # profile → the cluster's factor
    workload: Mapping | None = None           # the Kueue Workload of the current attempt (queued jobs; queue_steps.py)
    evicted_pods: tuple[dict, ...] = ()       # this job's pods Kueue evicted that are gone (all attempts)
    refusal: Refusal | None = None            # the apiserver's last refusal of this job's writes (refusals.py)
    rank_table_revision: int = 0              # the rank-table ConfigMap's `version` counter
    expander_image: str = names.DEFAULT_EXPANDER_IMAGE  # of the rank-table expander (--ranktable-expander-image)
    launcher_generation: int | None = None    # the rank generation <job>-recovery holds (None: not written yet)
    launcher_world: str | None = None         # the world it holds beside it (pods an elastic shrink kept)
    launcher_checkpoint: str | None = None    # the checkpoint interval it holds beside it (everySteps: auto)
    node_faults: NodeFaults | None = None     # the cluster's node faults, for the auto checkpoint interval
    launchers: Mapping[str, LauncherReport] = field(default_factory=dict)  # pod name → its launcher's report
    children_data: int | None = None          # the data degree job.json was applied for (None: not known)
    default_scheduler: str | None = None      # the operator's --scheduler: volcano runs jobs that name none there
    podgroup: Mapping | None = None           # Volcano: the current attempt's PodGroup, when podgroup_read
    podgroup_read: bool = False               # whether the shell read it this pass (it does while a gang starts)

    def sched_known(self, job: ResolvedJob) -> bool:
        """The pods' MS_SCHED_HOST can be rendered: `<job>-sched`'s ClusterIP read, or a job without Services."""
        return self.sched_ip is not None or not render.needs_services(job)


@dataclass
class Decision:
    actions: list[Action] = field(default_factory=list)
    status: dict = field(default_factory=dict)
    requeue_after: float | None = None
    # Its status is not written: a job held back only behind one not tried yet is placed a moment later, so a
    # burst of jobs would each write a Queued status that the placement overwrites (placing.place).
    provisional: bool = False

    def emit(self, event_type: str, reason: str, message: str) -> None:
        self.actions.append(PostEvent(event_type, reason, message))

    def act(self, action: Action) -> None:
        self.actions.append(action)


@dataclass
class Recorded:
    """What a function the shell runs on the job's status decided beside its edits to it: the events to post and
    when to look again."""

    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)
    requeue_after: float | None = None


def applied(record: Callable[Concatenate[AscendHybridJobStatus, Params], Recorded], raw: Mapping[str, Any],
            *args: Params.args, **kwargs: Params.kwargs) -> Decision:
    """The shell's edge with a function of the core that edits a job's status (placement_record's, elastic_steps.
    probed): `raw` (the status a pass decided, as a dict) parsed, `record` run on it, the result dumped into the
    Decision the shell executes. `raw` is left as it was."""
    parsed = status_edge.parse(raw)
    outcome = record(parsed.model, *args, **kwargs)
    decision = Decision(status=status_edge.dump(parsed), requeue_after=outcome.requeue_after)
    for event in outcome.events:
        decision.emit(*event)
    return decision


class Pass:
    """One reconcile pass: steps read `o` (the observation) and write `d` (the decision) and `s`, the job's status
    as its typed model. The status is parsed once here and dumped once into `d.status` when decide() ends
    (serialised); the transitions the steps share (end_attempt, restarting, pending_again, place_anew, fail,
    finished) are methods."""

    def __init__(self, observed: Observed):
        self.o = observed
        self.job = observed.job
        self.meta = observed.job["metadata"]
        self.generation = self.meta.get("generation")
        self.typed = status_edge.parse(observed.job.get("status") or {})
        self.d = Decision()

    @property
    def s(self) -> AscendHybridJobStatus:
        """The status this pass reads and writes."""
        return self.typed.model

    @property
    def attempt(self) -> int:
        """The current attempt (status.attempt, from 1); the steps that read it run after decision.first_seen."""
        if self.s.attempt is None:
            raise ValueError("a reconcile step read the attempt of a job that has none yet")
        return self.s.attempt

    def recovery(self) -> RecoveryState:
        """status.recovery to write to, made where the status has none (reads go through `s.recovery`, which may
        be None: making one for a read would write an empty status.recovery)."""
        if self.s.recovery is None:
            self.s.recovery = RecoveryState()
        return self.s.recovery

    def placement(self) -> PlacementStatus:
        """status.placement to write to, made where the status has none (as recovery())."""
        if self.s.placement is None:
            self.s.placement = PlacementStatus()
        return self.s.placement

    def rank_table(self) -> RankTableStatus:
        """status.rankTable to write to, made where the status has none (as recovery())."""
        if self.s.rank_table is None:
            self.s.rank_table = RankTableStatus()
        return self.s.rank_table

    def pod_counts(self, pods: list[dict], total: int) -> None:
        """status.pods: the current attempt's `pods` by phase, of `total`."""
        self.s.pods = PodCounts.model_validate(pod_counts(pods, total))

    def avoid(self, nodes: Iterable[str]) -> None:
        """`nodes` join status.avoidedNodes (kept sorted, each once)."""
        self.s.avoided_nodes = sorted(set(self.s.avoided_nodes) | set(nodes))

    @property
    def placed_nodes(self) -> list[str]:
        """status.placement.nodes: each pod's node by index ("" for one Volcano has not bound); [] unplaced."""
        return self.s.placement.nodes if self.s.placement is not None else []

    @property
    def training_step(self) -> int | None:
        """The latest training step telemetry read (status.training.step); None before the first reading."""
        return self.s.training.step if self.s.training is not None else None

    @property
    def rank_generation(self) -> int:
        """The rank generation every launcher runs (status.recovery.generation); 0 before the first in-place rung."""
        return (self.s.recovery.generation if self.s.recovery else None) or 0

    @property
    def rung(self) -> str | None:
        """The in-place rung in progress (status.recovery.rung), None when none runs."""
        return self.s.recovery.rung if self.s.recovery else None

    def serialised(self) -> dict:
        """The status the pass leaves, as the plain dict the shell patches the job with (status_edge.dump). Called
        once, when the pass ends."""
        return status_edge.dump(self.typed)

    @property
    def resolved(self) -> ResolvedJob:
        """The resolved job (an auto job's with its chosen strategy); steps run only after run() checked it."""
        if self.o.resolved is None:
            raise ValueError("a reconcile step ran for a job whose spec does not resolve")
        return self.o.resolved

    @property
    def queue(self) -> str | None:
        """The job's Kueue LocalQueue (spec.scheduling.queue), or None on the direct path."""
        resolved = self.o.resolved
        return resolved.spec.scheduling.queue if resolved is not None else None

    @property
    def volcano(self) -> bool:
        """Whether Volcano schedules the job's pods (contracts/volcano.uses_volcano)."""
        resolved = self.o.resolved
        if resolved is None:
            return False
        scheduling = resolved.spec.scheduling
        return volcanos.uses_volcano(scheduling.scheduler_name, scheduling.volcano is not None, scheduling.queue,
                                     self.o.default_scheduler)

    def gang_request(self, job: ResolvedJob, excluded: Iterable[str] = ()) -> GangRequest:
        """The placement request of `job`'s gang; under Volcano a preference (placement.GangRequest.volcano)."""
        return GangRequest.for_job(job, excluded, volcano=self.volcano)

    # -- helpers -----------------------------------------------------------------------------------------------
    def cond(self, kind: str, value: bool, reason: str, message: str = "") -> None:
        """Sets one condition (spec/conditions.py: lastTransitionTime moves only when its status flips)."""
        conditions.set_condition(self.s, kind, value, reason, message, self.o.now, self.generation)

    def condition(self, kind: str) -> Condition | None:
        """The condition of type `kind`, None when the status has none."""
        return conditions.condition(self.s, kind)

    def holds(self, kind: str) -> bool:
        """Whether condition `kind` is True."""
        return conditions.holds(self.s, kind)

    def phase(self, phase: str, message: str) -> None:
        self.s.phase, self.s.message = phase, message

    def requeue(self, seconds: float) -> None:
        current = self.d.requeue_after
        self.d.requeue_after = seconds if current is None else min(current, seconds)

    def write_rank_table(self, table: dict, pods: Iterable[Mapping] = ()) -> None:
        """Every table written counts one up (the ConfigMap's `version`, as MindCluster's operator counts). The
        DNS records of the headless `<job>` follow it: the table's `pods`, none while it is initializing."""
        resolved = self.o.resolved
        slices: tuple[dict, ...] = ()
        if resolved is not None and render.needs_services(resolved):
            slices = tuple(render.dns_slices(self.meta["name"], self.meta["namespace"], self.meta["uid"],
                                             render.pod_endpoints(pods), render.most_pods(resolved)))
        self.d.act(WriteRankTable(table, self.o.rank_table_revision + 1, slices))

    def table_format(self) -> str:
        resolved = self.o.resolved
        return ranktable.format_of(resolved is not None and CHIPS[resolved.chip].super_pods)

    def reset_rank_table(self) -> None:
        if self.o.rank_table is not None and self.o.rank_table.get("status") != "initializing":
            self.write_rank_table(ranktable.initializing(self.table_format()))
        rank = self.rank_table()
        rank.config_map, rank.status = names.rank_table_config_map(self.meta["name"]), "initializing"
        self.cond("RankTableReady", False, "Initializing", "waiting for every pod to run with its devices")

    def delete(self, pods: list[dict] | tuple[dict, ...]) -> None:
        doomed = live_names(pods)
        if doomed:
            workloads = workloads_of(pods)
            if workloads:
                self.d.act(workloads)
            for delete in doomed_pods(pods, self.o.pods):  # a lone pod and a whole attempt are two actions
                self.d.act(delete)

    def delete_pod_group(self) -> None:
        """Volcano: the current attempt's PodGroup goes (its attempt ended, or the job did)."""
        if self.volcano and self.s.attempt:
            self.d.act(DeletePodGroups((names.pod_group(self.meta["name"], self.s.attempt),)))

    def new_attempt(self) -> None:
        self.delete_pod_group()
        self.s.attempt = (self.s.attempt or 0) + 1
        self.s.placement = None
        self.s.monitoring = None  # the anomaly history of the old attempt says nothing of the new one
        if self.s.recovery is not None:  # no in-place rung outlives its pods
            self.s.recovery.rung = self.s.recovery.replacing = self.s.recovery.unplaced = None
        for kind in anomalies.CONDITIONS:
            if self.holds(kind):
                self.cond(kind, False, "NewAttempt", f"attempt {self.s.attempt} starts afresh")

    # -- transitions: the endings the steps share --------------------------------------------------------------
    def end_attempt(self, pods: list[dict] | tuple[dict, ...]) -> int:
        """The attempt ends: `pods` go, the rank table resets to initializing and the next attempt begins
        (new_attempt). Returns the new attempt's number, which the callers' messages name."""
        self.delete(pods)
        self.reset_rank_table()
        self.new_attempt()
        return self.attempt

    def restarting(self, reason: str, text: str, *, event: tuple[str, str, str] | None = None,
                   running_text: str | None = None, stops_running: bool = True) -> Decision:
        """The job is Restarting: condition Restarting=True (`reason`, `text`), Running=False (`running_text`, else
        `text`) unless not `stops_running`, phase Restarting, the `event` (type, reason, message) if any, and the
        next pass soon. Returns the pass's Decision."""
        self.cond("Restarting", True, reason, text)
        if stops_running:
            self.cond("Running", False, reason, running_text or text)
        self.phase("Restarting", text)
        if event is not None:
            self.d.emit(*event)
        self.requeue(FAST_REQUEUE_SECONDS)
        return self.d

    def pending_again(self, kind: str, reason: str, message: str, *, event_type: str,
                      requeue_seconds: float = FAST_REQUEUE_SECONDS, stops_running: bool = False) -> Decision:
        """A new attempt waits to be placed or admitted again, not counted as a restart: condition `kind`=False
        (and Running=False if `stops_running`) with `reason`, phase Pending, an event of `event_type` saying
        `message`, and the next pass after `requeue_seconds`. Returns the pass's Decision."""
        self.cond(kind, False, reason, message)
        if stops_running:
            self.cond("Running", False, reason, message)
        self.phase("Pending", message)
        self.d.emit(event_type, reason, message)
        self.requeue(requeue_seconds)
        return self.d

    def place_anew(self, pods: list[dict], reason: str, message: str) -> Decision:
        """The attempt's pods never all ran where they were placed: they go, and the next attempt is placed
        afresh, not counted as a restart (Placed=False and a warning say why)."""
        self.end_attempt(pods)
        return self.pending_again("Placed", reason, message, event_type="Warning")

    # -- terminal outcomes --------------------------------------------------------------------------------------
    def fail(self, reason: str, message: str, fix: str | None = None) -> Decision:
        open_incident = recovery.current_incident(self.s.recoveries)
        if open_incident is not None:
            recovery.gave_up(open_incident, f"the job failed: {reason}")
        if self.s.recovery is not None:
            self.s.recovery.rung = None
        self.s.completion_time = timestamp(self.o.now)
        self.cond("Running", False, reason, message)
        self.cond("Failed", True, reason, message)
        self.phase("Failed", message)
        self.d.emit("Warning", reason, f"{message}. Fix: {fix}" if fix else message)
        return self.finished(first=True)

    def finished(self, first: bool = False) -> Decision:
        """Terminal: apply cleanPodPolicy, then the TTL; the attempt's PodGroup goes at once (as MindCluster's
        ascend-operator deletes its job's)."""
        if first:
            self.delete_pod_group()
        e = self.o.resolved
        policy = e.spec.run_policy.clean_pod_policy if e else "All"
        if policy == "All":
            self.delete(self.o.pods)
        elif policy == "Running":
            self.delete([pod for pod in self.o.pods if phase_of(pod) not in TERMINAL_POD_PHASES])
        ttl = e.spec.run_policy.ttl_seconds_after_finished if e else None
        finished = parse_time(self.s.completion_time)
        if ttl is not None and finished is not None:
            left = ttl - (self.o.now - finished).total_seconds()
            if left <= 0 and not first:
                self.d.act(DeleteJob())
            else:
                self.requeue(max(left, 0.5))
        return self.d


def doomed_pods(pods: list[dict] | tuple[dict, ...], observed: list[dict] | tuple[dict, ...]) -> list[DeletePods]:
    """The deletes of `pods`: one collection delete per attempt whose every live observed pod goes (more than one),
    one delete per pod for the rest (a lone pod, or some pods of an attempt whose others stay)."""
    live_by_attempt: dict[int, set[str]] = {}
    index_by_name: dict[str, int | None] = {}  # as labelled: the shell selects the pods by their labels
    for pod in observed:
        if not is_deleting(pod):
            live_by_attempt.setdefault(attempt_of(pod), set()).add(pod["metadata"]["name"])
            index_by_name[pod["metadata"]["name"]] = pod_index(pod)
    doomed_by_attempt: dict[int, list[dict]] = {}
    for pod in pods:
        if not is_deleting(pod):
            doomed_by_attempt.setdefault(attempt_of(pod), []).append(pod)
    deletes, single = [], []
    for attempt, doomed in doomed_by_attempt.items():
        doomed_names = [pod["metadata"]["name"] for pod in doomed]
        if attempt and len(doomed) > 1 and set(doomed_names) == live_by_attempt.get(attempt):
            indexes = sorted(index for name in doomed_names if (index := index_by_name.get(name)) is not None)
            deletes.append(DeletePods(tuple(doomed_names), attempt=attempt,
                                      indexes=tuple(indexes) if len(indexes) == len(doomed) else ()))
        else:
            single += doomed_names
    return ([DeletePods(tuple(single))] if single else []) + deletes


def workloads_of(pods: list[dict] | tuple[dict, ...]) -> DeleteWorkloads | None:
    """Tearing down pods of a queued attempt deletes its Workload too: Kueue then drops its finalizers and the quota
    at once (pods that never bound would otherwise hold both until the pod GC, ~20 s)."""
    groups = sorted({group for pod in pods if not is_deleting(pod) and (group := kueue.group_of(pod))})
    return DeleteWorkloads(tuple(groups)) if groups else None
