"""Reading what a Controller's work queue holds, for the unit tests of what wakes which job."""

from __future__ import annotations


def drain(controller) -> set:
    """Every key queued within a second of the last one (wake_pending queues in 0.5 s), each marked done."""
    keys = set()
    while (key := controller.queue.get(timeout=1.0)) is not None:
        keys.add(key)
        controller.queue.done(key)
    return keys
