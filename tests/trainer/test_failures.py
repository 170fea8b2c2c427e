"""What the launcher does when something goes wrong: a worker dies, a worker fails, the strategy cannot run
on this device, the rank table never completes."""

from __future__ import annotations

import json
import os
import re
import signal
import time

import psutil
import pytest

from support.trainer_harness import TRAINER, ProcessSet, pod_launch_envs, render_job, run_local

pytestmark = pytest.mark.trainer

FAILURE_DEADLINE_SECONDS = 60


def last_line(text: str) -> str:
    return [line for line in text.splitlines() if line.strip()][-1]


def test_killed_worker_fails_both_launchers_naming_the_rank(tmp_path):
    """Rank 1 is SIGKILLed mid-training. Pod 1's launcher sees it directly; pod 0's launcher learns it through
    MindSpore (its scheduler stops hearing from rank 1 and the job ends). Both exit non-zero in time, and no
    process of the job is left behind."""
    spec = {"parallelism": {"data": 2}, "npu": {"chip": "910B", "perPod": 1},
            "model": {"preset": "tiny", "layers": 2},  # a short compile: the test is about the failure
            "training": {"steps": 100000, "globalBatchSize": 2, "seqLength": 32}}
    envs = pod_launch_envs(tmp_path, render_job(tmp_path, spec, name="kill"))
    processes = ProcessSet()
    pods = [processes.start(TRAINER + ["launch"], env) for env in envs]
    try:
        processes.wait_for(lambda: '"step": 2' in pods[0].text("stdout"), 180, "rank 0 to finish step 2")
        started = re.search(r"started rank 1 on device \d+ \(pid (\d+)\)", pods[1].text("stderr"))
        victim = int(started.group(1))
        job_pids = [child.pid for root in pods for child in psutil.Process(root.process.pid).children()]
        os.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic()
        processes.wait_for(lambda: all(pod.process.poll() is not None for pod in pods),
                           FAILURE_DEADLINE_SECONDS + 30, "both launchers to exit")
    finally:
        processes.kill()
    processes.wait_all(10)
    exit_seconds = [pod_exit - killed_at for pod_exit in (processes.exited_at(pod) for pod in pods)]
    print(f"\nrank 1 killed: pod 1's launcher exited after {exit_seconds[1]:.1f} s, pod 0's after "
          f"{exit_seconds[0]:.1f} s")
    assert pods[1].process.returncode == 128 + signal.SIGKILL
    assert re.search(r"rank 1 \(pid \d+\) exited with code -9 \(killed by SIGKILL\); stopped the other local "
                     r"processes$", last_line(pods[1].text("stderr")))
    assert pods[0].process.returncode != 0
    assert re.search(r"(rank 0|MindSpore scheduler) \(pid \d+\) exited with code -?\d+",
                     last_line(pods[0].text("stderr")))
    assert max(exit_seconds) <= FAILURE_DEADLINE_SECONDS, exit_seconds
    assert not [pid for pid in job_pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]


def test_local_runner_stops_every_pod_and_names_the_failing_rank(tmp_path):
    proc, processes, wall = run_local(["--data", "2", "--steps", "3", "--metrics-port", "0",
                                       "--dataset", str(tmp_path / "missing.npy")], timeout=120)
    assert proc.process.returncode == 2, processes.report()
    assert re.search(r"^\[local\] pod \d failed with exit code 2: \[launcher pod \d\] rank \d \(pid \d+\) exited "
                     r"with code 2; stopped the other local processes$", last_line(proc.text("stderr")))
    assert "AHJ_DATASET_PATH=" in proc.text("stderr") and "missing.npy: no such file" in proc.text("stderr")


def test_cpu_refuses_tensor_parallel_in_the_local_runner():
    proc, processes, _ = run_local(["--data", "1", "--tensor", "2"], timeout=60)
    assert proc.process.returncode == 2
    message = last_line(proc.text("stderr"))
    assert message.startswith("[local] error: parallelism tensor=2: the CPU backend can run only data parallel")
    assert "Invalid backend: CPU" in message and "does not change the strategy" in message
    assert proc.text("stdout") == ""


def test_cpu_refuses_the_operators_tensor_parallel_pod_before_starting_anything(tmp_path):
    spec = {"parallelism": {"data": 1, "tensor": 2}, "npu": {"chip": "910B", "perPod": 2}}
    (env,) = pod_launch_envs(tmp_path, render_job(tmp_path, spec, name="tp2"))
    processes = ProcessSet()
    launcher = processes.start(TRAINER + ["launch"], env)
    processes.wait_all(60)
    assert launcher.process.returncode == 2
    assert "started" not in launcher.text("stderr")
    assert re.match(r"\[launcher pod 0\] error: parallelism tensor=2: the CPU backend can run only data parallel",
                    last_line(launcher.text("stderr")))


def test_launcher_gives_up_on_a_rank_table_that_never_completes(tmp_path):
    table = tmp_path / "hccl.json"
    table.write_text(json.dumps({"status": "initializing"}))
    env = {**os.environ, "MS_ROLE": "MS_WORKER", "MS_SCHED_HOST": "127.0.0.1", "MS_SCHED_PORT": "1",
           "MS_WORKER_NUM": "1", "MS_LOCAL_WORKER": "1", "MS_NODE_RANK": "0", "RANK_SIZE": "1", "RANK_START": "0",
           "RANK_TABLE_FILE": str(table), "AHJ_RANKTABLE_TIMEOUT_SECONDS": "1"}
    env.pop("AHJ_JOB_CONFIG", None)
    processes = ProcessSet()
    launcher = processes.start(TRAINER + ["launch"], env)
    processes.wait_all(60)
    assert launcher.process.returncode == 2
    assert last_line(launcher.text("stderr")) == (
        f"[launcher pod 0] error: rank table {table} not completed after 1 s (status: initializing); the operator "
        f"completes it once every pod of the job is Running with its NPUs; raise AHJ_RANKTABLE_TIMEOUT_SECONDS to "
        f"wait longer")
