"""A slow node, for real processes: the process groups of the pods on a node that `dev-cluster fault NODE --slow F`
slowed are stopped and continued in duty cycles (SIGSTOP, SIGCONT), so they get 1/F of the time they would: their
trainer computes F times slower and every rank of the job waits for it, as a throttled chip would make it.

Each PERIOD_SECONDS every throttled group is stopped, and each continued after its share of the period
(1 − 1/F); a group no longer throttled (the fault cleared, the pod going) is continued once and left alone.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable

PERIOD_SECONDS = 0.1


def stopped_share(factor: float) -> float:
    """The share of each period a group slowed F times is stopped."""
    return 1 - 1 / factor if factor > 1 else 0.0


def _signal(group: int, signum: int) -> None:
    try:
        os.killpg(group, signum)
    except (ProcessLookupError, PermissionError):
        pass  # the group is gone


class Throttle:
    """`targets()` → process-group id → slowness factor, read each period."""

    def __init__(self, targets: Callable[[], dict[int, float]], period: float = PERIOD_SECONDS):
        self.targets, self.period = targets, period
        self.held: set[int] = set()

    def run(self, stop: threading.Event) -> None:
        try:
            while not stop.is_set():
                self.cycle(stop)
        finally:
            self.release(set(self.held))

    def cycle(self, stop: threading.Event) -> None:
        try:
            groups = {group: share for group, factor in self.targets().items()
                      if (share := stopped_share(factor)) > 0}
        except RuntimeError:  # the runtime's tables changed under the read: next period
            groups = {}
        self.release(self.held - set(groups))
        start = time.monotonic()
        if not groups:
            stop.wait(self.period)
            return
        for group in groups:
            _signal(group, signal.SIGSTOP)
        self.held = set(groups)
        for group, share in sorted(groups.items(), key=lambda item: item[1]):
            time.sleep(max(0.0, start + share * self.period - time.monotonic()))
            _signal(group, signal.SIGCONT)
        stop.wait(max(0.0, start + self.period - time.monotonic()))

    def release(self, groups: set[int]) -> None:
        for group in groups:
            _signal(group, signal.SIGCONT)
        self.held -= groups
