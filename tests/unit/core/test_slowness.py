"""A slow node (monitoring/slowness.py and reconcile/slowness_steps.py, pure): named from its ranks' compute against
their peers', confirmed over samples, never in a healthy noisy job nor for a pipeline stage that always does more
work; acted on by spec.runPolicy.slowness at the next checkpoint — ReplacePod of its pod, the node avoided, an
incident with cause SlowNode — or only reported."""

from __future__ import annotations

import math
import random
from datetime import timedelta

import pytest

from ascend_hybrid.contracts.conditions import condition, timestamp
from ascend_hybrid.monitoring import slowness
from ascend_hybrid.monitoring.progress import RankReading, Sample
from ascend_hybrid.reconcile import status_edge
from ascend_hybrid.spec.api import AscendHybridJobStatus, Slowness, SlownessStatus, SlowNodeRecord
from support.reconcile_passes import NOW, action, events, job, kinds, placed, rank_table, running_pass

SPEC = Slowness()


def readings(ranks: int, per_pod: int, compute: float = 0.2, comm: float = 0.05, jitter: float = 0.05,
             slow: dict[int, float] | None = None, rng: random.Random | None = None) -> tuple[RankReading, ...]:
    """A synchronous job's recent steps: every rank's step is the slowest rank's compute plus the collective; each
    rank's own compute is its share, the rest it waits."""
    rng = rng or random.Random(0)
    own = {rank: compute * (slow or {}).get(rank // per_pod, 1.0) * (1 + jitter * (2 * rng.random() - 1))
           for rank in range(ranks)}
    step = max(own.values()) + comm
    return tuple(RankReading(f"p{rank // per_pod}", rank, step, own[rank], step - own[rank]) for rank in range(ranks))


def nodes_of(ranks: int, per_pod: int) -> dict[str, str]:
    return {f"p{pod}": f"node-{pod}" for pod in range(ranks // per_pod)}


def published(state: SlownessStatus | None) -> dict:
    """status.slowness as the operator writes it ({} for none)."""
    return status_edge.dump(status_edge.Parsed(AscendHybridJobStatus(slowness=state))).get("slowness", {})


def run(samples, ranks=1024, per_pod=8, stage_size=None, healthy=None, spec=SPEC):
    state, changes = None, []
    stage_size = stage_size or ranks
    for index, ranked in enumerate(samples):
        sample = Sample("trainer", NOW + timedelta(seconds=15 * index), step=10 * index, ranks=ranked)
        folded = slowness.fold(state, sample, nodes_of(ranks, per_pod), lambda rank: rank // stage_size, spec, healthy)
        if folded is None:
            continue
        state, change = folded
        if change is not None:
            changes.append((index, change))
    return state, changes


def test_a_node_at_one_and_a_half_times_the_compute_is_named_after_three_samples_with_its_pod_and_ranks():
    rng = random.Random(1)
    samples = [readings(1024, 8, rng=rng) for _ in range(5)] + [
        readings(1024, 8, slow={77: 1.5}, rng=rng) for _ in range(5)]
    state, changes = run(samples, healthy=0.26)
    (index, change), = changes
    assert index == 7 and change.on and change.reason == "SlowCompute"  # the third slow sample
    assert "node node-77 is slow" in change.message and "1.5" in change.message
    SlownessStatus.model_validate(published(state))
    found = published(state)["confirmed"]
    assert (found["node"], found["pods"], found["ranks"]) == ("node-77", ["p77"], list(range(616, 624)))
    assert found["ratio"] == pytest.approx(1.5, rel=0.06) and found["slowdown"] > 1.1


def test_a_healthy_noisy_job_names_no_node_in_a_long_run():
    rng = random.Random(2)
    state, changes = run([readings(1024, 8, jitter=0.10, rng=rng) for _ in range(1000)])  # 4 hours of samples
    assert changes == [] and not state.suspects and "suspects" in published(state)


def test_a_pipeline_stage_that_always_works_more_is_not_a_slow_node():
    """Four stages of 256 ranks, the last with the output layer's extra work: its ranks are compared with each
    other, not with the first stages'."""
    rng = random.Random(3)
    samples = [readings(1024, 8, slow={pod: 1.4 for pod in range(96, 128)}, rng=rng) for _ in range(10)]
    _, staged = run(samples, stage_size=256)
    assert staged == []
    last = slowness.scores(samples[0], nodes_of(1024, 8), lambda rank: rank // 256)["node-100"]
    flat = slowness.scores(samples[0], nodes_of(1024, 8), lambda rank: 0)["node-100"]
    assert last.ratio == pytest.approx(1.0, abs=0.05) and flat.ratio == pytest.approx(1.4, rel=0.05)


def test_two_ranks_compare_with_each_other_and_the_condition_clears_once_the_node_keeps_pace():
    rng = random.Random(4)
    before = [readings(2, 1, rng=rng) for _ in range(4)]  # the first samples learn each node's usual ratio
    slow = [readings(2, 1, slow={1: 2.0}, rng=rng) for _ in range(4)]
    healthy = [readings(2, 1, rng=rng) for _ in range(4)]
    state, changes = run(before + slow + healthy, ranks=2, per_pod=1)
    assert [(index, change.on) for index, change in changes] == [(6, True), (10, False)]
    assert "confirmed" not in published(state)


@pytest.mark.parametrize("per_sample", [0.05, 0.1, 0.2])
def test_a_slowdown_that_comes_in_over_many_samples_is_named_and_not_learned_as_the_nodes_usual(per_sample):
    """The trainer's figures are means over a window of steps, so a node that turns slow at once shows a ratio that
    climbs sample by sample. A usual ratio that followed it raised the threshold as fast: a node at 13× its peers
    went unnamed (the real slowed-pod test under load, CI of stop 58). Samples more than halfway to the threshold
    do not move the usual ratio."""
    rng = random.Random(7)
    spec = Slowness(compute_factor=2.0, confirm_samples=3)
    factors = [1.0] * 6 + [1 + per_sample * step for step in range(1, 75)]
    state, changes = run([readings(2, 1, slow={1: factor}, rng=rng) for factor in factors], ranks=2, per_pod=1,
                         spec=spec)
    (index, change), *_ = changes
    assert change.on and "node node-1 is slow" in change.message
    assert factors[index] < 3.0, factors[index]  # named soon after it passes 2× its peers
    assert state.baselines.get("node-1", 1.0) < 1.2


def test_a_sample_without_a_nodes_figures_leaves_its_usual_ratio_where_it_was():
    """A node always 1.3× its peers whose endpoint misses readings: the samples without it do not pull its usual
    ratio back to 1, which would name it slow once it is read again."""
    rng = random.Random(8)
    spec = Slowness(compute_factor=1.2, confirm_samples=3)

    def unread(ranked):  # pod p3's endpoint did not answer
        return tuple(reading for reading in ranked if reading.pod != "p3")
    samples = [readings(8, 1, slow={3: 1.3}, jitter=0.01, rng=rng) for _ in range(60)]
    samples = samples[:4] + [sample if index % 4 == 0 else unread(sample) for index, sample in enumerate(samples[4:])]
    state, changes = run(samples, ranks=8, per_pod=1, spec=spec)
    assert changes == [] and published(state)["baselines"]["node-3"] == pytest.approx(1.3, rel=0.05)


def test_a_followed_node_missing_from_a_few_samples_is_held_and_one_silent_longer_is_judged_not_found():
    """A throttled node's endpoint misses reads now and then: up to confirmSamples samples in a row without its
    figures neither advance, break nor clear its counts; more than that, and it counts as not found."""
    rng = random.Random(6)

    def unread(ranked):  # pod p1's endpoint did not answer
        return tuple(reading for reading in ranked if reading.pod != "p1")
    before = [readings(2, 1, rng=rng) for _ in range(4)]
    slow = [readings(2, 1, slow={1: 3.0}, rng=rng) for _ in range(8)]
    state, changes = run(before + [slow[0], unread(slow[1]), slow[2], unread(slow[3]), unread(slow[4]), slow[5]],
                         ranks=2, per_pod=1)
    assert [(index, change.on) for index, change in changes] == [(9, True)]  # the third sample that read it
    assert "node node-1 is slow" in changes[0][1].message and "unread" not in published(state)
    learned, _ = run(before, ranks=2, per_pod=1)
    pending = Sample("trainer", NOW + timedelta(hours=1), ranks=readings(2, 1, rng=rng))
    after, _ = slowness.fold(learned, pending, {"p0": "node-0", "p1": "node-1", "p2": ""}, lambda rank: 0, SPEC, None)
    assert "unread" not in published(after)  # a pod not bound to a node yet is no node to hold
    # confirmed, then silent for confirmSamples samples: held; one more, and the samples count toward clearing
    silent = [unread(readings(2, 1, slow={1: 3.0}, rng=rng)) for _ in range(2 * SPEC.confirm_samples)]
    state, changes = run(before + slow[:3] + silent, ranks=2, per_pod=1)
    assert [(index, change.on) for index, change in changes] == [(6, True), (6 + 2 * SPEC.confirm_samples, False)]
    SlownessStatus.model_validate(published(state))
    # a suspect silent longer than that starts again from its next reading
    state, changes = run(before + slow[:2] + silent[:SPEC.confirm_samples + 1] + slow[2:4], ranks=2, per_pod=1)
    assert changes == [] and published(state)["suspects"] == {"node-1": 2}


def test_a_node_that_was_always_slower_is_not_a_slow_node_until_it_slows_down_further():
    """Chips vary from machine to machine (Meta measured up to 14 % between GEMMs): a node 1.3× its peers from the
    job's start is its usual self, measured over the first samples; only a further slowdown of it counts."""
    rng = random.Random(5)
    usual = [readings(2, 1, slow={0: 1.3}, rng=rng) for _ in range(10)]
    _, quiet = run(usual, ranks=2, per_pod=1)
    assert quiet == []
    worse = [readings(2, 1, slow={0: 1.3 * 1.5}, rng=rng) for _ in range(4)]
    _, named = run(usual + worse, ranks=2, per_pod=1)
    assert [(index, change.on) for index, change in named] == [(12, True)]
    assert "node node-0 is slow" in named[0][1].message


def test_the_same_sample_twice_changes_nothing_and_a_sample_without_compute_is_not_scored():
    sample = Sample("trainer", NOW, ranks=readings(16, 8, slow={1: 2.0}))
    state, _ = slowness.fold(None, sample, nodes_of(16, 8), lambda rank: 0, SPEC, None)
    assert slowness.fold(state, sample, nodes_of(16, 8), lambda rank: 0, SPEC, None) is None
    whole = Sample("trainer", NOW + timedelta(seconds=1), ranks=(RankReading("p0", 0, 0.3), RankReading("p1", 8, 0.3)))
    assert slowness.fold(state, whole, nodes_of(16, 8), lambda rank: 0, SPEC, None) is None


# -- the policy, through decide() ------------------------------------------------------------------------------
REPLACE = {"training": {"steps": 100_000, "checkpoint": {"claimName": "ckpt", "everySteps": 50}},
           "runPolicy": {"slowness": {"action": "Replace"}}}


WARMUP = 3  # healthy samples before the node turns slow: they set each node's usual ratio


def demo_readings(slow_pod: int | None, jitter_seed: int) -> tuple[RankReading, ...]:
    """demo: DP 2 × TP 4 on two pods of 4 ranks (pod 0: ranks 0-3 on node-a, pod 1: ranks 4-7 on node-b)."""
    ranked = readings(8, 4, slow={slow_pod: 1.6} if slow_pod is not None else None, rng=random.Random(jitter_seed))
    return tuple(RankReading(f"demo-a1-{r.rank // 4}", r.rank, r.step_seconds, r.compute_seconds, r.wait_seconds)
                 for r in ranked)


def passes(spec, steps, slow_pod=1, healthy=0.25, status_extra=None, save_seconds=None, account_extra=None,
           saves=None):
    """Running passes, one sample each (every 15 s, at the given steps): the decisions. `save_seconds`: the trainer
    has timed one save of that length; `saves`: instead, its count of saves at each sample (2 s each);
    `account_extra`: more of the goodput account."""
    pace = {str(round(math.log(healthy) * 100)): 10_000}  # the job's steps so far, all at the healthy pace
    account = {"healthyStepSeconds": healthy, "pace": pace, "paceIntervals": 100, "mode": "running",
               "accountedAt": timestamp(NOW - timedelta(seconds=1)), "seconds": {}, **(account_extra or {})}
    status = placed(spec, startTime=timestamp(NOW - timedelta(hours=1)), goodputAccount=account,
                    **(status_extra or {}))
    body, table = job(spec, status=status), rank_table(spec)
    decisions = []
    for index, step in enumerate(steps):
        moment = NOW + timedelta(seconds=15 * index)
        count = saves[index] if saves is not None else None if save_seconds is None else 1
        seconds = 2.0 * saves[index] if saves is not None else save_seconds
        sample = Sample("trainer", moment, step=step, step_count=step,
                        ranks=demo_readings(slow_pod if index >= WARMUP else None, index),
                        checkpoint_seconds_sum=seconds, checkpoint_count=count)
        decision = running_pass(body, table, now=moment, telemetry=sample)
        decisions.append(decision)
        body = job(spec, status=decision.status)
    return decisions


def test_replace_waits_for_the_next_checkpoint_then_replaces_only_the_slow_pod_avoiding_its_node():
    decisions = passes(REPLACE, [80, 90, 100, 110, 130, 140, 145, 160])
    confirmed = decisions[5]
    assert condition(confirmed.status, "SlowNode")["status"] == "True"
    assert ("Warning", "SlowNode") in events(confirmed) and "PlaceReplacement" not in kinds(confirmed)
    assert "waiting for the checkpoint of step 150" in confirmed.status["slowness"]["confirmed"]["decision"]
    assert "PlaceReplacement" not in kinds(decisions[6])  # step 145: the checkpoint of 150 not passed yet
    acted = decisions[7]
    placing = action(acted, "PlaceReplacement")
    assert placing.index == 1 and "node-b" in placing.request.excluded_nodes
    assert action(acted, "DeletePods").names == ("demo-a1-1",)
    record = acted.status["recoveries"][-1]
    assert (record["cause"], record["rungs"], record["counted"], record["node"]) == (
        "SlowNode", ["ReplacePod"], False, "node-b")
    assert acted.status["avoidedNodes"] == ["node-b"] and acted.status["slowNodes"][-1]["node"] == "node-b"
    assert acted.status["phase"] == "Restarting" and acted.status.get("restarts", 0) == 0
    AscendHybridJobStatus.model_validate(acted.status)  # what the CRD keeps: every key declared


def test_report_only_names_the_node_and_takes_no_action():
    decisions = passes({**REPLACE, "runPolicy": {"slowness": {"action": "Report"}}},
                       [80, 90, 100, 110, 130, 140, 160, 210])
    assert condition(decisions[-1].status, "SlowNode")["status"] == "True"
    assert not any("PlaceReplacement" in kinds(d) or d.status.get("avoidedNodes") for d in decisions)


def test_a_slowdown_under_the_threshold_or_past_the_hourly_cap_is_only_reported():
    mild = passes(REPLACE, [10, 40, 70, 100, 130, 160, 190], healthy=0.5)  # 30 steps in 15 s: at that pace
    assert "minSlowdown" in mild[-1].status["slowness"]["confirmed"]["decision"]
    earlier = {"cause": "SlowNode", "decided": timestamp(NOW - timedelta(minutes=20)), "rungs": ["ReplacePod"],
               "outcome": "Recovered", "seconds": 30.0}
    capped = passes(REPLACE, [80, 90, 100, 110, 130, 140, 160], status_extra={"recoveries": [earlier]})
    assert "maxActionsPerHour=1" in capped[-1].status["slowness"]["confirmed"]["decision"]
    assert not any("PlaceReplacement" in kinds(d) for d in mild + capped)


def test_an_action_that_costs_more_than_the_steps_left_lose_is_not_taken():
    short = {**REPLACE, "training": {"steps": 170, "checkpoint": {"claimName": "ckpt", "everySteps": 50}}}
    decisions = passes(short, [80, 90, 100, 110, 130, 140, 160])
    assert "less than 2× what an action costs" in decisions[-1].status["slowness"]["confirmed"]["decision"]


def test_before_any_recovery_an_action_is_weighed_against_the_jobs_own_start():
    """The same short job: with no recovery in its ledger, an action costs what the job's own start took (its
    goodput account's startsAndRestarts) — a quick start makes the steps left worth it, a slow one does not; 120 s
    before the start is measured."""
    short = {**REPLACE, "training": {"steps": 170, "checkpoint": {"claimName": "ckpt", "everySteps": 50}}}

    def decision(started: float | None) -> str:
        account = {"seconds": {"startsAndRestarts": started}} if started is not None else {}
        confirmed = passes(short, [80, 90, 100, 110, 130, 140], account_extra=account)[-1]
        return confirmed.status["slowness"]["confirmed"]["decision"]

    assert "waiting for the checkpoint of step 150" in decision(5.0)
    assert "less than 2× what an action costs (60s)" in decision(60.0)
    assert "less than 2× what an action costs (120s)" in decision(None)


def test_a_checkpoint_far_away_is_asked_for_and_the_pod_replaced_once_training_passed_it():
    """The interval's next checkpoint is minutes away at this slowdown: the trainer is asked (saveAt on the
    launchers' channel) for one 15 s ahead, and the pod is replaced once training passed it."""
    import json

    far = {**REPLACE, "training": {"steps": 100_000, "checkpoint": {"claimName": "ckpt", "everySteps": 1000}}}
    decisions = passes(far, [80, 90, 100, 110, 130, 140, 150, 160])
    asked = decisions[5]
    found = asked.status["slowness"]["confirmed"]
    assert found["decision"].startswith("asked the trainer for a checkpoint at step ") and found["saveAt"] > 140
    told = json.loads(action(asked, "SignalLaunchers").checkpoint)
    assert told == {"everySteps": 1000, "fromStep": 0, "saveAt": found["saveAt"]}
    assert "PlaceReplacement" not in kinds(asked)
    acted = next(d for d in decisions[6:] if "PlaceReplacement" in kinds(d))
    assert acted.status["recoveries"][-1]["cause"] == "SlowNode"
    last = [a for a in acted.actions if type(a).__name__ == "SignalLaunchers"][-1]  # what the channel holds after
    assert last.generation == 1 and last.checkpoint is None  # asked no more: its own interval, nothing to say


def test_a_save_the_trainer_finished_after_the_confirmation_is_the_checkpoint_the_action_waits_for():
    """The step asked for is still ahead, but the lead trainer finished a save since the node was confirmed (its
    count of saves grew): training passed a checkpoint, so the pod is replaced at once."""
    far = {**REPLACE, "training": {"steps": 100_000, "checkpoint": {"claimName": "ckpt", "everySteps": 1000}}}
    steps = [80, 90, 100, 110, 130, 140, 150]
    waited = passes(far, steps, saves=[3] * 7)
    assert waited[5].status["slowness"]["confirmed"]["savesAt"] == 3
    assert "waiting for the checkpoint asked for" in waited[6].status["slowness"]["confirmed"]["decision"]
    assert "PlaceReplacement" not in kinds(waited[6])
    saved = passes(far, steps, saves=[3] * 6 + [4])
    assert "PlaceReplacement" in kinds(saved[6]) and saved[6].status["recoveries"][-1]["cause"] == "SlowNode"


def test_a_checkpoint_is_asked_for_only_when_waiting_at_the_slowdown_loses_more_than_a_save_costs():
    """The same distance to the interval's checkpoint: asked for when the trainer's measured save is cheap, waited
    for when one save costs more than the wait loses at this slowdown."""
    far = {**REPLACE, "training": {"steps": 100_000, "checkpoint": {"claimName": "ckpt", "everySteps": 300}}}
    cheap = passes(far, [80, 90, 100, 110, 130, 140], save_seconds=1.0)[-1].status["slowness"]["confirmed"]
    dear = passes(far, [80, 90, 100, 110, 130, 140], save_seconds=3600.0)[-1].status["slowness"]["confirmed"]
    assert cheap["decision"].startswith("asked the trainer for a checkpoint") and "saveAt" in cheap
    assert "loses more than a save's 1s" in cheap["decision"]
    assert dear["decision"] == "waiting for the checkpoint of step 300 (training.checkpoint.everySteps=300)"
    assert "saveAt" not in dear


def test_new_trainer_processes_are_learned_again_before_a_node_is_named():
    """After a rank generation (new processes: compilation, warm-up), the first samples only learn again."""
    rng = random.Random(6)
    samples = [readings(2, 1, rng=rng) for _ in range(4)] + [readings(2, 1, slow={1: 2.0}, rng=rng) for _ in range(6)]
    state, named = None, []
    for index, ranked in enumerate(samples):
        sample = Sample("trainer", NOW + timedelta(seconds=15 * index), step=10 * index, ranks=ranked)
        epoch = "1/0" if index < 4 else "1/1"  # the slow node's ranks start with a new generation
        state, change = slowness.fold(state, sample, nodes_of(2, 1), lambda rank: 0, SPEC, None, None, epoch)
        named += [index] if change is not None and change.on else []
    assert named == [9]  # three samples learning, then three in a row
    for index in range(10, 13):  # a restart (another generation): its processes settle for three samples
        restarted = Sample("trainer", NOW + timedelta(seconds=15 * index), step=100, ranks=readings(2, 1, rng=rng))
        state, change = slowness.fold(state, restarted, nodes_of(2, 1), lambda rank: 0, SPEC, None, None, "1/2")
        assert change is None and state.confirmed is not None and state.confirmed.node == "node-1"  # settling: kept


def test_a_node_found_slow_in_two_jobs_or_twice_is_marked_for_the_administrator_and_once_is_not():
    once = [SlowNodeRecord(node="n1", since="2026-12-08T00:10:00Z", ratio=1.5)]
    twice = [SlowNodeRecord(node="n2", since="2026-12-08T00:10:00Z", ratio=1.4),
             SlowNodeRecord(node="n2", since="2026-12-08T03:00:00Z", ratio=1.6)]
    marked = slowness.nodes_to_mark({"a/one": once, "a/two": twice, "b/three": once, "b/none": []})
    assert sorted(marked) == ["n1", "n2"]
    assert marked["n1"].startswith("found slow 2 times: a/one at 2026-12-08T00:10:00Z (1.5× its peers' compute)")
    assert slowness.nodes_to_mark({"a/one": once}) == {}


def test_shrink_drops_the_slow_nodes_pod_and_keeps_the_others_in_a_smaller_data_degree():
    """DP 8 on two pods of 4 ranks: pod 1's node slow, Shrink keeps pod 0 as DP 4 (the global batch of 8 in two
    micro-batches), nothing placed; a job whose checkpoint is sliced per rank (TP 4) cannot shrink: it is replaced."""
    dp = {"parallelism": {"data": 8, "tensor": 1}}
    shrink = {**REPLACE, **dp, "runPolicy": {"slowness": {"action": "Shrink"}}, "elastic": {"minData": 1}}
    acted = next(d for d in passes(shrink, [80, 90, 100, 110, 130, 140, 145, 160]) if d.status.get("slowNodes"))
    record = acted.status["recoveries"][-1]
    assert (record["cause"], record["rungs"], record["counted"], record["podsKept"]) == ("SlowNode", ["Shrink"], False, 1)
    assert acted.status["elastic"]["data"] == 4 and acted.status["attempt"] == 2
    assert acted.status["recovery"]["kept"] == ["demo-a1-0"]  # pod 0 goes on as pod 0 of the smaller world
    assert "PlaceReplacement" not in kinds(acted) and "node-b" in acted.status["avoidedNodes"]
    AscendHybridJobStatus.model_validate(acted.status)
    sliced = {**REPLACE, "runPolicy": {"slowness": {"action": "Shrink"}}, "elastic": {"minData": 1}}
    replaced = next(d for d in passes(sliced, [80, 90, 100, 110, 130, 140, 145, 160]) if d.status.get("slowNodes"))
    assert replaced.status["recoveries"][-1]["rungs"] == ["ReplacePod"] and "PlaceReplacement" in kinds(replaced)
    assert "no smaller data degree" in replaced.status["slowness"]["confirmed"]["decision"]
