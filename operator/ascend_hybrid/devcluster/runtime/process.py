"""One pod's container as a local process group (the IO half of the process runtime's "kubelet").

The process leads its own session and process group, so signals reach everything it starts (the trainer's
launcher, its MindSpore scheduler and workers). It gets SIGKILL if the runtime dies (PR_SET_PDEATHSIG; the
launcher does the same for its children), so a killed runtime leaves nothing behind. stdout and stderr go, line
by line, into the pod's CRI-format log file, which kwok serves to `kubectl logs`. When the group's leader exits,
whatever is left of the group is killed, as a container's processes end with its PID 1.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

from ascend_hybrid.devcluster.runtime.podstatus import cri_log_line

PR_SET_PDEATHSIG = 1
MAX_RECORD_BYTES = 16 * 1024  # the kubelet's CRI log record limit; longer lines become P records
_libc = ctypes.CDLL(None, use_errno=True)
_prctl = _libc.prctl  # resolved here, in the parent: the forked child must not take the loader's locks


def _die_with_runtime() -> None:
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def exit_code_of(returncode: int) -> int:
    """A process ended by signal s reports -s; a container's exit code is 128 + s (137 for SIGKILL)."""
    return returncode if returncode >= 0 else 128 - returncode


class PodProcess:
    def __init__(self, argv: tuple[str, ...], env: dict[str, str], cwd: Path, log_file: Path):
        self.argv, self.env, self.cwd, self.log_file = argv, env, cwd, log_file
        self.process: subprocess.Popen | None = None
        self.pumps: list[threading.Thread] = []
        self.log_lock = threading.Lock()
        self.exit_code: int | None = None

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def container_id(self) -> str | None:
        """The runtime's ID of the container: process://<pgid> (the group leads its own session)."""
        return f"process://{self.pid}"

    def start(self) -> int:
        """Starts the group and its log pumps; raises OSError when the command cannot be executed. Must be called
        from a thread that lives as long as the runtime: PR_SET_PDEATHSIG fires when the forking thread ends."""
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        self.log_file.touch()
        self.process = subprocess.Popen(
            list(self.argv), env=self.env, cwd=self.cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, start_new_session=True, close_fds=True, preexec_fn=_die_with_runtime)
        self.pumps = [threading.Thread(target=self._pump, args=(stream, name), daemon=True,
                                       name=f"log-{self.process.pid}-{name}")
                      for stream, name in ((self.process.stdout, "stdout"), (self.process.stderr, "stderr"))]
        for pump in self.pumps:
            pump.start()
        return self.process.pid

    def _pump(self, stream, name: str) -> None:
        with open(self.log_file, "ab") as log:
            for chunk in iter(lambda: stream.readline(MAX_RECORD_BYTES), b""):
                with self.log_lock:
                    log.write(cri_log_line(time.time_ns(), name, chunk))
                    log.flush()
        stream.close()

    def poll(self) -> int | None:
        """The container's exit code once the leader ended (the rest of its group is then killed), else None."""
        if self.exit_code is None and self.process is not None and self.process.poll() is not None:
            self.exit_code = exit_code_of(self.process.returncode)
            self.end_rest()
            for pump in self.pumps:
                pump.join(timeout=2)  # the last lines reach the log before the end is reported
        return self.exit_code

    def end_rest(self) -> None:
        """The leader ended: what is left of its group goes with it."""
        self.signal_group(signal.SIGKILL)

    def signal_group(self, signum: int) -> None:
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass  # the whole group is gone already
