"""The trainer's per-step losses, out of a log or from the local runner, for comparing a cluster's job with
`ascend-hybrid-trainer local` (the same seed, global batch and sequence length give the same losses)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


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


def local_losses(steps: int, *, seed: int, seq_length: int, global_batch: int, data: int = 2) -> list[float]:
    """`ascend-hybrid-trainer local --data N` on this machine: rank 0's loss of every step."""
    result = subprocess.run(
        [str(Path(sys.executable).parent / "ascend-hybrid-trainer"), "local", "--data", str(data), "--steps",
         str(steps), "--global-batch", str(global_batch), "--seq-length", str(seq_length), "--seed", str(seed),
         "--metrics-port", "0"],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return [record["loss"] for record in step_records(result.stdout)]
