"""The cluster's observed efficiency, kept in the API: every telemetry interval the leader folds each Running job's
reading (planner/observed.py: steady measured / unscaled predicted step seconds) into the book per hardware profile
and applies it server-side to the ConfigMap `ascend-hybrid-observed-efficiency` in the operator's namespace; the
factors it holds are what `spec.npu.useObservedEfficiency` jobs are planned with and what `ascend-hybrid plan
--learn/--explain` read. The book is read back from the ConfigMap when this replica starts leading, so a restart
or a new leader continues it instead of starting over."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from ascend_hybrid.contracts import names
from ascend_hybrid.contracts.conditions import parse_time
from ascend_hybrid.controller.kube import Kube
from ascend_hybrid.diagnosis import checkpointing
from ascend_hybrid.monitoring import slowness
from ascend_hybrid.planner import observed
from ascend_hybrid.reconcile import status_edge
from ascend_hybrid.spec.api import AscendHybridJobStatus, RecoveryRecord, SlowNodeRecord

log = logging.getLogger("ascend_hybrid.observed")
Item = TypeVar("Item", bound=BaseModel)


def manifest(namespace: str, book: observed.Book) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": names.OBSERVED_EFFICIENCY_CONFIG_MAP, "namespace": namespace,
                         "labels": dict(names.MANAGED_BY)},
            "data": observed.to_data(book)}


class EfficiencyBook:
    """The book as this replica last read or wrote it."""

    def __init__(self, kube: Kube, namespace: str):
        self.kube, self.namespace = kube, namespace
        self.book: dict[str, dict[str, tuple[float, str]]] = {}
        self.loaded = False

    def load(self) -> None:
        config_map = self.kube.read_config_map(self.namespace, names.OBSERVED_EFFICIENCY_CONFIG_MAP)
        try:
            self.book = observed.from_data((config_map or {}).get("data"))
        except observed.ObservedError as error:
            # a hand-edited ConfigMap the operator cannot read: start a new book, which the next write replaces
            log.warning("%s/%s: %s; starting a new book", self.namespace, names.OBSERVED_EFFICIENCY_CONFIG_MAP,
                        error)
            self.book = {}
        self.loaded = True

    def fold(self, readings: Iterable[observed.Reading]) -> bool:
        """Folds the readings in; applies the ConfigMap when the book changed. True when it wrote."""
        if not self.loaded:
            self.load()
        folded = observed.fold(self.book, readings)
        if folded == self.book:
            return False
        self.kube.apply(manifest(self.namespace, folded))
        self.book = folded
        return True

    def factors(self) -> dict[str, observed.Observed]:
        return observed.observe_all(self.book)


def job_statuses(controller) -> list[tuple[tuple[str, str], AscendHybridJobStatus]]:
    """Each cached job's status, as much as the cluster-wide folds read of it (folded_fields). A worker or a watch
    may drop a record's cached job at any moment: each is read once (JobRecord.job)."""
    jobs = ((key, record.job) for key, record in list(controller.jobs.items()))
    return [(key, folded_fields(job.get("status") or {})) for key, job in jobs if job]


def folded_fields(status: dict) -> AscendHybridJobStatus:
    """What the folds read of a job's status, parsed: startTime and placement (a field that does not validate is
    left out, status_edge.parse), and each incident of the ledger and each slow node that validates (one another
    version wrote is skipped, not the whole list)."""
    typed = status_edge.parse({key: status[key] for key in ("startTime", "placement") if key in status}).model
    if not is_moment(typed.start_time):
        typed.start_time = None
    typed.recoveries = [record for record in valid_items(RecoveryRecord, status.get("recoveries"))
                        if is_moment(record.detected)]
    typed.slow_nodes = valid_items(SlowNodeRecord, status.get("slowNodes"))
    return typed


def is_moment(value: str | None) -> bool:
    """An RFC 3339 time with its offset (the schema types it as a string only: another version or a hand may have
    written anything there)."""
    try:
        moment = parse_time(value)
    except ValueError:
        return False
    return moment is not None and moment.tzinfo is not None


def valid_items(model: type[Item], items: object) -> list[Item]:
    """The items of a status list that `model` accepts (their undeclared keys dropped, as status_edge.parse
    drops them)."""
    found = []
    for item in items if isinstance(items, list) else ():
        try:
            found.append(model.model_validate(status_edge.known_only(model, item) if isinstance(item, dict) else item))
        except ValidationError:
            log.debug("a %s of a job's status is not read: another version's", model.__name__)
    return found


def mark_slow_nodes(controller) -> None:
    """--mark-slow-nodes: the node condition AscendSlowNode=True on each node found slow twice (slowness.py), set
    once per node and process; the administrator drains or repairs it (nothing schedules by it)."""
    found = {f"{key[0]}/{key[1]}": status.slow_nodes for key, status in job_statuses(controller)}
    for node, why in slowness.nodes_to_mark(found).items():
        if node in controller.marked_nodes:
            continue
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        controller.kube.set_node_condition(node, {"type": slowness.NODE_CONDITION, "status": "True",
                                                  "reason": "FoundSlow", "message": why,
                                                  "lastTransitionTime": now, "lastHeartbeatTime": now})
        controller.marked_nodes.add(node)
        log.warning("node %s marked %s: %s", node, slowness.NODE_CONDITION, why)


def fold_cluster(controller) -> None:
    """The node-fault rate every job's ledger gives (the auto checkpoint interval reads it); the slow nodes marked
    with --mark-slow-nodes."""
    controller.node_faults = checkpointing.cluster_node_faults(
        [status for _, status in job_statuses(controller)], datetime.now(UTC))
    if controller.settings.mark_slow_nodes:
        mark_slow_nodes(controller)


def folding_loop(controller, book: EfficiencyBook, interval: float) -> Callable[[], None]:
    """The loop that keeps the book: only the leader writes; a standby reads it again when it starts leading."""

    def observed_efficiency() -> None:
        while not controller.queue.closed:
            leadership = controller.leadership
            if leadership is not None and not leadership.leading():
                book.loaded = False
            else:
                try:
                    book.fold(controller.readings())
                except Exception:  # Kube retried with backoff (logged with its traceback): the next interval tries again
                    log.exception("cannot keep %s/%s", book.namespace, names.OBSERVED_EFFICIENCY_CONFIG_MAP)
                controller.observed_efficiency = book.factors()
                try:
                    fold_cluster(controller)
                except Exception:  # the API retried with backoff: the next interval tries again, the thread lives
                    log.exception("cannot fold the jobs' node faults and slow nodes")
            time.sleep(interval)
    return observed_efficiency
