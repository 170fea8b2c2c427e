"""The shell's side of spec.elastic (controller/placing.py): a Place that offers smaller gangs places the largest
that fits when the whole one does not, and ProbeGrow counts the job's own chips free."""

from __future__ import annotations

from datetime import UTC, datetime

from ascend_hybrid.controller import placing
from ascend_hybrid.controller.loop import Controller, Indexes
from ascend_hybrid.gang.placement import GangRequest
from ascend_hybrid.reconcile import elastic_steps
from ascend_hybrid.reconcile.actions import Place, ProbeGrow
from ascend_hybrid.reconcile.state import Decision, Observed
from ascend_hybrid.spec.rules import parse
from support.builders import JobBuilder, NodeBuilder, PodBuilder

NOW = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)
NODES = [NodeBuilder(f"node-{i}").chip("910B").rack("rack-0").ready(since=NOW).build() for i in range(4)]


def body(status: dict) -> dict:
    return (JobBuilder("elastic", namespace="ns").uid("uid-1").created("2026-12-02T11:59:00Z")
            .parallelism(data=4, tensor=1).per_pod(1).section("model", preset="tiny")
            .section("training", globalBatchSize=8).section("elastic", minData=2, replacementTimeoutSeconds=0)
            .status(status).build())


def filler(index: int) -> dict:
    """Another job's pod holding 7 of node `index`'s 8 chips: one chip per node is left."""
    return PodBuilder.named(f"filler-{index}", namespace="other").chips(7).node(f"node-{index}").phase("Running").build()


def own(index: int, attempt: int = 2) -> dict:
    return (PodBuilder("elastic", index, namespace="ns").attempt(attempt).chips(1).node(f"node-{index}")
            .phase("Running").build())


def controller(pods: list[dict], nodes=NODES) -> tuple[Controller, list]:
    made = Controller(kube=None)
    made.indexes = Indexes(nodes=lambda: list(nodes), npu_pods=lambda: list(pods), job_pods=lambda key: [],
                           device_infos=list, jobs=list)
    posted: list = []
    made.post_event = lambda job, kind, reason, message: posted.append((kind, reason, message))  # type: ignore[method-assign]
    return made, posted


def observed(job: dict) -> Observed:
    return Observed(job=job, resolved=parse(job), spec_problems=(), pods=(), rank_table=None, children_ready=True,
                    sched_ip=None, nodes={}, now=NOW)


def test_a_place_whose_whole_gang_does_not_fit_places_the_largest_smaller_one_and_records_the_shrink():
    job = body({"attempt": 2, "recoveries": [{"cause": "NodeNotReady", "rungs": ["ReplacePod", "RestartGang"],
                                              "outcome": "Recovering", "decided": "2026-12-02T11:59:59Z"}]})
    full = parse(job)
    smaller = [elastic_steps.at_data(full, 2, 2)]
    made, posted = controller([filler(i) for i in range(4)], nodes=NODES[:3])  # node-3 lost: 3 free chips
    decision = Decision(status=dict(job["status"]))
    action = Place(GangRequest.for_job(full), full, tuple((GangRequest.for_job(j), j) for j in smaller))
    assert placing.place(made, ("ns", "elastic"), job, observed(job), decision, action)
    status = decision.status
    assert status["placement"]["attempt"] == 2 and len(status["placement"]["nodes"]) == 2
    assert status["elastic"]["data"] == 2 and status["recoveries"][-1]["rungs"][-1] == "Shrink"
    assert ("Warning", "Shrunk") in [(kind, reason) for kind, reason, _ in posted]
    assert sorted(made.jobs[("ns", "elastic")].promised) == ["elastic-a2-0", "elastic-a2-1"]
    made.queue.close()


def test_without_smaller_gangs_a_place_that_does_not_fit_stays_pending():
    job = body({"attempt": 2})
    full = parse(job)
    made, _ = controller([filler(i) for i in range(4)], nodes=NODES[:3])
    decision = Decision(status=dict(job["status"]))
    assert not placing.place(made, ("ns", "elastic"), job, observed(job), decision,
                             Place(GangRequest.for_job(full), full, retry_within=7.0))
    assert decision.status["phase"] == "Pending" and "elastic" not in decision.status
    assert decision.requeue_after == 7.0  # back when the replacement timeout ends
    made.queue.close()


def test_a_growth_probe_counts_the_jobs_own_chips_free_but_not_other_jobs():
    job = body({"attempt": 2, "elastic": {"data": 2, "microBatches": 2, "fromData": 4}, "training": {"step": 6}})
    full = parse(job)
    probe = ProbeGrow(GangRequest.for_job(full), 4)
    made, posted = controller([filler(i) for i in range(4)] + [own(0), own(1)])
    decision = Decision(status=dict(job["status"]))
    placing.probe_grow(made, ("ns", "elastic"), job, observed(job), decision, probe)
    assert decision.status["elastic"]["growFits"] is True and decision.status["elastic"]["growFitsAtStep"] == 6
    assert [reason for _, reason, _ in posted] == ["GrowFits"]
    assert made.jobs.get(("ns", "elastic")) is None or not made.jobs[("ns", "elastic")].promised

    # another job's pod on node-3's last chip: the whole gang does not fit
    taken = PodBuilder.named("late", namespace="other").chips(1).node("node-3").phase("Running").build()
    made, _ = controller([filler(i) for i in range(4)] + [own(0), own(1), taken])
    decision = Decision(status=dict(job["status"]))
    placing.probe_grow(made, ("ns", "elastic"), job, observed(job), decision, probe)
    assert decision.status["elastic"]["growFits"] is False and decision.status["elastic"]["growReason"]
    made.queue.close()
