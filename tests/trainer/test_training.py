"""Single-process training on CPU through the local runner: the loss falls, a restart resumes, MoE trains."""

from __future__ import annotations

import json
import math
import shutil

import pytest

from support.losses import LAYERS
from support.trainer_harness import (
    CHECKPOINT_EVERY,
    GLOBAL_BATCH,
    LEARNING_RATE,
    SEED,
    SEQ_LENGTH,
    STEPS,
    losses_of,
    run_local,
)

pytestmark = pytest.mark.trainer


def test_single_process_tiny_training_lowers_the_loss(reference_run):
    losses = reference_run["losses"]
    assert sorted(losses) == list(range(1, STEPS + 1))
    assert all(math.isfinite(loss) for loss in losses.values())
    assert losses[STEPS] < losses[1] - 0.5, losses
    assert "training stand_alone on CPU" in reference_run["stderr"]


def test_checkpoints_are_committed_every_n_steps(reference_run):
    root = reference_run["checkpoints"]
    latest = json.loads((root / "latest.json").read_text())
    assert latest["step"] == STEPS and latest["loss"] == pytest.approx(reference_run["losses"][STEPS], abs=1e-6)
    steps = sorted(int(path.stem.split("_")[1]) for path in (root / "rank_0").glob("step_*.ckpt"))
    assert steps == list(range(CHECKPOINT_EVERY, STEPS + 1, CHECKPOINT_EVERY))


def test_resume_continues_from_the_saved_step_and_loss(reference_run, tmp_path):
    """A claim holding only the step-3 checkpoint: the restarted run trains steps 4..6 and reproduces the
    uninterrupted run's losses (parameters, optimizer moments and data position all restored)."""
    resumed = tmp_path / "claim"
    (resumed / "rank_0").mkdir(parents=True)
    shutil.copy(reference_run["checkpoints"] / "rank_0" / f"step_{CHECKPOINT_EVERY}.ckpt", resumed / "rank_0")
    (resumed / "latest.json").write_text(json.dumps(
        {"step": CHECKPOINT_EVERY, "loss": reference_run["losses"][CHECKPOINT_EVERY]}))
    proc, processes, _ = run_local([
        "--data", "1", "--layers", str(LAYERS), "--steps", str(STEPS), "--seed", str(SEED), "--global-batch", str(GLOBAL_BATCH),
        "--seq-length", str(SEQ_LENGTH), "--learning-rate", str(LEARNING_RATE), "--checkpoint-dir", str(resumed),
        "--checkpoint-every", str(CHECKPOINT_EVERY), "--metrics-port", "0"])
    assert proc.process.returncode == 0, processes.report()
    losses = losses_of(proc.text("stdout"))
    assert sorted(losses) == list(range(CHECKPOINT_EVERY + 1, STEPS + 1))
    for step, loss in losses.items():
        assert loss == pytest.approx(reference_run["losses"][step], abs=1e-5), (step, losses)
    assert f"resumed from {resumed}/rank_0/step_{CHECKPOINT_EVERY}.ckpt: step {CHECKPOINT_EVERY}" in proc.text(
        "stderr")
    assert json.loads((resumed / "latest.json").read_text())["step"] == STEPS


def test_moe_feed_forward_trains_on_one_process():
    proc, processes, _ = run_local(["--data", "1", "--layers", str(LAYERS), "--experts", "4", "--top-k", "2",
                                    "--steps", "8", "--global-batch", "4", "--metrics-port", "0"])
    assert proc.process.returncode == 0, processes.report()
    losses = losses_of(proc.text("stdout"))
    assert sorted(losses) == list(range(1, 9))
    assert losses[8] < losses[1] - 0.5, losses


def test_micro_batches_and_selective_recompute_train_exactly_what_one_pass_trains(reference_run):
    """microBatches 2 without a pipeline accumulates the gradients of two half batches; selective recompute
    recomputes the attention core in the backward pass. Neither changes the numbers: the losses are the reference
    run's (the same global batch in one forward pass, nothing recomputed) to 1e-5."""
    proc, processes, wall = run_local([
        "--data", "1", "--layers", str(LAYERS), "--micro-batches", "2", "--recompute", "selective", "--steps", str(STEPS), "--seed",
        str(SEED), "--global-batch", str(GLOBAL_BATCH), "--seq-length", str(SEQ_LENGTH), "--learning-rate",
        str(LEARNING_RATE), "--metrics-port", "0"], timeout=420)  # one graph holds both micro-batches: compiles 2x
    assert proc.process.returncode == 0, processes.report()
    losses = losses_of(proc.text("stdout"))
    differences = [abs(losses[step] - loss) for step, loss in reference_run["losses"].items()]
    print(f"\nmicro-batches 2 + selective recompute: wall {wall:.1f} s, loss max |diff| {max(differences):.2e}")
    assert sorted(losses) == sorted(reference_run["losses"]) and max(differences) <= 1e-5


def test_gradient_clipping_bounds_the_update_and_reports_the_norm_before_clipping():
    import mindspore as ms
    import numpy as np

    from ascend_hybrid_trainer.train import clipped, global_norm

    ms.set_context(mode=ms.PYNATIVE_MODE)
    grads = (ms.Tensor(np.full((2, 2), 3.0, np.float32)), ms.Tensor(np.full((3,), 4.0, np.float32)))
    norm = global_norm(grads)
    assert float(norm) == pytest.approx(math.sqrt(4 * 9 + 3 * 16))
    small = clipped(grads, norm, 1.0)
    assert float(global_norm(small)) == pytest.approx(1.0, rel=1e-5)
    assert np.allclose(small[0].asnumpy() / grads[0].asnumpy(), 1.0 / float(norm))
    untouched = clipped(grads, norm, 100.0)
    assert all(np.array_equal(a.asnumpy(), b.asnumpy()) for a, b in zip(untouched, grads))


def test_a_timed_step_compiles_each_of_its_graphs_once(monkeypatch):
    """Every step timed (AHJ_TIMED_STEP_EVERY=1, the CPU default) runs the compute graph and then the reduce-and-
    update graph: each is compiled once for the run, not once a step (a tuple of gradients handed to a graph as
    a constant would compile it anew for every step, ~1 s each on CPU). MindSpore's INFO log names each
    compilation's phase."""
    monkeypatch.setenv("GLOG_v", "1")
    monkeypatch.setenv("AHJ_TIMED_STEP_EVERY", "1")
    steps = 6
    proc, processes, _ = run_local(["--data", "1", "--layers", str(LAYERS), "--steps", str(steps), "--global-batch",
                                    "2", "--seq-length", "32", "--metrics-port", "0"])
    assert proc.process.returncode == 0, processes.report()
    assert sorted(losses_of(proc.text("stdout"))) == list(range(1, steps + 1))
    compiled = [line.split("Start compiling, phase: ", 1)[1].split(".", 3)[2]
                for line in proc.text("stderr").splitlines() if "Start compiling, phase: " in line]
    assert sorted(compiled) == ["local_gradients", "reduce_and_update"], compiled
