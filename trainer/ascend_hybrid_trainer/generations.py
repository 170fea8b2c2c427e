"""The launcher's life with the recovery channel (control.py; docs/reliability.md, "The launchers' channel"): run
the ranks of a rank generation; when the operator writes a newer one, stop them and start them again from the
newest committed checkpoint; when one fails, report the pod's cause and wait for the next generation."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import signal
import time
from collections.abc import Mapping
from typing import cast

from . import checkpoint, control
from .failures import Verdict
from .launcher import DYNAMIC, POLL_SECONDS, RANKTABLE, Launcher, PodLaunch, describe_exit, stop
from .rank_table import read_rank_table

RESTART_GRACE_SECONDS = 3.0    # healthy ranks stopped for a new generation: their work is redone from the checkpoint
SCHEDULER_WAIT_SECONDS = 60.0  # a restarting pod waits this long at most for pod 0's new scheduler
RANK_TABLE_WAIT_SECONDS = 300.0  # a kept pod waits this long at most for the mounted table of its new world


def pod_zero_name(pod_name: str, pod_index: int) -> str:
    """Pod 0's name from this pod's: the operator names pods `<job>-a<attempt>-<index>`."""
    suffix = f"-{pod_index}"
    return (pod_name[:-len(suffix)] if pod_name.endswith(suffix) else pod_name) + "-0"


def moved(launch: PodLaunch, env: Mapping[str, str], world: Mapping, index: int,
          job_config: str) -> tuple[PodLaunch, dict[str, str]]:
    """This pod's launch and env in the world an elastic shrink kept it in: its new pod index and ranks, the world
    size, the degrees and job.json (its env still says the world it was made for; the chips are its own still)."""
    size = int(world["worldSize"])
    start = index * launch.local_workers
    moved_launch = dataclasses.replace(launch, pod_index=index, rank_start=start, world_size=size)
    moved_env = {**env, "RANK_SIZE": str(size), "MS_WORKER_NUM": str(size), "MS_NODE_RANK": str(index),
                 "RANK_START": str(start), "AHJ_PARALLEL": json.dumps(world["parallel"], sort_keys=True),
                 "AHJ_JOB_CONFIG": job_config}
    return moved_launch, moved_env


def resumed_from(env: Mapping[str, str]) -> int:
    """The step of the newest committed checkpoint the ranks will load (0 without one)."""
    root = env.get("AHJ_CHECKPOINT_DIR")
    try:
        latest = checkpoint.read_latest(root) if root else None
    except RuntimeError:
        return 0
    return int(latest["step"]) if latest else 0


class Generations:
    """The launcher's life with the recovery channel: run the ranks of a generation; on a new generation stop
    them and start again; on a failure report it and wait for the next generation."""

    def __init__(self, launcher: Launcher, channel: control.Channel, env: Mapping[str, str], device_ids: list[int],
                 chips: list[str]):
        self.launcher, self.channel, self.env, self.device_ids, self.chips = launcher, channel, env, device_ids, chips
        self.launch = launcher.launch
        self.pod_zero = pod_zero_name(channel.pod_name, self.launch.pod_index)
        self.recovery_wait = self.launch.recovery_wait
        self.world_attempt: int | None = None  # the kept pods' world this launcher runs in (None: its env's)
        self.interval_passed: str | None = None  # the checkpoint interval last written for the ranks

    def log(self, message: str) -> None:
        self.launcher.log(message)

    def run(self, generation: int) -> int:
        restarted = False
        while True:
            self.follow_world()
            if restarted:
                self.wait_for_scheduler(generation)
                if self.launcher.stop_signal is not None:
                    return 128 + self.launcher.stop_signal
                if self.channel.generation() > generation:
                    generation = self.channel.generation()
                    continue
            resumed = resumed_from(self.env)
            self.pass_interval()
            records = os.path.join(self.launcher.records, f"generation-{generation}")
            os.makedirs(records, exist_ok=True)
            self.launcher.start_processes(self.env, self.device_ids, self.chips, records)
            self.channel.report(control.STARTED, generation, resumedFrom=resumed)
            outcome, value = self.supervise(generation, resumed)
            if outcome == "exit":
                return cast(int, value)
            restarted = True
            if outcome == "restart":
                generation = cast(int, value)
                continue
            verdict = cast(Verdict, value)
            record = verdict.record
            self.channel.report(control.FAILED, generation, cause=record.cause, rank=record.rank, step=record.step,
                                detail=record.detail)
            self.log(f"ranks of generation {generation} failed: {record.cause}; waiting up to "
                     f"{self.recovery_wait:.0f}s for the operator's next generation")
            self.channel.wait(functools.partial(self.moved_on, generation), self.recovery_wait)
            if self.launcher.stop_signal is not None:
                self.log(f"stopped by {signal.Signals(self.launcher.stop_signal).name}")
                return 128 + self.launcher.stop_signal
            if self.channel.generation() <= generation:
                return self.launcher.end_with(verdict)
            generation = self.channel.generation()

    def pass_interval(self) -> None:
        """The operator's checkpoint interval (an auto job's) to the ranks: the file they read before each step,
        replaced whole when it changes."""
        value = self.channel.checkpoint_interval()
        if value is None or value == self.interval_passed:
            return
        path = os.path.join(self.launcher.records, checkpoint.INTERVAL_FILE)
        temporary = f"{path}.tmp"
        with open(temporary, "w", encoding="utf-8") as handle:
            handle.write(value)
        os.replace(temporary, path)
        self.interval_passed = value
        self.log(f"checkpoint interval from the operator: {value}")

    def follow_world(self) -> bool:
        """Take the world the operator wrote beside the generation for the pods an elastic shrink kept (their env
        says the world they were made for). A pod the world does not name runs by its env: it was made for the
        world it runs in (or is one the shrink did not keep, which the operator deletes). True when it moved."""
        world = self.channel.world()
        index = None if world is None else world["pods"].get(self.channel.pod_name)
        if world is None or not isinstance(index, int):
            return False
        if world.get("attempt") == self.world_attempt and index == self.launch.pod_index:
            return False
        job_config = os.path.join(self.launcher.records, f"job-{world.get('attempt')}.json")
        with open(job_config, "w", encoding="utf-8") as handle:
            json.dump(world.get("jobConfig") or {}, handle)
        launch, env = moved(self.launch, self.env, world, index, job_config)
        self.log(f"world of attempt {world.get('attempt')}: this pod runs as pod {index} of "
                 f"{len(world['pods'])}, ranks {launch.rank_start}..{launch.rank_start + launch.local_workers - 1} "
                 f"of {launch.world_size}")
        self.launcher.launch = self.launch = launch
        self.env = env
        self.pod_zero = str(world.get("scheduler") or self.pod_zero)
        self.world_attempt = world.get("attempt")
        if launch.launch_mode == RANKTABLE:
            self.wait_for_rank_table(launch.world_size)
        return True

    def wait_for_rank_table(self, size: int) -> None:
        """Rank-table launch (HCCL reads the file): wait until the mounted table lists the new world's ranks."""
        path = self.env["RANK_TABLE_FILE"]
        deadline = time.monotonic() + RANK_TABLE_WAIT_SECONDS
        while time.monotonic() < deadline and self.launcher.stop_signal is None:
            table = read_rank_table(path)
            if table and table.get("status") == "completed" and int(table.get("server_count") or 0) and sum(
                    len(server.get("device") or ()) for server in table.get("server_list") or ()) == size:
                return
            time.sleep(1.0)
        self.log(f"the rank table at {path} did not list {size} ranks within {RANK_TABLE_WAIT_SECONDS:.0f}s")

    def moved_on(self, generation: int) -> bool:
        return self.channel.generation() > generation or self.launcher.stop_signal is not None

    def wait_for_scheduler(self, generation: int) -> None:
        """A pod other than pod 0 starts its workers only once pod 0 runs the new generation's scheduler: a worker
        that registered with the old one would lose it a moment later."""
        if not (self.launch.launch_mode == DYNAMIC and self.launch.world_size > 1) or self.launch.runs_scheduler:
            return
        if not self.channel.wait(lambda: self.scheduler_runs(generation) or self.channel.generation() > generation
                                 or self.launcher.stop_signal is not None, SCHEDULER_WAIT_SECONDS):
            self.log(f"pod 0 did not report generation {generation} within {SCHEDULER_WAIT_SECONDS:.0f}s; starting")

    def scheduler_runs(self, generation: int) -> bool:
        report = self.channel.report_of(self.pod_zero)
        return report.get("generation") == generation and report.get("state") in (control.STARTED, control.STEPPING)

    def supervise(self, generation: int, resumed: int) -> tuple[str, object]:
        """("exit", code) when the pod ends, ("restart", generation) for a new generation, ("failed", verdict)."""
        launcher, stepped = self.launcher, False
        while True:
            launcher._note_exits()
            if launcher.stop_signal is not None:
                stop(launcher.children, self.launch.stop_grace)
                self.log(f"stopped by {signal.Signals(launcher.stop_signal).name}; stopped every local process")
                return "exit", 128 + launcher.stop_signal
            wanted = self.channel.generation()
            if wanted > generation:
                stop(launcher.children, min(self.launch.stop_grace, RESTART_GRACE_SECONDS))
                self.log(f"rank generation {wanted} (was {generation}): stopped every local process; starting them "
                         f"again from the newest committed checkpoint")
                return "restart", wanted
            failed = launcher.failed_child()
            if failed is not None:
                stop([child for child in launcher.children if child is not failed], self.launch.stop_grace)
                launcher._note_exits()
                self.log(f"{failed.name} (pid {failed.process.pid}) exited with "
                         f"{describe_exit(failed.process.returncode)}; stopped the other local processes")
                return "failed", launcher.verdict()
            if all(child.process.poll() == 0 for child in launcher.children):
                self.log(f"all {len(launcher.children)} local processes succeeded")
                return "exit", 0
            self.pass_interval()
            if not stepped:
                step = launcher.progress_step()
                if step is not None and step >= resumed + 2:  # step resumed+1 is done: training runs again
                    self.channel.report(control.STEPPING, generation, resumedFrom=resumed, step=resumed + 1)
                    stepped = True
            time.sleep(POLL_SECONDS)


def live(launcher: Launcher, channel: control.Channel, env: Mapping[str, str], device_ids: list[int],
         chips: list[str], generation: int) -> int:
    """The launcher's life across rank generations, from `generation` on (launcher.AcrossGenerations)."""
    return Generations(launcher, channel, env, device_ids, chips).run(generation)
