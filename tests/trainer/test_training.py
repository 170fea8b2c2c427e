"""Single-process training on CPU through the local runner: the loss falls, a restart resumes, MoE trains."""

from __future__ import annotations

import json
import math
import shutil

import pytest

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
        "--data", "1", "--steps", str(STEPS), "--seed", str(SEED), "--global-batch", str(GLOBAL_BATCH),
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
    proc, processes, _ = run_local(["--data", "1", "--layers", "2", "--experts", "4", "--top-k", "2",
                                    "--steps", "8", "--global-batch", "4", "--metrics-port", "0"])
    assert proc.process.returncode == 0, processes.report()
    losses = losses_of(proc.text("stdout"))
    assert sorted(losses) == list(range(1, 9))
    assert losses[8] < losses[1] - 0.5, losses
