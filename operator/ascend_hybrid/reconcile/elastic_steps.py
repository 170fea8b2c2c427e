"""Elastic data parallelism (pure): a job with spec.elastic that lost a node and finds no room for its whole gang
restarts at a smaller data degree, and grows back to the spec's at a checkpoint boundary once the whole gang fits
again (docs/reliability.md, "Elastic data parallelism").

Only the data degree changes. The lost DP ways become gradient-accumulation micro-batches, so every step still
sees the whole global batch and the loss curve stays the same. The degree is chosen here (`choose`: the rules
module and the planner's memory model decide); the shell's placement decides which of the chosen degrees fits
the free chips (reconcile.actions.Place's alternatives); status.elastic holds the running degree while shrunk and
every pass runs with it (`run_shrunk`), as an auto job runs its chosen strategy.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from ascend_hybrid.contracts import names
from ascend_hybrid.contracts import volcano as volcanos
from ascend_hybrid.contracts.conditions import parse_time, timestamp
from ascend_hybrid.contracts.podview import (
    is_deleting,
    is_node_ready,
    labels_of,
    node_of,
    phase_of,
)
from ascend_hybrid.diagnosis import recovery
from ascend_hybrid.diagnosis.recovery import GROW, SHRINK
from ascend_hybrid.gang import layout as layouts
from ascend_hybrid.gang.placement import GangRequest, Placement
from ascend_hybrid.planner import search
from ascend_hybrid.planner.hardware import GIB, Hardware
from ascend_hybrid.reconcile import checkpoint_steps, membership, strategy, volcano_steps
from ascend_hybrid.reconcile.actions import EnsureChildren, PlaceReplacement, ProbeGrow
from ascend_hybrid.reconcile.state import Pass, Recorded
from ascend_hybrid.spec import rules
from ascend_hybrid.spec.api import (
    AscendHybridJobStatus,
    EffectiveParallelism,
    ElasticStatus,
    PlacementStatus,
    PlanStatus,
    RecoveryRecord,
    RunningPrediction,
)
from ascend_hybrid.spec.conditions import set_condition
from ascend_hybrid.spec.resolved import ResolvedJob, SpecError

# How often a shrunk job asks the shell whether its whole gang fits again (a placement under the one lock).
GROW_PROBE_SECONDS = 5.0
DEGRADED = "Degraded"


@dataclass(frozen=True)
class Choice:
    """The data degrees a shrink may take, largest first (each resolved through the rules), and why the others
    between the current degree and minData may not."""

    jobs: tuple[ResolvedJob, ...]
    rejected: tuple[str, ...]


def accumulation(full: ResolvedJob, data: int) -> int | None:
    """The micro-batches at `data`: the fewest that keep each forward pass at most as large as the spec's
    (global batch / (data × microBatches)) and split the global batch evenly; None when none does."""
    batch = full.global_batch_size
    fewest = -(-full.data * full.micro_batches // data)
    for micro in range(fewest, batch // data + 1):
        if batch % (data * micro) == 0:
            return micro
    return None


def at_data(full: ResolvedJob, data: int, micro_batches: int) -> ResolvedJob:
    """The spec's job at another data degree and micro-batch count, resolved and checked by rules.parse (every
    rule of the spec, as if the user had written these degrees); SpecError names what breaks."""
    spec: dict[str, Any] = full.spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    spec["parallelism"].update(data=data, microBatches=micro_batches)
    return rules.parse({"metadata": {"name": full.name}, "spec": spec})


def predicted_out_of_memory(job: ResolvedJob, hw: Hardware) -> str | None:
    try:
        evaluation = search.evaluate_job(job, hw)
    except search.PlanError as error:
        return str(error)
    if evaluation.fits:
        return None
    return (f"the planner predicts {evaluation.memory.total / GIB:.1f} GiB per NPU, above the usable "
            f"{evaluation.usable / GIB:.1f} GiB")


def sliced_checkpoints(job: ResolvedJob) -> str | None:
    """Why the job's checkpoints cannot be loaded at another data degree, None when they can. The trainer writes
    one whole checkpoint (rank 0's) when it runs data parallel without the parallel optimizer, else one slice per
    rank laid out for its world size (its strategy.plan_parallel and train.save; tests/contract checks that both
    sides agree). Slices are not resharded on load, so a job that restarts from them keeps its degrees."""
    if job.spec.training.checkpoint is None:
        return None
    if job.spec.training.optimizer_shard:
        return ("training.optimizerShard: each rank checkpoints its slice of the optimizer state for this data "
                "degree, and slices are not resharded on load")
    split = [f"{name}={degree}" for name, degree in (("tensor", job.tensor), ("pipeline", job.pipeline),
                                                     ("expert", job.expert), ("context", job.context)) if degree > 1]
    if split:
        return (f"parallelism {', '.join(split)}: each rank checkpoints its slice (semi-auto parallel) for this "
                "world size, and slices are not resharded on load")
    return None


def choose(full: ResolvedJob, below: int, hw: Hardware) -> Choice:
    """Every data degree under `below` down to spec.elastic.minData that splits the global batch, keeps every
    rule and is not predicted out of memory, largest first; none when the checkpoint would not load at another
    degree."""
    elastic = full.spec.elastic
    if elastic is None:
        return Choice((), ())
    if (sliced := sliced_checkpoints(full)) is not None:
        return Choice((), (f"its checkpoint loads at data {full.data} only: {sliced}",))
    jobs, rejected = [], []
    for data in range(min(below, full.data + 1) - 1, elastic.min_data - 1, -1):
        micro = accumulation(full, data)
        if micro is None:
            rejected.append(f"data {data}: no micro-batch count splits globalBatchSize={full.global_batch_size} "
                            f"over {data} ways")
            continue
        try:
            job = at_data(full, data, micro)
        except SpecError as error:
            rejected.append(f"data {data}: {error.problems[0]}")
            continue
        oom = predicted_out_of_memory(job, hw)
        if oom is not None:
            rejected.append(f"data {data}: {oom}")
            continue
        jobs.append(job)
    return Choice(tuple(jobs), tuple(rejected))


# -- the pass ------------------------------------------------------------------------------------------------
def spec_job(p: Pass) -> ResolvedJob:
    """The job at the spec's degrees (the pass may run a shrunk one)."""
    return rules.parse(p.job)


def run_shrunk(p: Pass) -> None:
    """While status.elastic holds a shrunk degree, the pass runs the job at it. A spec that no longer allows it
    (elasticity off, a data degree at or below it, a rule it breaks now) drops it: the pods, made at the shrunk
    degree, then differ from the spec's and restart as a spec change."""
    state = p.s.elastic
    if state is None or state.data is None or state.micro_batches is None:  # shrunk() writes both
        return
    full = p.resolved
    if full.spec.elastic is None or not full.spec.elastic.min_data <= state.data < full.data:
        drop(p, "the spec changed")
        return
    try:
        shrunk = at_data(full, state.data, state.micro_batches)
    except SpecError as error:
        drop(p, f"the spec changed: {error.problems[0]}")
        return
    p.o = replace(p.o, resolved=shrunk)
    with_degrees(p.s, shrunk)
    predict_running(p.s.plan, shrunk, p.o.hardware_profiles)


def with_degrees(status: AscendHybridJobStatus, job: ResolvedJob) -> None:
    """status.parallelism: the degrees `job` runs at, over those recorded (the virtual stages kept)."""
    before = status.parallelism.model_dump(by_alias=True, exclude_none=True) if status.parallelism else {}
    status.parallelism = EffectiveParallelism.model_validate({**before, **job.degrees})


def predict_running(plan: PlanStatus | None, shrunk: ResolvedJob, profiles: Mapping[str, Hardware]) -> None:
    """status.plan.running: the planner's step time at the degrees the job runs now, once per degree, scaled as
    the spec's prediction was (its observed stepScale), so stepTimeRatio and the cluster's observed efficiency
    compare a shrunk run with its own prediction."""
    running = plan.running if plan is not None else None
    if plan is None or (running is not None and (running.data, running.micro_batches)
                        == (shrunk.data, shrunk.micro_batches)):
        return
    try:
        evaluation = search.evaluate_job(shrunk, strategy.hardware_for(shrunk, profiles))
    except (strategy.StrategyError, search.PlanError):
        plan.running = None  # no prediction at these degrees: the ratio then reads against the spec's
        return
    scale = plan.observed.step_scale if plan.observed is not None else 1.0
    plan.running = RunningPrediction(data=shrunk.data, micro_batches=shrunk.micro_batches,
                                     step_seconds=round(evaluation.time.step * scale, 4))
    plan.step_time_ratio = None  # the old ratio read against the spec's prediction


def not_shrunk(plan: PlanStatus | None) -> None:
    """status.plan.running gone: the job runs at the spec's degrees, predicted by the plan itself."""
    if plan is not None:
        plan.running = None


def drop(p: Pass, why: str) -> None:
    p.s.elastic = None
    not_shrunk(p.s.plan)
    if p.holds(DEGRADED):
        p.cond(DEGRADED, False, "SpecChanged", why)


def healthy_avoided(p: Pass) -> list[str]:
    """status.avoidedNodes less the nodes Ready again: for an elastic job a node is avoided only while it is
    unhealthy, so a repaired node counts for the growth; a node it left for slowness (status.slowNodes) is Ready
    and stays avoided."""
    slow = {entry.node for entry in p.s.slow_nodes}
    return [node for node in p.s.avoided_nodes
            if node in slow or not is_node_ready(p.o.nodes.get(node))]


def shrink_options(p: Pass) -> tuple[tuple[tuple[GangRequest, ResolvedJob], ...], float | None]:
    """The smaller gangs the shell may place when the whole one does not fit, largest first, and the seconds
    until they may (replacementTimeoutSeconds after the open incident's last decision). None of them without
    spec.elastic or an open incident (elasticity answers a loss; a job too big for the cluster from its start
    waits whole)."""
    e = p.resolved
    elastic = e.spec.elastic
    record = recovery.current_incident(p.s.recoveries)
    decided = parse_time(record.decided) if record is not None else None
    if elastic is None or record is None or decided is None:
        return (), None
    left = elastic.replacement_timeout_seconds - (p.o.now - decided).total_seconds()
    if left > 0 and not record.replacement_timed_out:
        return (), left
    try:
        hw = strategy.hardware_for(e, p.o.hardware_profiles)
    except strategy.StrategyError as error:
        cannot_shrink(p, str(error))
        return (), None
    choice = choose(spec_job(p), e.data, hw)
    if not choice.jobs:
        if p.s.elastic is None:  # shrunk already: Degraded keeps saying so, the placement why it waits
            cannot_shrink(p, "; ".join(choice.rejected) or f"spec.elastic.minData={elastic.min_data} is the data "
                                                              "degree it runs with")
        return (), None
    avoided = p.s.avoided_nodes
    return tuple((p.gang_request(job, avoided), job) for job in choice.jobs), None


def cannot_shrink(p: Pass, why: str) -> None:
    """No smaller degree may run: the job waits whole and says why (once per reason, as an event too)."""
    message = f"the gang does not fit and the job cannot shrink: {why}"
    previous = p.condition(DEGRADED)
    if (previous.message if previous is not None else None) != message:
        p.d.emit("Warning", "CannotShrink", message)
    p.cond(DEGRADED, False, "CannotShrink", message)


def shrunk(status: AscendHybridJobStatus, asked: ResolvedJob, placed: ResolvedJob, now: datetime,
           generation: int | None) -> list[tuple[str, str, str]]:
    """The shell placed a smaller gang than the pass asked for: status.elastic, the ledger's Shrink rung, the
    Degraded condition; the events to post."""
    before = status.elastic
    status.elastic = ElasticStatus(data=placed.data, micro_batches=placed.micro_batches,
                                   from_data=(before.from_data if before is not None else None) or asked.data,
                                   since=timestamp(now))
    with_degrees(status, placed)
    status.world_size = placed.world_size
    # The next attempt's pods are made from another job: a pass that reads this status before the one that
    # creates them (a watch behind the patches) must not take them for a spec change.
    status.pod_template_hash = None
    why = (f"no room for data {asked.data} ({asked.pod_count} pods): shrunk to data {placed.data}, "
           f"{placed.micro_batches} micro-batches per step, the global batch of {placed.global_batch_size} kept")
    record = recovery.current_incident(status.recoveries[-1:])
    if record is not None:
        recovery.climb(record, SHRINK, why, now)
    set_condition(status, DEGRADED, True, "Shrunk", f"data {asked.data}→{placed.data}: {why}", now, generation)
    return [("Warning", "Shrunk", f"data {asked.data}→{placed.data}: {why}")]


# -- shrinking with the running pods kept ---------------------------------------------------------------------
def unplaced_step(p: Pass, current: Mapping[int, dict], record: RecoveryRecord, index: int, request: GangRequest) -> bool:
    """ReplacePod found no node for pod `index` of an elastic job: try the replacement again until
    replacementTimeoutSeconds passed since the rung's decision, then shrink keeping the running pods. False when
    it cannot (a queued job, too few pods running, no smaller degree): RestartGang follows, and its placement
    may shrink."""
    elastic = p.resolved.spec.elastic
    decided = parse_time(record.decided)
    if elastic is None or p.queue or decided is None:
        return False
    left = elastic.replacement_timeout_seconds - (p.o.now - decided).total_seconds()
    if left > 0:
        state = p.recovery()
        unplaced, state.unplaced = state.unplaced, None
        p.phase("Restarting", f"ReplacePod: no node fits pod index {index} yet ({unplaced}); "
                              f"shrinking in {left:.0f}s unless one frees (spec.elastic.replacementTimeoutSeconds)")
        p.d.act(PlaceReplacement(index, request))
        p.requeue(min(left, GROW_PROBE_SECONDS))
        return True
    record.replacement_timed_out = True  # a RestartGang that follows may place a smaller gang at once
    return shrink_in_place(p, current, index)


def survivors(current: Mapping[int, dict], lost: int) -> list[dict]:
    """The pods that go on into a smaller world: running, not the lost one, in their index order (a pipeline's
    stages stay on neighbouring pods)."""
    return [pod for index, pod in sorted(current.items())
            if index != lost and phase_of(pod) == "Running" and not is_deleting(pod)]


def shrink_in_place(p: Pass, current: Mapping[int, dict], lost: int) -> bool:
    """Shrink without remaking the gang: the largest smaller data degree whose pods the running ones can be. They
    are kept where they run (their chips, IPs and processes), renumbered 0..n-1 as a new attempt; the others go;
    the launchers restart their ranks in the smaller world from the newest checkpoint (the world is written with
    the next rank generation, recovery_steps.signal). The open incident climbs to Shrink."""
    full = spec_job(p)
    try:
        hw = strategy.hardware_for(full, p.o.hardware_profiles)
    except strategy.StrategyError:
        return False
    running = survivors(current, lost)
    choice = choose(full, p.resolved.data, hw)
    job = next((job for job in choice.jobs if job.pod_count <= len(running)), None)
    if job is None:
        return False
    kept, extra = running[:job.pod_count], running[job.pod_count:]
    asked = p.resolved
    p.delete(extra)
    p.new_attempt()
    attempt = p.attempt
    place_kept(p, job, [node_of(pod) or "" for pod in kept], f"kept {len(kept)} running pods")
    if p.volcano:  # the kept pods move into the new attempt's PodGroup as they are adopted
        volcano_steps.apply_group(p, job, attempt, 0)
    for kind, reason, message in shrunk(p.s, asked, job, p.o.now, p.generation):
        p.d.emit(kind, reason, message)
    membership.keep(p, kept)
    record = recovery.current_incident(p.s.recoveries)
    if record is not None:
        record.pods_kept = len(kept)
    generation = p.rank_generation + 1
    p.recovery().generation, p.recovery().rung = generation, SHRINK
    p.o = replace(p.o, resolved=job)
    p.reset_rank_table()
    message = (f"no node fits pod index {lost}: data {asked.data}→{job.data} keeping {len(kept)} running pods "
               f"(attempt {attempt}), their ranks restart in the smaller world at rank generation {generation}")
    p.restarting(SHRINK, message)
    return True


def place_kept(p: Pass, job: ResolvedJob, nodes: list[str], how: str, running: int | None = None) -> None:
    """status.placement of an attempt that kept running pods (nodes by pod index: the first `running` where those
    run, the rest placed), as a placement writes it. Under Volcano every node is the plan, and the kept pods' are
    where they are bound already."""
    tiers = job.spec.scheduling.topology_tiers
    racks = {labels_of(p.o.nodes.get(node) or {}).get(tiers[0]) if tiers else None for node in nodes}
    placement = PlacementStatus(
        attempt=p.attempt, nodes=list(nodes), summary=f"{how}: {len(set(nodes))} nodes in {len(racks)} racks",
        tensor_groups_node_local=layouts.tensor_groups_node_local(layouts.from_resolved(job), tuple(nodes)),
        racks=len(racks))
    if p.volcano:
        kept = len(nodes) if running is None else running
        domains = volcano_steps.node_domains(p, tuple(nodes), job)
        placement.scheduler = volcanos.SCHEDULER_NAME
        placement.pod_group = names.pod_group(job.name, p.attempt)
        placement.planned = volcano_steps.planned(job, tuple(nodes), domains)
        placement.nodes = [node if index < kept else "" for index, node in enumerate(nodes)]
    p.s.placement = placement


# -- growing back --------------------------------------------------------------------------------------------
def grow_step(p: Pass, current: Mapping[int, dict]) -> bool:
    """While shrunk with growBack: ask the shell whether the spec's gang fits (ProbeGrow: the pods it adds beside the
    running ones, or the whole gang when those cannot be kept); once it did and training passed the next checkpoint
    after that, grow to the spec's degree. True when the pass ends here."""
    state = p.s.elastic
    elastic = p.resolved.spec.elastic
    if state is None or elastic is None or not elastic.grow_back:
        return False
    full = spec_job(p)
    keep = keeps_pods(p, current)
    settled = recovery.current_incident(p.s.recoveries) is None  # the shrink's first step is in
    if settled and state.grow_fits and at_boundary(checkpoint_steps.every_steps(p), state.grow_fits_at_step,
                                                   p.training_step):
        added = state.grow_nodes or ()
        if keep and len(added) == full.pod_count - len(current):
            grow_in_place(p, full, current, added)
        else:
            grow(p, full, current)
        return True
    request = growth_request(p, full, current) if keep else p.gang_request(full, healthy_avoided(p))
    p.d.act(ProbeGrow(request, full.data, keep=keep))
    p.requeue(GROW_PROBE_SECONDS)
    return False


def keeps_pods(p: Pass, current: Mapping[int, dict]) -> bool:
    """Whether a growth can keep the running pods: not a queued job (its pod group is Kueue's), every pod of the
    attempt running with its launcher heard on the channel (it restarts its ranks in the larger world)."""
    if p.queue or len(current) != p.resolved.pod_count:
        return False
    for pod in current.values():
        report = p.o.launchers.get(pod["metadata"]["name"])
        if phase_of(pod) != "Running" or is_deleting(pod) or report is None or report.uid != pod["metadata"].get("uid"):
            return False
    return True


def growth_request(p: Pass, full: ResolvedJob, current: Mapping[int, dict]) -> GangRequest:
    """The pods a growth adds beside the running ones (pod indices from the running count on), near them."""
    nodes = frozenset(node for pod in current.values() if (node := node_of(pod)))
    return replace(p.gang_request(full, healthy_avoided(p)), pod_count=full.pod_count - len(current), groups=(),
                   near_nodes=nodes)


def at_boundary(every: int | None, since: int | None, step: int | None) -> bool:
    """Training passed a checkpoint since the spec's gang first fitted at step `since` (at once without
    checkpoints)."""
    if every is None:
        return True
    if step is None or since is None:
        return False
    return int(step) // every > int(since) // every


def probed(status: AscendHybridJobStatus, placement: Placement, data: int, now: datetime,
           keep: bool = False) -> Recorded:
    """What the shell's ProbeGrow found: whether the spec's gang fits the free chips now (`keep`: the pods it adds,
    beside the running ones, and where; else the whole gang, the job's own chips counted free), and the training
    step when it first did."""
    outcome = Recorded()
    state = status.elastic
    if state is None:
        return outcome
    if placement.ok:
        if not state.grow_fits:
            state.grow_fits_at_step = (status.training.step if status.training is not None else None) or 0
            outcome.events.append(("Normal", "GrowFits", f"a placement for data {data} fits again; growing back at "
                                                         "the next checkpoint boundary"))
        state.grow_fits, state.grow_reason = True, None
        state.grow_nodes = list(placement.nodes) if keep else None
    else:
        state.grow_fits, state.grow_reason = False, placement.reason
        state.grow_fits_at_step, state.grow_nodes = None, None
    return outcome


def grown(p: Pass, full: ResolvedJob) -> tuple[ElasticStatus, str]:
    """Out of shrunk: status.elastic gone, the ledger's incident of the growth (rung Grow, not counted); the
    previous elastic state and the incident's reason. Only a shrunk job grows."""
    state = p.s.elastic
    if state is None:
        raise ValueError("a job that did not shrink was grown")
    p.s.elastic = None
    not_shrunk(p.s.plan)
    p.s.avoided_nodes = healthy_avoided(p)
    training_step = p.training_step
    why = (f"a placement for data {full.data} fits again; growing from data {state.data} at the checkpoint "
           f"boundary (step {training_step})")
    recovery.open_incident(p.s.recoveries, cause="CapacityReturned", rung=GROW, why=why,
                           detected=p.o.now, decided=p.o.now, attempt=p.attempt, counted=False,
                           step=training_step)
    return state, why


def at_spec_degrees(p: Pass, full: ResolvedJob, state: ElasticStatus, why: str) -> None:
    with_degrees(p.s, full)
    p.s.world_size = full.world_size
    p.s.pod_template_hash = None  # as at a shrink: the next pods are made from the spec's job
    message = f"data {state.data}→{full.data}: {why}; restarting as attempt {p.attempt}"
    p.cond(DEGRADED, False, "Grown", message)
    p.restarting(GROW, message, event=("Normal", "Grown", message))


def grow(p: Pass, full: ResolvedJob, current: Mapping[int, dict]) -> None:
    """Back to the spec's data degree as a new attempt, every pod made again (the running ones could not be kept,
    or the pods to add were not placed)."""
    state, why = grown(p, full)
    p.end_attempt(list(current.values()))
    at_spec_degrees(p, full, state, why)


def grow_in_place(p: Pass, full: ResolvedJob, current: Mapping[int, dict], added: Iterable[str]) -> None:
    """Back to the spec's data degree keeping the running pods: a new attempt in which they keep their indices
    (their launchers restart the ranks in the larger world, told beside the next rank generation) and the pods
    the probe placed join them. job.json and the channel are written before the new pods are made, so they start
    in the larger world and never meet the smaller one's scheduler."""
    kept = [pod for _, pod in sorted(current.items())]
    state, why = grown(p, full)
    p.s.recoveries[-1].pods_kept = len(kept)
    p.new_attempt()
    attempt = p.attempt
    membership.keep(p, kept)
    generation = p.rank_generation + 1
    p.recovery().generation, p.recovery().rung = generation, GROW
    nodes = [node_of(pod) or "" for pod in kept] + list(added)
    place_kept(p, full, nodes, f"kept {len(kept)} running pods, {len(nodes) - len(kept)} added", running=len(kept))
    p.o = replace(p.o, resolved=full)
    p.reset_rank_table()
    p.d.act(EnsureChildren(full))
    p.d.act(membership.signal(p, generation))
    volcano_steps.create_pods(p, full, attempt, [(index, nodes[index]) for index in range(len(kept), full.pod_count)])
    at_spec_degrees(p, full, state, why)


def excluded(pods: Iterable[dict], namespace: str, job: str) -> list[dict]:
    """The NPU pods of every other job: the chips a growth may count on are the free ones and this job's own."""
    return [pod for pod in pods if not ((pod.get("metadata") or {}).get("namespace") == namespace
                                        and ((pod.get("metadata") or {}).get("labels") or {}).get(names.JOB_LABEL)
                                        == job)]
