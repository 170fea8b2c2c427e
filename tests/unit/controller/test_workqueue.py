"""The keyed delaying work queue: de-duplication, delays, per-key exclusivity, wake-up on done()."""

from __future__ import annotations

import threading
import time

from ascend_hybrid.controller.workqueue import WorkQueue


def test_many_adds_of_one_key_collapse_into_one_pass_at_the_earliest_due_time():
    queue = WorkQueue()
    queue.add("job", 30.0)
    queue.add("job", 0.0)
    queue.add("job", 10.0)
    assert queue.get(timeout=1) == "job"
    assert queue.get(timeout=0.2) is None


def test_a_delayed_key_comes_out_no_sooner_than_its_delay():
    queue = WorkQueue()
    started = time.monotonic()
    queue.add("job", 0.3)
    assert queue.get(timeout=2) == "job"
    assert time.monotonic() - started >= 0.29


def test_a_key_is_never_handed_to_two_workers_and_comes_back_when_done():
    queue = WorkQueue()
    queue.add("job")
    assert queue.get(timeout=1) == "job"
    queue.add("job")  # an event while a worker holds it
    queue.add("other")
    assert queue.get(timeout=1) == "other"
    got: list = []
    waiter = threading.Thread(target=lambda: got.append(queue.get(timeout=5)))
    waiter.start()
    time.sleep(0.2)
    assert got == []
    started = time.monotonic()
    queue.done("job")  # wakes the waiting worker at once, without polling
    waiter.join(timeout=5)
    assert got == ["job"] and time.monotonic() - started < 1.0


def test_close_wakes_every_waiting_worker():
    queue = WorkQueue()
    got: list = []
    waiter = threading.Thread(target=lambda: got.append(queue.get()))
    waiter.start()
    time.sleep(0.1)
    queue.close()
    waiter.join(timeout=2)
    assert got == [None] and queue.closed


def test_a_key_added_first_goes_before_every_key_already_due_and_first_ones_keep_their_order():
    queue = WorkQueue()
    for index in range(5):
        queue.add(f"burst-{index}")
    queue.add("head", first=True)
    queue.add("next-head", first=True)
    queue.add("burst-3", first=True)  # already due: moved before the rest of the burst too
    taken = [queue.get(timeout=1) for _ in range(7)]
    assert taken == ["head", "next-head", "burst-3", "burst-0", "burst-1", "burst-2", "burst-4"]
    queue.close()
