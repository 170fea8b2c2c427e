"""The simulated telemetry's pure side: which pods get metrics, the figures over time and by annotation, the
Prometheus text (read back with the operator's own parser), and the scrape config and target lists."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from ascend_hybrid.devcluster.telemetry import figures
from ascend_hybrid.devcluster.telemetry import scrape as scrapeconfig
from ascend_hybrid.monitoring.progress import from_trainer_text
from support.builders import telemetry_pod as pod_manifest

STARTED = "2026-11-29T17:00:00Z"
T0 = datetime(2026, 11, 29, 17, 0, tzinfo=UTC).timestamp()


def sim(**options) -> figures.SimPod:
    pod = figures.sim_pod(pod_manifest(**options))
    assert pod is not None
    return pod


def samples(text: bytes) -> dict[tuple[str, tuple], float]:
    found = {}
    for family in text_string_to_metric_families(text.decode()):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


# Which pods ----------------------------------------------------------------------------------------------------
def test_a_running_pod_with_chips_is_simulated_with_its_identity():
    pod = sim()
    assert (pod.namespace, pod.name, pod.ip, pod.node, pod.container, pod.chips) == \
        ("ns", "job-a1-0", "127.16.0.7", "node-002", "ascend", (0, 1))
    assert pod.started_at == T0 and pod.trainer_address == "127.16.0.7:9400" and pod.serves_trainer_metrics
    assert pod.training_key == "ns/job/1"


@pytest.mark.parametrize("change", [dict(phase="Pending"), dict(phase="Succeeded"), dict(chips=()), dict(ip=None),
                                    dict(started=None)])
def test_pods_not_running_with_chips_and_an_address_get_nothing(change):
    assert figures.sim_pod(pod_manifest(**change)) is None


def test_a_terminating_pod_gets_nothing():
    manifest = pod_manifest()
    manifest["metadata"]["deletionTimestamp"] = STARTED
    assert figures.sim_pod(manifest) is None


def test_a_pod_running_the_real_trainer_is_listed_but_not_served():
    pod = sim(annotations={figures.RUNTIME_ANNOTATION: "process"})
    assert not pod.serves_trainer_metrics
    assert scrapeconfig.trainer_targets([pod])[0]["targets"] == ["127.16.0.7:9400"]


# Figures --------------------------------------------------------------------------------------------------------
def test_steps_follow_the_pinned_step_time():
    pod = sim(annotations={figures.STEP_SECONDS_ANNOTATION: "0.5"})
    assert [figures.trainer_figures(pod, T0 + t).step for t in (0, 0.49, 0.5, 10, 60)] == [0, 0, 1, 20, 120]
    trained = figures.trainer_figures(pod, T0 + 10)
    assert trained.step_seconds == 0.5 and trained.samples_total == 20 * figures.SAMPLES_PER_STEP
    assert trained.tokens_per_second == pytest.approx(figures.TOKENS_PER_STEP / 0.5, rel=0.03)


def test_the_clock_before_the_start_gives_step_zero():
    assert figures.trainer_figures(sim(), T0 - 30).step == 0


def test_loss_starts_near_ln_vocab_and_falls_towards_its_floor():
    key = "ns/job/1"
    losses = [figures.loss_at(key, step) for step in range(0, 5001, 50)]
    assert losses[0] == pytest.approx(figures.INITIAL_LOSS, rel=0.03)
    assert 1.7 < losses[-1] < 2.5
    early = [figures.loss_at(key, step) for step in range(0, 2000, 10)]  # well above the floor: the trend wins
    window_means = [sum(early[i:i + 40]) / 40 for i in range(0, len(early), 40)]
    assert window_means == sorted(window_means, reverse=True)


@given(st.integers(min_value=0, max_value=10 ** 7))
def test_loss_is_positive_and_below_its_start(step):
    assert 0 < figures.loss_at("ns/job/1", step) <= figures.INITIAL_LOSS * 1.02


def test_pods_of_one_job_attempt_report_the_same_training_figures():
    first, second = sim(name="job-a1-0"), sim(name="job-a1-1", ip="127.16.0.8")
    now = T0 + 123.4
    one, two = figures.trainer_figures(first, now), figures.trainer_figures(second, now)
    assert (one.step, one.loss, one.tokens_per_second) == (two.step, two.loss, two.tokens_per_second)
    other = figures.trainer_figures(sim(job="other"), now)
    assert (other.step_seconds, other.loss) != (one.step_seconds, one.loss)


def test_figures_are_deterministic():
    assert figures.trainer_figures(sim(), T0 + 77) == figures.trainer_figures(sim(), T0 + 77)


def test_pinned_utilization_is_exact_on_every_chip_at_every_moment():
    pod = sim(annotations={figures.UTILIZATION_ANNOTATION: "73"})
    assert {figures.chip_utilization(pod, chip, T0 + t) for chip in (0, 1) for t in range(0, 120, 7)} == {73.0}


@pytest.mark.parametrize("raw, expected", [("150", 100.0), ("-4", 0.0), ("72.6", 73.0)])
def test_pinned_utilization_is_clamped_and_rounded(raw, expected):
    pod = sim(annotations={figures.UTILIZATION_ANNOTATION: raw})
    assert figures.chip_utilization(pod, 0, T0) == expected


@pytest.mark.parametrize("raw", ["busy", "nan", ""])
def test_an_unreadable_annotation_falls_back_to_the_default(raw):
    pinned, default = sim(annotations={figures.UTILIZATION_ANNOTATION: raw}), sim()
    assert figures.chip_utilization(pinned, 0, T0 + 5) == figures.chip_utilization(default, 0, T0 + 5)


def test_default_utilization_is_plausible_and_moves_with_time():
    pod = sim()
    readings = [figures.chip_utilization(pod, 0, T0 + t) for t in range(0, 60, 3)]
    assert all(66 <= value <= 98 for value in readings)
    assert len(set(readings)) > 1


def test_one_chip_can_be_skewed_against_the_others_in_both_the_exporter_and_the_trainer():
    pod = sim(chips=(0, 1, 2), annotations={figures.UTILIZATION_ANNOTATION: "90",
                                            figures.CHIP_UTILIZATION_ANNOTATION: "1=12, 9=50, x=3, 2=oops"})
    assert [figures.chip_utilization(pod, chip, T0 + 9) for chip in (0, 1, 2)] == [90.0, 12.0, 90.0]
    reading = {row.chip: row.utilization for row in figures.exporter_readings([pod], {}, T0 + 9)}
    assert reading == {0: 90.0, 1: 12.0, 2: 90.0}
    assert figures.trainer_figures(pod, T0 + 9).npu_utilization == {"0": 90.0, "1": 12.0, "2": 90.0}
    assert figures.chip_pins({figures.CHIP_UTILIZATION_ANNOTATION: "3=140,4=-1"}) == {3: 100.0, 4: 0.0}


def test_a_stalled_trainer_stops_stepping_and_its_histogram_stops_observing():
    pod = sim(annotations={figures.STEP_SECONDS_ANNOTATION: "0.5", figures.STALL_AFTER_ANNOTATION: "5"})
    assert [figures.trainer_figures(pod, T0 + t).step for t in (4, 5, 6, 600)] == [8, 10, 10, 10]
    read = samples(figures.trainer_text(pod, T0 + 600))
    assert read[("ascend_trainer_step_seconds_count", ())] == 10 and read[("ascend_trainer_step", ())] == 10


def test_a_slowed_trainer_steps_at_the_slow_pace_from_then_on():
    pod = sim(annotations={figures.STEP_SECONDS_ANNOTATION: "0.5", figures.SLOW_AFTER_ANNOTATION: "10",
                           figures.SLOW_STEP_SECONDS_ANNOTATION: "2"})
    assert [figures.trainer_figures(pod, T0 + t).step for t in (10, 11.9, 12, 20)] == [20, 20, 21, 25]
    slowed = figures.trainer_figures(pod, T0 + 20)
    assert slowed.step_seconds == 2 and slowed.tokens_per_second == pytest.approx(figures.TOKENS_PER_STEP / 2, rel=0.03)
    read = samples(figures.trainer_text(pod, T0 + 20))
    assert read[("ascend_trainer_step_seconds_sum", ())] == pytest.approx(20 * 0.5 + 5 * 2)
    assert read[("ascend_trainer_step_seconds_bucket", (("le", "0.5"),))] == 20
    assert read[("ascend_trainer_step_seconds_bucket", (("le", "2.5"),))] == 25
    sample = from_trainer_text({0: figures.trainer_text(pod, T0 + 20).decode()}, datetime.now(UTC), {0: "job-a1-0"})
    assert sample.pod_step_seconds == (("job-a1-0", pytest.approx(20 / 25)),)


def test_hbm_used_follows_the_annotation():
    pod = sim(annotations={figures.HBM_USED_PERCENT_ANNOTATION: "25"})
    assert figures.chip_hbm_used_mb(pod, 0, 65536) == 16384
    assert 0.55 * 65536 <= figures.chip_hbm_used_mb(sim(), 0, 65536) <= 0.85 * 65536


# Prometheus text -------------------------------------------------------------------------------------------------
def test_trainer_text_has_the_design_series_and_reads_back_through_the_operator():
    pod = sim(annotations={figures.STEP_SECONDS_ANNOTATION: "0.5", figures.UTILIZATION_ANNOTATION: "60"})
    text = figures.trainer_text(pod, T0 + 10)
    found = samples(text)
    assert found[("ascend_trainer_step", ())] == 20
    assert found[("ascend_trainer_step_seconds_count", ())] == 20 and found[("ascend_trainer_step_seconds_sum", ())] == 10
    assert found[("ascend_trainer_step_seconds_bucket", (("le", "0.25"),))] == 0
    assert found[("ascend_trainer_step_seconds_bucket", (("le", "0.5"),))] == 20
    assert found[("ascend_trainer_step_seconds_bucket", (("le", "+Inf"),))] == 20
    assert found[("ascend_trainer_samples_total", ())] == 20 * figures.SAMPLES_PER_STEP
    assert found[("ascend_trainer_npu_utilization_percent", (("device", "1"),))] == 60
    sample = from_trainer_text({0: text.decode()}, datetime.now(UTC))
    assert (sample.step, sample.step_seconds, sample.npu_percent) == (20, 0.5, 60)
    assert sample.loss == pytest.approx(figures.loss_at(pod.training_key, 20))


def test_exporter_text_lists_every_allocated_chip_with_its_pod():
    first = sim(chips=(0, 1), annotations={figures.UTILIZATION_ANNOTATION: "40"})
    second = sim(name="job-a1-1", chips=(5,), node="node-003", ip="127.16.0.8")
    found = samples(figures.exporter_text([first, second], {"node-002": "910B", "node-003": "910A"}, T0 + 5))
    rows = {dict(labels)["id"] + "@" + dict(labels)["pod_name"]: (name, dict(labels), value)
            for (name, labels), value in found.items() if name == "npu_chip_info_utilization"}
    assert sorted(rows) == ["0@job-a1-0", "1@job-a1-0", "5@job-a1-1"]
    _, labels, value = rows["1@job-a1-0"]
    assert value == 40 and labels == {"id": "1", "model_name": "Ascend910B3", "namespace": "ns",
                                      "pod_name": "job-a1-0", "container_name": "ascend"}
    totals = {dict(labels)["pod_name"]: value for (name, labels), value in found.items()
              if name == "npu_chip_info_hbm_total_memory"}
    assert totals == {"job-a1-0": 65536, "job-a1-1": 32768}


def test_an_unknown_node_gets_the_default_chip():
    rows = figures.exporter_readings([sim()], {}, T0)
    assert {row.hbm_total_mb for row in rows} == {figures.HBM_TOTAL_MB[figures.DEFAULT_CHIP]}


# Scrape config and targets -------------------------------------------------------------------------------------
def test_trainer_targets_carry_the_pod_for_relabeling_in_a_stable_order():
    groups = scrapeconfig.trainer_targets([sim(name="b", ip="127.16.0.9"), sim(name="a")])
    assert groups == [
        {"targets": ["127.16.0.7:9400"], "labels": {"__meta_ahj_namespace": "ns", "__meta_ahj_pod": "a",
                                                    "__meta_ahj_node": "node-002"}},
        {"targets": ["127.16.0.9:9400"], "labels": {"__meta_ahj_namespace": "ns", "__meta_ahj_pod": "b",
                                                    "__meta_ahj_node": "node-002"}}]
    assert json.loads(scrapeconfig.targets_text(groups)) == groups
    assert scrapeconfig.targets_text(groups) == scrapeconfig.targets_text(list(groups))


def test_exporter_targets():
    assert scrapeconfig.exporter_targets("127.15.0.1:4000") == [{"targets": ["127.15.0.1:4000"], "labels": {}}]
    assert scrapeconfig.exporter_targets(None) == []


def test_prometheus_config_relabels_trainer_targets_and_reads_the_target_files():
    config = yaml.safe_load(scrapeconfig.prometheus_config_text("/c/telemetry/targets", interval_seconds=3))
    assert config["global"]["scrape_interval"] == "3s" and config["global"]["scrape_timeout"] == "3s"
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    trainer, exporter_job = jobs["ascend-trainer"], jobs["npu-exporter"]
    assert trainer["file_sd_configs"][0]["files"] == ["/c/telemetry/targets/trainers.json"]
    assert exporter_job["file_sd_configs"][0]["files"] == ["/c/telemetry/targets/npu-exporter.json"]
    relabeled = {rule["target_label"]: rule["source_labels"] for rule in trainer["relabel_configs"]}
    assert relabeled == {"namespace": ["__meta_ahj_namespace"], "pod": ["__meta_ahj_pod"],
                         "node": ["__meta_ahj_node"]}
    assert exporter_job["honor_labels"] is True


def test_the_simulated_trainer_exports_exactly_the_bundled_trainers_series():
    from ascend_hybrid_trainer.metrics import CHECKPOINT_SECONDS_BUCKETS, STEP_SECONDS_BUCKETS, TrainerMetrics
    from ascend_hybrid_trainer.timing import RankFigures

    timed = [RankFigures(0, 3, 3, 0.5, 0.4, 0.1)]
    real = {(f.name, f.type) for f in TrainerMetrics(npu_reader=lambda: {"0": 1.0},
                                                     rank_timings=lambda: timed).registry.collect()}
    simulated = {(f.name, f.type) for f in figures.trainer_families(figures.trainer_figures(sim(), T0 + 9))}
    assert simulated == real
    assert figures.STEP_SECONDS_BUCKETS == STEP_SECONDS_BUCKETS
    assert figures.CHECKPOINT_SECONDS_BUCKETS == CHECKPOINT_SECONDS_BUCKETS


# Step times from the plan's prediction -------------------------------------------------------------------
def test_a_pod_asking_for_the_prediction_steps_within_the_declared_noise_of_it():
    from dataclasses import replace

    pod = sim(annotations={figures.STEP_SECONDS_ANNOTATION: figures.PREDICTED})
    assert pod.job == "job"
    unknown = figures.trainer_figures(pod, T0 + 10).step_seconds
    assert 0.4 <= unknown <= 1.2, "no prediction yet: the default range"
    planned = replace(pod, predicted_step_seconds=80.0)
    seconds = figures.trainer_figures(planned, T0 + 1000).step_seconds
    assert abs(seconds / 80.0 - 1) <= figures.PREDICTION_NOISE
    assert figures.trainer_figures(planned, T0 + 1000).step == int(1000 // seconds)
    # the same job attempt keeps one factor; without the annotation the prediction is ignored
    assert figures.trainer_figures(planned, T0 + 5000).step_seconds == seconds
    assert figures.step_seconds(replace(sim(), predicted_step_seconds=80.0)) == figures.step_seconds(sim())


@given(st.text(min_size=1, max_size=12))
def test_the_noise_stays_within_its_declared_bound_for_every_job(job):
    from dataclasses import replace

    pod = replace(sim(annotations={figures.STEP_SECONDS_ANNOTATION: figures.PREDICTED}),
                  training_key=f"ns/{job}/1", predicted_step_seconds=2.0)
    assert abs(figures.step_seconds(pod) / 2.0 - 1) <= figures.PREDICTION_NOISE


def test_the_prediction_is_read_from_the_jobs_plan():
    job = {"metadata": {"namespace": "ns", "name": "job"}, "status": {"plan": {"time": {"stepSeconds": 52.3}}}}
    assert figures.predicted_step_seconds(job) == 52.3
    assert figures.predicted_step_seconds({"metadata": {}, "status": {}}) is None
    assert figures.predicted_step_seconds({"status": {"plan": {"time": {"stepSeconds": "x"}}}}) is None


# A slow node or link, coupled across a synchronous job's ranks ---------------------------------------------------------
def job_pods(nodes=("n1", "n2", "n3", "n4"), chips=2, step="1.0"):
    """One pod per node of a job (pod i on nodes[i], `chips` ranks each), started at T0."""
    from dataclasses import replace

    pods = []
    for index, node in enumerate(nodes):
        pod = sim(annotations={figures.STEP_SECONDS_ANNOTATION: step}, chips=tuple(range(chips)))
        pods.append(replace(pod, name=f"job-a1-{index}", node=node, index=index))
    return pods


def coupled_to(pods, faults):
    from dataclasses import replace

    from ascend_hybrid.devcluster.telemetry import coupled

    compute, links = coupled.node_histories(faults)
    return [replace(pod, coupling=coupled.Job({p.node for p in pods}, compute, links)) for pod in pods]


def test_a_slow_node_slows_every_rank_of_its_job_and_only_its_own_ranks_compute_longer():
    from ascend_hybrid.devcluster.telemetry import coupled

    faults = {"n3": {coupled.SLOW_COMPUTE_ANNOTATION: coupled.appended(None, 1.5, T0 + 100)}}
    pods = coupled_to(job_pods(), faults)
    at = T0 + 400
    steps = {figures.trainer_figures(pod, at).step for pod in pods}
    assert steps == {100 + int(300 / (0.8 * 1.5 + 0.2))}  # one pace for all: the slowest node's, after 100 s
    ranks = {rank: (step, compute, wait) for pod in pods for rank, step, compute, wait in
             figures.trainer_figures(pod, at).ranks}
    assert sorted(ranks) == list(range(8))
    slow = [ranks[4][1], ranks[5][1]]  # pod 2 on n3: ranks 4 and 5
    others = [ranks[rank][1] for rank in (0, 1, 2, 3, 6, 7)]
    assert min(slow) > 1.35 * max(others)
    assert max(ranks[4][2], ranks[5][2]) < min(ranks[rank][2] for rank in (0, 1, 2, 3, 6, 7))
    assert max(step for step, _, _ in ranks.values()) / min(step for step, _, _ in ranks.values()) < 1.01
    cleared = {"n3": {coupled.SLOW_COMPUTE_ANNOTATION: coupled.appended(
        faults["n3"][coupled.SLOW_COMPUTE_ANNOTATION], 1.0, T0 + 400)}}
    again = coupled_to(job_pods(), cleared)
    later = figures.trainer_figures(again[0], T0 + 500).step
    assert later == figures.trainer_figures(again[0], T0 + 400).step + 100  # back at its pace


def test_a_slow_link_slows_the_collectives_of_a_job_across_it_and_no_other_job():
    from ascend_hybrid.devcluster.telemetry import coupled

    faults = {"n1": {coupled.SLOW_LINKS_ANNOTATION: f"n2=4@{T0:.3f}"}}
    across = coupled_to(job_pods(("n1", "n2")), faults)
    beside = coupled_to(job_pods(("n3", "n4")), faults)
    assert figures.trainer_figures(across[0], T0 + 160).step == int(160 / (0.8 + 0.2 * 4))
    assert figures.trainer_figures(beside[0], T0 + 160).step == 160
    (_, step, compute, wait), *_ = figures.trainer_figures(across[1], T0 + 160).ranks
    assert compute == pytest.approx(0.8, rel=0.04) and wait == pytest.approx(0.8, rel=0.1)


def test_the_operator_names_the_simulated_slow_node_from_the_exported_figures():
    from datetime import datetime

    from ascend_hybrid.devcluster.telemetry import coupled
    from ascend_hybrid.monitoring import slowness
    from ascend_hybrid.monitoring.progress import from_trainer_text
    from ascend_hybrid.spec.api import Slowness

    faults = {"n3": {coupled.SLOW_COMPUTE_ANNOTATION: coupled.appended(None, 1.5, T0 + 100)}}
    pods = coupled_to(job_pods(chips=8), faults)
    texts = {pod.index: figures.trainer_text(pod, T0 + 300).decode() for pod in pods}
    sample = from_trainer_text(texts, datetime.fromtimestamp(T0 + 300, UTC), {pod.index: pod.name for pod in pods})
    found = slowness.suspects(sample.ranks, {pod.name: pod.node for pod in pods}, lambda rank: 0,
                              Slowness().compute_factor)
    assert [(suspect.node, suspect.ranks) for suspect in found] == [("n3", tuple(range(16, 24)))]


def test_a_fault_history_reads_back_as_written_and_ignores_what_it_cannot_read():
    from ascend_hybrid.devcluster.telemetry import coupled

    text = coupled.appended(coupled.appended(None, 2.0, 100.0), 1.0, 200.0)
    history = coupled.parse_history(text + ";junk;0.5@300")
    assert history == ((100.0, 2.0), (200.0, 1.0), (300.0, 1.0))  # a factor below 1 is no speed-up
    assert [coupled.at(history, t) for t in (50, 150, 250)] == [1.0, 2.0, 1.0]
    assert coupled.parse_links(coupled.links_text({"n2": ((5.0, 4.0),)})) == {"n2": ((5.0, 4.0),)}
