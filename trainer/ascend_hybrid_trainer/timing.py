"""Per-rank step timing: how long each step took this rank, and how much of it was the rank's own compute (forward
and backward) against the wait in the collectives that follow (the gradient all-reduce waits for the slowest rank).

In a synchronous job every rank's step takes as long as the slowest rank's: the step time says the job is slow,
only the compute share says which rank is. Each worker keeps the steps of its last WINDOW_SECONDS and writes their
means to `<AHJ_TIMING_DIR>/rank-<rank>.json` (the launcher's directory for the generation, shared by the pod's
ranks); the pod's metrics endpoint (local rank 0) serves every local rank's figures (metrics.RankTimingCollector).
"""

from __future__ import annotations

import collections
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

WINDOW_SECONDS = 15.0   # the figures are the means of the steps that ended this recently (at least MIN_STEPS)
MIN_STEPS = 2
WARMUP_STEPS = 3        # a process's first steps hold its graph compilation and warm-up: not timed
WRITE_SECONDS = 1.0     # a rank writes its file at most this often
FILE_PREFIX = "rank-"


@dataclass(frozen=True)
class RankFigures:
    rank: int
    step: int              # the last step this rank completed
    steps: int             # steps in the window
    step_seconds: float    # mean wall time of a step
    compute_seconds: float | None  # mean of the rank's own compute; None where the step is one compiled graph
    wait_seconds: float | None     # mean of the rest: the collectives' wait and the update

    def as_json(self) -> dict:
        return {"rank": self.rank, "step": self.step, "steps": self.steps, "stepSeconds": self.step_seconds,
                "computeSeconds": self.compute_seconds, "waitSeconds": self.wait_seconds}


class RankTiming:
    """The steps of one rank's recent window, written to its file in `directory` (None: kept in memory only)."""

    def __init__(self, rank: int, directory: str | None, clock: Callable[[], float] = time.monotonic):
        self.rank, self.directory, self.clock = rank, directory, clock
        self.window: collections.deque[tuple[float, float, float | None]] = collections.deque()
        self.step = 0
        self.written = float("-inf")
        self.skipped = 0

    def record(self, step: int, seconds: float, compute: float | None) -> None:
        now = self.clock()
        self.step = step
        if self.skipped < WARMUP_STEPS:
            self.skipped += 1
            return
        self.window.append((now, seconds, compute))
        # the window: the steps of the last WINDOW_SECONDS, at least MIN_STEPS, and at least MIN_STEPS timed ones
        # while older ones are there (one step in several is timed on Ascend)
        while len(self.window) > MIN_STEPS and now - self.window[0][0] > WINDOW_SECONDS and (
                self.window[0][2] is None or sum(item[2] is not None for item in self.window) > MIN_STEPS):
            self.window.popleft()
        if self.directory and now - self.written >= WRITE_SECONDS:
            self.written = now
            write(self.directory, self.figures())

    def figures(self) -> RankFigures:
        """The window's mean step; the mean compute of its timed steps, and their wait (their step less it)."""
        count = len(self.window)
        seconds = sum(item[1] for item in self.window) / count if count else 0.0
        timed = [(item[1], item[2]) for item in self.window if item[2] is not None]
        if not timed:
            return RankFigures(self.rank, self.step, count, seconds, None, None)
        compute = sum(own for _, own in timed) / len(timed)
        waited = sum(took for took, _ in timed) / len(timed) - compute
        return RankFigures(self.rank, self.step, count, seconds, compute, max(0.0, waited))


def write(directory: str, figures: RankFigures) -> None:
    path = os.path.join(directory, f"{FILE_PREFIX}{figures.rank}.json")
    temporary = f"{path}.tmp"
    try:
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(figures.as_json(), handle)
        os.replace(temporary, path)
    except OSError:
        pass  # the figures are for watching the job: a full disk must not stop training


def read_all(directory: str | None) -> list[RankFigures]:
    """Every rank's last figures in `directory` (unreadable files skipped)."""
    if not directory:
        return []
    try:
        names = sorted(name for name in os.listdir(directory)
                       if name.startswith(FILE_PREFIX) and name.endswith(".json"))
    except OSError:
        return []
    found = []
    for name in names:
        try:
            with open(os.path.join(directory, name), encoding="utf-8") as handle:
                raw = json.load(handle)
            found.append(RankFigures(int(raw["rank"]), int(raw["step"]), int(raw["steps"]), float(raw["stepSeconds"]),
                                     _number(raw.get("computeSeconds")), _number(raw.get("waitSeconds"))))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return found


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
