"""What a placement outcome writes into the job's status and which events it posts (pure): the shell placed the gang
on its inventory, or found it cannot, and runs these on the job's status (state.applied parses it and dumps it
again); each edits the typed status in place and returns the events to post and when to look again (Recorded)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from ascend_hybrid.contracts import names
from ascend_hybrid.contracts import volcano as volcanos
from ascend_hybrid.gang import backlog
from ascend_hybrid.gang import layout as layouts
from ascend_hybrid.gang.backlog import QueueKey
from ascend_hybrid.gang.placement import Placement
from ascend_hybrid.reconcile import elastic_steps, volcano_steps
from ascend_hybrid.reconcile.state import FAST_REQUEUE_SECONDS, SLOW_REQUEUE_SECONDS, Recorded
from ascend_hybrid.spec.api import (
    AscendHybridJobStatus,
    PlacementStatus,
    PlannedPlacement,
    RecoveryState,
    VolcanoScheduling,
)
from ascend_hybrid.spec.conditions import set_condition
from ascend_hybrid.spec.resolved import ResolvedJob


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def record_placement(status: AscendHybridJobStatus, job: ResolvedJob, placement: Placement, now: datetime,
                     generation: int | None, node_domains: Mapping[str, str | None], asked: ResolvedJob | None = None,
                     volcano: bool = False, may_wait: bool = False) -> Recorded:
    """The status and events after the shell placed the gang (or found it cannot), so the shell only executes what
    the core decided. `job` is what was placed; `asked`, when it differs, the whole gang an elastic job asked for
    first (it shrank to `job`). Under Volcano (`volcano`) the placement is a plan handed to Volcano as preferences,
    and a gang the placer finds no room for goes to Volcano without one, unless it `may_wait` (an elastic job that
    may shrink once its replacement window passes)."""
    outcome = Recorded()
    attempt = status.attempt or 1
    previous_reason = status.placement.reason if status.placement is not None else None
    if volcano and (placement.ok or not may_wait):
        handed_to_volcano(status, job, placement, now, generation, node_domains)
        if asked is not None and asked.data != job.data:
            outcome.events += elastic_steps.shrunk(status, asked, job, now, generation)
        outcome.requeue_after = FAST_REQUEUE_SECONDS
    elif placement.ok:
        layout = layouts.from_resolved(job)
        racks = {node_domains.get(node) for node in placement.nodes}
        spread = f"{_count(len(set(placement.nodes)), 'node')} in {_count(len(racks), 'rack')}"
        status.placement = PlacementStatus(
            attempt=attempt, nodes=list(placement.nodes), summary=spread,
            tensor_groups_node_local=layouts.tensor_groups_node_local(layout, placement.nodes), racks=len(racks))
        message = f"attempt {attempt}: {_count(job.pod_count, 'pod')} on {spread}"
        set_condition(status, "Placed", True, "Placed", message, now, generation)
        status.phase, status.message = "Placing", message  # no event: Running names the nodes
        if asked is not None and asked.data != job.data:
            outcome.events += elastic_steps.shrunk(status, asked, job, now, generation)
        outcome.requeue_after = FAST_REQUEUE_SECONDS
    else:
        unplaced(status, placement.reason)
        set_condition(status, "Placed", False, placement.cause, placement.reason, now, generation)
        if placement.reason != previous_reason:
            outcome.events.append(("Warning", placement.cause, placement.reason))
        outcome.requeue_after = SLOW_REQUEUE_SECONDS
    return outcome


def unplaced(status: AscendHybridJobStatus, reason: str) -> None:
    """No placement, and why: Pending."""
    status.placement = PlacementStatus(attempt=None, nodes=[], reason=reason)
    status.phase, status.message = "Pending", reason


def record_queued(status: AscendHybridJobStatus, blocker: QueueKey, now: datetime,
                  generation: int | None) -> Recorded:
    """The status of a job held back behind an older one: Pending, `Placed=False` reason `Queued`, no event (the
    queue moves on its own; one event per job per wave would flood a namespace of hundreds of jobs)."""
    message = backlog.queued_message(blocker)
    unplaced(status, message)
    set_condition(status, "Placed", False, "Queued", message, now, generation)
    return Recorded(requeue_after=SLOW_REQUEUE_SECONDS)


def _with(values: list[str], index: int, value: str) -> list[str]:
    return [value if i == index else old for i, old in enumerate(values)]


def record_replacement(status: AscendHybridJobStatus, index: int, placement: Placement, now: datetime) -> Recorded:
    """ReplacePod's placement of one pod: its node in status.placement.nodes, or why none fits (the next pass
    escalates to RestartGang)."""
    outcome = Recorded(requeue_after=FAST_REQUEUE_SECONDS)
    if status.recovery is None:
        status.recovery = RecoveryState()
    if not placement.ok:
        status.recovery.unplaced = placement.reason
        return outcome
    if status.placement is None:
        status.placement = PlacementStatus()
    nodes = list(status.placement.nodes)
    old = nodes[index] if index < len(nodes) else None
    plan = status.placement.planned
    if plan is not None:  # under Volcano: the new pod's preference; where it is, Volcano's binding says
        plan.nodes = _with(plan.nodes or [""] * len(nodes), index, placement.nodes[0])
        nodes[index] = ""
    else:
        nodes[index] = placement.nodes[0]
    status.placement.nodes = nodes
    status.recovery.unplaced = None
    outcome.events.append(("Normal", "PodReplaced", f"pod index {index} placed again on {placement.nodes[0]} "
                                                    f"(was {old})"))
    return outcome


# -- under Volcano ---------------------------------------------------------------------------------------------
def handed_to_volcano(status: AscendHybridJobStatus, job: ResolvedJob, placement: Placement, now: datetime,
                      generation: int | None, node_domains: Mapping[str, str | None]) -> None:
    """The attempt goes to Volcano as one PodGroup: where its pods are is Volcano's to say (status.placement.nodes
    fills as it binds them), the operator's plan its preference."""
    attempt = status.attempt or 1
    group = names.pod_group(job.name, attempt)
    queue = (job.spec.scheduling.volcano or VolcanoScheduling()).queue
    plan = PlannedPlacement.model_validate(
        volcano_steps.planned(job, placement.nodes if placement.ok else (), node_domains))
    status.placement = PlacementStatus(attempt=attempt, scheduler=volcanos.SCHEDULER_NAME, pod_group=group,
                                       nodes=[""] * job.pod_count, planned=plan)
    if placement.ok:
        spread = f"{_count(len(set(placement.nodes)), 'node')} in {_count(plan.racks or 0, 'rack')}"
        message = (f"attempt {attempt}: PodGroup {group} handed to Volcano (Queue {queue}), "
                   f"{_count(job.pod_count, 'pod')} planned on {spread} as their preferred nodes")
    else:
        status.placement.reason = placement.reason
        message = (f"attempt {attempt}: PodGroup {group} handed to Volcano (Queue {queue}) without a plan: "
                   f"{placement.reason}")
    set_condition(status, "Placed", False, volcano_steps.SCHEDULING, message, now, generation)
    status.phase, status.message = "Placing", message


SCHEDULING = "Scheduling"  # Placed=False while Volcano has the gang and has not bound it
