"""What timing each rank's compute apart costs the real trainer: `ascend-hybrid-trainer local` (MindSpore on CPU,
the 2-layer tiny model) with every step timed (AHJ_TIMED_STEP_EVERY=1, the CPU default: two compiled graphs a step,
synchronised between them), one step in 8 (the Ascend default) and none, run one after the other in each round.

    .venv/bin/python bench/bench_timed_step.py [--rounds 3] [--steps 120] [--data 2]

Prints each run's wall time (process start to exit: MindSpore's import and compilation included), the median and
range per setting, and `timed/untimed wall ratio median: R (rounds: …)` for every step timed over none.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from benchkit import median_range, ratio_line, say

TRAINER = Path(sys.executable).parent / "ascend-hybrid-trainer"
SETTINGS = {"none": "0", "every 8th": "8", "every": "1"}


def wall_of(every: str, steps: int, data: int) -> float:
    command = [str(TRAINER), "local", "--data", str(data), "--layers", "2", "--steps", str(steps), "--global-batch",
               str(data), "--seq-length", "32", "--seed", "7", "--metrics-port", "0"]
    started = time.monotonic()
    result = subprocess.run(command, env={**os.environ, "AHJ_TIMED_STEP_EVERY": every}, capture_output=True,
                            text=True, timeout=900)
    if result.returncode != 0:
        raise SystemExit(f"AHJ_TIMED_STEP_EVERY={every}: exit {result.returncode}\n{result.stderr[-2000:]}")
    return time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--data", type=int, default=2)
    args = parser.parse_args()
    walls: dict[str, list[float]] = {name: [] for name in SETTINGS}
    for round_ in range(1, args.rounds + 1):
        for name, every in SETTINGS.items():
            walls[name].append(wall_of(every, args.steps, args.data))
            say(f"round {round_}: steps timed {name}: {walls[name][-1]:.1f} s")
    print(f"DP {args.data}, tiny model with 2 layers, {args.steps} steps, wall from process start to exit:")
    for name in SETTINGS:
        print(f"  steps timed {name}: {median_range(walls[name], 1, ' s')}")
    print(ratio_line("timed/untimed wall ratio", [timed / untimed for timed, untimed in
                                                 zip(walls["every"], walls["none"], strict=True)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
