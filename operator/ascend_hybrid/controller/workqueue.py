"""A keyed work queue with delays, de-duplication and per-key exclusivity (the controller-runtime pattern).

Many events for one job collapse into one pending pass; a key is never handled by two workers at once.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Hashable


class WorkQueue:
    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._due: dict[Hashable, float] = {}
        self._heap: list[tuple[float, int, Hashable]] = []
        self._active: set[Hashable] = set()
        self._counter = 0
        self._closed = False

    def add(self, key: Hashable, delay: float = 0.0, *, first: bool = False) -> None:
        """Schedules a pass for `key` in `delay` seconds, or sooner if one is already due sooner. `first` puts it
        before every key already due: the head of the placement queue must not wait behind the passes of the
        jobs it holds back (a burst of 1 000 new jobs would otherwise move it one pass per burst)."""
        due = 0.0 if first else time.monotonic() + max(delay, 0.0)
        with self._condition:
            if self._closed or self._due.get(key, float("inf")) <= due:
                return
            self._due[key] = due
            self._counter += 1
            heapq.heappush(self._heap, (due, self._counter, key))
            self._condition.notify()

    def get(self, timeout: float | None = None) -> Hashable | None:
        """The next due key that no other worker holds; None when closed or on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._condition:
            while not self._closed:
                now = time.monotonic()
                wait = None if deadline is None else deadline - now
                if wait is not None and wait <= 0:
                    return None
                skipped = []
                while self._heap:
                    due, counter, key = self._heap[0]
                    if self._due.get(key) != due:  # superseded by an earlier add
                        heapq.heappop(self._heap)
                        continue
                    if due > now:
                        wait = due - now if wait is None else min(wait, due - now)
                        break
                    heapq.heappop(self._heap)
                    if key in self._active:
                        skipped.append((due, counter, key))
                        continue
                    del self._due[key]
                    self._active.add(key)
                    for item in skipped:
                        heapq.heappush(self._heap, item)
                    return key
                for item in skipped:
                    heapq.heappush(self._heap, item)
                # a key held by another worker comes back with done(), which notifies: no polling needed
                self._condition.wait(wait)
            return None

    def done(self, key: Hashable) -> None:
        with self._condition:
            self._active.discard(key)
            self._condition.notify_all()

    def close(self) -> None:
        with self._condition:
            self._closed = True
            self._condition.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed
