"""Processes the dev cluster owns, tracked by pid files and stopped by pid only (never by name).

A pid is trusted only while /proc/<pid>/cmdline still contains the marker the process was started with (the
cluster's directory), so a recycled pid is never signalled. A zombie counts as gone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn


def _proc_state(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return stat.rsplit(")", 1)[1].split()[0]  # the field after "(comm)"


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return ""


def group_members(pgid: int) -> list[int]:
    """The live processes of process group `pgid` (the process runtime runs each pod as one group)."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if fields[0] not in ("Z", "X") and int(fields[2]) == pgid:
                members.append(int(entry))
    return sorted(members)


def is_alive(pid: int) -> bool:
    state = _proc_state(pid)
    return state is not None and state not in ("Z", "X")


def is_ours(pid: int, marker: str) -> bool:
    return is_alive(pid) and marker in cmdline(pid)


def read_pid(pid_file: Path) -> int | None:
    try:
        return int(pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def _reap(pid: int) -> None:
    """Collects the exit status when the process is our child, so it does not linger as a zombie."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _wait_gone(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        _reap(pid)
        if not is_alive(pid):
            return True
        time.sleep(0.05)
    return not is_alive(pid)


def stop(pid: int, marker: str | None = None, grace: float = 10.0) -> bool:
    """SIGTERM, then SIGKILL after `grace` seconds. True when the process is gone (or never was ours)."""
    if not is_alive(pid):
        _reap(pid)
        return True
    if marker is not None and not is_ours(pid, marker):
        if cmdline(pid):
            return True  # someone else's process on a recycled pid
        # Alive with an empty command line: it is exiting (its memory is released before it turns zombie), e.g.
        # after kwokctl's own SIGTERM on a loaded machine. Gone soon; not signalled, since the pid is unproven.
        return _wait_gone(pid, grace)
    for signum, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            return True
        if _wait_gone(pid, wait):
            return True
    return not is_alive(pid)


def start_detached(args: list[str], log_file: Path, pid_file: Path, env: dict | None = None) -> int:
    """Starts a helper in its own session (it outlives the CLI), stdout and stderr appended to log_file."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as log:
        process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True, close_fds=True, env=env)
    pid_file.write_text(f"{process.pid}\n")
    return process.pid


def python_module_command(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]


def log(message: str) -> None:
    """One timestamped line on stdout, which the helper processes' log files capture."""
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {message}", flush=True)


def run_until_signalled(body, ready_file: Path | None) -> None:
    """Runs a helper's `body(stop)` until SIGTERM or SIGINT sets `stop`; its ready file (written by the body once
    it serves) is gone before and after, so `up` never trusts a stale one."""
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    if ready_file:
        ready_file.unlink(missing_ok=True)
    try:
        body(stop)
    finally:
        if ready_file:
            ready_file.unlink(missing_ok=True)


def helper_main(main: Callable[[], int]) -> NoReturn:
    """The entry point of a helper process: runs main() and leaves at once. Its informer and worker threads may
    sit in a watch or a retry against an apiserver that is already gone; nothing they hold needs saving."""
    code = main()
    sys.stdout.flush()
    os._exit(code)
