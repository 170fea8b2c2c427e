"""Placing a gang (IO side): under the controller's one placement lock, the cluster's inventory from the watch,
the chips other gangs hold or were promised, and the oldest-first queue per chip type (backlog.py); the core then
records the outcome (placement_record.py)."""

from __future__ import annotations

import time
from collections.abc import Mapping

from ascend_hybrid.contracts import names
from ascend_hybrid.contracts.ascend import DEVICEINFO_LABEL, DEVICEINFO_NAMESPACE, DeviceInfo, device_infos_by_node
from ascend_hybrid.contracts.podview import node_of
from ascend_hybrid.controller import metrics
from ascend_hybrid.controller.records import JobKey, JobRecord
from ascend_hybrid.controller.roles import Placer
from ascend_hybrid.gang import backlog
from ascend_hybrid.gang.inventory import build_inventory, pinned_node
from ascend_hybrid.gang.placement import place as place_on
from ascend_hybrid.gang.summary import node_domains
from ascend_hybrid.reconcile import elastic_steps, placement_record
from ascend_hybrid.reconcile.actions import Place, PlaceReplacement, PostEvent, ProbeGrow
from ascend_hybrid.reconcile.placement_record import record_placement, record_replacement
from ascend_hybrid.reconcile.state import Decision, Observed, applied


def place(controller: Placer, key: JobKey, job: dict, observed: Observed, decision: Decision, action: Place) -> bool:
    """Places the gang under the one lock; the core records the outcome, this executes its events."""
    resolved, request = action.job, action.request
    record = controller.record_of(key)
    with controller.placement_lock:
        # admitted by Kueue, in Kueue's order, or held by Volcano in its Queue's: never held here
        queued = bool(resolved.spec.scheduling.queue) or request.volcano
        first_try = not record.queue_key[0]
        record.chip = resolved.chip
        record.queue_key = backlog.queue_key(job["metadata"].get("creationTimestamp"), *key)
        entries = controller.indexes.jobs()  # one copy of the index per placement: the queue's and the promises'
        oldest = oldest_waiting(controller, entries, exclude=key)
        blocker = None if queued else backlog.ahead(record.queue_key, resolved.chip, oldest)
        if blocker is not None:
            record.waiting, record.promised = True, {}
            _try_first(controller, blocker, only_untried=True)
            outcome = applied(placement_record.record_queued, decision.status, blocker, observed.now,
                              job["metadata"].get("generation"))
            decision.status, decision.requeue_after = outcome.status, outcome.requeue_after
            _hold(controller, record, blocker, decision)
            return False
        record.held_since = None
        started = time.perf_counter()
        npu_pods, health = cluster_holdings(controller)
        plugins = controller.indexes.device_plugins()
        inventory = build_inventory(controller.indexes.nodes(), npu_pods, health=health, plugins=plugins,
                                    reserved=reserved(controller, npu_pods, entries, exclude=key))
        placement = place_on(request, inventory)
        placed = resolved
        # spec.elastic: when the whole gang does not fit, the largest smaller one that does (the core chose them)
        for smaller_request, smaller in action.alternatives if not placement.ok else ():
            smaller_placement = place_on(smaller_request, inventory)
            if smaller_placement.ok:
                placement, placed = smaller_placement, smaller
                break
        metrics.PLACEMENT_SECONDS.observe(time.perf_counter() - started)
        # it blocks younger jobs only if the cluster could hold it once others free their chips
        record.waiting = not queued and not placement.ok and place_on(request, build_inventory(
            controller.indexes.nodes(), [], health=health, plugins=plugins)).ok
        if first_try and not placement.ok and not record.waiting:
            controller.wake_pending()  # it can never fit: the jobs queued behind it while untried go ahead
        tier = request.tier_labels[0] if request.tier_labels else ""
        outcome = applied(record_placement, decision.status, placed, placement, observed.now,
                          job["metadata"].get("generation"), node_domains(inventory, tier), asked=resolved,
                          volcano=request.volcano, may_wait=action.retry_within is not None)
        handed_over = request.volcano and (placement.ok or action.retry_within is None)
        if placement.ok:
            attempt = outcome.status["attempt"]
            record.promised = {names.pod_name(key[1], attempt, index): (node, placed.per_pod)
                               for index, node in enumerate(placement.nodes)}
            if not queued:  # the queue moved now, not when this job's status says so: the next job goes at once
                _try_first(controller, backlog.head(resolved.chip, oldest))
        else:
            record.promised = {}
    decision.status = outcome.status
    decision.requeue_after = outcome.requeue_after
    if action.retry_within is not None and outcome.requeue_after is not None:
        decision.requeue_after = min(outcome.requeue_after, max(action.retry_within, 0.5))
    for event in outcome.actions:
        if isinstance(event, PostEvent):  # a placement outcome's only actions are its events
            controller.post_event(job, event.type, event.reason, event.message)
    return placement.ok or handed_over


def probe_grow(controller: Placer, key: JobKey, job: dict, observed: Observed, decision: Decision,
               action: ProbeGrow) -> None:
    """spec.elastic, shrunk: whether the spec's gang would fit under the one lock, the chips of this job's own
    pods counted free (a growth deletes them first); the core records the answer. Nothing is promised."""
    with controller.placement_lock:
        npu_pods, health = cluster_holdings(controller)
        plugins = controller.indexes.device_plugins()
        others = npu_pods if action.keep else elastic_steps.excluded(npu_pods, *key)
        inventory = build_inventory(controller.indexes.nodes(), others, health=health, plugins=plugins,
                                    reserved=reserved(controller, npu_pods, controller.indexes.jobs(), exclude=key))
        placement = place_on(action.request, inventory)
    outcome = applied(elastic_steps.probed, decision.status, placement, action.data, observed.now, action.keep)
    decision.status = outcome.status
    for event in outcome.actions:
        if isinstance(event, PostEvent):
            controller.post_event(job, event.type, event.reason, event.message)


def place_replacement(controller: Placer, key: JobKey, job: dict, observed: Observed, decision: Decision,
                      action: PlaceReplacement) -> bool:
    """ReplacePod: one pod of a running gang placed again under the one lock, on the inventory less the chips
    every other gang holds or was promised; the core records where (placement_record.record_replacement)."""
    record = controller.record_of(key)
    with controller.placement_lock:
        npu_pods, health = cluster_holdings(controller)
        plugins = controller.indexes.device_plugins()
        inventory = build_inventory(controller.indexes.nodes(), npu_pods, health=health, plugins=plugins,
                                    reserved=reserved(controller, npu_pods, controller.indexes.jobs(), exclude=key))
        placement = place_on(action.request, inventory)
        outcome = applied(record_replacement, decision.status, action.index, placement, observed.now)
        if placement.ok:
            attempt = int(outcome.status.get("attempt") or 1)
            record.promised[names.pod_name(key[1], attempt, action.index)] = (placement.nodes[0],
                                                                               action.request.chips_per_pod)
    decision.status = outcome.status
    decision.requeue_after = outcome.requeue_after
    for event in outcome.actions:
        if isinstance(event, PostEvent):  # a placement outcome's only actions are its events
            controller.post_event(job, event.type, event.reason, event.message)
    return placement.ok


def _hold(controller: Placer, record: JobRecord, blocker: backlog.QueueKey, decision: Decision) -> None:
    """A job held back behind one that no try found short of chips (not tried yet, or held back itself) is placed
    in a moment: its Queued status stays unwritten for up to `status_coalesce_seconds` of holding, and it passes
    again by then at the latest (the head it waits for wakes it sooner)."""
    now = time.monotonic()
    record.held_since = now if record.held_since is None else record.held_since
    ahead_of_it = controller.jobs.get((blocker[1], blocker[2]))
    short_of_chips = ahead_of_it is not None and bool(ahead_of_it.queue_key[0]) and ahead_of_it.waiting \
        and ahead_of_it.held_since is None
    left = controller.settings.status_coalesce_seconds - (now - record.held_since)
    if not short_of_chips and left > 0:
        decision.provisional = True
        decision.requeue_after = min(decision.requeue_after or left, left)


def _try_first(controller: Placer, job: backlog.QueueKey | None, *, only_untried: bool = False) -> None:
    """Puts a pass of `job` before every pass already due. A job held back by an older one that this process has
    not tried yet asks for that one (a job already tried and waiting for chips is woken when chips free)."""
    if job is None:
        return
    key = (job[1], job[2])
    record = controller.jobs.get(key)
    if only_untried and record is not None and record.queue_key[0]:
        return
    controller.queue.add(key, first=True)


def cluster_holdings(controller: Placer) -> tuple[list[dict], Mapping[str, DeviceInfo]]:
    """(NPU pods, each node's device health) of the whole cluster. When the operator watches only some namespaces
    its stores miss the NPUs held elsewhere and the kube-system ConfigMaps: those are listed cluster-wide. The
    watched health is the store's map, kept until a ConfigMap changes (not parsed again per placement)."""
    if controller.settings.watches_cluster:
        return controller.indexes.npu_pods(), controller.indexes.device_infos_by_node()
    return (controller.kube.list_npu_pods(), device_infos_by_node(
        controller.kube.list_device_infos(DEVICEINFO_NAMESPACE, f"{DEVICEINFO_LABEL}=true")))


def oldest_waiting(controller: Placer, entries: list[backlog.Entry], exclude: JobKey) -> dict[str, backlog.QueueKey]:
    """The head of each chip type's queue but `exclude`. Nothing `exclude`'s own placement changes moves it: its
    placement asks once, and the head it then wakes is the one asked before."""
    records = list(controller.jobs.items())
    tried = {key for key, record in records if record.queue_key[0]} | {exclude}
    known = (backlog.Waiting(record.queue_key, record.chip) for key, record in records
             if key != exclude and record.queue_key[0] and record.phase == "Pending" and record.waiting)
    return backlog.oldest_waiting(known, entries, tried)


def reserved(controller: Placer, npu_pods: list[dict], entries: list[backlog.Entry], exclude: JobKey) -> dict[str, int]:
    """Chips per node promised to gangs the inventory cannot see on their nodes yet: this process's promises
    and the placements other jobs' statuses hold (made by a process that died before creating every pod), until
    their pods are shown bound or pinned (a queued gang's pods exist unpinned until Kueue admits them)."""
    visible = {(pod["metadata"].get("namespace"), pod["metadata"]["name"]): pod for pod in npu_pods}
    placed = {key for key, pod in visible.items() if node_of(pod) or pinned_node(pod, {})}
    promised = backlog.unseen_placements(entries, placed, exclude)
    for key, record in list(controller.jobs.items()):
        if key == exclude:
            continue
        promises = record.promised  # written under the placement lock, as this runs
        for pod_name, (node, chips) in list(promises.items()):
            pod = visible.get((key[0], pod_name))
            if pod is not None and (node_of(pod) or pinned_node(pod, {})):
                del promises[pod_name]
            else:
                promised[(key[0], pod_name)] = (node, chips)
    totals: dict[str, int] = {}
    for node, chips in promised.values():
        totals[node] = totals.get(node, 0) + chips
    return totals
