"""The reconcile steps of a job Volcano schedules (pure; contracts/volcano.py, docs/install.md "On a MindCluster
cluster with Volcano"): each attempt's PodGroup applied with the pods it holds, Volcano's word while it holds the
gang, where it bound the pods against the operator's plan (the plan is only its preference), and a pod a node
refused at admission made again in the same PodGroup.

Each step is a function of the pass (state.Pass): it reads `p.o`, writes `p.s` (the status) and `p.d`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from ascend_hybrid.contracts import names
from ascend_hybrid.contracts import volcano as volcanos
from ascend_hybrid.contracts.podview import admission_refusal, is_deleting, labels_of, node_of, pod_index
from ascend_hybrid.gang import layout as layouts
from ascend_hybrid.gang import render
from ascend_hybrid.reconcile.actions import ApplyPodGroup, CreatePods, DeletePods, PodToCreate
from ascend_hybrid.reconcile.state import FAST_REQUEUE_SECONDS, Decision, Pass
from ascend_hybrid.spec.api import AscendHybridJobStatus, PlacementStatus, PlannedPlacement, VolcanoScheduling
from ascend_hybrid.spec.conditions import condition, set_condition
from ascend_hybrid.spec.resolved import ResolvedJob

# Volcano's verdict is read from the PodGroup on each pass while it holds the gang: this often at least
VERDICT_POLL_SECONDS = 5.0
SCHEDULING = "Scheduling"            # Placed=False: Volcano has the gang and has not bound it yet
WAITING_IN_QUEUE = "WaitingInQueue"  # … its Queue has not admitted the PodGroup
UNSCHEDULABLE = "Unschedulable"      # … admitted, but the gang fits nowhere (Volcano's gang plugin says why)


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def queue_of(job: ResolvedJob) -> str:
    return (job.spec.scheduling.volcano or VolcanoScheduling()).queue


def node_domains(p: Pass, nodes: tuple[str, ...], job: ResolvedJob) -> dict[str, str | None]:
    """Each node's first-tier domain (its rack), as placement reads it."""
    tiers = job.spec.scheduling.topology_tiers
    return {node: labels_of(p.o.nodes.get(node) or {}).get(tiers[0]) if tiers else None for node in nodes}


# -- the plan and the pods ---------------------------------------------------------------------------------------
def planned(job: ResolvedJob, nodes: tuple[str, ...], domains: Mapping[str, str | None]) -> PlannedPlacement:
    """status.placement.planned: the plan's nodes and what they make of the gang's groups (no nodes: none)."""
    if not nodes:
        return PlannedPlacement(nodes=[])
    layout = layouts.from_resolved(job)
    return PlannedPlacement(nodes=list(nodes), racks=len({domains.get(node) for node in nodes}),
                            stage_racks=layouts.stage_racks(layout, nodes, domains),
                            tensor_groups_node_local=layouts.tensor_groups_node_local(layout, nodes))


def preferred_node(placement: PlacementStatus, index: int) -> str | None:
    """Where pod `index` goes: under Volcano the plan's node (its preference; None without a plan), else the
    placed node."""
    nodes = placement.planned.nodes if placement.planned is not None else placement.nodes
    return (nodes[index] or None) if index < len(nodes) else None


def selection(p: Pass, job: ResolvedJob) -> render.ByVolcano:
    node_selector, requirements = volcanos.chip_selection(job.chip, p.o.nodes.values(),
                                                          job.spec.template.node_selector)
    return render.ByVolcano(node_selector, tuple(requirements))


def apply_group(p: Pass, job: ResolvedJob, attempt: int, placing: int) -> None:
    p.d.act(ApplyPodGroup(render.pod_group(job, p.meta["namespace"], p.meta["uid"], attempt, placing, p.meta)))


def create_pods(p: Pass, job: ResolvedJob, attempt: int,
                placed: list[tuple[int, str | None]]) -> tuple[PodToCreate, ...]:
    """CreatePods of `placed` ((index, node) of `job`'s attempt). Under Volcano the attempt's PodGroup is applied
    first, asking Volcano for these pods, and each node is only the pod's preference."""
    by_volcano = None
    if p.volcano:
        apply_group(p, job, attempt, len(placed))
        by_volcano = selection(p, job)
        placement = p.s.placement
        if placement is not None and placement.remaking:
            placement.remaking = sorted(set(placement.remaking) - {index for index, _ in placed})
    manifests = render.gang_pods(job, p.meta["namespace"], p.meta["uid"], attempt,
                                 [(index, node or None) for index, node in placed], p.o.sched_ip,
                                 expander_image=p.o.expander_image, volcano=by_volcano)
    created = tuple(PodToCreate(manifest, node or None, job.per_pod) for (_, node), manifest in zip(placed, manifests))
    p.d.act(CreatePods(created))
    return created


def ensure_group(p: Pass, current: Mapping[int, dict]) -> None:
    """The attempt's PodGroup is missing while its pods exist (an operator stopped between the two, or someone
    deleted it): applied again, asking for the pods not bound yet."""
    if not (p.volcano and p.o.podgroup_read and p.o.podgroup is None and current):
        return
    unbound = sum(1 for pod in current.values() if not node_of(pod))
    apply_group(p, p.resolved, p.attempt, unbound)


def remaking(p: Pass) -> set[int]:
    return set(p.s.placement.remaking) if p.s.placement is not None else set()


# -- while Volcano holds the gang ------------------------------------------------------------------------------------
def waiting(p: Pass, pods: list[dict], unbound: list[dict]) -> Decision | None:
    """No pod of the attempt bound: Volcano holds the gang (its Queue has not admitted the PodGroup, or the gang
    fits nowhere yet). The job is Pending and says why in Volcano's words, with no timeout: Volcano's queue
    decides. None when some pods are bound (a pod made again joins a running gang: the scheduling timeout
    applies as on the direct path)."""
    if len(unbound) < len(pods):
        return None
    e, attempt = p.resolved, p.attempt
    group = names.pod_group(p.meta["name"], attempt)
    verdict = volcanos.assess(p.o.podgroup, queue_of(e)) if p.o.podgroup_read else None
    if verdict is not None and verdict.state == volcanos.PENDING:
        reason, kind = WAITING_IN_QUEUE, "Normal"
    elif verdict is not None and verdict.state == volcanos.UNSCHEDULABLE:
        reason, kind = UNSCHEDULABLE, "Warning"
    else:
        reason, kind = SCHEDULING, ""
    message = verdict.message if verdict is not None and verdict.state != volcanos.ABSENT else (
        f"attempt {attempt}: {len(pods)} pods of PodGroup {group} waiting for Volcano to bind them")
    previous = p.condition("Placed")
    if kind and (previous.reason if previous is not None else None) != reason:
        p.d.emit(kind, reason, message)
    p.cond("Placed", False, reason, message)
    p.phase("Pending", message)
    p.requeue(VERDICT_POLL_SECONDS if kind else FAST_REQUEUE_SECONDS)
    return p.d


def remake_refused(p: Pass, current: Mapping[int | None, dict]) -> Decision | None:
    """A pod a node's kubelet refused at admission (Volcano's chips were not there for it: UnexpectedAdmissionError,
    OutOf…) ran nothing: it is deleted and made again in the same PodGroup, which Volcano places anew; no restart
    is counted and the rest of the gang stays. The pass waits here until the refused pod is gone."""
    refused = [(index, pod, why) for index, pod in current.items() if index is not None
               and (why := admission_refusal(pod))]
    if not refused:
        return None
    refused.sort(key=lambda found: found[0])
    p.placement().remaking = sorted(remaking(p) | {index for index, _, _ in refused})
    fresh = [(pod, why) for _, pod, why in refused if not is_deleting(pod)]
    group = names.pod_group(p.meta["name"], p.attempt)
    if fresh:
        p.d.act(DeletePods(tuple(pod["metadata"]["name"] for pod, _ in fresh)))
        for pod, why in fresh:
            p.d.emit("Warning", "RefusedByNode", f"{pod['metadata']['name']} refused by node {node_of(pod)}: {why}; "
                                                 f"made again in PodGroup {group} (no restart counted)")
    pod, why = refused[0][1], refused[0][2]
    message = (f"{pod['metadata']['name']} refused by node {node_of(pod)}: {why}; making it again in PodGroup "
               f"{group}" + (f" (and {len(refused) - 1} more pods)" if len(refused) > 1 else ""))
    p.phase(p.s.phase or "Starting", message)
    p.requeue(FAST_REQUEUE_SECONDS)
    return p.d


# -- every pod bound ------------------------------------------------------------------------------------------------
def bound(p: Pass, pods: list[dict]) -> None:
    """Every pod of the attempt bound: where Volcano put them, recorded once per change (bound_by_volcano)."""
    e = p.resolved
    by_index = {pod_index(pod): pod for pod in pods}
    nodes = tuple(node_of(by_index[index]) or "" for index in range(e.pod_count) if index in by_index)
    placed = p.holds("Placed")
    if len(nodes) != e.pod_count or (p.s.placement is not None and p.s.placement.nodes == list(nodes) and placed):
        return
    for event in bound_by_volcano(p.placement(), p.s, e, p.attempt, nodes, p.o.now, p.generation,
                                  node_domains(p, nodes, e)):
        p.d.emit(*event)


def bound_by_volcano(placement: PlacementStatus, status: AscendHybridJobStatus, job: ResolvedJob, attempt: int,
                     bound: tuple[str, ...], now: datetime, generation: int | None,
                     node_domains: Mapping[str, str | None]) -> list[tuple[str, str, str]]:
    """Every pod bound: `placement` (status.placement) says where Volcano put them and how far that is from the
    plan, Placed is True and PlacementHonoured says whether the plan held (the events to post: a plan broken says
    so once)."""
    layout = layouts.from_resolved(job)
    racks = {node_domains.get(node) for node in bound}
    summary = f"{_count(len(set(bound)), 'node')} in {_count(len(racks), 'rack')}"
    local, stage_racks = layouts.tensor_groups_node_local(layout, bound), layouts.stage_racks(layout, bound,
                                                                                           node_domains)
    placement.nodes, placement.summary, placement.racks = list(bound), summary, len(racks)
    placement.tensor_groups_node_local, placement.stage_racks = local, stage_racks
    set_condition(status, "Placed", True, "BoundByVolcano",
                  f"attempt {attempt}: Volcano bound {_count(len(bound), 'pod')} on {summary}", now, generation)
    plan = placement.planned or PlannedPlacement()
    if len(plan.nodes) != len(bound):
        placement.on_planned_nodes = None
        set_condition(status, "PlacementHonoured", True, "NoPlan", "the operator had no plan to give Volcano: "
                      + str(placement.reason or "none was made"), now, generation)
        return []
    on_plan = sum(1 for node, wanted in zip(bound, plan.nodes) if node == wanted)
    placement.on_planned_nodes = f"{on_plan}/{len(bound)}"
    planned_local = plan.tensor_groups_node_local or ""
    worse = [what for what, now_, then in (
        ("nodes", len(set(bound)), len(set(plan.nodes))), ("racks", len(racks), plan.racks or 0),
        ("stage racks", stage_racks, plan.stage_racks or 0),
        ("TP groups apart", _apart(local), _apart(planned_local))) if now_ > then]
    message = (f"{placement.on_planned_nodes} pods on their planned nodes; {_count(len(set(bound)), 'node')} "
               f"(planned {len(set(plan.nodes))}), {_count(len(racks), 'rack')} (planned {plan.racks}), pipeline "
               f"stages over {_count(stage_racks, 'rack')} in all (planned {plan.stage_racks}), TP groups inside a "
               f"node {local} (planned {planned_local})")
    honoured = condition(status, "PlacementHonoured")
    was = honoured.status if honoured is not None else None  # read before set_condition edits it in place
    if worse:
        text = f"Volcano placed the gang wider than planned ({', '.join(worse)}): {message}"
        set_condition(status, "PlacementHonoured", False, "PlanNotHonoured", text, now, generation)
        return [("Warning", "PlanNotHonoured", f"attempt {attempt}: {text}")] if was != "False" else []
    reason = "AsPlanned" if on_plan == len(bound) else "AsCloseAsPlanned"
    set_condition(status, "PlacementHonoured", True, reason, message, now, generation)
    return []


def _apart(local: str) -> int:
    """TP groups not inside one node, from tensorGroupsNodeLocal's "local/total"."""
    try:
        inside, total = (int(part) for part in local.split("/"))
    except ValueError:
        return 0
    return total - inside
