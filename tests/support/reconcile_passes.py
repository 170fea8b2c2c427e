"""The demo job of the reconcile tests and passes of decide() over it: DP 2 × TP 4 on two 4-NPU pods (pod 0 on
node-a, pod 1 on node-b), running with its launchers heard."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

from ascend_hybrid.contracts import names
from ascend_hybrid.diagnosis.recovery import LauncherReport
from ascend_hybrid.gang.placement import Placement
from ascend_hybrid.reconcile.actions import PostEvent
from ascend_hybrid.reconcile.decision import decide
from ascend_hybrid.reconcile.placement_record import record_placement
from ascend_hybrid.reconcile.state import Observed, applied
from ascend_hybrid.spec.rules import parse
from support.builders import JobBuilder, NodeBuilder, PodBuilder

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
NODES = ("node-a", "node-b")


def job(spec_overrides: dict | None = None, status: dict | None = None) -> dict:
    built = (JobBuilder("demo", namespace="ns").uid("uid-1").created("2026-11-29T11:59:00Z")
             .parallelism(data=2, tensor=4).per_pod(4).backoff_limit(2))
    for section, fields in (spec_overrides or {}).items():
        built = built.section(section, **fields)
    return built.status(status or {}).build()


def live(index: int) -> dict:
    return (PodBuilder("demo", index, namespace="ns").attempt(1).created(NOW).running(node=NODES[index])
            .devices(range(4)).uid(f"uid-1-{index}").build())


def observe(body: dict, pods=(), rank_table: dict | None = None, now: datetime = NOW, **extra) -> Observed:
    return Observed(job=body, resolved=parse(body), spec_problems=(), pods=tuple(pods),
                    rank_table=rank_table if rank_table is not None else {"status": "initializing"},
                    children_ready=True, sched_ip="127.32.0.10",
                    nodes={n: NodeBuilder(n).ready(since=NOW).build() for n in NODES}, now=now, **extra)


def placed(spec_overrides: dict | None = None, phase: str = "Running", **extra) -> dict:
    body = job(spec_overrides)
    status = decide(observe(body)).status
    status = applied(record_placement, status, parse(body), Placement(ok=True, nodes=NODES), NOW, 1,
                     {n: "rack-0" for n in NODES}).status
    status.update(attempt=1, phase=phase, **extra)
    status["placement"]["attempt"] = 1
    return status


def said(index: int, state: str, generation: int = 0, **fields) -> tuple[str, LauncherReport]:
    return names.pod_name("demo", 1, index), LauncherReport(f"uid-1-{index}", generation, state, time=NOW, **fields)


def rank_table(spec_overrides: dict | None = None) -> dict:
    starting = decide(observe(job(spec_overrides, placed(spec_overrides, phase="Starting")), pods=[live(0), live(1)]))
    return next(a.table for a in starting.actions if type(a).__name__ == "WriteRankTable")


def running_pass(body: dict, table: dict, now: datetime = NOW, **extra):
    """One pass over the running demo job, both launchers heard at generation 0."""
    reports = dict([said(0, "Started", resumed_from=0), said(1, "Started", resumed_from=0)])
    observed = observe(body, pods=[live(0), live(1)], rank_table=table, now=now, launcher_generation=0,
                       launchers=reports)
    return decide(dataclasses.replace(observed, **extra) if extra else observed)


def kinds(decision) -> list[str]:
    return [type(action).__name__ for action in decision.actions]


def action(decision, kind: str):
    return next(a for a in decision.actions if type(a).__name__ == kind)


def events(decision) -> list[tuple[str, str]]:
    return [(a.type, a.reason) for a in decision.actions if isinstance(a, PostEvent)]
