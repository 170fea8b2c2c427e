"""The pure reconcile core: every lifecycle transition from observed state, no API server involved."""

from __future__ import annotations

import copy
import dataclasses
import json
from datetime import UTC, datetime, timedelta

import pytest

from ascend_hybrid.contracts import names
from ascend_hybrid.contracts.ascend import DEVICE_ANNOTATION, RACK_LABEL, DeviceInfo
from ascend_hybrid.contracts.conditions import timestamp
from ascend_hybrid.diagnosis import refusals
from ascend_hybrid.gang.placement import Placement
from ascend_hybrid.reconcile import decision as reconcile
from ascend_hybrid.reconcile import state
from ascend_hybrid.reconcile.actions import (
    CreatePods,
    DeleteJob,
    DeletePods,
    EnsureChildren,
    GrantLaunchers,
    Place,
    PlaceReplacement,
    PostEvent,
    RemoveGates,
    SignalLaunchers,
    WriteRankTable,
)
from ascend_hybrid.reconcile.decision import decide
from ascend_hybrid.reconcile.placement_record import record_placement
from ascend_hybrid.reconcile.state import Observed, applied
from ascend_hybrid.spec import rules
from ascend_hybrid.spec.rules import parse
from support.builders import JobBuilder, NodeBuilder, PodBuilder

KINDS = {PostEvent: "event", Place: "place", EnsureChildren: "ensure_children", CreatePods: "create_pods",
         RemoveGates: "remove_gates", DeletePods: "delete_pods", WriteRankTable: "write_rank_table",
         DeleteJob: "delete_job", SignalLaunchers: "signal_launchers", PlaceReplacement: "place_replacement",
         GrantLaunchers: "grant_launchers"}

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
NODES = ("node-a", "node-b")


def demo(name: str = "demo") -> JobBuilder:
    """The job under test: DP 2 × TP 4 on two 4-NPU pods, two restarts allowed, stored a minute ago."""
    return (JobBuilder(name, namespace="ns").uid("uid-1").created("2026-11-29T11:59:00Z")
            .parallelism(data=2, tensor=4).per_pod(4).backoff_limit(2).status({}))


def pod(index: int, attempt: int = 1) -> PodBuilder:
    """Pod `index` of demo, running on its node of NODES with its 4 chips annotated."""
    return (PodBuilder("demo", index, namespace="ns").attempt(attempt).created(NOW).running(node=NODES[index])
            .devices(range(4)))


def report(cause, rank=None, step=None, detail=""):
    return json.dumps({"cause": cause, "rank": rank, "step": step, "detail": detail})


def both() -> list[dict]:
    """Both pods, running."""
    return [pod(0).build(), pod(1).build()]


def node(name: str) -> NodeBuilder:
    return NodeBuilder(name).ready(since=NOW)


def observe(body, pods=(), rank_table=None, children_ready=True, nodes=None, now=NOW, launcher_generation=0,
            launchers=None):
    """launcher_generation 0: the LauncherChannel <job>-recovery holds the generation a fresh job runs (its write
    is tested in test_recovery_ladder.py)."""
    try:
        resolved, problems = parse(body), ()
    except rules.SpecError as error:
        resolved, problems = None, tuple(error.problems)
    return Observed(job=body, resolved=resolved, spec_problems=problems, pods=tuple(pods),
                    rank_table=rank_table if rank_table is not None else {"status": "initializing"},
                    children_ready=children_ready, sched_ip="127.32.0.10",
                    nodes=nodes if nodes is not None else {n: node(n).build() for n in NODES}, now=now,
                    launcher_generation=launcher_generation, launchers=launchers or {})


def kinds(decision):
    return [KINDS[type(action)] for action in decision.actions]


def action(decision, kind):
    return next(a for a in decision.actions if KINDS[type(a)] == kind)


def events(decision):
    return [(a.type, a.reason) for a in decision.actions if isinstance(a, PostEvent)]


def placed_status(attempt=1, phase="Placing", **extra):
    body = demo().build()
    status = decide(observe(body)).status
    status = applied(record_placement, status, parse(body), Placement(ok=True, nodes=NODES), NOW, 1,
                     {n: "rack-0" for n in NODES}).status
    status.update(attempt=attempt, phase=phase, **extra)
    status["placement"]["attempt"] = attempt
    return status


def test_new_job_is_created_and_asks_for_placement():
    decision = decide(observe(demo().build()))
    assert kinds(decision) == ["place"], "no Created event: the placement's event follows in the same pass"
    assert decision.status["phase"] == "Pending" and decision.status["attempt"] == 1
    assert decision.status["worldSize"] == 8
    request = action(decision, "place").request
    assert (request.pod_count, request.chips_per_pod, request.chip) == (2, 4, "910B")
    assert [c["type"] for c in decision.status["conditions"]] == ["Created", "StrategyFits"]
    fits = decision.status["conditions"][1]
    assert fits["status"] == "True" and fits["reason"] == "Fits"
    assert decision.status["plan"]["source"] == "evaluated" and decision.status["plan"]["fits"]
    assert decision.status["parallelism"]["data"] == 2 and decision.status["parallelism"]["tensor"] == 4


def test_failed_placement_is_pending_with_one_warning():
    body = demo().build()
    status = decide(observe(body)).status
    failure = Placement(ok=False, reason="needs 2 pods × 4 huawei.com/Ascend910 (910B); 0 of 0 nodes could host a pod")
    first = applied(record_placement, status, parse(body), failure, NOW, 1, {})
    status = first.status
    assert status["phase"] == "Pending" and status["placement"]["reason"].startswith("needs 2 pods")
    assert events(first) == [("Warning", "Unschedulable")]
    assert first.requeue_after == state.SLOW_REQUEUE_SECONDS
    again = applied(record_placement, status, parse(body), failure, NOW, 1, {})
    assert again.actions == []  # one warning per reason, not one per retry
    placed = next(c for c in status["conditions"] if c["type"] == "Placed")
    assert placed["status"] == "False" and placed["reason"] == "Unschedulable"


def test_placed_job_applies_children_then_creates_schedulable_pinned_pods():
    body = demo().status(placed_status()).build()
    assert kinds(decide(observe(body, children_ready=False))) == ["ensure_children"]
    decision = decide(observe(body))
    create = action(decision, "create_pods")
    assert [p.manifest["metadata"]["name"] for p in create.pods] == ["demo-a1-0", "demo-a1-1"]
    assert [(p.node, p.chips) for p in create.pods] == [("node-a", 4), ("node-b", 4)]
    first = create.pods[0].manifest
    assert "schedulingGates" not in first["spec"], "the direct path: chips promised, nothing for a gate to hold"
    terms = first["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"][0]["values"] == ["node-a"]
    env = {e["name"]: e.get("value") for e in create.pods[1].manifest["spec"]["containers"][0]["env"]}
    assert env["MS_SCHED_HOST"] == "127.32.0.10" and env["RANK_START"] == "4" and env["MS_NODE_RANK"] == "1"
    # one write per pod: no gate to remove, no event for a step nobody waits on
    assert kinds(decision) == ["create_pods"]
    assert decision.status["phase"] == "Starting"
    assert decision.requeue_after == state.FAST_REQUEUE_SECONDS


def test_only_missing_pods_are_created_after_a_crash():
    body = demo().status(placed_status()).build()
    decision = decide(observe(body, pods=[pod(0).build()]))
    assert [p.manifest["metadata"]["name"] for p in action(decision, "create_pods").pods] == ["demo-a1-1"]
    assert "remove_gates" not in kinds(decision)


def test_gated_pods_an_older_operator_created_are_released_with_the_missing_ones_created_ungated():
    """An upgrade in the middle of a gang's start: the pods the previous version made carry the gang gate; they
    are released, the missing ones are made without it."""
    body = demo().status(placed_status()).build()
    decision = decide(observe(body, pods=[pod(0).gated().build()]))
    (created,) = action(decision, "create_pods").pods
    assert created.manifest["metadata"]["name"] == "demo-a1-1" and "schedulingGates" not in created.manifest["spec"]
    assert action(decision, "remove_gates").pods == (("demo-a1-0", (names.GANG_GATE,)),)


def test_pods_in_flight_are_neither_recreated_nor_lost():
    body = demo().status(placed_status(phase="Starting")).build()
    seen_one = observe(body, pods=[pod(0).gated().build()])
    decision = decide(Observed(**{**seen_one.__dict__, "in_flight": frozenset({"demo-a1-0", "demo-a1-1"})}))
    assert "create_pods" not in kinds(decision) and "remove_gates" not in kinds(decision)
    assert decision.status["phase"] == "Starting" and decision.status["restarts"] == 0
    without = decide(observe(demo().status(placed_status(phase="Starting")).build(), pods=[pod(0).build()]))
    assert without.status["phase"] == "Restarting"  # the same gap, not explained by a recent creation


def test_gates_are_removed_only_when_the_whole_gang_exists():
    body = demo().status(placed_status()).build()
    decision = decide(observe(body, pods=[pod(0).gated().build(), pod(1).gated().build()]))
    gate = names.GANG_GATE
    assert action(decision, "remove_gates").pods == (("demo-a1-0", (gate,)), ("demo-a1-1", (gate,)))
    assert decision.status["phase"] == "Starting"


def test_rank_table_completes_when_every_pod_runs_with_devices():
    body = demo().status(placed_status(phase="Starting")).build()
    waiting = decide(observe(body, pods=[pod(0).build(), pod(1).device_annotation(None).build()]))
    assert "write_rank_table" not in kinds(waiting) and waiting.status["phase"] == "Starting"
    assert waiting.status["rankTable"]["status"] == "initializing"
    decision = decide(observe(body, pods=both()))
    table = action(decision, "write_rank_table").table
    assert table["status"] == "completed" and table["server_count"] == "2"
    ranks = [d["rank_id"] for s in table["server_list"] for d in s["device"]]
    assert ranks == [str(r) for r in range(8)]
    assert decision.status["phase"] == "Running"
    assert events(decision) == []  # a first start: the status keeps it (startTime, conditions, placement summary)
    back = demo().status(placed_status(attempt=2, phase="Starting")).build()  # after a restart: the event keeps
    returned = decide(observe(back, pods=[pod(0, 2).build(), pod(1, 2).build()]))  # what the status overwrites
    assert events(returned) == [("Normal", "Running")]  # one event for both milestones
    assert "hccl.json completed for 8 ranks" in next(a.message for a in returned.actions if isinstance(a, PostEvent))
    ready = next(c for c in decision.status["conditions"] if c["type"] == "RankTableReady")
    assert ready["status"] == "True"
    steady = decide(observe(demo().status(decision.status).build(), pods=both(), rank_table=table))
    assert "write_rank_table" not in kinds(steady) and events(steady) == []
    rewritten = copy.deepcopy(decision.status)  # someone reset the table while the gang ran: completed again
    next(c for c in rewritten["conditions"] if c["type"] == "RankTableReady")["status"] = "False"
    again = decide(observe(demo().status(rewritten).build(), pods=both(), rank_table={"status": "initializing"}))
    assert events(again) == [("Normal", "RankTableReady")]


def test_every_table_written_counts_the_configmaps_version_up():
    """MindCluster's TaskD waits for the ConfigMap's `version` to grow after a reschedule: each write is one more."""
    body = demo().status(placed_status(phase="Starting")).build()
    observed = dataclasses.replace(observe(body, pods=both()), rank_table_revision=4)
    write = action(decide(observed), "write_rank_table")
    assert write.revision == 5 and write.table["status"] == "completed"
    steady = dataclasses.replace(observe(demo().status(placed_status(phase="Running")).build(), pods=both(),
                                         rank_table=write.table), rank_table_revision=5)
    assert "write_rank_table" not in kinds(decide(steady))


def test_the_headless_services_dns_records_are_written_with_each_table():
    """The pods' DNS records follow the table, written before it: the completed table's pods, none once it goes
    back to initializing at a restart. A job of one pod has no headless Service, so no records."""
    routed = [pod(index).running(node=NODES[index], pod_ip=f"10.1.0.{index + 1}").build() for index in (0, 1)]
    write = action(decide(observe(demo().status(placed_status(phase="Starting")).build(), pods=routed)),
                   "write_rank_table")
    (dns,) = write.dns_slices
    assert dns["metadata"]["name"] == "demo-dns-0"
    assert [(e["hostname"], e["addresses"]) for e in dns["endpoints"]] == [("demo-a1-0", ["10.1.0.1"]),
                                                                          ("demo-a1-1", ["10.1.0.2"])]
    failed = [routed[0], pod(1).running(node=NODES[1], pod_ip="10.1.0.2").exited(137).build()]
    reset = action(decide(observe(demo().status(placed_status(phase="Running")).build(), pods=failed,
                                  rank_table=write.table)), "write_rank_table")
    assert reset.table["status"] == "initializing" and [s["endpoints"] for s in reset.dns_slices] == [[]]
    solo = PodBuilder("solo", 0, namespace="ns").running(node=NODES[0], pod_ip="10.1.0.9").devices(range(4)).build()
    placed = {**placed_status(phase="Starting"), "placement": {**placed_status()["placement"], "nodes": [NODES[0]]}}
    decision = decide(observe(JobBuilder("solo", namespace="ns").uid("uid-2").parallelism(data=1, tensor=4)
                              .per_pod(4).status(placed).build(), pods=[solo]))
    assert action(decision, "write_rank_table").dns_slices == ()


def test_a_chip_without_a_device_ip_keeps_the_table_initializing_and_the_condition_names_it():
    body = demo().status(placed_status(phase="Starting")).build()
    broken = pod(1).build()
    configuration = json.loads(broken["metadata"]["annotations"][DEVICE_ANNOTATION])
    configuration["devices"][2]["device_ip"] = "-1"
    broken["metadata"]["annotations"][DEVICE_ANNOTATION] = json.dumps(configuration)
    decision = decide(observe(body, pods=[pod(0).build(), broken]))
    assert "write_rank_table" not in kinds(decision) and decision.status["phase"] == "Starting"
    assert decision.status["rankTable"]["status"] == "initializing"
    ready = next(c for c in decision.status["conditions"] if c["type"] == "RankTableReady")
    assert ready["status"] == "False" and "demo-a1-1: device 2 has device_ip '-1'" in ready["message"]
    # the table was completed before the device plugin lost the IP: it goes back to initializing
    completed = action(decide(observe(body, pods=both())), "write_rank_table").table
    reset = decide(observe(demo().status(placed_status(phase="Running")).build(), pods=[pod(0).build(), broken], rank_table=completed))
    assert action(reset, "write_rank_table").table == {"status": "initializing", "version": "1.0"}


def test_an_a3_rank_table_takes_super_pods_from_deviceinfo_when_nodes_lack_the_label():
    body = demo().section("npu", chip="A3", perPod=4).status(placed_status(phase="Starting")).build()
    infos = {name: DeviceInfo(name, super_pod=str(7 + index)) for index, name in enumerate(NODES)}
    observed = observe(body, pods=both())
    decision = decide(dataclasses.replace(observed, device_infos=infos))
    table = action(decision, "write_rank_table").table
    assert table["version"] == "1.2"
    assert [entry["super_pod_id"] for entry in table["super_pod_list"]] == ["7", "8"]


def test_an_unexplained_failure_restarts_the_whole_gang_keeping_its_node():
    body = demo().status(placed_status(phase="Running")).build()
    decision = decide(observe(body, pods=[pod(0).build(), pod(1).exited(137).build()],
                              rank_table={"status": "completed"}))
    assert action(decision, "delete_pods").names == ("demo-a1-0", "demo-a1-1")
    reset = action(decision, "write_rank_table")
    assert (reset.table, reset.revision) == ({"status": "initializing", "version": "1.0"}, 1)
    status = decision.status
    assert (status["attempt"], status["restarts"], status["phase"]) == (2, 1, "Restarting")
    assert status["avoidedNodes"] == []  # nothing says the node is to blame
    assert "placement" not in status
    warning = next(a for a in decision.actions if isinstance(a, PostEvent))
    assert (warning.type, warning.reason) == ("Warning", "Unknown")
    assert "demo-a1-1" in warning.message and "node-b" in warning.message and "exit code 137" in warning.message
    assert status["lastFailure"]["cause"] == "Unknown" and status["lastFailure"]["action"] == "RestartJob"


def test_an_hccl_timeout_restarts_the_gang_avoiding_the_node_of_the_first_failed_rank():
    body = demo().status(placed_status(phase="Running")).build()
    echo = pod(0).exited(9, message=report("PeerFailed", 0, 17), finished=NOW).build()
    cause = pod(1).exited(7, message=report("HCCLExecTimeout", 5, 17, "EI0002 timeout"),
                          finished=NOW + timedelta(seconds=1)).build()
    decision = decide(observe(body, pods=[echo, cause], now=NOW + timedelta(seconds=2)))
    status = decision.status
    assert status["avoidedNodes"] == ["node-b"] and status["restarts"] == 1 and status.get("disruptions", 0) == 0
    assert status["lastFailure"] == {
        "cause": "HCCLExecTimeout", "action": "RestartJobAvoidingNode", "attempt": 1, "pod": "demo-a1-1",
        "node": "node-b", "rank": 5, "exitCode": 7, "step": 17, "message": "EI0002 timeout",
        "hint": status["lastFailure"]["hint"], "time": "2026-11-29T12:00:01Z"}
    assert "spec.hccl.execTimeoutSeconds=600" in status["lastFailure"]["hint"]
    restarting = next(c for c in status["conditions"] if c["type"] == "Restarting")
    assert restarting["reason"] == "HCCLExecTimeout" and "without node node-b" in restarting["message"]
    warning = next(a for a in decision.actions if isinstance(a, PostEvent))
    assert warning.reason == "HCCLExecTimeout" and status["lastFailure"]["hint"] in warning.message


def test_an_echo_alone_waits_for_the_real_cause_while_other_pods_run():
    body = demo().status(placed_status(phase="Running")).build()
    echo = pod(0).exited(9, message=report("PeerFailed", 0, 3), finished=NOW).build()
    early = decide(observe(body, pods=[echo, pod(1).build()], now=NOW + timedelta(seconds=4)))
    assert early.status["phase"] == "Running" and "delete_pods" not in kinds(early)
    assert early.requeue_after == pytest.approx(6)
    late = decide(observe(body, pods=[echo, pod(1).build()], now=NOW + timedelta(seconds=11)))
    assert late.status["phase"] == "Restarting" and late.status["lastFailure"]["cause"] == "PeerFailed"


def test_a_configuration_error_fails_at_once_and_blames_no_node():
    body = demo().status(placed_status(phase="Running")).build()
    failed = pod(1).exited(2, message=report("ConfigError", 4, None, "training.steps=0: must be >= 1")).build()
    decision = decide(observe(body, pods=[pod(0).build(), failed]))
    status = decision.status
    assert status["phase"] == "Failed" and status.get("restarts", 0) == 0 and not status.get("avoidedNodes")
    failed_condition = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed_condition["reason"] == "ConfigError" and "training.steps=0" in failed_condition["message"]
    assert events(decision)[-1] == ("Warning", "ConfigError")


def test_device_out_of_memory_fails_with_the_planners_prediction_in_the_hint():
    body = demo().status(placed_status(phase="Running")).build()
    failed = pod(0).exited(4, message=report("DeviceOutOfMemory", 1, 0, "Out of memory: 62 GB")).build()
    decision = decide(observe(body, pods=[failed, pod(1).build()]))
    hint = decision.status["lastFailure"]["hint"]
    assert decision.status["phase"] == "Failed"
    assert "training.recompute" in hint and "optimizerShard" in hint
    assert "the planner's prediction was" in hint and "GiB of 57.6 GiB usable per 910B NPU" in hint


def test_a_host_oom_kill_is_out_of_memory_with_the_memory_limit_in_the_hint():
    body = demo().status(placed_status(phase="Running")).build()
    decision = decide(observe(body, pods=[pod(0).build(), pod(1).exited(137, reason="OOMKilled").build()]))
    failure = decision.status["lastFailure"]
    assert (failure["cause"], failure["reason"], failure["action"]) == ("DeviceOutOfMemory", "OOMKilled", "FailJob")
    assert "spec.template.resources.limits.memory" in failure["hint"]


def test_user_rules_come_first_and_the_first_match_wins():
    rules_ = {"failurePolicy": {"rules": [{"exitCodes": [42], "action": "Ignore"},
                                          {"causes": ["HCCLExecTimeout"], "action": "FailJob"},
                                          {"exitCodes": [7], "action": "RestartJob"}]}}
    retried = demo().section("runPolicy", **rules_).status(placed_status(phase="Running", restarts=2)).build()
    ignored = decide(observe(retried, pods=[pod(0).build(), pod(1).exited(42).build()]))
    status = ignored.status
    assert status["phase"] == "Restarting"  # backoffLimit 2 is used up, but an ignored failure does not count
    assert (status["restarts"], status["ignoredFailures"]) == (3, 1) and status["avoidedNodes"] == []
    assert "rules[0] (exitCodes 42)" in status["message"]
    hccl = pod(1).exited(7, message=report("HCCLExecTimeout", 4, 9, "Heartbeat Lost")).build()
    failed = decide(observe(demo().section("runPolicy", **rules_).status(placed_status(phase="Running")).build(),
                            pods=[pod(0).build(), hccl]))
    assert failed.status["phase"] == "Failed" and failed.status["lastFailure"]["action"] == "FailJob"
    assert "rules[1] (causes HCCLExecTimeout)" in failed.status["message"]


def test_next_attempt_waits_for_old_pods_then_places_avoiding_nodes():
    status = placed_status(phase="Restarting")
    status.update(attempt=2, restarts=1, avoidedNodes=["node-b"])
    status.pop("placement")
    waiting = decide(observe(demo().status(status).build(), pods=[pod(0).phase("Running").build()]))
    assert kinds(waiting) == ["delete_pods"]
    decision = decide(observe(demo().status(status).build()))
    assert action(decision, "place").request.excluded_nodes == frozenset({"node-b"})


def test_backoff_exhausted_fails_naming_pod_and_exit_code():
    status = placed_status(phase="Running", restarts=3, disruptions=1)  # two counted restarts of backoffLimit 2
    decision = decide(observe(demo().status(status).build(), pods=[pod(0).build(), pod(1).exited(3).build()]))
    assert decision.status["phase"] == "Failed"
    failed = next(c for c in decision.status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "BackoffLimitExceeded"
    assert "demo-a1-1" in failed["message"] and "exit code 3" in failed["message"]
    assert decision.status["completionTime"]
    assert action(decision, "delete_pods").names == ("demo-a1-0",)  # cleanPodPolicy Running keeps the failed pod


def test_all_pods_succeeded_and_clean_pod_policy_all():
    body = (demo().section("runPolicy", cleanPodPolicy="All", ttlSecondsAfterFinished=60)
            .status(placed_status(phase="Running")).build())
    decision = decide(observe(body, pods=[pod(0).phase("Succeeded").build(), pod(1).phase("Succeeded").build()]))
    assert decision.status["phase"] == "Succeeded" and decision.status["completionTime"]
    assert action(decision, "delete_pods").names == ("demo-a1-0", "demo-a1-1")
    assert decision.requeue_after == pytest.approx(60)
    later = decide(observe(demo().section("runPolicy", ttlSecondsAfterFinished=60).status(decision.status).build(),
                           now=NOW + timedelta(seconds=61)))
    assert kinds(later) == ["delete_job"]


def test_node_not_ready_restarts_after_the_grace_period_only():
    status = placed_status(phase="Running")
    pods = both()
    nodes = {"node-a": node("node-a").build(),
             "node-b": node("node-b").not_ready(since=NOW - timedelta(seconds=10)).build()}
    early = decide(observe(demo().status(status).build(), pods=pods, nodes=nodes))
    assert "delete_pods" not in kinds(early) and early.requeue_after == pytest.approx(20)
    late = decide(observe(demo().status(status).build(), pods=pods, nodes=nodes, now=NOW + timedelta(seconds=25)))
    assert late.status["avoidedNodes"] == ["node-b"] and late.status["phase"] == "Restarting"
    assert next(c for c in late.status["conditions"] if c["type"] == "Restarting")["reason"] == "NodeNotReady"
    assert (late.status["restarts"], late.status["disruptions"]) == (1, 1)


def test_node_faults_do_not_consume_the_backoff_limit():
    status = placed_status(phase="Running", restarts=2)  # backoffLimit 2, used up
    nodes = {"node-a": node("node-a").build(),
             "node-b": node("node-b").not_ready(since=NOW - timedelta(seconds=60)).build()}
    decision = decide(observe(demo().status(status).build(), pods=both(), nodes=nodes))
    assert decision.status["phase"] == "Restarting" and decision.status["disruptions"] == 1
    assert decision.status["lastFailure"]["cause"] == "NodeNotReady"


def test_a_failure_next_to_a_node_within_its_grace_blames_the_node():
    nodes = {"node-a": node("node-a").not_ready(since=NOW - timedelta(seconds=5)).build(),
             "node-b": node("node-b").build()}
    echo = pod(1).exited(7, message=report("HCCLExecTimeout", 4, 2, "Heartbeat Lost")).build()
    decision = decide(observe(demo().status(placed_status(phase="Running")).build(), pods=[pod(0).build(), echo],
                              nodes=nodes))
    assert decision.status["lastFailure"]["cause"] == "NodeNotReady" and decision.status["avoidedNodes"] == ["node-a"]


def test_an_unhealthy_chip_under_a_running_pod_restarts_avoiding_its_node():
    observed = observe(demo().status(placed_status(phase="Running")).build(), pods=both())
    infos = {"node-b": DeviceInfo("node-b", unusable=frozenset({2}))}
    decision = decide(dataclasses.replace(observed, device_infos=infos))
    status = decision.status
    assert status["lastFailure"]["cause"] == "ChipUnhealthy" and status["avoidedNodes"] == ["node-b"]
    assert status["disruptions"] == 1 and "chip 2 of node-b" in status["lastFailure"]["hint"]
    spare = decide(dataclasses.replace(observed, device_infos={"node-b": DeviceInfo("node-b", unusable=frozenset({7}))}))
    assert spare.status["phase"] == "Running"  # a broken chip the job does not hold is none of its business


def test_pod_deleted_while_running_restarts():
    decision = decide(observe(demo().status(placed_status(phase="Running")).build(), pods=[pod(0).build()]))
    assert decision.status["phase"] == "Restarting"
    assert "demo-a1-1" in decision.status["message"] and decision.status["lastFailure"]["cause"] == "PodDeleted"
    assert decision.status["avoidedNodes"] == []


def test_suspend_deletes_pods_and_resume_places_anew():
    status = placed_status(phase="Running")
    suspended = decide(observe(demo().section("runPolicy", suspend=True).status(status).build(), pods=both()))
    assert action(suspended, "delete_pods").names == ("demo-a1-0", "demo-a1-1")
    assert suspended.status["phase"] == "Suspended" and "placement" not in suspended.status
    resumed = decide(observe(demo().status(suspended.status).build()))
    assert resumed.status["attempt"] == 2 and resumed.status["phase"] == "Pending"
    assert "place" in kinds(resumed) and resumed.status["restarts"] == 0


def test_template_change_restarts_with_the_new_spec_but_training_change_does_not():
    status = placed_status(phase="Running")
    running = decide(observe(demo().status(status).build(), pods=both()))
    changed = demo().section("template", image="other:1").status(running.status).build()
    decision = decide(observe(changed, pods=both()))
    assert decision.status["phase"] == "Restarting" and decision.status["restarts"] == 0
    training = demo().section("training", steps=5).status(running.status).build()
    assert decide(observe(training, pods=both())).status["phase"] == "Running"


def test_scheduling_timeout_deletes_the_attempt_and_replans():
    status = placed_status(phase="Starting")
    old = NOW - timedelta(seconds=400)
    pods = [pod(0).created(old).build(), {**pod(1).created(old).build(), "spec": {"nodeName": None}}]
    decision = decide(observe(demo().status(status).build(), pods=pods))
    assert decision.status["attempt"] == 2 and "placement" not in decision.status
    assert ("Warning", "SchedulingTimeout") in events(decision)
    assert action(decision, "delete_pods").names == ("demo-a1-0", "demo-a1-1")


def test_a_pod_the_kubelet_refused_at_admission_ends_the_attempt_without_a_restart():
    """Bound to its placed node at creation, a pod the node's kubelet refuses (a pod the default scheduler bound
    there first holds the chips) never ran: not a training failure. Every pod of the attempt goes and the gang is
    placed anew at once, the refusal named; nothing is counted against backoffLimit."""
    why = ("Pod was rejected: Node didn't have enough resource: huawei.com/Ascend910, requested: 4, used: 8, "
           "capacity: 8")
    rejected = (PodBuilder("demo", 1, namespace="ns").attempt(1).created(NOW).node(NODES[1]).phase("Failed")
                .status(reason="OutOfhuawei.com/Ascend910", message=why).build())
    for phase in ("Starting", "Running"):
        decision = decide(observe(demo().status(placed_status(phase=phase)).build(), pods=[pod(0).build(), rejected]))
        assert decision.status["attempt"] == 2 and decision.status["restarts"] == 0
        assert "placement" not in decision.status and "lastFailure" not in decision.status
        deleted = action(decision, "delete_pods")
        assert (deleted.names, deleted.attempt) == (("demo-a1-0", "demo-a1-1"), 1), "the attempt in one call"
        message = f"demo-a1-1 refused by node {NODES[1]}: OutOfhuawei.com/Ascend910: {why}; placing anew"
        assert decision.status["message"] == message and decision.status["phase"] == "Pending"
        assert ("Warning", "RefusedByNode") in events(decision)
        placed = next(c for c in decision.status["conditions"] if c["type"] == "Placed")
        assert (placed["status"], placed["reason"], placed["message"]) == ("False", "RefusedByNode", message)
        replaced = decide(observe(demo().status(decision.status).build()))
        assert "place" in kinds(replaced) and replaced.status["restarts"] == 0


def test_pods_whose_placement_was_never_written_record_it_when_all_are_there():
    """A one-pod job's placement is written with its start's next change (the shell's onepod.OnePodStart): an
    operator that stopped before that left its pod bound to a node no status names. The pods say where."""
    created = decide(observe(demo().build())).status
    nodes = {n: node(n).label(RACK_LABEL, f"rack-{i}").build() for i, n in enumerate(NODES)}
    decision = decide(observe(demo().status(created).build(), pods=both(), nodes=nodes))
    assert kinds(decision) == [] and decision.status["attempt"] == 1 and decision.status["phase"] == "Placing"
    assert decision.status["placement"]["nodes"] == list(NODES) and decision.status["placement"]["attempt"] == 1
    assert decision.status["placement"]["summary"] == "2 nodes in 2 racks"
    assert any(c["type"] == "Placed" and c["status"] == "True" for c in decision.status["conditions"])
    running = decide(observe(demo().status(decision.status).build(), pods=both()))
    assert "write_rank_table" in kinds(running) and running.status["phase"] == "Running"


def test_pods_of_an_attempt_whose_placement_was_never_written_go_when_some_are_missing():
    """Where the rest of the gang was to go is lost: the attempt's pods go, the next attempt is placed afresh, no
    restart is counted (a gang's placement is written before its pods: only a stranger's pods get here)."""
    created = decide(observe(demo().build())).status
    decision = decide(observe(demo().status(created).build(), pods=[pod(0).build()]))
    assert decision.status["attempt"] == 2 and decision.status["restarts"] == 0
    deleted = action(decision, "delete_pods")
    assert deleted.names == ("demo-a1-0",)
    assert ("Warning", "PlacementUnrecorded") in events(decision)
    placed = next(c for c in decision.status["conditions"] if c["type"] == "Placed")
    assert (placed["status"], placed["reason"]) == ("False", "PlacementUnrecorded")
    waiting = decide(observe(demo().status(decision.status).build(), pods=[pod(0).build()]))
    assert kinds(waiting) == ["delete_pods"], "the old attempt's pod must go before the gang is placed anew"
    assert "place" in kinds(decide(observe(demo().status(decision.status).build())))


def test_a_node_that_refuses_the_job_in_two_attempts_is_avoided():
    """Once is a race with a rival; a node whose kubelet refuses again (it counts fewer chips than it reports) would
    take every placement of the gang: from its second refusal the job avoids it, and the next placement says so."""
    def refusing(attempt):
        return (PodBuilder("demo", 1, namespace="ns").attempt(attempt).created(NOW).node(NODES[1]).phase("Failed")
                .status(reason="UnexpectedAdmissionError", message="Pod was rejected: Allocate failed").build())
    first = decide(observe(demo().status(placed_status(phase="Starting")).build(),
                           pods=[pod(0).build(), refusing(1)]))
    assert first.status["admissionRefusals"] == {NODES[1]: 1} and first.status.get("avoidedNodes", []) == []
    assert "avoided" not in first.status["message"]
    again = placed_status(attempt=2, phase="Starting", admissionRefusals=first.status["admissionRefusals"])
    second = decide(observe(demo().status(again).build(), pods=[pod(0, attempt=2).build(), refusing(2)]))
    assert second.status["attempt"] == 3 and second.status["restarts"] == 0
    assert second.status["admissionRefusals"] == {NODES[1]: 2} and second.status["avoidedNodes"] == [NODES[1]]
    assert f"node {NODES[1]} refused this job in 2 attempts and is avoided" in second.status["message"]
    replaced = decide(observe(demo().status(second.status).build()))
    assert NODES[1] in action(replaced, "place").request.excluded_nodes


def test_a_pod_its_placed_node_refused_is_named_then_placed_anew_without_a_restart():
    """The placement race: a pod the default scheduler bound took the chips before our pinned pod reached the
    scheduler. The pod waits unschedulable (never bound elsewhere, never doubled); the phase says why, and past
    schedulingTimeoutSeconds the attempt is placed anew, not counted as a failure."""
    why = "0/10 nodes are available: 1 Insufficient huawei.com/Ascend910."
    status = placed_status(phase="Starting")

    def refused(created):
        return pod(1).created(created).node(None).condition("PodScheduled", "False", reason="Unschedulable",
                                                             message=why).build()
    waiting = decide(observe(demo().status(status).build(),
                             pods=[pod(0).build(), refused(NOW - timedelta(seconds=10))]))
    assert waiting.status["attempt"] == 1 and "delete_pods" not in kinds(waiting)
    assert waiting.status["message"] == f"1 of 2 pods waiting for the scheduler; demo-a1-1 refused by the scheduler: {why}"
    late = decide(observe(demo().status(status).build(), pods=[pod(0).build(), refused(NOW - timedelta(seconds=400))]))
    assert late.status["attempt"] == 2 and late.status["restarts"] == 0 and "placement" not in late.status
    assert action(late, "delete_pods").names == ("demo-a1-0", "demo-a1-1")
    assert why in next(c for c in late.status["conditions"] if c["type"] == "Placed")["message"]


def test_invalid_spec_fails_with_every_problem():
    decision = decide(observe(demo().section("parallelism", tensor=3).build()))
    assert decision.status["phase"] == "Failed"
    assert "spec.parallelism.tensor=3 must divide spec.npu.perPod=4" in decision.status["message"]


def test_active_deadline_fails_the_job():
    status = placed_status(phase="Running", startTime="2026-11-29T11:00:00Z")
    decision = decide(observe(demo().section("runPolicy", activeDeadlineSeconds=600).status(status).build(),
                              pods=both()))
    assert decision.status["phase"] == "Failed"
    assert next(c for c in decision.status["conditions"] if c["type"] == "Failed")["reason"] == "DeadlineExceeded"


def test_decide_does_not_mutate_its_input():
    body = demo().status(placed_status(phase="Running")).build()
    before = copy.deepcopy(body)
    decide(observe(body, pods=[pod(0).build(), pod(1).exited(1).build()]))
    assert body == before


def test_pod_template_hash_ignores_training_settings():
    a, b = parse(demo().build()), parse(demo().section("training", steps=7).build())
    assert reconcile.pod_template_hash(a) == reconcile.pod_template_hash(b)
    wider = parse(demo().section("parallelism", data=4).build())
    assert reconcile.pod_template_hash(a) != reconcile.pod_template_hash(wider)


def test_running_job_records_progress_and_utilization_and_says_when_they_go_stale():
    from ascend_hybrid.monitoring.progress import Sample
    body = demo().section("training", steps=200).status(placed_status(phase="Running")).build()
    table = decide(observe(body, pods=both())).actions
    completed = next(a.table for a in table if isinstance(a, WriteRankTable))
    good = Sample("trainer", NOW, step=50, loss=2.5, tokens_per_second=1000.0, step_seconds=0.5, npu_percent=87.5)
    first = decide(Observed(**{**observe(body, pods=both(), rank_table=completed).__dict__, "telemetry": good}))
    assert first.status["training"] == {"step": 50, "loss": 2.5, "tokensPerSecond": 1000.0, "stepSeconds": 0.5,
                                        "progressPercentage": 25.0, "estimatedRemainingSeconds": 75.0}
    assert first.status["utilization"] == {"npuPercent": 87.5, "source": "trainer", "sampledAt": "2026-11-29T12:00:00Z"}
    bad = Sample("trainer", NOW + timedelta(seconds=30), error="trainer metrics unreachable (127.16.0.1:9400: refused)")
    stale = decide(Observed(**{**observe(demo().section("training", steps=200).status(first.status).build(),
                                         pods=both(), rank_table=completed).__dict__, "telemetry": bad}))
    assert stale.status["phase"] == "Running"
    assert stale.status["utilization"]["sampledAt"] == "2026-11-29T12:00:00Z"  # the old figure, with its age
    metrics = next(c for c in stale.status["conditions"] if c["type"] == "MetricsAvailable")
    assert metrics["status"] == "False" and "unreachable" in metrics["message"]
    assert [e for e in events(stale) if e[1] == "MetricsUnavailable"] == [("Warning", "MetricsUnavailable")]
    again = decide(Observed(**{**observe(demo().section("training", steps=200).status(stale.status).build(),
                                         pods=both(), rank_table=completed).__dict__, "telemetry": bad}))
    assert not [e for e in events(again) if e[1] == "MetricsUnavailable"]  # one event, not one per reading


def test_no_series_yet_is_not_an_outage():
    from ascend_hybrid.monitoring.progress import Sample
    body = demo().status(placed_status(phase="Running")).build()
    completed = next(a.table for a in decide(observe(body, pods=both())).actions if isinstance(a, WriteRankTable))
    empty = Sample("prometheus", NOW, error="Prometheus has no series for this job yet", no_data_yet=True)
    first = decide(Observed(**{**observe(body, pods=both(), rank_table=completed).__dict__, "telemetry": empty}))
    assert not [e for e in events(first) if e[1] == "MetricsUnavailable"]
    assert next(c for c in first.status["conditions"] if c["type"] == "MetricsAvailable")["reason"] == "NoDataYet"
    down = Sample("prometheus", NOW, error="Prometheus at http://127.0.0.1:9 unreachable: refused")
    later = decide(Observed(**{**observe(demo().status(first.status).build(), pods=both(),
                                         rank_table=completed).__dict__, "telemetry": down}))
    assert [e for e in events(later) if e[1] == "MetricsUnavailable"] == [("Warning", "MetricsUnavailable")]


def test_a_placement_made_for_other_degrees_is_made_again():
    status = placed_status()  # 2 pods placed
    # now 4 pods, none created yet
    decision = decide(observe(demo().section("parallelism", data=4).status(status).build()))
    assert "create_pods" not in kinds(decision)
    assert action(decision, "place").request.pod_count == 4


def test_anomalies_turn_on_with_one_warning_and_a_restart_starts_them_afresh():
    from ascend_hybrid.monitoring.progress import ChipReading, Sample
    body = demo().section("monitoring", imbalanceSamples=2).status(placed_status(phase="Running")).build()
    completed = next(a.table for a in decide(observe(body, pods=both())).actions
                     if isinstance(a, WriteRankTable))
    skewed = (ChipReading("demo-a1-0", "0", 92.0), ChipReading("demo-a1-1", "3", 11.0))
    status, warnings = body["status"], []
    for second in (0, 30, 30, 60):  # the sample of second 30 is seen by two passes
        reading = Sample("trainer", NOW + timedelta(seconds=second), step=10 + second, chips=skewed)
        observed = observe(demo().section("monitoring", imbalanceSamples=2).status(status).build(), pods=both(),
                           rank_table=completed)
        decision = decide(dataclasses.replace(observed, telemetry=reading))
        status = decision.status
        warnings += [a for a in decision.actions if isinstance(a, PostEvent) and a.reason == "LoadImbalanced"]
    imbalanced = next(c for c in status["conditions"] if c["type"] == "LoadImbalanced")
    assert imbalanced["status"] == "True" and "chip 3 of pod demo-a1-1 at 11%" in imbalanced["message"]
    assert len(warnings) == 1 and warnings[0].type == "Warning"
    assert status["monitoring"]["imbalancedSamples"] == 3 and status["monitoring"]["sampledAt"] == "2026-11-29T12:01:00Z"
    restarted = decide(observe(demo().status(status).build(), pods=[pod(0).build(), pod(1).exited(1).build()],
                               rank_table=completed)).status
    assert "monitoring" not in restarted
    assert next(c for c in restarted["conditions"] if c["type"] == "LoadImbalanced")["status"] == "False"


def test_the_only_pod_of_a_one_pod_job_deleted_is_a_counted_whole_gang_restart():
    body = demo().section("parallelism", data=1, tensor=4).status(placed_status(phase="Running")).build()
    body["status"]["placement"]["nodes"] = ["node-a"]
    decision = decide(observe(body, pods=[]))
    assert decision.status["phase"] == "Restarting" and decision.status["restarts"] == 1
    assert decision.status["attempt"] == 2 and "create_pods" not in kinds(decision)
    assert ("Warning", "PodDeleted") in events(decision)
    assert "demo-a1-0" in decision.status["message"]
    # before the gang ever started, no pod is no failure: the pod is (re)created in the same attempt
    placing = demo().section("parallelism", data=1, tensor=4).status(placed_status(phase="Placing")).build()
    placing["status"]["placement"]["nodes"] = ["node-a"]
    assert "create_pods" in kinds(decide(observe(placing, pods=[])))


def refusal(status, at=NOW, resource="pods", message="boom"):
    return refusals.Refusal(verb="create", resource=resource, name="demo-a1-0", namespace="ns", status=status,
                             message=message, at=at)


@pytest.mark.parametrize("code", [400, 422])
def test_a_pod_the_apiserver_refuses_fails_the_job_with_its_message(code):
    message = 'Pod "demo-a1-0" is invalid: spec.containers[0].env[9].name: Invalid value: "1BAD"'
    observed = observe(demo().status(placed_status(phase="Placing")).build(), pods=[pod(1).gated().build()])
    decision = decide(dataclasses.replace(observed, refusal=refusal(code, message=message)))
    assert decision.status["phase"] == "Failed"
    failed = next(c for c in decision.status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "InvalidPodTemplate" and message in failed["message"]
    assert ("Warning", "InvalidPodTemplate") in events(decision)
    assert "create_pods" not in kinds(decision)
    assert action(decision, "delete_pods").names == ("demo-a1-1",)  # cleanPodPolicy Running: none left behind


def test_a_forbidden_write_is_a_condition_naming_verb_and_resource_then_retried():
    observed = observe(demo().status(placed_status(phase="Placing")).build())
    message = 'pods is forbidden: User "system:serviceaccount:x:y" cannot create resource "pods"'
    fresh = decide(dataclasses.replace(observed, refusal=refusal(403, message=message)))
    authorized = next(c for c in fresh.status["conditions"] if c["type"] == "Authorized")
    assert authorized["status"] == "False" and authorized["reason"] == "Forbidden"
    assert "may not create pods in namespace ns" in authorized["message"] and message in authorized["message"]
    assert kinds(fresh) == ["event"] and fresh.status["phase"] == "Placing"
    assert fresh.requeue_after == pytest.approx(refusals.RETRY_SECONDS)
    again = decide(dataclasses.replace(observe(demo().status(fresh.status).build()),
                                       refusal=refusal(403, message=message, at=NOW - timedelta(seconds=5))))
    assert kinds(again) == [] and again.requeue_after == pytest.approx(10)  # one event, not one per pass
    later = decide(dataclasses.replace(observe(demo().status(fresh.status).build()),
                                       refusal=refusal(403, at=NOW - timedelta(seconds=20))))
    assert "create_pods" in kinds(later)  # tried again
    cleared = decide(observe(demo().status(fresh.status).build()))
    assert next(c for c in cleared.status["conditions"] if c["type"] == "Authorized")["status"] == "True"
    refused_again = decide(dataclasses.replace(observe(demo().status(cleared.status).build()),
                                               refusal=refusal(403, message=message)))
    assert ("Warning", "Forbidden") in events(refused_again)  # forbidden again after it was allowed: said again
    other = decide(dataclasses.replace(observe(demo().status(fresh.status).build()),
                                       refusal=refusal(403, message="services is forbidden")))
    assert ("Warning", "Forbidden") in events(other)  # another refusal than the one the condition names
    assert not [c for c in decide(observe(demo().status(placed_status()).build())).status["conditions"]
                if c["type"] == "Authorized"]


def test_a_sched_service_back_with_another_ip_restarts_the_gang():
    body = demo().status(placed_status(phase="Running")).build()
    pods = both()
    for p in pods:
        p["spec"]["containers"] = [{"name": "ascend", "env": [{"name": "MS_SCHED_HOST", "value": "127.32.0.10"}]}]
    assert decide(observe(body, pods=pods)).status["phase"] == "Running"
    moved = decide(dataclasses.replace(observe(body, pods=pods), sched_ip="127.32.0.99"))
    assert moved.status["phase"] == "Restarting" and moved.status["restarts"] == 1
    restarting = next(c for c in moved.status["conditions"] if c["type"] == "Restarting")
    assert restarting["reason"] == "SchedServiceChanged" and "127.32.0.99" in restarting["message"]


# -- the recovery ladder (recovery_steps.py) ----------------------------------------------------------------------
def live(index, attempt=1, node=None):
    """A running pod with a UID, as the launchers' reports name it (on `node`, else its own of NODES)."""
    made = pod(index, attempt).uid(f"uid-{attempt}-{index}")
    return (made.running(node=node) if node else made).build()


def job(spec_overrides=None, status=None):
    """demo with `spec_overrides` merged into its spec sections and the given status."""
    built = demo()
    for section, fields in (spec_overrides or {}).items():
        built = built.section(section, **fields)
    return built.status(status).build()


def node_object(name, ready=True, since=NOW):
    return NodeBuilder(name).ready(ready, since=since).build()


def said(index, state, generation=0, attempt=1, at=NOW, **fields):
    from ascend_hybrid.diagnosis.recovery import LauncherReport

    return (names.pod_name("demo", attempt, index),
            LauncherReport(f"uid-{attempt}-{index}", generation, state, time=at, **fields))


def running_job(**status_extra):
    body = job(status=placed_status(phase="Running", **status_extra))
    table = decide(observe(job(status=placed_status(phase="Starting")), pods=[live(0), live(1)]))
    return body, action(table, "write_rank_table").table


def ladder_pass(body, table, reports, now=NOW, pods=None, launcher_generation=None, **extra):
    generation = int((body["status"].get("recovery") or {}).get("generation") or 0)
    observed = observe(body, pods=pods or [live(0), live(1)], rank_table=table, now=now,
                       launcher_generation=generation if launcher_generation is None else launcher_generation,
                       launchers=dict(reports))
    return decide(dataclasses.replace(observed, **extra) if extra else observed)


def failed_rank_one(body, table, now=NOW):
    return ladder_pass(body, table, [said(0, "Started", resumed_from=0),
                                     said(1, "Failed", cause="Unknown", rank=1, step=12,
                                          detail="rank 1 (pid 7) ended by SIGKILL")], now=now)


def test_a_rank_that_died_restarts_every_rank_in_place():
    body, table = running_job()
    decision = failed_rank_one(body, table)
    assert kinds(decision).count("delete_pods") == 0 and "write_rank_table" not in kinds(decision)
    assert action(decision, "signal_launchers") == SignalLaunchers(1, "demo-launcher")
    status = decision.status
    assert (status["attempt"], status["restarts"], status["phase"]) == (1, 1, "Restarting")
    assert status["recovery"] == {"generation": 1, "rung": "RestartRanks"}
    (record,) = status["recoveries"]
    assert {key: record[key] for key in ("cause", "pod", "node", "rank", "step", "rungs", "outcome", "counted")} == {
        "cause": "Unknown", "pod": "demo-a1-1", "node": "node-b", "rank": 1, "step": 12, "rungs": ["RestartRanks"],
        "outcome": "Recovering", "counted": True}
    assert record["detected"] == record["decided"] == record["podsReady"] == "2026-11-29T12:00:00Z"
    assert status["lastFailure"]["cause"] == "Unknown" and status["lastFailure"]["rank"] == 1
    warning = next(a for a in decision.actions if isinstance(a, PostEvent))
    assert warning.type == "Warning" and "restarting every rank in place" in warning.message
    assert "rank generation 1 (1/2)" in warning.message


def test_rank_zero_restarts_in_place_too():
    body, table = running_job()
    decision = ladder_pass(body, table, [said(0, "Failed", cause="Unknown", rank=0, step=5), said(1, "Started")])
    assert action(decision, "signal_launchers").generation == 1
    assert decision.status["recoveries"][0]["pod"] == "demo-a1-0"


def test_an_in_place_recovery_is_recovered_at_the_first_step_after():
    body, table = running_job()
    restarting = failed_rank_one(body, table).status
    later = NOW + timedelta(seconds=8)
    relaunched = ladder_pass(job(status=restarting), table, [said(0, "Started", 1, at=later, resumed_from=10),
                                                             said(1, "Started", 1, at=later, resumed_from=10)],
                             now=later)
    assert relaunched.status["phase"] == "Restarting" and "2/2 launchers" in relaunched.status["message"]
    assert relaunched.status["recoveries"][0]["ranksRelaunched"] == "2026-11-29T12:00:08Z"
    assert "signal_launchers" not in kinds(relaunched) and events(relaunched) == []
    stepped = NOW + timedelta(seconds=20)
    done = ladder_pass(job(status=relaunched.status), table,
                       [said(0, "Stepping", 1, at=stepped, resumed_from=10, step=11),
                        said(1, "Started", 1, at=later, resumed_from=10)], now=stepped)
    record = done.status["recoveries"][0]
    assert (record["outcome"], record["recoveredBy"], record["resumedFromStep"], record["stepsRedone"],
            record["seconds"]) == ("Recovered", "RestartRanks", 10, 2, 20.0)
    assert record["firstStepAfter"] == "2026-11-29T12:00:20Z"
    assert done.status["phase"] == "Running" and done.status["recovery"] == {"generation": 1}
    assert ("Normal", "Recovered") in events(done)
    assert done.status["restarts"] == 1 and done.status["attempt"] == 1


def test_a_rung_past_its_timeout_gives_way_to_the_gang_without_counting_again():
    body, table = running_job()
    restarting = failed_rank_one(body, table).status
    late = NOW + timedelta(seconds=301)
    decision = ladder_pass(job(status=restarting), table, [said(0, "Started", 1), said(1, "Started", 1)], now=late)
    assert action(decision, "delete_pods").names == ("demo-a1-0", "demo-a1-1")
    record = decision.status["recoveries"][0]
    assert record["rungs"] == ["RestartRanks", "RestartGang"] and record["outcome"] == "Recovering"
    assert "RestartRanks passed its timeout of 300s" in record["why"]
    assert (decision.status["attempt"], decision.status["restarts"]) == (2, 1)
    assert ("Warning", "RecoveryTimeout") in events(decision)
    assert "rung" not in decision.status["recovery"]


def test_a_second_failure_during_the_rung_escalates_it_to_replace_that_pod_then_to_the_gang():
    body, table = running_job()
    restarting = failed_rank_one(body, table).status
    later = NOW + timedelta(seconds=5)
    decision = ladder_pass(job(status=restarting), table,
                           [said(0, "Started", 1), said(1, "Failed", 1, cause="Unknown", rank=1, at=later)],
                           now=later)
    assert action(decision, "delete_pods") == DeletePods(("demo-a1-1",), force=False)
    placing = action(decision, "place_replacement")
    assert (placing.index, placing.request.pod_count, placing.request.chips_per_pod) == (1, 1, 4)
    assert placing.request.excluded_nodes == set()  # an unexplained crash suspects no node
    assert action(decision, "signal_launchers").generation == 2
    status = decision.status
    assert status["recoveries"][0]["rungs"] == ["RestartRanks", "ReplacePod"]
    assert status["recovery"] == {"generation": 2, "rung": "ReplacePod", "replacing": 1}
    assert (status["attempt"], status["restarts"]) == (1, 1)
    # and a failure of the other pod while ReplacePod runs: the whole gang
    again = ladder_pass(job(status=status), table,
                        [said(0, "Failed", 2, cause="HCCLExecTimeout", rank=0, at=later), said(1, "Started", 2)],
                        now=later + timedelta(seconds=5))
    assert action(again, "delete_pods").names == ("demo-a1-0", "demo-a1-1")
    assert again.status["recoveries"][0]["rungs"] == ["RestartRanks", "ReplacePod", "RestartGang"]
    assert (again.status["attempt"], again.status["restarts"]) == (2, 1)
    assert ("Warning", "RecoveryEscalated") in events(again)


def test_the_gang_restart_is_recovered_when_the_new_attempt_steps():
    from ascend_hybrid.monitoring.progress import Sample

    body, table = running_job()
    restarting = failed_rank_one(body, table).status
    gang = ladder_pass(job(status=restarting), table, [said(0, "Started", 1), said(1, "Started", 1)],
                       now=NOW + timedelta(seconds=301)).status
    status = placed_status(attempt=2, phase="Starting")
    status.update({key: gang[key] for key in ("recoveries", "recovery", "restarts")})
    back = NOW + timedelta(seconds=340)
    decision = ladder_pass(job(status=status), None, [], now=back, pods=[live(0, attempt=2), live(1, attempt=2)],
                           telemetry=Sample("trainer", back, step=11.0, loss=2.0, step_seconds=0.5))
    record = decision.status["recoveries"][0]
    assert decision.status["phase"] == "Running"
    assert (record["outcome"], record["recoveredBy"], record["podsReady"], record["resumedFromStep"]) == (
        "Recovered", "RestartGang", "2026-11-29T12:05:40Z", 10)
    assert record["seconds"] == 340.0


def test_a_pod_whose_launcher_never_reported_gets_the_whole_gang():
    body, table = running_job()
    decision = ladder_pass(body, table, [said(1, "Failed", cause="Unknown", rank=1)])
    assert action(decision, "delete_pods").names == ("demo-a1-0", "demo-a1-1")
    record = decision.status["recoveries"][0]
    assert record["rungs"] == ["RestartGang"] and "demo-a1-0 never reported" in record["why"]


def test_a_report_of_another_pod_of_the_same_name_or_an_older_generation_is_not_heard():
    from ascend_hybrid.diagnosis.recovery import LauncherReport

    body, table = running_job(recovery={"generation": 2})
    stale = ladder_pass(body, table, [said(0, "Started", 2), said(1, "Failed", 1, cause="Unknown")])
    assert stale.status["phase"] == "Running" and "recoveries" not in stale.status
    impostor = ladder_pass(body, table, [said(0, "Started", 2),
                                         ("demo-a1-1", LauncherReport("uid-other", 2, "Failed", cause="Unknown"))])
    assert impostor.status["phase"] == "Running" and "recoveries" not in impostor.status


def test_an_echo_waits_for_the_real_cause():
    body, table = running_job()
    decision = ladder_pass(body, table, [said(0, "Failed", cause="PeerFailed", rank=0), said(1, "Started")])
    assert decision.status["phase"] == "Running" and "signal_launchers" not in kinds(decision)
    assert decision.requeue_after is not None and decision.requeue_after <= 10
    later = ladder_pass(body, table, [said(0, "Failed", cause="PeerFailed", rank=0),
                                      said(1, "Failed", cause="HCCLExecTimeout", rank=1, at=NOW + timedelta(seconds=1))],
                        now=NOW + timedelta(seconds=1))
    assert later.status["recoveries"][0]["cause"] == "HCCLExecTimeout"
    assert action(later, "signal_launchers").generation == 1
    # every pod stays: the suspected node is kept in the incident for a rung that moves pods, not avoided yet
    assert not later.status.get("avoidedNodes") and later.status["recoveries"][0]["avoid"] == ["node-b"]
    gang = ladder_pass(job(status=later.status), table, [said(0, "Started", 1), said(1, "Started", 1)],
                       now=NOW + timedelta(seconds=400))
    assert gang.status["avoidedNodes"] == ["node-b"] and gang.status["attempt"] == 2


def test_the_hourly_cap_and_the_finest_rung_send_the_failure_to_the_gang():
    body, table = running_job()
    capped_body = job({"runPolicy": {"recovery": {"maxInPlacePerHour": 1}}}, status=failed_rank_one(
        body, table).status)
    capped_body["status"]["recoveries"][0]["outcome"] = "Recovered"
    capped_body["status"]["recovery"] = {"generation": 1}
    capped_body["status"]["phase"] = "Running"
    decision = ladder_pass(capped_body, table, [said(0, "Started", 1),
                                                said(1, "Failed", 1, cause="Unknown", rank=1)],
                           now=NOW + timedelta(minutes=10))
    assert "delete_pods" in kinds(decision)
    assert "maxInPlacePerHour=1" in decision.status["recoveries"][-1]["why"]
    assert decision.status["restarts"] == 2
    gang_only = job({"runPolicy": {"recovery": {"finestRung": "RestartGang"}}}, status=placed_status(phase="Running"))
    decision = failed_rank_one(gang_only, table)
    assert "delete_pods" in kinds(decision) and "finestRung=RestartGang" in decision.status["recoveries"][0]["why"]


def test_a_failure_policy_rule_can_ask_for_the_gang_or_fail_and_close_the_incident():
    body, table = running_job()
    gang = job({"runPolicy": {"failurePolicy": {"rules": [{"causes": ["Unknown"], "action": "RestartJob"}]}}},
               status=placed_status(phase="Running"))
    assert "delete_pods" in kinds(failed_rank_one(gang, table))
    restarting = failed_rank_one(body, table).status
    failing = job({"runPolicy": {"failurePolicy": {"rules": [{"causes": ["DataError"], "action": "FailJob"}]}}},
                  status=restarting)
    decision = ladder_pass(failing, table, [said(0, "Started", 1), said(1, "Failed", 1, cause="DataError")])
    assert decision.status["phase"] == "Failed"
    assert decision.status["recoveries"][0]["outcome"] == "JobFailed"


def test_the_channel_is_written_level_based():
    body, table = running_job(recovery={"generation": 3})
    decision = ladder_pass(body, table, [said(0, "Started", 3), said(1, "Started", 3)], launcher_generation=-1)
    assert action(decision, "signal_launchers") == SignalLaunchers(3, "demo-launcher")
    fresh = ladder_pass(body, table, [], launcher_generation=None)
    fresh_missing = dataclasses.replace(observe(body, pods=[live(0), live(1)], rank_table=table),
                                        launcher_generation=None)
    assert action(decide(fresh_missing), "signal_launchers").generation == 3
    assert fresh.status["phase"] == "Running"


def test_a_start_grants_the_launchers_and_writes_no_channel():
    """Generation 0 is what a channel without the key means: the start that completes the table checks the
    launchers' grant (the job's own ServiceAccount: the template names none) and writes no generation; a channel
    holding only reports needs no write either."""
    starting = job(status=placed_status(phase="Starting"))
    fresh = decide(dataclasses.replace(observe(starting, pods=[live(0), live(1)]), launcher_generation=None))
    assert "write_rank_table" in kinds(fresh) and "signal_launchers" not in kinds(fresh)
    assert action(fresh, "grant_launchers") == GrantLaunchers("demo-launcher")  # the job's own ServiceAccount
    assert fresh.status["phase"] == "Running"
    body, table = running_job()
    reports = dict([said(0, "Started"), said(1, "Started")])
    reported = decide(dataclasses.replace(observe(body, pods=[live(0), live(1)], rank_table=table, launchers=reports),
                                          launcher_generation=None))
    assert "signal_launchers" not in kinds(reported) and "grant_launchers" not in kinds(reported)


def test_goodput_is_the_productive_share_of_an_account_that_follows_the_job_pass_by_pass():
    """Each pass attributes the time since the last to a bucket by the state it leaves: the start until the lead
    trainer steps, then its readings' steps at the healthy pace (two slow intervals charged as slowness), then a
    failure's restart."""
    from ascend_hybrid.monitoring.progress import Sample

    started = NOW - timedelta(seconds=100)
    body, table = running_job(startTime=timestamp(started))
    reports = [said(0, "Started", resumed_from=0), said(1, "Started", resumed_from=0)]
    moment, step = NOW, 0
    for seconds_per_step in (1.0,) * 10 + (2.0, 2.0, 1.0):  # three windows of a minute make the pace
        moment += timedelta(seconds=20)
        step += int(20 / seconds_per_step)
        sample = Sample("trainer", moment, step=step, step_count=step, step_seconds=seconds_per_step)
        decision = ladder_pass(body, table, reports, now=moment, telemetry=sample)
        body = job(status=decision.status)
    account = body["status"]["goodputAccount"]
    # placed 100 s before its pods ran, and the 20 steps before the first reading go with the start
    assert account["seconds"]["startsAndRestarts"] == 120.0
    assert account["healthyStepSeconds"] == pytest.approx(1.0)
    assert account["seconds"]["slowSteps"] == pytest.approx(20.0)  # 20 steps at 2 s where 1 s is the pace
    assert body["status"]["goodput"] == round(220 / 360, 4)
    failing = failed_rank_one(body, table, now=moment + timedelta(seconds=15))
    failed = job(status=failing.status)
    restarted = ladder_pass(failed, table, [said(0, "Started", generation=1, resumed_from=100),
                                            said(1, "Started", generation=1, resumed_from=100)],
                            now=moment + timedelta(seconds=45))
    assert restarted.status["phase"] == "Restarting"
    again = restarted.status["goodputAccount"]
    assert again["mode"] == "starting" and again["wallSeconds"] == pytest.approx(375.0)
    assert again["seconds"]["startsAndRestarts"] == pytest.approx(135.0)  # the 15 s since the last reading


def test_an_auto_checkpoint_interval_is_set_from_the_measured_save_and_failures_and_told_to_the_launchers():
    from ascend_hybrid.diagnosis import checkpointing
    from ascend_hybrid.monitoring.progress import Sample

    auto = {"training": {"steps": 100_000, "checkpoint": {"claimName": "ckpt", "everySteps": "auto"}}}
    failure = {"cause": "Unknown", "detected": timestamp(NOW - timedelta(hours=1)), "rungs": ["RestartRanks"],
               "outcome": "Recovered"}
    status = placed_status(phase="Running", startTime=timestamp(NOW - timedelta(hours=2)), recoveries=[failure],
                           goodputAccount={"healthyStepSeconds": 0.5})
    body = job(auto, status=status)
    table = decide(observe(job(auto, status=placed_status(phase="Starting")), pods=[live(0), live(1)]))
    sample = Sample("trainer", NOW, step=400, step_count=400, checkpoint_seconds_sum=8.0, checkpoint_count=4)
    decision = ladder_pass(body, action(table, "write_rank_table").table,
                           [said(0, "Started", resumed_from=0), said(1, "Started", resumed_from=0)], telemetry=sample)
    interval = decision.status["checkpointInterval"]
    optimum = checkpointing.daly_seconds(2.0, interval["mtbfSeconds"])
    assert interval["saveSeconds"] == 2.0 and interval["everySteps"] == round(optimum / 0.5)
    assert interval["fromStep"] == 400 + 120  # a minute ahead at 0.5 s a step
    told = action(decision, "signal_launchers")
    assert json.loads(told.checkpoint) == {"everySteps": interval["everySteps"], "fromStep": 520,
                                         "previousEverySteps": 100}  # what a process started before 520 saves at
    from ascend_hybrid.spec.api import AscendHybridJobStatus

    AscendHybridJobStatus.model_validate(decision.status)  # what the CRD keeps: every key declared
    fixed = decide(observe(job(status=status), pods=[live(0), live(1)], rank_table=action(table, "write_rank_table").table))
    assert "checkpointInterval" not in fixed.status  # a job with its own interval has none


def test_a_pod_lost_with_its_node_is_replaced_alone_and_the_others_restart_in_place():
    from ascend_hybrid.gang.placement import Placement
    from ascend_hybrid.reconcile.placement_record import record_replacement

    body, table = running_job()
    lost = {"node-a": node_object("node-a"), "node-b": node_object("node-b", ready=False, since=NOW - timedelta(seconds=40))}
    heard = [said(0, "Started"), said(1, "Started")]
    decision = ladder_pass(body, table, heard, nodes=lost)
    assert action(decision, "delete_pods") == DeletePods(("demo-a1-1",), force=True)  # its kubelet is gone
    placing = action(decision, "place_replacement")
    assert placing.index == 1 and placing.request.excluded_nodes == {"node-b"} and placing.request.pod_count == 1
    assert placing.request.near_nodes == {"node-a"}  # pod 0's node: the replacement joins its rack if it can
    assert action(decision, "signal_launchers").generation == 1
    status = decision.status
    assert status["recovery"] == {"generation": 1, "rung": "ReplacePod", "replacing": 1}
    assert status["recoveries"][0]["rungs"] == ["ReplacePod"] and status["recoveries"][0]["cause"] == "NodeNotReady"
    assert (status["attempt"], status["restarts"], status["disruptions"]) == (1, 1, 1)
    assert status["avoidedNodes"] == ["node-b"]
    # the shell placed it (placement_record.record_replacement) on node-c
    placed = applied(record_replacement, status, 1, Placement(ok=True, nodes=("node-c",)), NOW).status
    assert placed["placement"]["nodes"] == ["node-a", "node-c"]
    nodes = {**lost, "node-c": node_object("node-c")}

    # the old pod still terminating on the lost node: no new failure, the pass waits
    going = live(1)
    going["metadata"]["deletionTimestamp"] = "2026-11-29T12:00:01Z"
    waiting = ladder_pass(job(status=placed), table, heard, pods=[live(0), going], nodes=nodes,
                          now=NOW + timedelta(seconds=2))
    assert waiting.status["phase"] == "Restarting" and "waiting for the old pod" in waiting.status["message"]
    assert "delete_pods" not in kinds(waiting) and len(waiting.status["recoveries"]) == 1

    # gone: the pod is made again at index 1 on node-c, not taken for a deleted pod
    again = ladder_pass(job(status=placed), table, heard, pods=[live(0)], nodes=nodes, now=NOW + timedelta(seconds=3))
    (created,) = action(again, "create_pods").pods
    assert created.node == "node-c" and created.manifest["metadata"]["name"] == "demo-a1-1"
    assert len(again.status["recoveries"]) == 1 and again.status["attempt"] == 1

    # every pod runs again and the launchers step: Recovered by ReplacePod
    back = live(1, node="node-c")
    back["metadata"]["uid"] = "uid-new"
    from ascend_hybrid.diagnosis.recovery import LauncherReport

    stepped = NOW + timedelta(seconds=30)
    reports = [said(0, "Stepping", 1, at=stepped, resumed_from=8, step=9),
               ("demo-a1-1", LauncherReport("uid-new", 1, "Started", time=stepped, resumed_from=8))]
    observed = dataclasses.replace(observe(job(status=again.status), pods=[live(0), back], rank_table=None,
                                           nodes=nodes, now=stepped, launcher_generation=1),
                                   launchers=dict(reports))
    done = decide(observed)
    table_written = action(done, "write_rank_table").table  # rewritten for the new server
    assert table_written["status"] == "completed"
    record = done.status["recoveries"][0]
    assert (record["outcome"], record["recoveredBy"]) == ("Recovered", "ReplacePod")
    assert done.status["recovery"] == {"generation": 1} and done.status["phase"] == "Running"


def test_a_replacement_no_node_fits_restarts_the_gang():
    from ascend_hybrid.gang.placement import Placement
    from ascend_hybrid.reconcile.placement_record import record_replacement

    body, table = running_job()
    lost = {"node-a": node_object("node-a"), "node-b": node_object("node-b", ready=False, since=NOW - timedelta(seconds=40))}
    status = ladder_pass(body, table, [said(0, "Started"), said(1, "Started")], nodes=lost).status
    unplaced = applied(record_replacement, status, 1, Placement(ok=False, reason="0/2 nodes fit"), NOW).status
    assert unplaced["recovery"]["unplaced"] == "0/2 nodes fit"
    decision = ladder_pass(job(status=unplaced), table, [said(0, "Started", 1)], pods=[live(0)], nodes=lost,
                           now=NOW + timedelta(seconds=2))
    assert action(decision, "delete_pods").names == ("demo-a1-0",)
    assert decision.status["recoveries"][0]["rungs"] == ["ReplacePod", "RestartGang"]
    assert "no node fits the replacement of pod index 1: 0/2 nodes fit" in decision.status["recoveries"][0]["why"]
    assert decision.status["attempt"] == 2 and "replacing" not in decision.status["recovery"]


def test_a_queued_job_that_loses_a_node_restarts_its_gang_as_a_new_pod_group_not_by_replacing_the_pod():
    """Kueue's pod groups are not retriable (kueue.py): a replacement would join a group whose Workload a lost pod
    ended, so a queued job goes to RestartGang even with every launcher heard."""
    _, table = running_job()
    queued = job({"scheduling": {"queue": "team"}}, status=placed_status(phase="Running"))
    lost = {"node-a": node_object("node-a"), "node-b": node_object("node-b", ready=False, since=NOW - timedelta(seconds=40))}
    decision = ladder_pass(queued, table, [said(0, "Started"), said(1, "Started")], nodes=lost)
    assert "place_replacement" not in kinds(decision)
    assert sorted(action(decision, "delete_pods").names) == ["demo-a1-0", "demo-a1-1"]
    record = decision.status["recoveries"][0]
    assert record["rungs"] == ["RestartGang"] and "ReplacePod is not taken under Kueue" in record["why"]
    assert decision.status["attempt"] == 2


def test_a_deleted_pod_of_a_job_without_launchers_still_restarts_the_gang():
    body, table = running_job()
    decision = ladder_pass(body, table, [], pods=[live(0)])
    assert decision.status["attempt"] == 2 and decision.status["recoveries"][0]["rungs"] == ["RestartGang"]
    assert "no launcher of this attempt ever reported" in decision.status["recoveries"][0]["why"]


def test_an_escalating_failure_adds_its_own_suspect_to_the_nodes_the_replacement_avoids():
    body, table = running_job()
    restarting = failed_rank_one(body, table).status
    later = NOW + timedelta(seconds=5)
    decision = ladder_pass(job(status=restarting), table,
                           [said(0, "Started", 1),
                            said(1, "Failed", 1, cause="HCCLExecTimeout", rank=1, at=later)], now=later)
    placing = action(decision, "place_replacement")
    assert placing.request.excluded_nodes == {"node-b"}  # an HCCL timeout suspects the failed rank's node
    assert decision.status["recoveries"][0]["avoid"] == ["node-b"]


def test_every_live_pod_of_an_attempt_goes_in_one_collection_delete_and_the_rest_one_by_one():
    """One call for a whole attempt (a 128-pod restart was 128 deletes); a pod alone, some pods of an attempt whose
    others stay, or a pod already going are deleted by name, or not at all."""
    first = [pod(0).build(), pod(1).build()]
    second = [pod(0, attempt=2).build(), pod(1, attempt=2).build()]
    going = pod(1, attempt=2).deleting(NOW).build()
    assert state.doomed_pods(first, first + second) == [state.DeletePods(("demo-a1-0", "demo-a1-1"), attempt=1,
                                                                          indexes=(0, 1))]
    assert state.doomed_pods(first + second[:1], first + second) == [
        state.DeletePods(("demo-a2-0",)), state.DeletePods(("demo-a1-0", "demo-a1-1"), attempt=1, indexes=(0, 1))]
    assert state.doomed_pods([second[0], going], [second[0], going]) == [state.DeletePods(("demo-a2-0",))]
    assert state.doomed_pods(first[:1], first[:1]) == [state.DeletePods(("demo-a1-0",))], "one pod: by name"
    assert state.doomed_pods([], first) == []


def test_a_pass_deletes_a_lone_pod_and_a_whole_attempt_in_one_step():
    """Pass.delete hands each of doomed_pods' deletes to the decision: a pod of a new attempt whose sibling stays and
    every pod of the old one are two actions in one call (they once went to Decision.act as two arguments)."""
    first = [pod(0).build(), pod(1).build()]
    second = [pod(0, attempt=2).build(), pod(1, attempt=2).build()]
    step = state.Pass(observe(demo().status(placed_status(attempt=2, phase="Running")).build(), pods=first + second))
    step.delete(first + second[:1])
    assert step.d.actions == [state.DeletePods(("demo-a2-0",)),
                              state.DeletePods(("demo-a1-0", "demo-a1-1"), attempt=1, indexes=(0, 1))]


def test_a_pod_the_kubelet_gave_chips_from_both_910a_rings_never_gets_a_table():
    """Kubelet mode lets the kubelet choose the chips: a 4-chip 910A pod with chips 2-5 would make HCCL fail at the
    job's start. The table stays initializing, the attempt's pods go and the gang is placed anew (no restart
    counted), a Warning naming the pod and its chips."""
    body = (JobBuilder("demo", namespace="ns").uid("uid-1").created("2026-11-29T11:59:00Z")
            .parallelism(data=2, tensor=4).per_pod(4).section("npu", chip="910A").backoff_limit(2).build())
    status = decide(observe(body)).status
    status = applied(record_placement, status, parse(body), Placement(ok=True, nodes=NODES), NOW, 1,
                     {n: "rack-0" for n in NODES}).status
    status.update(phase="Starting")
    body["status"] = status
    split = pod(1).devices([2, 3, 4, 5]).build()
    decision = decide(observe(body, pods=[pod(0).build(), split]))
    assert "write_rank_table" not in kinds(decision)
    assert decision.status["attempt"] == 2 and decision.status["restarts"] == 0
    message = (f"demo-a1-1 got chips 2,3,4,5 on {NODES[1]} from both HCCS rings (the kubelet chose them; HCCL needs "
               "a pod of ≤ 4 910A chips inside one ring); placing anew")
    assert decision.status["message"] == message
    assert ("Warning", "ChipsSplitAcrossRings") in events(decision)
    assert action(decision, "delete_pods").names == ("demo-a1-0", "demo-a1-1")
    inside = decide(observe(body, pods=both()))  # chips 0-3 each: one ring
    assert action(inside, "write_rank_table").table["status"] == "completed"


def test_a_pod_the_volcano_mode_plugin_could_not_allocate_is_placed_anew_without_a_restart():
    """UnexpectedAdmissionError ("not get valid pod"): the kubelet never ran a container, so it is no training
    failure: the gang is placed anew as after any refusal at admission."""
    refused = (PodBuilder("demo", 1, namespace="ns").attempt(1).created(NOW).node(NODES[1]).phase("Failed")
               .status(reason="UnexpectedAdmissionError",
                       message="Allocate failed due to not get valid pod, which is unexpected").build())
    decision = decide(observe(demo().status(placed_status(phase="Starting")).build(), pods=[pod(0).build(), refused]))
    assert decision.status["attempt"] == 2 and decision.status["restarts"] == 0
    assert ("Warning", "RefusedByNode") in events(decision)
    assert "UnexpectedAdmissionError: Allocate failed due to not get valid pod" in decision.status["message"]


def test_a_placement_kept_out_by_the_device_plugins_mode_says_so_in_its_reason():
    body = demo().build()
    status = decide(observe(body)).status
    held = Placement(ok=False, reason="needs 2 pods …: 2 run the device plugin in Volcano mode (…)",
                     cause="DevicePluginVolcanoMode")
    outcome = applied(record_placement, status, parse(body), held, NOW, 1, {})
    assert events(outcome) == [("Warning", "DevicePluginVolcanoMode")]
    placed = next(c for c in outcome.status["conditions"] if c["type"] == "Placed")
    assert (placed["status"], placed["reason"]) == ("False", "DevicePluginVolcanoMode")


def test_a_pod_whose_endpoint_did_not_answer_is_named_in_metrics_available_without_an_event():
    from ascend_hybrid.monitoring.progress import from_trainer_text
    body = demo().section("training", steps=200).status(placed_status(phase="Running")).build()
    completed = next(a.table for a in decide(observe(body, pods=both())).actions if isinstance(a, WriteRankTable))
    sample = from_trainer_text({0: "ascend_trainer_loss 2.5\n"}, NOW, {0: "job-a1-0"},
                               unread=("job-a1-1: 127.0.0.2:9400: timed out",))
    first = decide(Observed(**{**observe(body, pods=both(), rank_table=completed).__dict__, "telemetry": sample}))
    metrics = next(c for c in first.status["conditions"] if c["type"] == "MetricsAvailable")
    assert (metrics["status"], metrics["reason"]) == ("True", "PartlyRead") and "job-a1-1" in metrics["message"]
    assert first.status["training"]["loss"] == 2.5 and not [e for e in events(first) if "Metrics" in e[1]]


def test_a_metrics_page_with_refused_lines_is_read_and_says_so_once():
    from ascend_hybrid.monitoring.progress import from_trainer_text
    body = demo().section("training", steps=200).status(placed_status(phase="Running")).build()
    completed = next(a.table for a in decide(observe(body, pods=both())).actions if isinstance(a, WriteRankTable))
    page = "ascend_trainer_step abc\nascend_trainer_loss 2.5\n"
    sample = from_trainer_text({0: page}, NOW, {0: "job-a1-0"})
    first = decide(Observed(**{**observe(body, pods=both(), rank_table=completed).__dict__, "telemetry": sample}))
    assert first.status["training"]["loss"] == 2.5 and first.status["phase"] == "Running"
    metrics = next(c for c in first.status["conditions"] if c["type"] == "MetricsAvailable")
    assert (metrics["status"], metrics["reason"]) == ("True", "PartlyRefused") and "job-a1-0 line 1" in metrics["message"]
    assert [e for e in events(first) if e[1] == "MetricsRefused"] == [("Warning", "MetricsRefused")]
    again = decide(Observed(**{**observe(demo().section("training", steps=200).status(first.status).build(),
                                         pods=both(), rank_table=completed).__dict__, "telemetry": sample}))
    assert not [e for e in events(again) if e[1] == "MetricsRefused"]  # one event, not one per reading
