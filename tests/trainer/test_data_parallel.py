"""A DP=2 job started the way the cluster starts it: the operator renders the pods (design §8 env), the planning
core writes hccl.json for the two running pods, and one launcher per pod runs with that env (MS_SCHED_HOST
127.0.0.1). The loss must equal the single-process run's with the same global batch — for the tiny preset, and
for the tiny preset with grouped-query attention (2 key/value heads for 8 query heads) and SwiGLU."""

from __future__ import annotations

import json
import threading

import pytest

from support.losses import LAYERS, MODEL
from support.trainer_harness import (
    GLOBAL_BATCH,
    LEARNING_RATE,
    SEED,
    SEQ_LENGTH,
    STEPS,
    TRAINER,
    ProcessSet,
    losses_of,
    metric_value,
    pod_launch_envs,
    render_job,
    run_local,
    scrape,
)

pytestmark = pytest.mark.trainer

PARITY_TOLERANCE = 1e-5
DP2_SPEC = {"parallelism": {"data": 2}, "npu": {"chip": "910B", "perPod": 1}, "model": MODEL,
            "training": {"steps": STEPS, "globalBatchSize": GLOBAL_BATCH, "seqLength": SEQ_LENGTH,
                         "learningRate": LEARNING_RATE, "seed": SEED}}


def poll_metrics(port: int, processes: ProcessSet, scrapes: list[str]) -> None:
    """Scrape while the pod's worker runs; keep every answer that shows a completed step."""
    while any(proc.process.poll() is None for proc in processes.procs):
        text = scrape(port)
        if text and (metric_value(text, "ascend_trainer_step") or 0) >= 1:
            scrapes.append(text)
        threading.Event().wait(0.1)


@pytest.fixture(scope="module")
def dp2_run(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("dp2")
    envs = pod_launch_envs(tmp_path, render_job(tmp_path, DP2_SPEC))
    processes = ProcessSet()
    pods = [processes.start(TRAINER + ["launch"], env) for env in envs]
    scrapes: dict[int, list[str]] = {0: [], 1: []}
    pollers = [threading.Thread(target=poll_metrics, args=(int(env["AHJ_METRICS_PORT"]), processes, scrapes[i]),
                                daemon=True) for i, env in enumerate(envs)]
    for poller in pollers:
        poller.start()
    wall = processes.wait_all(timeout=180)
    for poller in pollers:
        poller.join(timeout=5)
    return {"pods": pods, "processes": processes, "wall": wall, "scrapes": scrapes}


def test_dp2_through_the_launcher_matches_one_process(dp2_run, reference_run):
    pods, processes = dp2_run["pods"], dp2_run["processes"]
    assert [pod.process.returncode for pod in pods] == [0, 0], processes.report()
    assert "started the MindSpore scheduler on 127.0.0.1" in pods[0].text("stderr")
    assert "training data_parallel on CPU" in pods[1].text("stderr")
    assert pods[1].text("stdout") == "", "only global rank 0 prints the per-step JSON lines"
    losses, reference = losses_of(pods[0].text("stdout")), reference_run["losses"]
    assert sorted(losses) == sorted(reference) == list(range(1, STEPS + 1))
    differences = [abs(losses[step] - reference[step]) for step in reference]
    workers = processes.worker_peak_rss_mb()
    print(f"\nDP=2 through the launcher: wall {dp2_run['wall']:.1f} s (single process {reference_run['wall']:.1f} "
          f"s), peak RSS of the whole job {processes.peak_total_rss / 2**20:.0f} MB, per worker "
          f"{', '.join(f'{rss:.0f}' for rss in workers)} MB, loss max |diff| {max(differences):.2e}")
    assert max(differences) <= PARITY_TOLERANCE, (losses, reference)
    assert len(workers) == 2


def test_metrics_endpoint_serves_the_design_metrics_during_training(dp2_run):
    for pod, scrapes in dp2_run["scrapes"].items():
        assert scrapes, f"pod {pod}: no scrape answered with a completed step while the job ran"
        text = scrapes[-1]
        for name in ("ascend_trainer_step", "ascend_trainer_loss", "ascend_trainer_tokens_per_second",
                     "ascend_trainer_step_seconds_count", "ascend_trainer_samples_total", "ascend_trainer_grad_norm"):
            assert metric_value(text, name) is not None, f"pod {pod}: {name} missing\n{text}"
        step = metric_value(text, "ascend_trainer_step")
        assert 1 <= step <= STEPS
        assert metric_value(text, "ascend_trainer_samples_total") == step * GLOBAL_BATCH
        assert metric_value(text, "ascend_trainer_step_seconds_count") == step
        assert metric_value(text, "ascend_trainer_tokens_per_second") > 0
        assert metric_value(text, "ascend_trainer_grad_norm") > 0
        assert "ascend_trainer_npu_utilization_percent" not in text  # no npu-smi on this machine


def test_each_pod_serves_its_ranks_compute_and_wait_in_their_recent_steps(dp2_run):
    """The data-parallel step runs as the local gradients, then the all-reduce and update: each rank's compute and
    wait add up to its step time, as the operator's slow-node detection reads them."""
    from prometheus_client.parser import text_string_to_metric_families

    for pod, scrapes in dp2_run["scrapes"].items():
        figures = {}
        for family in text_string_to_metric_families(scrapes[-1]):
            for sample in family.samples:
                if sample.name.startswith("ascend_trainer_rank_"):
                    figures[(sample.name, sample.labels["rank"])] = sample.value
        rank = str(pod)  # one rank per pod: pod i runs rank i
        step, compute, wait = (figures[(f"ascend_trainer_rank_{name}", rank)]
                               for name in ("step_seconds", "compute_seconds", "wait_seconds"))
        assert step > 0 and compute > 0 and wait >= 0, figures
        assert compute + wait == pytest.approx(step, rel=1e-6)
        assert figures[("ascend_trainer_rank_step", rank)] >= 1


GQA_SWIGLU = {**MODEL, "kvHeads": 2, "ffnType": "swiglu"}


def test_a_gqa_swiglu_dp2_job_matches_one_process(tmp_path):
    """Grouped-query attention and SwiGLU train: the tiny preset with 2 key/value heads for its 8 query heads and a SwiGLU
    feed-forward, as a DP 2 job through the launcher, equals `local --data 1` of the same model to 1e-5 — loss
    and gradient norm at every step."""
    proc, processes, single_wall = run_local([
        "--data", "1", "--preset", "tiny", "--layers", str(LAYERS), "--kv-heads", "2", "--ffn-type", "swiglu", "--steps", str(STEPS),
        "--seed", str(SEED), "--global-batch", str(GLOBAL_BATCH), "--seq-length", str(SEQ_LENGTH),
        "--learning-rate", str(LEARNING_RATE), "--metrics-port", "0"])
    assert proc.process.returncode == 0, processes.report()
    single = [json.loads(line) for line in proc.text("stdout").splitlines() if line.startswith("{")]
    spec = {**DP2_SPEC, "model": GQA_SWIGLU}
    envs = pod_launch_envs(tmp_path, render_job(tmp_path, spec, name="gqa-swiglu"))
    job = json.loads((tmp_path / "job.json").read_text())["model"]
    assert (job["kvHeads"], job["ffnType"]) == (2, "swiglu")
    dp2 = ProcessSet()
    pods = [dp2.start(TRAINER + ["launch"], env) for env in envs]
    wall = dp2.wait_all(timeout=240)
    assert [pod.process.returncode for pod in pods] == [0, 0], dp2.report()
    parallel = [json.loads(line) for line in pods[0].text("stdout").splitlines() if line.startswith("{")]
    assert [r["step"] for r in parallel] == [r["step"] for r in single] == list(range(1, STEPS + 1))
    loss_diff = max(abs(a["loss"] - b["loss"]) for a, b in zip(parallel, single))
    norm_diff = max(abs(a["gradNorm"] - b["gradNorm"]) / b["gradNorm"] for a, b in zip(parallel, single))
    print(f"\nGQA + SwiGLU: DP=2 wall {wall:.1f} s, single process {single_wall:.1f} s; loss max |diff| "
          f"{loss_diff:.2e}, gradient norm max relative diff {norm_diff:.2e}; losses "
          f"{[round(r['loss'], 4) for r in single]}")
    assert loss_diff <= PARITY_TOLERANCE  # the acceptance criterion
    assert norm_diff <= 1e-4  # float32 sums in another order (all-reduce of two halves): measured 6.6e-6
    assert single[-1]["loss"] < single[0]["loss"] - 0.5  # it trains
    assert "training data_parallel on CPU" in pods[1].text("stderr")


def test_a_dp2_job_timing_one_step_in_three_apart_trains_the_same_losses(tmp_path, reference_run):
    """As on Ascend, where only one step in several runs as two graphs (AHJ_TIMED_STEP_EVERY): the other steps run
    the one fused graph — here with two accumulated micro-batches — and the losses are the single process's still."""
    spec = {**DP2_SPEC, "parallelism": {"data": 2, "microBatches": 2}}
    envs = [{**env, "AHJ_TIMED_STEP_EVERY": "3"} for env in pod_launch_envs(tmp_path, render_job(tmp_path, spec))]
    processes = ProcessSet()
    pods = [processes.start(TRAINER + ["launch"], env) for env in envs]
    processes.wait_all(timeout=180)
    assert [pod.process.returncode for pod in pods] == [0, 0], processes.report()
    losses, reference = losses_of(pods[0].text("stdout")), reference_run["losses"]
    assert sorted(losses) == list(range(1, STEPS + 1))
    assert max(abs(losses[step] - reference[step]) for step in reference) <= PARITY_TOLERANCE
