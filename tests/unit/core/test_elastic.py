"""Elastic data parallelism (reconcile/elastic_steps.py): the choice of the shrunk data degree, and the passes that
shrink a job that lost a node with no spare, and grow it back at a checkpoint boundary."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_hybrid.contracts import kueue, names
from ascend_hybrid.contracts.podview import project_pod
from ascend_hybrid.diagnosis import recovery
from ascend_hybrid.diagnosis.recovery import LauncherReport
from ascend_hybrid.gang.placement import Placement
from ascend_hybrid.monitoring.progress import Sample
from ascend_hybrid.planner import search
from ascend_hybrid.planner.hardware import builtin
from ascend_hybrid.reconcile import elastic_steps, membership, strategy
from ascend_hybrid.reconcile.actions import (
    AdoptPods,
    CreatePods,
    DeletePods,
    EnsureChildren,
    Place,
    PlaceReplacement,
    PostEvent,
    ProbeGrow,
    SignalLaunchers,
    WriteRankTable,
)
from ascend_hybrid.reconcile.decision import decide
from ascend_hybrid.reconcile.placement_record import record_placement, record_replacement
from ascend_hybrid.reconcile.state import Observed, Pass, applied
from ascend_hybrid.spec import rules
from ascend_hybrid.spec.api import PlanStatus, TrainingStatus, UtilizationStatus
from ascend_hybrid.spec.rules import parse
from support.builders import JobBuilder, NodeBuilder, PodBuilder

NOW = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)
NODES = ("node-0", "node-1", "node-2", "node-3")
HW = builtin("910B")


# -- the choice ------------------------------------------------------------------------------------------------
def spec_job(data=4, tensor=1, per_pod=1, micro=None, batch=8, min_data=1, **spec):
    parallelism = {"data": data, "tensor": tensor, **({"microBatches": micro} if micro else {})}
    built = (JobBuilder("elastic", namespace="ns").uid("uid-1").created("2026-12-02T11:59:00Z")
             .parallelism(**parallelism).per_pod(per_pod).section("model", preset="tiny")
             .section("training", globalBatchSize=batch, steps=100, **spec.pop("training", {}))
             .section("elastic", minData=min_data, replacementTimeoutSeconds=spec.pop("timeout", 120)))
    for section, fields in spec.items():
        built = built.section(section, **fields)
    return built


@settings(max_examples=60, deadline=None)
@given(data=st.integers(1, 12), micro=st.integers(1, 4), factor=st.integers(1, 6), tensor=st.sampled_from([1, 2]),
       min_data=st.integers(1, 12), below=st.integers(1, 13))
def test_a_shrink_never_goes_below_min_data_always_splits_the_batch_and_keeps_every_rule(
        data, micro, factor, tensor, min_data, below):
    min_data = min(min_data, data)
    full = parse(spec_job(data=data, tensor=tensor, per_pod=tensor, micro=micro, batch=data * micro * factor,
                          min_data=min_data).build())
    choice = elastic_steps.choose(full, below, HW)
    chosen = [job.data for job in choice.jobs]
    assert chosen == sorted(chosen, reverse=True) and len(set(chosen)) == len(chosen)
    for job in choice.jobs:
        assert min_data <= job.data < min(below, data + 1)
        assert job.global_batch_size == full.global_batch_size  # the global batch stays
        assert job.global_batch_size % (job.data * job.micro_batches) == 0
        # each forward pass sees at most the spec's micro-batch: the lost ways are accumulated
        assert job.data * job.micro_batches >= full.data * full.micro_batches
        assert (job.tensor, job.pipeline, job.expert, job.per_pod) == (full.tensor, full.pipeline, full.expert,
                                                                        full.per_pod)
        assert rules.broken_rules(job) == []
        body = {"metadata": {"name": "elastic"}, "spec": job.spec.model_dump(mode="json", by_alias=True,
                                                                              exclude_none=True)}
        assert parse(body).degrees == job.degrees  # what the rules module resolves from these degrees
    # every degree in between is either chosen or said why not
    assert len(choice.jobs) + len(choice.rejected) == max(0, min(below, data + 1) - min_data)


def test_three_ways_do_not_split_a_batch_of_eight_so_four_shrink_to_two_with_twice_the_accumulation():
    full = parse(spec_job().build())
    choice = elastic_steps.choose(full, 4, HW)
    assert [(job.data, job.micro_batches, job.pod_count) for job in choice.jobs] == [(2, 2, 2), (1, 4, 1)]
    assert choice.rejected == ("data 3: no micro-batch count splits globalBatchSize=8 over 3 ways",)


def test_a_shrink_the_planner_predicts_out_of_memory_is_not_taken():
    # gpt-1b with the optimizer sharded over DP: each rank's share grows as DP shrinks (8.3 GiB at DP 4, 12.9 at
    # DP 2, 22.1 at DP 1 in the planner's model)
    full = parse(spec_job(training={"optimizerShard": True}, model={"preset": "gpt-1b"}, batch=16).build())
    roomy = dataclasses.replace(HW, hbm_gib=16.0)  # 14.4 GiB usable
    assert [job.data for job in elastic_steps.choose(full, 4, roomy).jobs] == [2]
    tight = dataclasses.replace(HW, hbm_gib=12.0)  # 10.8 GiB usable: DP 4 fits, nothing smaller
    choice = elastic_steps.choose(full, 4, tight)
    assert choice.jobs == ()
    assert any(text.startswith("data 2: the planner predicts 12.9 GiB per NPU, above the usable 10.8 GiB")
               for text in choice.rejected), choice.rejected


# -- the passes ------------------------------------------------------------------------------------------------
def test_a_checkpoint_sliced_per_rank_keeps_the_degrees_and_says_why():
    """The trainer slices checkpoints per rank in semi-auto parallel and with the parallel optimizer; slices do
    not load at another data degree, so such a job does not shrink (without a checkpoint it may: it restarts
    from the start)."""
    checkpoint = {"checkpoint": {"claimName": "ckpt", "everySteps": 2}}
    tensor = parse(spec_job(data=4, tensor=2, per_pod=2, training=checkpoint).build())
    choice = elastic_steps.choose(tensor, 4, HW)
    assert choice.jobs == () and choice.rejected == (
        "its checkpoint loads at data 4 only: parallelism tensor=2: each rank checkpoints its slice (semi-auto "
        "parallel) for this world size, and slices are not resharded on load",)
    sharded = parse(spec_job(training={**checkpoint, "optimizerShard": True}).build())
    assert "training.optimizerShard" in elastic_steps.choose(sharded, 4, HW).rejected[0]
    assert [job.data for job in elastic_steps.choose(parse(spec_job(data=4, tensor=2, per_pod=2).build()), 4,
                                                     HW).jobs] == [2, 1]
    assert [job.data for job in elastic_steps.choose(parse(spec_job(training=checkpoint).build()), 4, HW).jobs] \
        == [2, 1]


def node(name, ready=True, since=NOW):
    return NodeBuilder(name).ready(ready, since=since).build()


def live(index, attempt=1, node_name=None):
    return (PodBuilder("elastic", index, namespace="ns").attempt(attempt).created(NOW).uid(f"uid-{attempt}-{index}")
            .running(node=node_name or NODES[index]).devices([0]).build())


def observe(body, pods=(), nodes=None, now=NOW, rank_table=None, launchers=(), children_data=None, profiles=None,
            channel=None, **extra):
    return Observed(job=body, resolved=parse(body), spec_problems=(), pods=tuple(pods),
                    rank_table=rank_table or {"status": "initializing"}, children_ready=True, sched_ip="127.32.0.10",
                    nodes=nodes if nodes is not None else {n: node(n) for n in NODES}, now=now,
                    launcher_generation=channel if channel is not None else int(
                        (body["status"].get("recovery") or {}).get("generation") or 0),
                    launchers=dict(launchers), children_data=children_data,
                    hardware_profiles=profiles or {}, **extra)


def said(index, state, generation=0, attempt=1, at=NOW, **fields):
    return (names.pod_name("elastic", attempt, index),
            LauncherReport(f"uid-{attempt}-{index}", generation, state, time=at, **fields))


def of(decision, kind):
    return [action for action in decision.actions if isinstance(action, kind)]


def events(decision):
    return [(a.type, a.reason) for a in decision.actions if isinstance(a, PostEvent)]


def with_status(builder, status):
    return builder.status(status).build()


def running(builder):
    """The DP 4 job placed on the four nodes and running, its rank table complete: (status, table)."""
    body = with_status(builder, {})
    status = decide(observe(body)).status
    status = applied(record_placement, status, parse(body), Placement(ok=True, nodes=NODES), NOW, 1,
                     {n: "rack-0" for n in NODES}).status
    pods = [live(i) for i in range(4)]
    table = next(a.table for a in decide(observe(with_status(builder, status), pods=pods)).actions
                 if type(a).__name__ == "WriteRankTable")
    status = decide(observe(with_status(builder, status), pods=pods, rank_table=table)).status
    assert status["phase"] == "Running" and status["parallelism"]["data"] == 4 and status["worldSize"] == 4
    return status, table


def lose_node_three(builder, status, table):
    """node-3 NotReady past its grace, no launcher ever heard on the recovery channel (no pod can restart in place,
    so none is kept): RestartGang at once, attempt 2, whose placement may shrink the gang."""
    lost = {**{n: node(n) for n in NODES}, "node-3": node("node-3", ready=False, since=NOW - timedelta(seconds=40))}
    gang = decide(observe(with_status(builder, status), pods=[live(i) for i in range(4)], nodes=lost,
                          rank_table=table))
    assert gang.status["attempt"] == 2 and gang.status["recoveries"][-1]["rungs"] == ["RestartGang"]
    return gang.status, lost


def test_a_job_that_lost_a_node_with_no_spare_shrinks_only_after_the_replacement_timeout():
    builder = spec_job(timeout=120)
    status, table = running(builder)
    restarting, lost = lose_node_three(builder, status, table)
    body = with_status(builder, restarting)

    soon = decide(observe(body, nodes=lost, now=NOW + timedelta(seconds=30)))
    (place,) = of(soon, Place)
    assert place.request.pod_count == 4 and place.alternatives == ()  # the whole gang only, within the timeout
    assert place.retry_within == 90.0  # and the pass comes back when the timeout ends

    later = decide(observe(body, nodes=lost, now=NOW + timedelta(seconds=122)))
    (place,) = of(later, Place)
    assert place.request.pod_count == 4 and place.retry_within is None
    assert [(job.data, job.micro_batches, request.pod_count) for request, job in place.alternatives] == [
        (2, 2, 2), (1, 4, 1)]
    assert all(request.excluded_nodes == {"node-3"} for request, _ in place.alternatives)

    # the shell placed DP 2 (the whole gang did not fit): the ledger's rung Shrink, Degraded, status.elastic
    shrunk_job = place.alternatives[0][1]
    outcome = applied(record_placement, later.status, shrunk_job, Placement(ok=True, nodes=("node-0", "node-1")),
                      NOW + timedelta(seconds=122), 1, {n: "rack-0" for n in NODES}, asked=place.job)
    status = outcome.status
    assert status["elastic"] == {"data": 2, "microBatches": 2, "fromData": 4, "since": "2026-12-02T12:02:02Z"}
    assert status["recoveries"][-1]["rungs"] == ["RestartGang", "Shrink"]
    # an incident with a key this version does not know (another operator version's) is read without it, as a
    # pass reads it (status_edge.parse), and climbs; the placement is recorded
    odd = {**later.status, "recoveries": [*later.status["recoveries"][:-1],
                                          {**later.status["recoveries"][-1], "futureField": 1}]}
    kept = applied(record_placement, odd, shrunk_job, Placement(ok=True, nodes=("node-0", "node-1")),
                   NOW + timedelta(seconds=122), 1, {n: "rack-0" for n in NODES}, asked=place.job).status
    assert kept["recoveries"] == status["recoveries"] and kept["elastic"]["data"] == 2
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "Shrunk")
    assert degraded["message"].startswith("data 4→2: ")
    assert ("Warning", "Shrunk") in [(e.type, e.reason) for e in outcome.actions]
    assert (status["parallelism"]["data"], status["parallelism"]["microBatches"], status["worldSize"]) == (2, 2, 2)

    # the next pass runs at DP 2: job.json applied again for it, two pods whose env describes the shrunk world
    body = with_status(builder, status)
    children = decide(observe(body, nodes=lost, now=NOW + timedelta(seconds=123), children_data=4))
    (ensure,) = of(children, EnsureChildren)
    assert (ensure.job.data, ensure.job.micro_batches) == (2, 2)
    start = decide(observe(body, nodes=lost, now=NOW + timedelta(seconds=124), children_data=2))
    (create,) = of(start, CreatePods)
    assert [pod.node for pod in create.pods] == ["node-0", "node-1"]
    env = {item["name"]: item.get("value") for item in create.pods[0].manifest["spec"]["containers"][0]["env"]}
    assert json.loads(env["AHJ_PARALLEL"])["data"] == 2 and json.loads(env["AHJ_PARALLEL"])["microBatches"] == 2
    assert env["MS_WORKER_NUM"] == "2"
    assert start.status["worldSize"] == 2 and start.status["parallelism"]["data"] == 2
    # the pods are made from the shrunk job: once they exist, no pass takes them for a spec change, not even one
    # that reads the status the shrink wrote but not yet the one that created them (a watch behind the patches)
    pods = [live(i, attempt=2) for i in range(2)]
    assert "podTemplateHash" not in status
    behind = decide(observe(body, pods=pods, nodes=lost, children_data=2, now=NOW + timedelta(seconds=125)))
    assert not of(behind, DeletePods) and behind.status["attempt"] == 2
    again = decide(observe(with_status(builder, start.status), pods=pods, nodes=lost, children_data=2,
                           now=NOW + timedelta(seconds=125)))
    assert not of(again, DeletePods) and again.status["attempt"] == 2


def test_no_shrink_the_planner_predicts_out_of_memory_the_job_waits_and_says_why():
    builder = spec_job(timeout=0, training={"optimizerShard": True}, model={"preset": "gpt-1b"}, batch=16)
    status, table = running(builder)
    restarting, lost = lose_node_three(builder, status, table)
    tight = {"910B": dataclasses.replace(HW, hbm_gib=12.0)}
    decision = decide(observe(with_status(builder, restarting), nodes=lost, now=NOW + timedelta(seconds=2),
                              profiles=tight))
    (place,) = of(decision, Place)
    assert place.alternatives == ()
    degraded = next(c for c in decision.status["conditions"] if c["type"] == "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("False", "CannotShrink")
    assert "data 2: the planner predicts 12.9 GiB per NPU" in degraded["message"]
    assert ("Warning", "CannotShrink") in events(decision)


def shrunk_running(builder, step=5):
    """The job running at DP 2 (attempt 2 after a shrink, the incident recovered) at training step `step`."""
    status, table = running(builder)
    restarting, lost = lose_node_three(builder, status, table)
    later = decide(observe(with_status(builder, restarting), nodes=lost, now=NOW + timedelta(seconds=2)))
    (place,) = of(later, Place)
    status = applied(record_placement, later.status, place.alternatives[0][1], Placement(ok=True, nodes=NODES[:2]),
                     NOW + timedelta(seconds=2), 1, {n: "rack-0" for n in NODES}, asked=place.job).status
    status = decide(observe(with_status(builder, status), nodes=lost, children_data=2)).status  # creates them
    pods = [live(i, attempt=2) for i in range(2)]
    table = next(a.table for a in decide(observe(with_status(builder, status), pods=pods, nodes=lost,
                                                 children_data=2)).actions if type(a).__name__ == "WriteRankTable")
    stepped = NOW + timedelta(seconds=40)
    status = decide(observe(with_status(builder, status), pods=pods, nodes=lost, rank_table=table, children_data=2,
                            now=stepped, telemetry=Sample("trainer", stepped, step=float(step), loss=2.0,
                                                          step_seconds=0.5))).status
    assert status["recoveries"][-1]["outcome"] == "Recovered" and status["recoveries"][-1]["recoveredBy"] == "Shrink"
    status.setdefault("training", {})["step"] = step
    return status, table, pods


def test_a_shrunk_job_grows_back_at_the_next_checkpoint_boundary_once_its_whole_gang_fits():
    builder = spec_job(timeout=0, training={"checkpoint": {"claimName": "ckpt", "everySteps": 4}})
    status, table, pods = shrunk_running(builder, step=5)
    healed = {n: node(n) for n in NODES}  # node-3 Ready again

    probing = decide(observe(with_status(builder, status), pods=pods, nodes=healed, rank_table=table,
                             children_data=2, now=NOW + timedelta(seconds=50)))
    (probe,) = of(probing, ProbeGrow)
    assert probe.data == 4 and probe.request.pod_count == 4
    assert probe.request.excluded_nodes == set()  # node-3 was avoided for its fault; Ready again, it counts
    assert probing.status["phase"] == "Running" and probing.requeue_after == elastic_steps.GROW_PROBE_SECONDS

    # the shell found room for DP 4 at step 5: the job waits for the checkpoint of step 8
    fits = applied(elastic_steps.probed, probing.status, Placement(ok=True, nodes=NODES), 4, NOW).status
    assert fits["elastic"]["growFits"] and fits["elastic"]["growFitsAtStep"] == 5
    fits["training"]["step"] = 7
    before = decide(observe(with_status(builder, fits), pods=pods, nodes=healed, rank_table=table, children_data=2,
                            now=NOW + timedelta(seconds=55)))
    assert not of(before, DeletePods) and before.status["attempt"] == 2 and of(before, ProbeGrow)

    fits["training"]["step"] = 8
    grown = decide(observe(with_status(builder, fits), pods=pods, nodes=healed, rank_table=table, children_data=2,
                           now=NOW + timedelta(seconds=60)))
    (deleted,) = of(grown, DeletePods)
    assert deleted.names == ("elastic-a2-0", "elastic-a2-1")
    status = grown.status
    assert status["attempt"] == 3 and "elastic" not in status and status["phase"] == "Restarting"
    assert (status["parallelism"]["data"], status["worldSize"]) == (4, 4)
    grow = status["recoveries"][-1]
    assert (grow["cause"], grow["rungs"], grow["counted"], grow["outcome"]) == (
        "CapacityReturned", ["Grow"], False, "Recovering")
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("False", "Grown") and "data 2→4" in degraded["message"]
    assert status["avoidedNodes"] == []
    # the new attempt places the whole gang at the spec's degrees
    (place,) = of(decide(observe(with_status(builder, status), nodes=healed, now=NOW + timedelta(seconds=61))), Place)
    assert place.job.data == 4 and place.request.pod_count == 4


def test_a_shrunk_job_measures_against_the_prediction_at_the_degrees_it_runs_until_it_grows_back():
    builder = spec_job(timeout=0, training={"checkpoint": {"claimName": "ckpt", "everySteps": 4}})
    status, table, pods = shrunk_running(builder, step=5)
    plan = status["plan"]
    shrunk = elastic_steps.at_data(parse(with_status(builder, {})), 2, 2)
    expected = round(search.evaluate_job(shrunk, HW).time.step, 4)
    assert plan["running"] == {"data": 2, "microBatches": 2, "stepSeconds": expected}
    assert expected > plan["time"]["stepSeconds"]  # half the DP ways, each accumulating two micro-batches
    measured = strategy.measured(PlanStatus.model_validate(plan), TrainingStatus(step_seconds=1.5 * expected),
                                 UtilizationStatus())
    assert measured.step_time_ratio == 1.5
    # once per degree: a later pass keeps it as it is
    again = decide(observe(with_status(builder, status), pods=pods, nodes={n: node(n) for n in NODES[:2]},
                           rank_table=table, children_data=2, now=NOW + timedelta(seconds=45))).status
    assert again["plan"]["running"] == plan["running"]
    # grown back: the spec's prediction again
    fits = applied(elastic_steps.probed, status, Placement(ok=True, nodes=NODES), 4, NOW).status
    fits["training"]["step"] = 8
    grown = decide(observe(with_status(builder, fits), pods=pods, nodes={n: node(n) for n in NODES},
                           rank_table=table, children_data=2, now=NOW + timedelta(seconds=60))).status
    assert grown["attempt"] == 3 and "running" not in grown["plan"]


def test_no_growth_while_the_whole_gang_does_not_fit_and_none_with_grow_back_off():
    builder = spec_job(timeout=0)
    status, table, pods = shrunk_running(builder)
    blocked = applied(elastic_steps.probed, status, Placement(ok=False, reason="1 of 4 pods do not fit"), 4,
                      NOW).status
    assert blocked["elastic"]["growFits"] is False and blocked["elastic"]["growReason"] == "1 of 4 pods do not fit"
    stays = decide(observe(with_status(builder, blocked), pods=pods, rank_table=table, children_data=2,
                           now=NOW + timedelta(seconds=60)))
    assert not of(stays, DeletePods) and stays.status["elastic"]["data"] == 2

    off = spec_job(timeout=0).section("elastic", minData=1, replacementTimeoutSeconds=0, growBack=False)
    status, table, pods = shrunk_running(off)
    kept = decide(observe(with_status(off, status), pods=pods, rank_table=table, children_data=2,
                          now=NOW + timedelta(seconds=60)))
    assert not of(kept, ProbeGrow) and not of(kept, DeletePods) and kept.status["worldSize"] == 2


def test_a_job_without_elastic_waits_whole_as_before():
    builder = (JobBuilder("elastic", namespace="ns").uid("uid-1").created("2026-12-02T11:59:00Z")
               .parallelism(data=4, tensor=1).per_pod(1).section("model", preset="tiny")
               .section("training", globalBatchSize=8))
    status, table = running(builder)
    restarting, lost = lose_node_three(builder, status, table)
    (place,) = of(decide(observe(with_status(builder, restarting), nodes=lost, now=NOW + timedelta(hours=1))), Place)
    assert place.alternatives == () and place.retry_within is None


# -- under Kueue -----------------------------------------------------------------------------------------------
def queued_pod(index, attempt, total):
    """A pod of a queued attempt, admitted (Kueue's gates gone, the gang gate kept), in a group of `total`, as the
    operator's pod store keeps it (its projection)."""
    labels, annotations = kueue.pod_metadata("elastic", attempt, total, "team")
    pod = (PodBuilder("elastic", index, namespace="ns").attempt(attempt).created(NOW).uid(f"uid-{attempt}-{index}")
           .labels({**labels, kueue.MANAGED_LABEL: "true"}).annotations(annotations).gated(names.GANG_GATE).build())
    return project_pod(pod)


def test_a_queued_job_that_shrinks_at_its_placement_queues_the_smaller_gang_as_a_pod_group_of_its_own():
    builder = spec_job(timeout=0, scheduling={"queue": "team"})
    full = parse(with_status(builder, {}))
    lost = {**{n: node(n) for n in NODES}, "node-3": node("node-3", ready=False, since=NOW - timedelta(seconds=40))}
    ledger = [{"cause": "NodeNotReady", "rungs": ["ReplacePod", "RestartGang"], "attempt": 1, "counted": False,
               "outcome": recovery.RECOVERING,
               "detected": "2026-12-02T11:59:50Z", "decided": "2026-12-02T11:59:50Z"}]
    restarted = {"attempt": 2, "phase": "Pending", "restarts": 0, "recoveries": ledger, "avoidedNodes": ["node-3"]}
    admitted_pods = [queued_pod(i, 2, 4) for i in range(4)]

    # Kueue admitted the whole gang's group; it no longer fits: the placement may take the smaller gangs, on the
    # admitted flavor's nodes as well
    placing = decide(observe(with_status(builder, restarted), pods=admitted_pods, nodes=lost))
    (place,) = of(placing, Place)
    assert place.request.pod_count == 4
    assert [(job.data, request.pod_count) for request, job in place.alternatives] == [(2, 2), (1, 1)]
    assert all(request.excluded_nodes == {"node-3"} for request, _ in place.alternatives)

    # the shell placed DP 2: the group made for 4 pods goes and DP 2 queues as attempt 3, not a restart
    shrunk = applied(record_placement, placing.status, place.alternatives[0][1], Placement(ok=True, nodes=NODES[:2]),
                     NOW, 1, {n: "rack-0" for n in NODES}, asked=full).status
    resized = decide(observe(with_status(builder, shrunk), pods=admitted_pods, nodes=lost, children_data=2))
    (delete,) = of(resized, DeletePods)
    assert sorted(delete.names) == [names.pod_name("elastic", 2, i) for i in range(4)]
    assert resized.status["attempt"] == 3 and resized.status["restarts"] == 0
    admitted = next(c for c in resized.status["conditions"] if c["type"] == "Admitted")
    assert (admitted["status"], admitted["reason"]) == ("False", "Resized")
    assert "elastic-a2 was made for 4 pods; the job runs 2 now (data 2): queued again as pod group elastic-a3" in \
        admitted["message"]
    assert ("Normal", "Resized") in events(resized)

    # attempt 3: a group of 2 pods for Kueue, whose env describes the shrunk world
    queued = decide(observe(with_status(builder, resized.status), nodes=lost, children_data=2))
    (create,) = of(queued, CreatePods)
    assert len(create.pods) == 2
    meta = create.pods[0].manifest["metadata"]
    assert meta["labels"][kueue.POD_GROUP_LABEL] == "elastic-a3"
    assert meta["annotations"][kueue.GROUP_TOTAL_COUNT_ANNOTATION] == "2"
    env = {item["name"]: item.get("value") for item in create.pods[0].manifest["spec"]["containers"][0]["env"]}
    assert env["MS_WORKER_NUM"] == "2" and json.loads(env["AHJ_PARALLEL"])["microBatches"] == 2

    # once Kueue admits it, the group of 2 is placed as it is: no second resize
    placed = decide(observe(with_status(builder, queued.status), pods=[queued_pod(i, 3, 2) for i in range(2)],
                            nodes=lost, children_data=2))
    assert not of(placed, DeletePods) and placed.status["attempt"] == 3
    (place,) = of(placed, Place)
    assert place.request.pod_count == 2


# -- a shrink that keeps the running pods ------------------------------------------------------------------------
def test_a_lost_node_with_no_spare_shrinks_keeping_the_running_pods_renumbered_in_a_new_attempt():
    """ReplacePod finds no node for pod 1: it tries again until replacementTimeoutSeconds, then DP 4 → 2 keeps
    pods 0 and 2 where they run (their chips, processes and UIDs) as pods 0 and 1 of attempt 2, deletes pod 3,
    and tells the launchers their new world beside the next rank generation."""
    builder = spec_job(timeout=60, training={"checkpoint": {"claimName": "ckpt", "everySteps": 4}})
    unplaced, table, lost, heard = lose_node_one(builder)
    survivors = [live(i) for i in (0, 2, 3)]

    # within the timeout: the replacement is placed again, nothing else moves
    waiting = decide(observe(with_status(builder, unplaced), pods=survivors, nodes=lost, rank_table=table,
                             launchers=heard, now=NOW + timedelta(seconds=20)))
    (again,) = of(waiting, PlaceReplacement)
    assert again.index == 1 and again.request.pod_count == 1
    assert waiting.status["attempt"] == 1 and not of(waiting, DeletePods) and waiting.requeue_after <= 5
    assert "shrinking in 40s" in waiting.status["message"]

    # past it: DP 2 (3 does not split the batch of 8) on two of the three running pods
    shrink = decide(observe(with_status(builder, unplaced), pods=survivors, nodes=lost, rank_table=table,
                            launchers=heard, now=NOW + timedelta(seconds=61)))
    status = shrink.status
    (deleted,) = of(shrink, DeletePods)
    assert deleted.names == ("elastic-a1-3",) and not of(shrink, CreatePods) and not of(shrink, Place)
    assert status["attempt"] == 2 and status["recovery"]["kept"] == ["elastic-a1-0", "elastic-a1-2"]
    assert (status["elastic"]["data"], status["elastic"]["microBatches"], status["recovery"]["keptAttempt"]) == (
        2, 2, 2)
    assert status["placement"]["attempt"] == 2 and status["placement"]["nodes"] == ["node-0", "node-2"]
    incident = status["recoveries"][-1]
    assert incident["rungs"] == ["ReplacePod", "Shrink"] and incident["podsKept"] == 2
    assert incident["replacementTimedOut"] and incident["outcome"] == "Recovering"
    assert status["recovery"]["rung"] == "Shrink" and status["recovery"]["generation"] == 2
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "Shrunk")
    assert status["worldSize"] == 2 and status["phase"] == "Restarting"

    # the next pass: the kept pods are this attempt's pods 0 and 1 (their labels patched to say so), job.json at DP 2
    kept = [live(0), live(2)]
    body = with_status(builder, status)
    children = decide(observe(body, pods=kept, nodes=lost, rank_table=table, launchers=heard, children_data=4,
                              now=NOW + timedelta(seconds=62)))
    assert not of(children, DeletePods) and (of(children, EnsureChildren)[0].job.data == 2)
    (adopt,) = of(children, AdoptPods)
    patches = dict(adopt.pods)
    assert {op["path"]: op["value"] for op in patches["elastic-a1-2"]} == {
        "/metadata/labels/hybrid.ascend.dev~1attempt": "2", "/metadata/labels/hybrid.ascend.dev~1pod-index": "1",
        "/metadata/annotations/hccl~1rankIndex": "1"}
    relabelled = [membership.as_member(pod, 2, index) for index, pod in enumerate(kept)]
    assert not of(decide(observe(body, pods=relabelled, nodes=lost, rank_table=table, launchers=heard,
                                 children_data=4, now=NOW + timedelta(seconds=62))), AdoptPods)

    # the table of the smaller world from the kept pods, no pod made; then the generation and the world
    tabled = decide(observe(body, pods=kept, nodes=lost, rank_table=table, launchers=heard, children_data=2,
                            now=NOW + timedelta(seconds=63), channel=1))
    assert not of(tabled, CreatePods)
    (write,) = of(tabled, WriteRankTable)
    ranks = {device["rank_id"]: server["container_ip"] for server in write.table["server_list"]
             for device in server["device"]}
    assert sorted(ranks) == ["0", "1"] and ranks["1"] == kept[1]["status"]["podIP"]
    (signal,) = of(tabled, SignalLaunchers)
    world = json.loads(signal.world)
    assert signal.generation == 2 and world["pods"] == {"elastic-a1-0": 0, "elastic-a1-2": 1}
    assert (world["worldSize"], world["scheduler"], world["attempt"]) == (2, "elastic-a1-0", 2)
    assert world["parallel"]["data"] == 2 and world["parallel"]["microBatches"] == 2
    assert world["jobConfig"]["parallelism"]["data"] == 2 and world["jobConfig"]["worldSize"] == 2
    assert tabled.status["phase"] == "Restarting"

    # old-generation reports do not count; the kept launchers stepping in generation 2 recover the incident
    stepped = NOW + timedelta(seconds=70)
    moved = [said(0, "Stepping", generation=2, at=stepped, resumed_from=4, step=5),
             said(2, "Stepping", generation=2, at=stepped, resumed_from=4, step=5)]
    done = decide(observe(with_status(builder, tabled.status), pods=kept, nodes=lost, rank_table=write.table,
                          launchers=moved, children_data=2, now=stepped, launcher_world=signal.world))
    assert not of(done, SignalLaunchers)  # the channel holds this generation and world: nothing to write
    record = done.status["recoveries"][-1]
    assert (record["outcome"], record["recoveredBy"], record["resumedFromStep"]) == ("Recovered", "Shrink", 4)
    assert done.status["phase"] == "Running" and "rung" not in done.status["recovery"]

    # a later fault on a kept pod's node: ReplacePod makes pod 0 again under attempt 2's own name, the world says so
    worse = {**lost, "node-0": node("node-0", ready=False, since=stepped)}
    replace = decide(observe(with_status(builder, done.status), pods=kept, nodes=worse, rank_table=write.table,
                             launchers=moved, children_data=2, now=stepped + timedelta(seconds=60)))
    assert replace.status["recoveries"][-1]["rungs"] == ["ReplacePod"]
    assert replace.status["recovery"]["kept"] == ["", "elastic-a1-2"]
    (signal,) = of(replace, SignalLaunchers)
    assert json.loads(signal.world)["pods"] == {"elastic-a2-0": 0, "elastic-a1-2": 1}


def lose_node_one(builder):
    """The DP 4 job running, every launcher heard; node-1 NotReady past its grace → ReplacePod, whose placement
    finds no node: (status, rank table, nodes, the launchers' reports)."""
    status, table = running(builder)
    lost = {**{n: node(n) for n in NODES}, "node-1": node("node-1", ready=False, since=NOW - timedelta(seconds=40))}
    heard = [said(i, "Stepping") for i in range(4)]
    replacing = decide(observe(with_status(builder, status), pods=[live(i) for i in range(4)], nodes=lost,
                               rank_table=table, launchers=heard))
    assert replacing.status["recoveries"][-1]["rungs"] == ["ReplacePod"]
    unplaced = applied(record_replacement, replacing.status, 1, Placement(ok=False, reason="0/3 nodes fit"),
                       NOW).status
    return unplaced, table, lost, heard


def test_a_shrink_keeps_pods_only_when_enough_run_else_the_gang_restarts_and_may_shrink_at_once():
    builder = spec_job(timeout=0, min_data=4 - 1)
    unplaced, table, lost, heard = lose_node_one(builder)
    # minData 3 and a batch of 8: no smaller degree may run, the gang restarts whole (and waits whole)
    gang = decide(observe(with_status(builder, unplaced), pods=[live(i) for i in (0, 2, 3)], nodes=lost,
                          rank_table=table, launchers=heard, now=NOW + timedelta(seconds=1)))
    assert gang.status["attempt"] == 2 and gang.status["recoveries"][-1]["rungs"] == ["ReplacePod", "RestartGang"]
    assert "elastic" not in gang.status


def test_the_world_of_kept_pods_names_a_replacement_made_in_the_shrunk_attempt():
    builder = spec_job(timeout=0)
    status = {"attempt": 2, "elastic": {"data": 2, "microBatches": 2, "fromData": 4},
              "recovery": {"kept": ["", "elastic-a1-2"], "keptAttempt": 2}}
    body = with_status(builder, status)
    p = Pass(observe(body, pods=[live(2)]))
    elastic_steps.run_shrunk(p)
    world = json.loads(membership.launcher_world(p, p.o.pods))
    assert world["pods"] == {"elastic-a2-0": 0, "elastic-a1-2": 1} and world["scheduler"] == "elastic-a2-0"
    assert membership.member_name(p, 1) == "elastic-a1-2" and membership.member_name(p, 0) == "elastic-a2-0"


def test_a_world_left_in_the_channel_goes_once_no_kept_pod_runs():
    builder = spec_job(timeout=0)
    status, table = running(builder)
    stale = json.dumps({"attempt": 2, "pods": {"elastic-a1-2": 1}})
    decision = decide(observe(with_status(builder, status), pods=[live(i) for i in range(4)], rank_table=table,
                              launcher_world=stale))
    (signal,) = of(decision, SignalLaunchers)
    assert signal.world is None and signal.generation == 0


def shrunk_keeping(builder):
    """The DP 4 job shrunk to DP 2 keeping pods 0 and 2 (node-1 lost), stepping in generation 2 at step 5:
    (status, kept pods, their reports, rank table, nodes, time)."""
    unplaced, table, lost, heard = lose_node_one(builder)
    status = decide(observe(with_status(builder, unplaced), pods=[live(i) for i in (0, 2, 3)], nodes=lost,
                            rank_table=table, launchers=heard, now=NOW + timedelta(seconds=1))).status
    kept = [membership.as_member(live(0), 2, 0), membership.as_member(live(2), 2, 1)]
    tabled = decide(observe(with_status(builder, status), pods=kept, nodes=lost, launchers=heard, children_data=2,
                            now=NOW + timedelta(seconds=2), channel=1))
    table = next(a.table for a in tabled.actions if isinstance(a, WriteRankTable))
    world = next(a.world for a in tabled.actions if isinstance(a, SignalLaunchers))
    stepped = NOW + timedelta(seconds=10)
    reports = [said(0, "Stepping", generation=2, at=stepped, resumed_from=4, step=5),
               said(2, "Stepping", generation=2, at=stepped, resumed_from=4, step=5)]
    status = decide(observe(with_status(builder, tabled.status), pods=kept, nodes=lost, rank_table=table,
                            launchers=reports, children_data=2, now=stepped, launcher_world=world)).status
    assert status["recoveries"][-1]["recoveredBy"] == "Shrink" and status["phase"] == "Running"
    status.setdefault("training", {})["step"] = 5
    return status, kept, reports, table, world, stepped


def test_a_job_that_shrank_keeping_its_pods_grows_back_keeping_them_and_adding_the_others():
    builder = spec_job(timeout=0, training={"checkpoint": {"claimName": "ckpt", "everySteps": 4}})
    status, kept, reports, table, world, stepped = shrunk_keeping(builder)
    healed = {n: node(n) for n in NODES}

    def look(status, at):
        return decide(observe(with_status(builder, status), pods=kept, nodes=healed, rank_table=table,
                              launchers=reports, children_data=2, now=at, launcher_world=world))

    probing = look(status, stepped + timedelta(seconds=5))
    (probe,) = of(probing, ProbeGrow)
    assert probe.keep and probe.data == 4 and probe.request.pod_count == 2  # the two pods it adds, nothing else
    assert probe.request.near_nodes == {"node-0", "node-2"}
    fits = applied(elastic_steps.probed, probing.status, Placement(ok=True, nodes=("node-1", "node-3")), 4, stepped,
                   keep=True).status
    assert fits["elastic"]["growNodes"] == ["node-1", "node-3"] and fits["elastic"]["growFitsAtStep"] == 5
    fits["training"]["step"] = 8  # the checkpoint boundary
    grown = look(fits, stepped + timedelta(seconds=20))
    status = grown.status
    assert not of(grown, DeletePods) and status["attempt"] == 3 and "elastic" not in status
    assert status["recovery"]["kept"] == ["elastic-a1-0", "elastic-a1-2"] and status["recovery"]["keptAttempt"] == 3
    assert status["recovery"]["rung"] == "Grow" and status["recovery"]["generation"] == 3
    assert status["placement"]["nodes"] == ["node-0", "node-2", "node-1", "node-3"]
    record = status["recoveries"][-1]
    assert (record["rungs"], record["podsKept"], record["cause"]) == (["Grow"], 2, "CapacityReturned")
    # job.json and the channel first, then the two new pods, made for the whole world
    kinds = [type(action).__name__ for action in grown.actions if not isinstance(action, PostEvent)]
    assert kinds.index("EnsureChildren") < kinds.index("SignalLaunchers") < kinds.index("CreatePods")
    (ensure,) = of(grown, EnsureChildren)
    assert ensure.job.data == 4
    (signal,) = of(grown, SignalLaunchers)
    assert json.loads(signal.world)["pods"] == {"elastic-a1-0": 0, "elastic-a1-2": 1, "elastic-a3-2": 2,
                                                "elastic-a3-3": 3}
    (create,) = of(grown, CreatePods)
    assert [(pod.manifest["metadata"]["name"], pod.node) for pod in create.pods] == [
        ("elastic-a3-2", "node-1"), ("elastic-a3-3", "node-3")]
    env = {item["name"]: item.get("value") for item in create.pods[0].manifest["spec"]["containers"][0]["env"]}
    assert (env["MS_WORKER_NUM"], env["RANK_START"], json.loads(env["AHJ_PARALLEL"])["data"]) == ("4", "2", 4)

    # the next pass: kept pods relabelled to attempt 3 at their indices, the new ones in flight: nothing is lost
    added = [live(i, attempt=3, node_name=n) for i, n in ((2, "node-1"), (3, "node-3"))]
    later = decide(observe(with_status(builder, status), pods=[*kept, *added], nodes=healed, rank_table=table,
                           launchers=reports, children_data=4, now=stepped + timedelta(seconds=21),
                           launcher_world=signal.world, channel=3))
    assert "lastFailure" not in later.status or later.status["lastFailure"]["attempt"] < 3
    (adopt,) = of(later, AdoptPods)
    assert sorted(name for name, _ in adopt.pods) == ["elastic-a1-0", "elastic-a1-2"]
    assert not of(later, CreatePods) and not of(later, DeletePods)
