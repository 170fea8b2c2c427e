"""Shared runs of the trainer tests. Tests marked `trainer` run real MindSpore on CPU; without it they fail
(never skip): CI installs the extra."""

from __future__ import annotations

import importlib.util

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


@pytest.fixture(autouse=True)
def _mindspore_is_installed(request):
    if request.node.get_closest_marker("trainer") and importlib.util.find_spec("mindspore") is None:
        pytest.fail("tests marked `trainer` need MindSpore: pip install -e '.[trainer]'", pytrace=False)


@pytest.fixture(scope="session")
def reference_run(tmp_path_factory):
    """`local --data 1`: the single-process run every parity and resume test compares with. It checkpoints every
    CHECKPOINT_EVERY steps into its own directory."""
    if importlib.util.find_spec("mindspore") is None:
        pytest.fail("the reference run needs MindSpore: pip install -e '.[trainer]'", pytrace=False)
    checkpoints = tmp_path_factory.mktemp("reference-checkpoints")
    proc, processes, wall = run_local([
        "--data", "1", "--preset", "tiny", "--layers", str(LAYERS), "--steps", str(STEPS), "--seed", str(SEED),
        "--global-batch", str(GLOBAL_BATCH), "--seq-length", str(SEQ_LENGTH), "--learning-rate", str(LEARNING_RATE),
        "--checkpoint-dir", str(checkpoints), "--checkpoint-every", str(CHECKPOINT_EVERY),
        "--metrics-port", "0"])
    assert proc.process.returncode == 0, processes.report()
    return {"losses": losses_of(proc.text("stdout")), "checkpoints": checkpoints, "wall": wall,
            "stderr": proc.text("stderr")}
