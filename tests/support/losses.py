"""The trainer's per-step losses, out of a log or from the local runner, for comparing a cluster's job with
`ascend-hybrid-trainer local` (the same seed, global batch and sequence length give the same losses)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

# The model every real-MindSpore test trains: the tiny preset cut to 2 of its 24 layers. MindSpore compiles the
# training step for each layer it unrolls: on 2 cores the first step of 24 layers comes ~40 s after start, of 2
# layers ~4 s, and a step takes ~0.1 s instead of ~0.5 s. What the tests check (data-parallel parity,
# accumulation, checkpoints, failures, recovery) takes the same code path at any depth.
LAYERS = 2
MODEL = {"preset": "tiny", "layers": LAYERS}


def step_records(text: str) -> list[dict]:
    """The trainer's per-step JSON lines ({"step": n, "loss": x}) out of a log."""
    records = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if "step" in record and "loss" in record:
                records.append(record)
    return records


def local_losses(steps: int, *, seed: int, seq_length: int, global_batch: int, data: int = 2,
                 micro_batches: int = 1) -> list[float]:
    """`ascend-hybrid-trainer local --data N` of MODEL on this machine: rank 0's loss of every step. Run once
    more if it fails: MindSpore 2.10 on CPU now and then segfaults in a rank's exit, after its last step."""
    command = [str(Path(sys.executable).parent / "ascend-hybrid-trainer"), "local", "--data", str(data), "--layers",
               str(LAYERS), "--micro-batches", str(micro_batches), "--steps", str(steps), "--global-batch",
               str(global_batch), "--seq-length", str(seq_length), "--seed", str(seed), "--metrics-port", "0"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return [record["loss"] for record in step_records(result.stdout)]
