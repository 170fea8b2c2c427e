"""Pure reconcile: observed job + children + nodes → actions and the new status.

Nothing here talks to the API. The shell (`controller/reconciler.py`) executes the actions in order, then patches the
status, then asks again; every decision is recomputed from what is observed, so a crash at any point is
recovered by the next pass.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

from ascend_hybrid.contracts import names
from ascend_hybrid.contracts.ascend import DeviceInfo
from ascend_hybrid.contracts.chips import CHIPS
from ascend_hybrid.contracts.conditions import (
    TERMINAL_JOB_PHASES,
    condition,
    parse_time,
    set_condition,
    timestamp,
)
from ascend_hybrid.contracts.kueue import EVICTED
from ascend_hybrid.contracts.podview import (
    TERMINAL_POD_PHASES,
    attempt_of,
    is_deleting,
    is_gated,
    live_names,
    node_of,
    phase_of,
    pod_counts,
    pod_index,
)
from ascend_hybrid.diagnosis import refusals
from ascend_hybrid.diagnosis.failures import Failure, last_failure, summary
from ascend_hybrid.diagnosis.hints import hint, prediction
from ascend_hybrid.diagnosis.policy import counters_after, judge, restart_text
from ascend_hybrid.diagnosis.refusals import Refusal
from ascend_hybrid.gang import ranktable, render
from ascend_hybrid.gang.placement import GangRequest
from ascend_hybrid.monitoring import anomalies
from ascend_hybrid.monitoring.progress import Sample
from ascend_hybrid.planner.hardware import Hardware
from ascend_hybrid.reconcile import strategy
from ascend_hybrid.reconcile.actions import (
    Action,
    CreatePods,
    DeleteJob,
    DeletePods,
    EnsureChildren,
    Place,
    PodToCreate,
    PostEvent,
    WriteRankTable,
)
from ascend_hybrid.reconcile.failure_steps import FailureSteps
from ascend_hybrid.reconcile.queue_steps import QueueSteps
from ascend_hybrid.reconcile.telemetry_steps import TelemetrySteps
from ascend_hybrid.spec.rules import ResolvedJob

NODE_NOT_READY_GRACE_SECONDS = 30.0
SLOW_REQUEUE_SECONDS = 30.0
FAST_REQUEUE_SECONDS = 2.0


@dataclass(frozen=True)
class Observed:
    job: dict
    effective: ResolvedJob | None
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
    workload: Mapping | None = None           # the Kueue Workload of the current attempt (queued jobs; queueing.py)
    refusal: Refusal | None = None            # the apiserver's last refusal of this job's writes (refusals.py)


@dataclass
class Decision:
    actions: list[Action] = field(default_factory=list)
    status: dict = field(default_factory=dict)
    requeue_after: float | None = None

    def emit(self, event_type: str, reason: str, message: str) -> None:
        self.actions.append(PostEvent(event_type, reason, message))

    def act(self, action: Action) -> None:
        self.actions.append(action)


def pod_template_hash(effective: ResolvedJob) -> str:
    """What the pods are made from: the degrees they run with (an auto job's chosen ones), npu and template. The
    keys are those of the first release, so an operator upgrade does not restart running jobs."""
    spec = effective.spec
    parallelism = {"data": effective.data, "tensor": effective.tensor, "pipeline": effective.pipeline,
                   "expert": effective.expert, "expertPlacement": effective.expert_placement,
                   "microBatches": spec.parallelism.micro_batches}
    if effective.virtual_pipeline_stages != 1:
        parallelism["virtualPipelineStages"] = effective.virtual_pipeline_stages
    npu = {"resource": spec.npu.resource, "perPod": spec.npu.per_pod, "chip": spec.npu.chip}
    relevant = {"parallelism": parallelism, "npu": npu, "template": spec.template.model_dump(by_alias=True)}
    return hashlib.sha256(json.dumps(relevant, sort_keys=True).encode()).hexdigest()[:16]


class _Pass(QueueSteps, TelemetrySteps, FailureSteps):
    """One reconcile pass; methods read `observed`, write `decision` (a queued job's steps: queueing.py)."""

    def __init__(self, observed: Observed):
        self.o = observed
        self.job = observed.job
        self.meta = observed.job["metadata"]
        self.generation = self.meta.get("generation")
        self.d = Decision(status=copy.deepcopy(observed.job.get("status") or {}))
        self.status = self.d.status

    # -- helpers -----------------------------------------------------------------------------------------------
    def cond(self, kind: str, value: bool, reason: str, message: str = "") -> None:
        set_condition(self.status, kind, value, reason, message, self.o.now, self.generation)

    def phase(self, phase: str, message: str) -> None:
        self.status["phase"], self.status["message"] = phase, message

    def requeue(self, seconds: float) -> None:
        current = self.d.requeue_after
        self.d.requeue_after = seconds if current is None else min(current, seconds)

    def reset_rank_table(self) -> None:
        if self.o.rank_table is not None and self.o.rank_table.get("status") != "initializing":
            self.d.act(WriteRankTable(dict(ranktable.INITIALIZING)))
        rank = self.status.setdefault("rankTable", {})
        rank.update(configMap=names.rank_table_config_map(self.meta["name"]), status="initializing")
        self.cond("RankTableReady", False, "Initializing", "waiting for every pod to run with its devices")

    def delete(self, pods) -> None:
        doomed = live_names(pods)
        if doomed:
            workloads = self.workloads_of(pods)
            if workloads:
                self.d.act(workloads)
            self.d.act(DeletePods(doomed))

    def new_attempt(self) -> None:
        self.status["attempt"] = int(self.status.get("attempt") or 0) + 1
        self.status.pop("placement", None)
        self.status.pop("monitoring", None)  # the anomaly history of the old attempt says nothing of the new one
        for kind in anomalies.CONDITIONS:
            if (condition(self.status, kind) or {}).get("status") == "True":
                self.cond(kind, False, "NewAttempt", f"attempt {self.status['attempt']} starts afresh")

    # -- the pass ----------------------------------------------------------------------------------------------
    def run(self) -> Decision:
        o, status = self.o, self.status
        if o.effective is None:
            return self.invalid()
        if status.get("phase") not in TERMINAL_JOB_PHASES:
            chosen = strategy.step(self.job.get("spec") or {}, o.effective, status, o.hardware_profiles, o.now,
                                   self.generation)
            for event in chosen.events:
                self.d.emit(*event)
            if chosen.failure:
                return self.fail(*chosen.failure)
            self.o = o = replace(o, effective=chosen.effective)  # an auto job runs the strategy chosen for it
        e = o.effective
        status["worldSize"], status["observedGeneration"] = e.world_size, self.generation
        status.setdefault("restarts", 0)
        if status.get("phase") in TERMINAL_JOB_PHASES:
            return self.finished()
        if o.refusal is not None and self.refused(o.refusal):
            return self.d
        if o.refusal is None:
            refusals.allow(status, o.now, self.generation)
        if not status.get("attempt"):
            status["attempt"] = 1
            self.cond("Created", True, "Created", f"world {e.world_size}: {e.pod_count} pods × {e.per_pod} NPUs")
            self.phase("Pending", "waiting for placement")
            self.d.emit("Normal", "Created", f"{e.pod_count} pods × {e.per_pod} {e.chip} NPUs, world {e.world_size}")
        deadline = e.spec.run_policy.active_deadline_seconds
        started = parse_time(status.get("startTime"))
        if deadline and started:
            remaining = deadline - (o.now - started).total_seconds()
            if remaining <= 0:
                return self.fail("DeadlineExceeded", f"active for more than activeDeadlineSeconds={deadline}")
            self.requeue(remaining)
        if e.spec.run_policy.suspend:
            return self.suspended()
        if status.get("phase") == "Suspended":
            self.new_attempt()
            self.cond("Suspended", False, "Resumed", "resumed: placing anew")
            self.phase("Pending", "resumed: placing anew")
            self.d.emit("Normal", "Resumed", "job resumed; placing a new attempt")
        attempt = int(status["attempt"])
        stale = [pod for pod in o.pods if attempt_of(pod) != attempt]
        if stale:
            self.delete(stale)
        current = {pod_index(pod): pod for pod in o.pods if attempt_of(pod) == attempt}
        template_hash = pod_template_hash(e)
        if current and status.get("podTemplateHash") not in (None, template_hash):
            return self.restart_for_spec_change(list(current.values()))
        verdict = self.kueue_verdict(current) if self.queue else None
        if verdict is not None and verdict.state == EVICTED:
            return self.preempted(verdict, current)
        placement = status.get("placement") or {}
        if placement.get("attempt") == attempt and len(placement.get("nodes") or ()) != e.pod_count:
            placement = {}  # made for another spec (its parallelism changed before any pod existed): place anew
        # Every pod gone (the only pod of a one-pod gang deleted) is a failure too, not a gang to create again.
        if placement.get("attempt") == attempt and (current or self.queue
                                                    or status.get("phase") in ("Starting", "Running")):
            failure = self.failure(current, placement)
            if isinstance(failure, Failure):
                return self.failed(failure, list(current.values()))
            if failure is not None:  # broken, its cause not in yet
                return self.d
            if current and len(current) == e.pod_count and all(phase_of(p) == "Succeeded" for p in current.values()):
                return self.succeeded(list(current.values()))
        if placement.get("attempt") != attempt:
            if verdict is not None:
                return self.enqueued(current, stale, verdict, template_hash)
            if stale:
                self.phase(status.get("phase") or "Pending", "waiting for the previous attempt's pods to go")
                self.requeue(FAST_REQUEUE_SECONDS)
                return self.d
            self.d.act(Place(GangRequest.for_job(e, status.get("avoidedNodes") or ()), e))
            return self.d
        return self.start(current, placement, template_hash)

    def start(self, current: dict, placement: dict, template_hash: str) -> Decision:
        o, e, status = self.o, self.o.effective, self.status
        attempt = int(status["attempt"])
        status["podTemplateHash"] = template_hash
        status.setdefault("startTime", timestamp(o.now))
        if not o.children_ready or not o.sched_ip:
            self.d.act(EnsureChildren(e))
            return self.d
        nodes = placement["nodes"]
        job = self.meta["name"]
        missing = [index for index in range(e.pod_count)
                   if index not in current and names.pod_name(job, attempt, index) not in o.in_flight]
        pods = list(current.values())
        status["pods"] = pod_counts(pods, e.pod_count)
        releasable = [(pod["metadata"]["name"], tuple(gate["name"] for gate in pod["spec"]["schedulingGates"]))
                      for pod in pods if is_gated(pod) and not is_deleting(pod) and self.unreleased(pod)]
        if missing:
            manifests = render.gang_pods(e, self.meta["namespace"], self.meta["uid"], attempt,
                                         [(index, nodes[index]) for index in missing], o.sched_ip)
            created = tuple(PodToCreate(manifest, nodes[index], e.per_pod) for index, manifest in zip(missing, manifests))
            self.d.act(CreatePods(created))
            # Creation answered means the pod exists: the gang is released in the same pass, not one watch later.
            releasable += [(pod.manifest["metadata"]["name"], (names.GANG_GATE,)) for pod in created]
        if releasable:
            self.d.act(self.release(releasable, current, nodes))
            self.phase("Starting", f"all {e.pod_count} pods exist; releasing the gang to the scheduler")
            self.d.emit("Normal", "GangReleased", f"all {e.pod_count} pods created; scheduling gates removed")
            self.requeue(FAST_REQUEUE_SECONDS)
            return self.d
        if len(pods) < e.pod_count:
            self.phase("Starting", f"{e.pod_count - len(pods)} pods created, not yet seen by the watch")
            self.requeue(FAST_REQUEUE_SECONDS)
            return self.d
        unbound = [pod for pod in pods if not node_of(pod)]
        if unbound:
            return self.waiting_for_binding(pods, unbound)
        table = ranktable.build_rank_table(pods, e.per_pod, self.super_pods(nodes), pod_count=e.pod_count)
        rank = status.setdefault("rankTable", {})
        rank["configMap"] = names.rank_table_config_map(self.meta["name"])
        if table["status"] == "completed":
            if o.rank_table != table:
                self.d.act(WriteRankTable(table))
            rank.update(status="completed", version=table["version"])
            completed = f"hccl.json completed for {e.world_size} ranks"
            table_news = (condition(status, "RankTableReady") or {}).get("status") != "True"
            self.cond("RankTableReady", True, "Completed", f"hccl.json v{table['version']} lists {e.world_size} ranks")
            if status.get("phase") != "Running":  # the two milestones come together: one event tells both
                self.d.emit("Normal", "Running", f"attempt {attempt}: {e.pod_count} pods running"
                            + (f", {completed}" if table_news else ""))
            elif table_news:
                self.d.emit("Normal", "RankTableReady", completed)
            self.cond("Running", True, "AllPodsRunning", f"attempt {attempt}")
            self.cond("Restarting", False, "Running", f"attempt {attempt} running")
            self.phase("Running", f"attempt {attempt}: {e.pod_count} pods running, rank table completed")
            self.record_telemetry()
            self.requeue(SLOW_REQUEUE_SECONDS)
        else:
            if o.rank_table is not None and o.rank_table.get("status") == "completed":
                self.reset_rank_table()
            waiting = ranktable.missing_for_completion(pods, e.per_pod, e.pod_count)
            rank["status"] = "initializing"
            self.cond("RankTableReady", False, "WaitingForPods", "; ".join(waiting[:3]))
            self.phase("Starting", f"waiting for {len(waiting)} pods: {waiting[0]}")
            self.requeue(FAST_REQUEUE_SECONDS)
        return self.d

    def super_pods(self, nodes: list[str]) -> dict[str, str] | None:
        if not CHIPS[self.o.effective.chip].super_pods:
            return None
        return ranktable.node_super_pods(nodes, self.o.nodes, self.o.device_infos)

    def waiting_for_binding(self, pods: list[dict], unbound: list[dict]) -> Decision:
        e = self.o.effective
        created = min(parse_time(pod["metadata"].get("creationTimestamp")) or self.o.now for pod in pods)
        admitted = condition(self.status, "Admitted")  # a queued gang waits for the scheduler from its admission
        if admitted is not None and admitted["status"] == "True":
            created = max(created, parse_time(admitted["lastTransitionTime"]) or created)
        waited = (self.o.now - created).total_seconds()
        limit = e.spec.run_policy.scheduling_timeout_seconds
        if waited >= limit:
            names_ = ", ".join(p["metadata"]["name"] for p in unbound[:5])
            message = f"{len(unbound)} pods not bound within schedulingTimeoutSeconds={limit} ({names_}); re-planning"
            self.delete(pods)
            self.reset_rank_table()
            self.new_attempt()
            self.cond("Placed", False, "SchedulingTimeout", message)
            self.phase("Pending", message)
            self.d.emit("Warning", "SchedulingTimeout", message)
            self.requeue(FAST_REQUEUE_SECONDS)
            return self.d
        self.phase("Starting", f"{len(unbound)} of {len(pods)} pods waiting for the scheduler")
        self.requeue(min(FAST_REQUEUE_SECONDS, limit - waited))
        return self.d

    def failed(self, failure: Failure, current: list[dict]) -> Decision:
        """The failure policy's verdict: fail, or restart the whole gang (counted against backoffLimit, or as a
        disruption, or ignored), avoiding the first failed rank's node where it says so."""
        e, status = self.o.effective, self.status
        verdict = judge(e.spec.run_policy.failure_policy.rules, failure)
        fix = hint(failure, e, prediction(e) if failure.cause == "DeviceOutOfMemory" else None)
        status["lastFailure"] = last_failure(failure, verdict.action, int(status["attempt"]), fix, self.o.now)
        what = summary(failure)
        if verdict.fails:
            return self.fail(failure.cause, f"{what}; FailJob by {verdict.why}", fix)
        limit = e.spec.run_policy.backoff_limit
        counters, counted = counters_after(status, verdict)
        if verdict.counts and counted > limit:
            return self.fail("BackoffLimitExceeded", f"{what}; backoffLimit={limit} restarts exhausted", fix)
        status.update(counters)
        status["avoidedNodes"] = sorted(set(status.get("avoidedNodes") or []) | set(verdict.avoid))
        self.delete(current)
        self.reset_rank_table()
        self.new_attempt()
        text = restart_text(what, verdict, status["attempt"], counted, limit)
        self.cond("Restarting", True, failure.cause, text)
        self.cond("Running", False, failure.cause, what)
        self.phase("Restarting", text)
        self.d.emit("Warning", failure.cause, f"{text}. Fix: {fix}")
        self.requeue(FAST_REQUEUE_SECONDS)
        return self.d

    def restart_for_spec_change(self, current: list[dict]) -> Decision:
        self.delete(current)
        self.reset_rank_table()
        self.new_attempt()
        message = f"parallelism, npu or template changed; restarting as attempt {self.status['attempt']}"
        self.cond("Restarting", True, "SpecChanged", message)
        self.phase("Restarting", message)
        self.d.emit("Normal", "SpecChanged", message)
        self.requeue(FAST_REQUEUE_SECONDS)
        return self.d

    def succeeded(self, current: list[dict]) -> Decision:
        self.status["completionTime"] = timestamp(self.o.now)
        self.status["pods"] = pod_counts(current, self.o.effective.pod_count)
        self.cond("Running", False, "Completed", "all pods succeeded")
        self.cond("Succeeded", True, "AllPodsSucceeded", f"attempt {self.status['attempt']} succeeded")
        self.phase("Succeeded", f"all {len(current)} pods succeeded")
        self.d.emit("Normal", "Succeeded", f"all {len(current)} pods succeeded")
        return self.finished(first=True)

    def fail(self, reason: str, message: str, fix: str | None = None) -> Decision:
        self.status["completionTime"] = timestamp(self.o.now)
        self.cond("Running", False, reason, message)
        self.cond("Failed", True, reason, message)
        self.phase("Failed", message)
        self.d.emit("Warning", reason, f"{message}. Fix: {fix}" if fix else message)
        return self.finished(first=True)

    def invalid(self) -> Decision:
        if self.status.get("phase") == "Failed":
            return self.finished()
        message = "; ".join(self.o.spec_problems)
        return self.fail("InvalidSpec", message)

    def finished(self, first: bool = False) -> Decision:
        """Terminal: apply cleanPodPolicy, then the TTL."""
        e = self.o.effective
        policy = e.spec.run_policy.clean_pod_policy if e else "All"
        if policy == "All":
            self.delete(self.o.pods)
        elif policy == "Running":
            self.delete([pod for pod in self.o.pods if phase_of(pod) not in TERMINAL_POD_PHASES])
        ttl = e.spec.run_policy.ttl_seconds_after_finished if e else None
        finished = parse_time(self.status.get("completionTime"))
        if ttl is not None and finished is not None:
            left = ttl - (self.o.now - finished).total_seconds()
            if left <= 0 and not first:
                self.d.act(DeleteJob())
            else:
                self.requeue(max(left, 0.5))
        return self.d

    def suspended(self) -> Decision:
        if self.o.pods:
            self.delete(self.o.pods)
        self.reset_rank_table()
        self.status.pop("placement", None)
        self.status["pods"] = pod_counts([], 0)
        if self.status.get("phase") != "Suspended":
            self.d.emit("Normal", "Suspended", "job suspended; pods deleted")
        self.cond("Suspended", True, "Suspended", "spec.runPolicy.suspend is true")
        self.cond("Running", False, "Suspended", "suspended")
        self.phase("Suspended", "suspended: pods deleted, spec kept")
        if self.o.pods:
            self.requeue(FAST_REQUEUE_SECONDS)
        return self.d


def decide(observed: Observed) -> Decision:
    return _Pass(observed).run()
