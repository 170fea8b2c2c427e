"""Polling with a deadline, for the CLI and for tests: the last value seen goes into the timeout message."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class WaitTimeout(AssertionError):
    """A condition did not hold in time (an AssertionError, so pytest shows it as a plain failure)."""


def wait_until(condition: Callable[[], T], timeout: float, what: str, interval: float = 0.2,
               describe: Callable[[], str] | None = None) -> T:
    """Calls condition() until it returns something truthy and returns that; raises WaitTimeout after `timeout`
    seconds, naming `what`, the last value (or the last exception) and describe() when given."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            last = condition()
            if last:
                return last
        except Exception as error:  # noqa: BLE001 - kept for the message; the condition may not hold yet
            last = error
        if time.monotonic() >= deadline:
            detail = f"; {describe()}" if describe else ""
            raise WaitTimeout(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r}){detail}")
        time.sleep(interval)
