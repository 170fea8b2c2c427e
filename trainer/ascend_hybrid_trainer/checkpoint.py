"""Where checkpoints live on the claim and which one a restart resumes from. Pure file bookkeeping; the worker
does the MindSpore save/load.

Layout under AHJ_CHECKPOINT_DIR (default /checkpoints, the job's claim):
    rank_<r>/step_<n>.ckpt   parameters and optimizer state of rank r after step n
    latest.json              {"step": n, "loss": x, ...}: written last, after every rank's file of step n is
                             complete, so a job killed mid-save resumes from the previous step, never a torn one.
In data-parallel mode every rank holds the same state, so only rank 0 writes and every rank reads rank_0.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from .rank_table import write_json_atomically

LATEST = "latest.json"
INTERVAL_FILE = "checkpoint-interval.json"  # in the launcher's directory: the operator's interval for an auto job
CHECKPOINT_NAME = re.compile(r"^step_(\d+)\.ckpt$")


def rank_directory(root: str, rank: int) -> str:
    return os.path.join(root, f"rank_{rank}")


def checkpoint_file(root: str, rank: int, step: int) -> str:
    return os.path.join(rank_directory(root, rank), f"step_{step}.ckpt")


def read_latest(root: str) -> dict[str, Any] | None:
    """The newest committed checkpoint's record, or None for a fresh start."""
    try:
        with open(os.path.join(root, LATEST), encoding="utf-8") as handle:
            record = json.load(handle)
    except FileNotFoundError:
        return None
    except json.JSONDecodeError as error:
        raise RuntimeError(f"{os.path.join(root, LATEST)} is not valid JSON ({error}); remove it to start over "
                           f"or restore it to resume") from None
    if not isinstance(record, dict) or not isinstance(record.get("step"), int):
        raise RuntimeError(f"{os.path.join(root, LATEST)}: expected an object with an integer \"step\", got "
                           f"{record!r}")
    return record


def commit(root: str, step: int, loss: float, world_size: int, mode: str) -> None:
    write_json_atomically(os.path.join(root, LATEST),
                          {"step": step, "loss": loss, "worldSize": world_size, "mode": mode})


def steps_on_disk(directory: str) -> list[int]:
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(int(match.group(1)) for match in map(CHECKPOINT_NAME.match, names) if match)


def steps_to_prune(steps: list[int], committed: int, keep: int) -> list[int]:
    """Older checkpoints beyond the `keep` newest committed ones; never the committed one or anything newer
    (a newer file is a save still waiting for its commit)."""
    committed_or_older = sorted(step for step in steps if step <= committed)
    return committed_or_older[:-keep] if keep > 0 and len(committed_or_older) > keep else []


class Interval:
    """The steps a rank saves at: the multiples of `every`. Where the launcher passes the operator's interval of an
    `everySteps: auto` job (AHJ_CHECKPOINT_INTERVAL_FILE, JSON {"everySteps", "fromStep", "previousEverySteps"},
    rewritten when it changes), the new one from its fromStep on: every rank of the job changes at the same step; a
    process that starts before fromStep saves at previousEverySteps until then, as the ranks that run on do. A
    "saveAt" step in it is one save more (the operator asks for it before it replaces a slow node's pod)."""

    def __init__(self, every: int, path: str | None = None):
        self.every, self.path = every, path
        self.seen: float | None = None
        self.upcoming: tuple[int, int] | None = None
        self.save_at: int | None = None
        self.fresh = True  # told nothing yet: a process that starts takes the interval its peers save at

    def due(self, step: int) -> bool:
        self._read()
        if self.upcoming is not None and step >= self.upcoming[1]:
            self.every, self.upcoming = self.upcoming[0], None
        return step % self.every == 0 or step == self.save_at

    def told(self, raw: Any) -> None:
        """Takes the operator's interval as the file holds it (parsed); one that does not parse changes nothing."""
        try:
            every, start = int(raw["everySteps"]), int(raw.get("fromStep") or 0)
            save_at = int(raw["saveAt"]) if raw.get("saveAt") is not None else None
        except (ValueError, KeyError, TypeError, AttributeError):
            return
        self.save_at = save_at
        previous = raw.get("previousEverySteps")
        if self.fresh and isinstance(previous, int) and previous >= 1:
            self.every = previous  # before fromStep the processes that run on save at the one before
        self.fresh = False
        if every >= 1 and (every, start) != (self.every, 0):
            self.upcoming = (every, start)

    def _read(self) -> None:
        if not self.path:
            return
        try:
            changed = os.stat(self.path).st_mtime_ns
            if changed == self.seen:
                return
            with open(self.path, encoding="utf-8") as handle:
                raw = json.load(handle)
        except (OSError, ValueError):
            return  # none yet, or half written (it is replaced whole): the interval in force stays
        self.seen = changed
        self.told(raw)
