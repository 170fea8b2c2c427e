"""`ascend-hybrid-trainer launch`: the image entrypoint, one per pod (design §9).

Waits for the rank table to be completed, starts the MindSpore scheduler in pod 0 (dynamic cluster), then the
pod's MS_LOCAL_WORKER workers; exits 0 only when every local process succeeded. On the first failure it stops
the other local processes and decides the pod's cause from its processes' termination records and stderr
(failures.pod_verdict).

With the recovery channel (control.py: the job's LauncherChannel `<job>-recovery`, reached with the pod's
ServiceAccount token) the pod outlives its ranks: the launcher reports the cause there and waits for the operator's
next rank generation, then starts its processes again (pod 0's scheduler first) from the newest committed checkpoint; a new
generation also stops healthy ranks and starts them again (RestartRanks, docs/reliability.md). Without the
channel, or when no new generation comes within AHJ_RECOVERY_WAIT_SECONDS, it writes the pod's record to
AHJ_TERMINATION_LOG (default /dev/termination-log) and exits with the cause's code; its last log lines name the
failing rank and the cause.
"""

from __future__ import annotations

import collections
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import IO, Protocol, cast

from . import checkpoint, control, defaults, failures
from .config import ConfigError, EnvSettings, load_run_config
from .device import detect_device_target, logical_device_id, visible_devices
from .rank_table import RankTableTimeout, local_device_ids, plain_rank_table_file, wait_for_completed
from .strategy import validate_run

DYNAMIC, RANKTABLE = "dynamic", "ranktable"
CLUSTER_VARIABLES = ("MS_ROLE", "MS_SCHED_HOST", "MS_SCHED_PORT", "MS_WORKER_NUM", "MS_NODE_ID", "MS_WORKER_IP")
POLL_SECONDS = 0.2


@dataclass(frozen=True)
class PodLaunch:
    pod_index: int
    local_workers: int
    rank_start: int
    world_size: int
    sched_host: str | None
    sched_port: str | None
    pod_ip: str | None
    rank_table_file: str
    launch_mode: str
    ranktable_timeout: float
    stop_grace: float
    recovery_wait: float = 600.0

    @property
    def ranks(self) -> range:
        return range(self.rank_start, self.rank_start + self.local_workers)

    @property
    def runs_scheduler(self) -> bool:
        return self.launch_mode == DYNAMIC and self.world_size > 1 and self.pod_index == 0


def _required_int(env: Mapping[str, str], name: str, fallback: str | None = None) -> int:
    raw = env.get(name) or (env.get(fallback) if fallback else None)
    if raw in (None, ""):
        raise ConfigError(f"{name} is not set; the operator injects it into every pod (design §8)")
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r}: must be an integer") from None


def read_pod_launch(env: Mapping[str, str]) -> PodLaunch:
    world = _required_int(env, "RANK_SIZE", fallback="MS_WORKER_NUM")
    local_workers = _required_int(env, "MS_LOCAL_WORKER")
    rank_start = _required_int(env, "RANK_START")
    mode = env.get("AHJ_LAUNCH_MODE") or DYNAMIC
    if mode not in (DYNAMIC, RANKTABLE):
        raise ConfigError(f"AHJ_LAUNCH_MODE={mode!r}: must be {DYNAMIC} (MindSpore scheduler) or {RANKTABLE}")
    if env.get("MS_WORKER_NUM") and _required_int(env, "MS_WORKER_NUM") != world:
        raise ConfigError(f"MS_WORKER_NUM={env['MS_WORKER_NUM']} and RANK_SIZE={world} must be equal")
    if local_workers < 1 or rank_start < 0 or rank_start + local_workers > world:
        raise ConfigError(f"RANK_START={rank_start} + MS_LOCAL_WORKER={local_workers} must lie within RANK_SIZE="
                          f"{world}")
    if not env.get("RANK_TABLE_FILE"):
        raise ConfigError("RANK_TABLE_FILE is not set; the operator mounts hccl.json and names it there")
    settings = EnvSettings.from_env(env)
    launch = PodLaunch(
        pod_index=_required_int(env, "MS_NODE_RANK") if env.get("MS_NODE_RANK") else rank_start // local_workers,
        local_workers=local_workers, rank_start=rank_start, world_size=world, sched_host=env.get("MS_SCHED_HOST"),
        sched_port=env.get("MS_SCHED_PORT"), pod_ip=env.get("POD_IP") or None,
        rank_table_file=env["RANK_TABLE_FILE"], launch_mode=mode,
        ranktable_timeout=settings.ranktable_timeout_seconds, stop_grace=settings.stop_grace_seconds,
        recovery_wait=settings.recovery_wait_seconds)
    if mode == DYNAMIC and world > 1 and not (launch.sched_host and launch.sched_port):
        raise ConfigError("MS_SCHED_HOST and MS_SCHED_PORT must be set for the dynamic cluster launch")
    return launch


def scheduler_host(launch: PodLaunch) -> str | None:
    """MindSpore's scheduler listens on exactly MS_SCHED_HOST, and the Service's ClusterIP is no local address
    inside pod 0: there the scheduler and the local workers use the pod's own IP (design §9)."""
    return launch.pod_ip if launch.pod_index == 0 and launch.pod_ip else launch.sched_host


def worker_env(base: Mapping[str, str], launch: PodLaunch, local_index: int, device_id: int,
               pod_chips: list[str]) -> dict[str, str]:
    rank = launch.rank_start + local_index
    env = {key: value for key, value in base.items() if key not in CLUSTER_VARIABLES}
    env.update(RANK_ID=str(rank), RANK_SIZE=str(launch.world_size), DEVICE_ID=str(device_id),
               AHJ_LOCAL_RANK=str(local_index), AHJ_LAUNCH_MODE=launch.launch_mode,
               AHJ_POD_CHIPS=",".join(pod_chips))
    env.setdefault("GLOG_v", "3")  # MindSpore's own INFO/WARNING chatter off unless asked for
    set_topology_timeout(env)
    if launch.world_size > 1 and launch.launch_mode == DYNAMIC:
        # read_pod_launch refuses a dynamic multi-rank launch without MS_SCHED_HOST: the host is set here
        env.update(MS_ROLE="MS_WORKER", MS_NODE_ID=str(rank), MS_WORKER_NUM=str(launch.world_size),
                   MS_SCHED_HOST=cast(str, scheduler_host(launch)), MS_SCHED_PORT=str(launch.sched_port))
        if launch.pod_ip:
            env["MS_WORKER_IP"] = launch.pod_ip  # else MindSpore guesses an interface
    return env


def scheduler_env(base: Mapping[str, str], launch: PodLaunch) -> dict[str, str]:
    env = {key: value for key, value in base.items() if key not in CLUSTER_VARIABLES}
    # only a dynamic multi-rank launch runs a scheduler, and read_pod_launch refuses one without MS_SCHED_HOST
    env.update(MS_ROLE="MS_SCHED", MS_SCHED_HOST=cast(str, scheduler_host(launch)),
               MS_SCHED_PORT=str(launch.sched_port), MS_WORKER_NUM=str(launch.world_size), RANK_ID="0")
    env.setdefault("GLOG_v", "3")
    set_topology_timeout(env)
    return env


def set_topology_timeout(env: dict[str, str]) -> None:
    """One connect timeout for the job: MindSpore's cluster formation (MS_TOPO_TIMEOUT, 30 minutes by default)
    waits as long as HCCL's link set-up (HCCL_CONNECT_TIMEOUT, the job's hccl.connectTimeoutSeconds), so a
    scheduler that cannot be reached fails the pod as HCCLConnectTimeout in that time, on CPU too. An explicit
    MS_TOPO_TIMEOUT wins."""
    if env.get("HCCL_CONNECT_TIMEOUT") and not env.get("MS_TOPO_TIMEOUT"):
        env["MS_TOPO_TIMEOUT"] = env["HCCL_CONNECT_TIMEOUT"]


def exit_code_of(returncode: int) -> int:
    """A child killed by signal s reports -s; the shell convention 128 + s keeps the launcher's code non-zero."""
    return returncode if returncode >= 0 else 128 - returncode


def describe_exit(returncode: int) -> str:
    return failures.describe_exit(returncode)


TAIL_LINES = 200  # stderr lines kept per process for the classification


@dataclass
class Child:
    name: str
    rank: int | None
    process: subprocess.Popen
    record_path: str
    tail: collections.deque = field(default_factory=lambda: collections.deque(maxlen=TAIL_LINES))
    reader: threading.Thread | None = None
    ended_at: float | None = None
    stopped: bool = False


def die_with_parent() -> None:
    """Run in a child before exec: it gets SIGKILL when its parent dies, so no worker outlives a killed
    launcher (and no launcher a killed local runner)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def forward(child: Child) -> None:
    """Pass a child's stderr through to the pod's log, keeping its last lines (the MindSpore and CANN C++ logs
    that say why it ended are there, not in the Python exception)."""
    for raw in cast(IO[bytes], child.process.stderr):  # start() opens it with stderr=PIPE
        line = raw.decode("utf-8", errors="replace")
        sys.stderr.write(line)
        sys.stderr.flush()
        child.tail.append(line.rstrip("\n"))


def start(name: str, role: str, env: Mapping[str, str], rank: int | None, records: str) -> Child:
    command = [sys.executable, "-m", "ascend_hybrid_trainer", role]
    record_path = os.path.join(records, f"{role}-{'scheduler' if rank is None else rank}.json")
    process = subprocess.Popen(command, env={**env, "AHJ_TERMINATION_LOG": record_path}, stderr=subprocess.PIPE,
                               preexec_fn=die_with_parent)
    child = Child(name, rank, process, record_path)
    child.reader = threading.Thread(target=forward, args=(child,), daemon=True)
    child.reader.start()
    return child


def stop(children: list[Child], grace: float) -> None:
    alive = [child for child in children if child.process.poll() is None]
    for child in alive:
        child.stopped = True
        child.process.terminate()
    deadline = time.monotonic() + grace
    for child in alive:
        try:
            child.process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.process.kill()
            child.process.wait()


class AcrossGenerations(Protocol):
    """How a launcher lives once its recovery channel answers (generations.live): handed in by the entrypoint, so
    that this module, which supervises one generation, never imports the one that runs many."""

    def __call__(self, launcher: Launcher, channel: control.Channel, env: Mapping[str, str], device_ids: list[int],
                 chips: list[str], generation: int) -> int: ...


class Launcher:
    def __init__(self, launch: PodLaunch, log, termination_log: str = defaults.ENV["AHJ_TERMINATION_LOG"],
                 across_generations: AcrossGenerations | None = None):
        self.launch, self.log, self.termination_log = launch, log, termination_log
        self.across_generations = across_generations
        self.children: list[Child] = []
        self.stop_signal: int | None = None
        self.records = tempfile.mkdtemp(prefix="ahj-records-")
        self.oom_kills_at_start = failures.oom_kills()

    def _on_signal(self, signum, _frame) -> None:
        self.stop_signal = signum

    def _note_exits(self) -> None:
        for child in self.children:
            if child.ended_at is None and child.process.poll() is not None:
                child.ended_at = time.monotonic()

    def supervise(self) -> int:
        """Wait for every child; on the first failure (or a stop signal) stop the rest and report it last."""
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        while True:
            self._note_exits()
            if self.stop_signal is not None:
                stop(self.children, self.launch.stop_grace)
                self.log(f"stopped by {signal.Signals(self.stop_signal).name}; stopped every local process")
                return 128 + self.stop_signal
            failed = next((child for child in self.children
                           if child.process.poll() not in (None, 0)), None)
            if failed is not None:
                stop([child for child in self.children if child is not failed], self.launch.stop_grace)
                self._note_exits()
                code = failed.process.returncode
                self.log(f"{failed.name} (pid {failed.process.pid}) exited with {describe_exit(code)}; stopped "
                         f"the other local processes")
                return self.conclude()
            if all(child.process.poll() == 0 for child in self.children):
                self.log(f"all {len(self.children)} local processes succeeded")
                return 0
            time.sleep(POLL_SECONDS)

    def conclude(self) -> int:
        """The pod's cause, from every process's record and stderr: written as the pod's termination record."""
        return self.end_with(self.verdict())

    def end_with(self, verdict: failures.Verdict) -> int:
        failures.write_record(self.termination_log, verdict.record, self.log)
        record = verdict.record
        where = ", ".join(f"{name} {value}" for name, value in (("rank", record.rank), ("step", record.step))
                          if value is not None)
        self.log(f"cause {record.cause} (exit code {verdict.exit_code}){', ' + where if where else ''}: "
                 f"{record.detail}")
        return verdict.exit_code

    def verdict(self) -> failures.Verdict:
        """The pod's cause, from every process's record and stderr."""
        for child in self.children:
            if child.reader is not None:
                child.reader.join(timeout=2)  # a helper MindSpore forked may hold the pipe open: do not wait on it
        oom_now = failures.oom_kills()
        oom_happened = oom_now is not None and self.oom_kills_at_start is not None and \
            oom_now > self.oom_kills_at_start
        ended = [failures.Ended(
            name=child.name, rank=child.rank, returncode=child.process.returncode,
            order=child.ended_at if child.ended_at is not None else time.monotonic(), stopped=child.stopped,
            record=failures.read_record(child.record_path), tail=list(child.tail),
            oom_killed=oom_happened and child.process.returncode == -signal.SIGKILL and not child.stopped)
            for child in self.children]
        return failures.pod_verdict(ended)

    def run(self, env: Mapping[str, str]) -> int:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        try:
            return self._run(env)
        finally:
            shutil.rmtree(self.records, ignore_errors=True)

    def _run(self, env: Mapping[str, str]) -> int:
        launch = self.launch
        last_report = [0.0]

        def report_wait(status: str) -> None:
            if time.monotonic() - last_report[0] >= 30:
                last_report[0] = time.monotonic()
                self.log(f"waiting for rank table {launch.rank_table_file} (status: {status})")

        table = wait_for_completed(launch.rank_table_file, launch.ranktable_timeout, on_wait=report_wait)
        chips = local_device_ids(table, launch.ranks, launch.rank_table_file)
        plain = plain_rank_table_file(launch.rank_table_file, table, self.records)
        if plain != launch.rank_table_file:
            self.log(f"rank table {launch.rank_table_file} is compressed; the workers read {plain}")
            env = {**env, "RANK_TABLE_FILE": plain}
        visible = visible_devices(env)
        device_ids = [logical_device_id(chip, visible, rank) for chip, rank in zip(chips, launch.ranks)]
        channel = control.Channel.from_env(env, self.log) if self.across_generations else None
        if channel is not None:
            try:
                generation = channel.start()
            except control.ChannelUnavailable as error:
                self.log(f"no recovery channel ({error}): a failure ends this pod")
                channel = None
        if channel is None or self.across_generations is None:
            self.start_processes(env, device_ids, chips, self.records)
            return self.supervise()
        try:
            return self.across_generations(self, channel, env, device_ids, chips, generation)
        finally:
            channel.close()

    def start_processes(self, env: Mapping[str, str], device_ids: list[int], chips: list[str], records: str) -> None:
        launch = self.launch
        self.children = []
        if launch.runs_scheduler:
            self.children.append(start("MindSpore scheduler", "scheduler", scheduler_env(env, launch), None, records))
            self.log(f"started the MindSpore scheduler on {scheduler_host(launch)}:{launch.sched_port} "
                     f"(pid {self.children[-1].process.pid})")
        for index, rank in enumerate(launch.ranks):
            # the pod's ranks write their step timing where its metrics endpoint reads them (timing.py)
            child_env = {**worker_env(env, launch, index, device_ids[index], chips), "AHJ_TIMING_DIR": records,
                         "AHJ_CHECKPOINT_INTERVAL_FILE": os.path.join(self.records, checkpoint.INTERVAL_FILE)}
            child = start(f"rank {rank}", "worker", child_env, rank, records)
            self.children.append(child)
            self.log(f"started rank {rank} on device {device_ids[index]} (pid {child.process.pid})")

    def failed_child(self) -> Child | None:
        return next((child for child in self.children if child.process.poll() not in (None, 0)), None)

    def progress_step(self) -> int | None:
        """The highest step a local rank has begun (the workers' progress records)."""
        steps = [record.step for child in self.children if child.rank is not None
                 and (record := failures.read_record(child.record_path)) is not None and record.step is not None]
        return max(steps) if steps else None


def main(env: Mapping[str, str] = os.environ, across_generations: AcrossGenerations | None = None) -> int:
    """The pod's launch; with `across_generations` (the image's entrypoint passes generations.live) the pod
    outlives its ranks when the recovery channel answers, without it every failure ends the pod."""
    pod = [env.get("MS_NODE_RANK", "?")]  # the index read_pod_launch derives, once it has

    def log(message: str) -> None:
        print(f"[launcher pod {pod[0]}] {message}", file=sys.stderr, flush=True)

    termination_log = env.get("AHJ_TERMINATION_LOG") or defaults.ENV["AHJ_TERMINATION_LOG"]
    rank = None
    try:
        launch = read_pod_launch(env)
        pod[0], rank = str(launch.pod_index), launch.rank_start
        config = load_run_config(env)
        validate_run(config.parallelism, config.model, config.training, launch.world_size,
                     detect_device_target(env), launch.launch_mode)
        return Launcher(launch, log, termination_log, across_generations).run(env)
    except (ConfigError, RankTableTimeout) as error:
        record = failures.record_for_exception(error, rank, 0)
        log(f"error: {error}")
        failures.write_record(termination_log, record, log)
        return record.exit_code()
