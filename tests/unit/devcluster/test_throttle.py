"""The process runtime's throttle (devcluster/runtime/throttle.py): a slowed pod's process group gets 1/F of the time,
and is running again once its node is no longer slow."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

from ascend_hybrid.devcluster.runtime.throttle import Throttle, stopped_share


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def state(pid: int) -> str:
    with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
        return handle.read().rsplit(")", 1)[1].split()[0]


def test_the_share_a_slowed_group_is_stopped():
    assert [stopped_share(f) for f in (0.5, 1.0, 2.0, 4.0)] == [0.0, 0.0, 0.5, 0.75]


def test_a_slowed_group_gets_a_quarter_of_the_time_and_runs_freely_once_released():
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
    factor = {busy.pid: 4.0}
    stop = threading.Event()
    worker = threading.Thread(target=Throttle(lambda: dict(factor), period=0.05).run, args=(stop,))
    try:
        time.sleep(0.3)  # its interpreter started
        before, started = cpu_seconds(busy.pid), time.monotonic()
        worker.start()
        time.sleep(2.0)
        used, wall = cpu_seconds(busy.pid) - before, time.monotonic() - started
        assert used <= 0.4 * wall, (used, wall)  # a quarter of the time, with room for the clock ticks
        factor.clear()  # the fault cleared: continued once, then left alone
        time.sleep(0.3)
        assert state(busy.pid) != "T"
    finally:
        stop.set()
        if worker.is_alive():
            worker.join(timeout=2)
        busy.kill()
        busy.wait()
