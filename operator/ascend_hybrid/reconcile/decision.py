"""Pure reconcile: observed job + children + nodes → actions and the new status.

Nothing here talks to the API. The shell (`controller/loop.py`) executes the actions in order, then patches the
status, then asks again; every decision is recomputed from what is observed, so a crash at any point is
recovered by the next pass.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from typing import cast

from ascend_hybrid.contracts import names
from ascend_hybrid.contracts.chips import CHIPS
from ascend_hybrid.contracts.conditions import (
    TERMINAL_JOB_PHASES,
    parse_time,
    timestamp,
)
from ascend_hybrid.contracts.kueue import EVICTED, Admission
from ascend_hybrid.contracts.podview import (
    admission_refusal,
    attempt_of,
    is_deleting,
    is_gated,
    node_of,
    phase_of,
    pod_index,
    unschedulable_message,
)
from ascend_hybrid.diagnosis import refusals
from ascend_hybrid.diagnosis.failures import Failure
from ascend_hybrid.gang import ranktable
from ascend_hybrid.gang.placement import GangRequest, Placement
from ascend_hybrid.reconcile import (
    checkpoint_steps,
    elastic_steps,
    failure_steps,
    goodput_steps,
    membership,
    queue_steps,
    recovery_steps,
    slowness_steps,
    strategy,
    telemetry_steps,
    volcano_steps,
)
from ascend_hybrid.reconcile.actions import (
    EnsureChildren,
    GrantLaunchers,
    Place,
)
from ascend_hybrid.reconcile.placement_record import record_placement
from ascend_hybrid.reconcile.state import (
    FAST_REQUEUE_SECONDS,
    SLOW_REQUEUE_SECONDS,
    Decision,
    Observed,
    Pass,
    Recorded,
)
from ascend_hybrid.spec.api import PlacementStatus
from ascend_hybrid.spec.resolved import ResolvedJob

# a node refusing this job's pods in this many attempts is avoided (count_refusals): once is a race with a rival
REFUSALS_BEFORE_AVOIDING = 2


def pod_template_hash(resolved: ResolvedJob) -> str:
    """What the pods are made from: the degrees they run with (an auto job's chosen ones), npu and template. The
    keys are those of the first release, so an operator upgrade does not restart running jobs."""
    spec = resolved.spec
    parallelism = {"data": resolved.data, "tensor": resolved.tensor, "pipeline": resolved.pipeline,
                   "expert": resolved.expert, "expertPlacement": resolved.expert_placement,
                   "microBatches": spec.parallelism.micro_batches}
    if resolved.virtual_pipeline_stages != 1:
        parallelism["virtualPipelineStages"] = resolved.virtual_pipeline_stages
    npu = {"resource": spec.npu.resource, "perPod": spec.npu.per_pod, "chip": spec.npu.chip}
    relevant = {"parallelism": parallelism, "npu": npu, "template": spec.template.model_dump(by_alias=True)}
    return hashlib.sha256(json.dumps(relevant, sort_keys=True).encode()).hexdigest()[:16]


def run(p: Pass) -> Decision:
    """One pass, as a sequence of steps: each either ends the pass with the Decision it made or returns None and the
    next step runs. The order is the priority: a spec that cannot run, then what ends the job, then what ends the
    attempt, then placement, then starting the gang."""
    # a spec the rules refuse fails the job; no pod is made
    if p.o.resolved is None:
        return invalid(p)
    # an auto job runs the strategy chosen for it; an unfit strategy may fail the job here
    if (done := chosen_strategy(p)) is not None:
        return done
    # a finished job only keeps its cleanPodPolicy and TTL
    if p.s.phase in TERMINAL_JOB_PHASES:
        return p.finished()
    # the apiserver refused this job's writes: fail (400/422) or wait and say why (403)
    if (done := refusal(p)) is not None:
        return done
    first_seen(p)
    # activeDeadlineSeconds passed since the first start
    if (done := past_deadline(p)) is not None:
        return done
    # suspended: every pod goes; resumed: a new attempt
    if (done := suspension(p)) is not None:
        return done
    attempt = p.attempt
    pods = membership.kept_views(p, p.o.pods)  # pods a shrink kept count as members of this attempt
    stale = [pod for pod in pods if attempt_of(pod) != attempt]
    p.delete(stale)
    current = {pod_index(pod): pod for pod in pods if attempt_of(pod) == attempt}
    membership.adopt(p, p.o.pods)
    template_hash = pod_template_hash(p.resolved)
    # parallelism, npu or template changed under running pods: restart as a new attempt
    if current and p.s.pod_template_hash not in (None, template_hash):
        return restart_for_spec_change(p, list(current.values()))
    # an elastic job shrank at its placement under Kueue: its pod group, made for the whole gang, queues anew
    if p.queue and (done := queue_steps.resized(p, current)) is not None:
        return done
    admission = queue_steps.kueue_admission(p, current) if p.queue else None
    # Kueue evicted the pod group: the attempt ends without counting a restart
    if admission is not None and admission.state == EVICTED:
        return queue_steps.preempted(p, admission, current)
    placement = placement_of_attempt(p, attempt)
    # a node's kubelet refused a pod bound to it (a rival took the chips first): placed anew, not a failure (under
    # Volcano only that pod is made again, in the same PodGroup)
    if (done := (volcano_steps.remake_refused if p.volcano else refused_at_admission)(p, current)) is not None:
        return done
    # a placed attempt that broke (the failure policy decides) or whose every pod succeeded
    if (done := attempt_outcome(p, current, placement)) is not None:
        return done
    # not placed yet: Kueue first for a queued job, else place the gang once the previous attempt's pods went
    if placement.attempt != attempt:
        return enqueued(p, current, stale, admission, template_hash)
    # placed: create, release and complete the gang, then watch it run
    return start(p, current, placement, template_hash)


def chosen_strategy(p: Pass) -> Decision | None:
    """The planner's step (strategy.step) on every live pass; the job runs with the strategy it resolves."""
    o = p.o
    if p.s.phase not in TERMINAL_JOB_PHASES:
        chosen = strategy.step(p.job.get("spec") or {}, p.resolved, p.s, o.hardware_profiles, o.now,
                               p.generation, o.observed_efficiency)
        for event in chosen.events:
            p.d.emit(*event)
        if chosen.failure:
            return p.fail(*chosen.failure)
        p.o = replace(o, resolved=chosen.resolved)
        # an elastic job that shrank runs at its shrunk data degree (status.elastic)
        elastic_steps.run_shrunk(p)
    p.s.world_size, p.s.observed_generation = p.resolved.world_size, p.generation
    if p.s.restarts is None:
        p.s.restarts = 0
    return None


def refusal(p: Pass) -> Decision | None:
    if p.o.refusal is None:
        if p.condition(refusals.AUTHORIZED) is not None:  # allow() changes only a status that was refused once
            refusals.allow(p.s, p.o.now, p.generation)
        return None
    return p.d if failure_steps.refused(p, p.o.refusal) else None


def first_seen(p: Pass) -> None:
    """Attempt 1 begins: condition Created, Pending. No event: the placement's (Placed, or why not) follows in the
    same pass and says as much; an event is a write per job."""
    if p.s.attempt:
        return
    e = p.resolved
    p.s.attempt = 1
    p.cond("Created", True, "Created", f"world {e.world_size}: {e.pod_count} pods × {e.per_pod} {e.chip} NPUs")
    p.phase("Pending", "waiting for placement")


def past_deadline(p: Pass) -> Decision | None:
    deadline = p.resolved.spec.run_policy.active_deadline_seconds
    started = parse_time(p.s.start_time)
    if not (deadline and started):
        return None
    remaining = deadline - (p.o.now - started).total_seconds()
    if remaining <= 0:
        return p.fail("DeadlineExceeded", f"active for more than activeDeadlineSeconds={deadline}")
    p.requeue(remaining)
    return None


def suspension(p: Pass) -> Decision | None:
    if p.resolved.spec.run_policy.suspend:
        return suspended(p)
    if p.s.phase == "Suspended":
        p.new_attempt()
        p.cond("Suspended", False, "Resumed", "resumed: placing anew")
        p.phase("Pending", "resumed: placing anew")
        p.d.emit("Normal", "Resumed", "job resumed; placing a new attempt")
    return None


def placement_of_attempt(p: Pass, attempt: int) -> PlacementStatus:
    placement = p.s.placement or PlacementStatus()
    if placement.attempt == attempt and len(placement.nodes) != p.resolved.pod_count:
        return PlacementStatus()  # made for another spec (its parallelism changed before any pod existed): place anew
    return placement


def attempt_outcome(p: Pass, current: dict, placement: PlacementStatus) -> Decision | None:
    """A placed attempt's failure (judged by the failure policy), a failure whose cause is not in yet (hold), or
    its success. Every pod gone (the only pod of a one-pod gang deleted) is a failure too, not a gang to create
    again."""
    if placement.attempt != p.attempt:
        return None
    if not (current or p.queue or recovery_steps.in_place_running(p)
            or p.s.phase in ("Starting", "Running")):
        return None
    failure = failure_steps.failure(p, recovery_steps.seen_for_failures(p, current), placement)
    if isinstance(failure, Failure):
        return recovery_steps.failed(p, failure, list(current.values()))
    if failure is not None:  # broken, its cause not in yet
        return p.d
    pods = list(current.values())
    if pods and len(pods) == p.resolved.pod_count and all(phase_of(pod) == "Succeeded" for pod in pods):
        return succeeded(p, pods)
    return None


def enqueued(p: Pass, current: dict, stale: list, admission: Admission | None, template_hash: str) -> Decision:
    """An attempt not placed yet: a queued job goes through Kueue (queue_steps); an unqueued one waits for the
    previous attempt's pods to go, then asks the shell to place the gang."""
    if admission is not None:
        return queue_steps.enqueued(p, current, stale, admission, template_hash)
    if stale:
        p.phase(p.s.phase or "Pending", "waiting for the previous attempt's pods to go")
        p.requeue(FAST_REQUEUE_SECONDS)
        return p.d
    if current:
        return unrecorded_pods(p, current)
    e = p.resolved
    alternatives, retry_within = elastic_steps.shrink_options(p)
    p.d.act(Place(p.gang_request(e, p.s.avoided_nodes), e, alternatives, retry_within))
    return p.d


def unrecorded_pods(p: Pass, current: dict) -> Decision:
    """Pods of an unqueued attempt whose placement the status does not hold: a process created them bound to their
    nodes and stopped before it wrote where (a one-pod job's placement is written with its start's next change).
    Every pod there and bound: they say where the gang is, and the placement is recorded from them. Else where the
    rest was to go is lost: the attempt's pods go and the gang is placed anew, as after a refusal (not a restart)."""
    e = p.resolved
    nodes = tuple(node_of(current[index]) if index in current else None for index in range(e.pod_count))
    if p.volcano:  # Volcano places them: the attempt goes on without a plan, where it binds them is recorded
        lost = Placement(ok=False, reason="the operator stopped before it recorded its plan")
        emitted(p, record_placement(p.s, e, lost, p.o.now, p.generation, {}, volcano=True))
        p.requeue(FAST_REQUEUE_SECONDS)
        return p.d
    if all(nodes):
        tiers = GangRequest.for_job(e).tier_labels
        tier = tiers[0] if tiers else ""
        domains = {node: ((p.o.nodes.get(node) or {}).get("metadata", {}).get("labels") or {}).get(tier)
                   for node in nodes if node}
        emitted(p, record_placement(p.s, e, Placement(ok=True, nodes=cast(tuple[str, ...], nodes)), p.o.now,
                                    p.generation, domains))
        p.requeue(FAST_REQUEUE_SECONDS)
        return p.d
    attempt = p.attempt
    message = (f"{len(current)} pods of attempt {attempt} exist without a recorded placement (the operator stopped "
               "before writing it); placing anew")
    return p.place_anew(list(current.values()), "PlacementUnrecorded", message)


def emitted(p: Pass, outcome: Recorded) -> None:
    """The events a placement record decided, posted by this pass."""
    for event in outcome.events:
        p.d.emit(*event)


def running(p: Pass, table: dict, current: dict) -> Decision:
    """Every pod runs and the table is complete: written, the launchers told their generation, an in-place rung or
    an elastic growth followed, else the job Running with its telemetry and goodput."""
    o, e = p.o, p.resolved
    attempt = p.attempt
    if o.rank_table != table:
        p.write_rank_table(table, current.values())
        p.d.act(GrantLaunchers(membership.service_account(p)))
    p.rank_table().status, p.rank_table().version = "completed", table["version"]
    checkpoint_steps.record_interval(p)  # before the signal: a new interval goes with it
    recovery_steps.signal_launchers(p)
    if recovery_steps.follow_in_place(p, current) or elastic_steps.grow_step(p, current):
        return p.d
    completed = f"hccl.json completed for {e.world_size} ranks"
    table_news = not p.holds("RankTableReady")
    p.cond("RankTableReady", True, "Completed", f"hccl.json v{table['version']} lists {e.world_size} ranks")
    if p.s.phase != "Running" and ran_before(p):  # one event tells both milestones
        where = p.s.placement.summary if p.s.placement is not None else None
        p.d.emit("Normal", "Running", f"attempt {attempt}: {e.pod_count} pods running"
                 + (f" on {where}" if where else "") + (f", {completed}" if table_news else ""))
    elif table_news and p.s.phase == "Running":
        p.d.emit("Normal", "RankTableReady", completed)
    p.cond("Running", True, "AllPodsRunning", f"attempt {attempt}")
    p.cond("Restarting", False, "Running", f"attempt {attempt} running")
    p.phase("Running", f"attempt {attempt}: {e.pod_count} pods running, rank table completed")
    telemetry_steps.record_telemetry(p)
    if slowness_steps.record_slowness(p, current):  # a slow node replaced or shrunk around at the checkpoint
        return p.d
    recovery_steps.signal_launchers(p)  # a checkpoint the slow node's action asked for goes out in this pass
    recovery_steps.follow_gang(p, current)
    p.requeue(SLOW_REQUEUE_SECONDS)
    return p.d


def ran_before(p: Pass) -> bool:
    """Whether this Running is a return: after a restart, a recovery or a resume (a later attempt). Only a return
    gets the Running event: the status keeps a job's first start (startTime, the Running and RankTableReady
    conditions, placement.summary naming the nodes) until it runs again, and events keep the history the status
    overwrites — one write fewer for every job that never fails."""
    return (p.s.attempt or 1) > 1 or bool(p.s.restarts) or bool(p.s.recoveries)


def start(p: Pass, current: dict, placement: PlacementStatus, template_hash: str) -> Decision:
    """A placed attempt, from its children to Running: apply the Services and ConfigMaps, create the missing pods
    pinned to their nodes (a queued gang's are released too), wait for the scheduler, then complete the rank table
    (or reset it while a pod is not ready) and read the running job's telemetry."""
    o, e = p.o, p.resolved
    p.s.pod_template_hash = template_hash
    if p.s.start_time is None:
        p.s.start_time = timestamp(o.now)
    # job.json describes the degrees the pods run with: an elastic job's shrink or growth applies it again
    if not o.children_ready or not o.sched_known(e) or o.children_data not in (None, e.data):
        p.d.act(EnsureChildren(e))
        return p.d
    if recovery_steps.replacement_step(p, current):
        return p.d
    pods = list(current.values())
    p.pod_counts(pods, e.pod_count)
    if created_or_released(p, current, placement):
        return p.d
    unbound = [pod for pod in pods if not node_of(pod)]
    if unbound:
        return (p.volcano and volcano_steps.waiting(p, pods, unbound)) or waiting_for_binding(p, pods, unbound)
    nodes = placement.nodes
    if p.volcano:
        volcano_steps.bound(p, pods)
        nodes = p.placed_nodes
    if split := ranktable.ring_splits(pods, CHIPS[e.chip]):
        return ring_split(p, pods, split)
    return ranked(p, current, nodes)


def created_or_released(p: Pass, current: dict, placement: PlacementStatus) -> bool:
    """The attempt's missing pods created (pinned to their nodes, or in the PodGroup for Volcano) and a queued
    gang's gates released; True while the pass ends there, until every pod exists, ungated, as the watch sees."""
    e, attempt, job = p.resolved, p.attempt, p.meta["name"]
    missing = [index for index in range(e.pod_count)
               if index not in current and names.pod_name(job, attempt, index) not in p.o.in_flight]
    pods = list(current.values())
    releasable = [(pod["metadata"]["name"], tuple(gate["name"] for gate in pod["spec"]["schedulingGates"]))
                  for pod in pods if is_gated(pod) and not is_deleting(pod) and queue_steps.unreleased(p, pod)]
    if missing:
        created = volcano_steps.create_pods(p, e, attempt, [(index, volcano_steps.preferred_node(placement, index))
                                                            for index in missing])
        if p.queue:  # a queued gang's pods carry Kueue's group gate: creation answered, released in the same pass
            releasable += [(pod.manifest["metadata"]["name"], (names.GANG_GATE,)) for pod in created]
    else:
        volcano_steps.ensure_group(p, current)
    if releasable:  # a queued gang, or pods an operator before design §5's change created gated
        p.d.act(queue_steps.release(p, releasable, current, placement.nodes))
        p.phase("Starting", f"all {e.pod_count} pods exist; releasing the gang to the scheduler")
        p.d.emit("Normal", "GangReleased", f"all {e.pod_count} pods created; scheduling gates removed")
    elif missing:  # the direct path: created schedulable and pinned, the chips promised under the placement lock
        p.phase("Starting", f"{len(missing)} pods created " + (
            f"in PodGroup {names.pod_group(job, attempt)} for Volcano to place" if p.volcano
            else "on their placed nodes"))
    elif len(pods) < e.pod_count:
        p.phase("Starting", f"{e.pod_count - len(pods)} pods created, not yet seen by the watch")
    else:
        return False
    p.requeue(FAST_REQUEUE_SECONDS)
    return True


def ranked(p: Pass, current: dict, nodes: list[str]) -> Decision:
    """Every pod bound: the rank table completed and the job running, or the table reset to initializing while a
    pod is not ready (RankTableReady False names the first ones)."""
    e = p.resolved
    table, waiting = ranktable.assess(list(current.values()), e.per_pod, super_pods(p, nodes),
                                      pod_count=e.pod_count)
    rank = p.rank_table()
    rank.config_map = names.rank_table_config_map(p.meta["name"])
    if table["status"] == "completed":
        return running(p, table, current)
    if p.o.rank_table is not None and p.o.rank_table.get("status") == "completed":
        p.reset_rank_table()
    rank.status = "initializing"
    p.cond("RankTableReady", False, "WaitingForPods", "; ".join(waiting[:3]))
    p.phase("Starting", f"waiting for {len(waiting)} pods: {waiting[0]}")
    p.requeue(FAST_REQUEUE_SECONDS)
    return p.d


def super_pods(p: Pass, nodes: list[str]) -> dict[str, str] | None:
    if not CHIPS[p.resolved.chip].super_pods:
        return None
    return ranktable.node_super_pods(nodes, p.o.nodes, p.o.device_infos)


def waiting_for_binding(p: Pass, pods: list[dict], unbound: list[dict]) -> Decision:
    e = p.resolved
    # from the creation of the pods still waiting (a pod ReplacePod made joins a gang that runs for long)
    created = min(parse_time(pod["metadata"].get("creationTimestamp")) or p.o.now for pod in unbound)
    admitted = p.condition("Admitted")  # a queued gang waits for the scheduler from its admission
    if admitted is not None and admitted.status == "True":
        created = max(created, parse_time(admitted.last_transition_time) or created)
    waited = (p.o.now - created).total_seconds()
    limit = e.spec.run_policy.scheduling_timeout_seconds
    # a pod pinned to its placed node that the scheduler calls unschedulable: the node refused it (a pod the
    # default scheduler bound there took the chips between our placement and the pod's creation)
    refused = [(pod["metadata"]["name"], why) for pod in unbound if (why := unschedulable_message(pod))]
    refusal = f"; {refused[0][0]} refused by the scheduler: {refused[0][1]}" if refused else ""
    if waited >= limit:
        names_ = ", ".join(p["metadata"]["name"] for p in unbound[:5])
        message = (f"{len(unbound)} pods not bound within schedulingTimeoutSeconds={limit} ({names_}){refusal}; "
                   "re-planning")
        return p.place_anew(pods, "SchedulingTimeout", message)
    # a pod made again beside running ones (ReplacePod, under Volcano) waits inside its rung: the job stays Restarting
    phase = "Restarting" if p.s.phase == "Restarting" else "Starting"
    p.phase(phase, f"{len(unbound)} of {len(pods)} pods waiting for the scheduler{refusal}")
    p.requeue(min(FAST_REQUEUE_SECONDS, limit - waited))
    return p.d


def refused_at_admission(p: Pass, current: dict) -> Decision | None:
    """A pod bound to its placed node at creation and refused by that node's kubelet (a pod another scheduler bound
    there meanwhile holds the chips): no container ran, so it is not a training failure and no restart is counted.
    The attempt ends and the gang is placed anew, as after a scheduling timeout: the new placement sees the rival's
    chips taken. Every pod of the attempt goes first, so none is doubled."""
    refused = [(pod, why) for pod in current.values() if (why := admission_refusal(pod))]
    if not refused:
        return None
    pod, why = refused[0]
    avoided = count_refusals(p, {node for pod, _ in refused if (node := node_of(pod))})
    avoiding = (f"; node {', '.join(avoided)} refused this job in {REFUSALS_BEFORE_AVOIDING} attempts and is avoided"
                if avoided else "")
    message = (f"{pod['metadata']['name']} refused by node {node_of(pod)}: {why}"
               + (f" (and {len(refused) - 1} more pods)" if len(refused) > 1 else "") + avoiding + "; placing anew")
    return p.place_anew(list(current.values()), "RefusedByNode", message)


def count_refusals(p: Pass, nodes: set[str]) -> list[str]:
    """One more attempt refused by each node in `nodes` (status.admissionRefusals); the nodes that reach
    REFUSALS_BEFORE_AVOIDING join status.avoidedNodes, so a node that refuses every time (its kubelet counts fewer
    chips than its deviceinfo, its hostname label is not its name) does not take the gang's placements forever.
    Returns those nodes, sorted."""
    counts = {**p.s.admission_refusals, **{node: p.s.admission_refusals.get(node, 0) + 1 for node in nodes}}
    p.s.admission_refusals = counts
    newly = sorted(node for node in nodes if counts[node] >= REFUSALS_BEFORE_AVOIDING
                   and node not in p.s.avoided_nodes)
    if newly:
        p.avoid(newly)
    return newly


def ring_split(p: Pass, pods: list[dict], split: list[tuple]) -> Decision:
    """A pod the kubelet gave chips from both 910A HCCS rings (the device plugin in kubelet mode lets it choose):
    HCCL would fail the job at its start, so its table never completes; the attempt is placed anew, not counted as
    a restart. The placement gives such pods only nodes whose free chips sit in one ring, so this is a rival's
    pod or chips freed between the placement and the kubelet's admission."""
    pod, chips = split[0]
    ids, chip = ",".join(map(str, chips)), CHIPS[p.resolved.chip]
    message = (f"{pod['metadata']['name']} got chips {ids} on {node_of(pod)} from both HCCS rings (the kubelet "
               f"chose them; HCCL needs a pod of ≤ {chip.ring_size} {chip.name} chips inside one ring)"
               + (f" (and {len(split) - 1} more pods)" if len(split) > 1 else "") + "; placing anew")
    return p.place_anew(pods, "ChipsSplitAcrossRings", message)


def restart_for_spec_change(p: Pass, current: list[dict]) -> Decision:
    attempt = p.end_attempt(current)
    message = f"parallelism, npu or template changed; restarting as attempt {attempt}"
    return p.restarting("SpecChanged", message, event=("Normal", "SpecChanged", message), stops_running=False)


def succeeded(p: Pass, current: list[dict]) -> Decision:
    p.s.completion_time = timestamp(p.o.now)
    p.pod_counts(current, p.resolved.pod_count)
    p.cond("Running", False, "Completed", "all pods succeeded")
    p.cond("Succeeded", True, "AllPodsSucceeded", f"attempt {p.attempt} succeeded")
    p.phase("Succeeded", f"all {len(current)} pods succeeded")
    p.d.emit("Normal", "Succeeded", f"all {len(current)} pods succeeded")
    return p.finished(first=True)


def invalid(p: Pass) -> Decision:
    if p.s.phase == "Failed":
        return p.finished()
    message = "; ".join(p.o.spec_problems)
    return p.fail("InvalidSpec", message)


def suspended(p: Pass) -> Decision:
    if p.o.pods:
        p.delete(p.o.pods)
    p.reset_rank_table()
    p.s.placement = None
    p.pod_counts([], 0)
    if p.s.phase != "Suspended":
        p.delete_pod_group()  # a PodGroup left in its Queue would keep the Queue's room while the job is away
        p.d.emit("Normal", "Suspended", "job suspended; pods deleted")
    p.cond("Suspended", True, "Suspended", "spec.runPolicy.suspend is true")
    p.cond("Running", False, "Suspended", "suspended")
    p.phase("Suspended", "suspended: pods deleted, spec kept")
    if p.o.pods:
        p.requeue(FAST_REQUEUE_SECONDS)
    return p.d


def decide(observed: Observed) -> Decision:
    """The whole decision of one pass over what was observed; the shell executes it and asks again. The goodput
    account follows every pass of a started job (goodput_steps: the state the pass leaves names the bucket)."""
    p = Pass(observed)
    finished_before = p.s.phase in TERMINAL_JOB_PHASES
    decision = run(p)
    goodput_steps.account(p, finished_before)
    decision.status = p.serialised()
    return decision
