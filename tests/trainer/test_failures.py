"""What the launcher does when something goes wrong — a worker dies, a worker fails, the loss diverges, the
scheduler cannot be reached, the strategy cannot run on this device, the rank table never completes — and the cause
each pod says in its termination message and exit code (failures.py)."""

from __future__ import annotations

import json
import os
import re
import signal
import time

import psutil
import pytest

from ascend_hybrid_trainer.failures import EXIT_CODES, Cause
from ascend_hybrid_trainer.local import free_port
from support.losses import LAYERS, MODEL
from support.trainer_harness import (
    TRAINER,
    ProcessSet,
    losses_of,
    pod_launch_envs,
    render_job,
    run_local,
    termination_record,
)

pytestmark = pytest.mark.trainer

FAILURE_DEADLINE_SECONDS = 60


def last_line(text: str, back: int = 1) -> str:
    return [line for line in text.splitlines() if line.strip()][-back]


def test_killed_worker_fails_both_launchers_naming_the_rank(tmp_path):
    """Rank 1 is SIGKILLed mid-training. Pod 1's launcher sees it directly; pod 0's launcher learns it through
    MindSpore (its scheduler stops hearing from rank 1 and the job ends). Both exit non-zero in time, and no
    process of the job is left behind."""
    spec = {"parallelism": {"data": 2}, "npu": {"chip": "910B", "perPod": 1},
            "model": MODEL,
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
                     r"processes$", last_line(pods[1].text("stderr"), back=2))
    assert last_line(pods[1].text("stderr")).startswith("[launcher pod 1] cause Unknown (exit code 137), rank 1")
    killed = termination_record(tmp_path, 1)
    assert (killed["cause"], killed["rank"]) == ("Unknown", 1) and killed["step"] >= 2
    assert killed["detail"].startswith("rank 1 exited with code -9 (killed by SIGKILL)")
    # Pod 0 lost its peer: the MindSpore scheduler names the worker it lost first, and the all-reduce timeout of
    # rank 0 is its echo. Should rank 0's collective fail before the scheduler's log line, the timeout stands.
    survivor = termination_record(tmp_path, 0)
    print(f"pod 0 ended with {survivor}")
    assert re.search(r"(rank 0|MindSpore scheduler) \(pid \d+\) exited with code -?\d+",
                     last_line(pods[0].text("stderr"), back=2))
    assert survivor["step"] >= 2  # the step rank 0 was in when its all-reduce failed
    if survivor["cause"] == "PeerFailed":
        # whichever of the scheduler's two messages decided: its log line or its exception
        assert survivor["rank"] == 1 and re.search(r"The node: 1 is timed out|worker 1 is the first one timed out",
                                                   survivor["detail"]), survivor
    else:
        assert survivor["cause"] == "HCCLExecTimeout" and survivor["rank"] == 0, survivor
    assert pods[0].process.returncode == EXIT_CODES[Cause(survivor["cause"])]
    assert max(exit_seconds) <= FAILURE_DEADLINE_SECONDS, exit_seconds
    assert not [pid for pid in job_pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]


def test_local_runner_stops_every_pod_and_names_the_failing_rank_and_the_cause(tmp_path):
    proc, processes, wall = run_local(["--data", "2", "--layers", str(LAYERS), "--steps", "3", "--metrics-port", "0",
                                       "--dataset", str(tmp_path / "missing.npy")], timeout=120)
    assert proc.process.returncode == EXIT_CODES[Cause.DATA_ERROR] == 16, processes.report()
    assert re.search(r"^\[local\] pod \d failed with exit code 16: \[launcher pod \d\] cause DataError \(exit code "
                     r"16\), rank \d, step 0: AHJ_DATASET_PATH=.*missing.npy: no such file$",
                     last_line(proc.text("stderr"), back=2))
    assert re.search(r'^\[local\] pod \d termination message: \{"cause": "DataError", "rank": \d, "step": 0, '
                     r'"detail": "AHJ_DATASET_PATH=.*missing.npy: no such file"\}$', last_line(proc.text("stderr")))
    assert "Traceback" not in proc.text("stderr")


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
           "RANK_TABLE_FILE": str(table), "AHJ_RANKTABLE_TIMEOUT_SECONDS": "1",
           "AHJ_TERMINATION_LOG": str(tmp_path / "termination-log")}
    env.pop("AHJ_JOB_CONFIG", None)
    processes = ProcessSet()
    launcher = processes.start(TRAINER + ["launch"], env)
    processes.wait_all(60)
    assert launcher.process.returncode == EXIT_CODES[Cause.RANK_TABLE_TIMEOUT] == 10
    message = (f"rank table {table} not completed after 1 s (status: initializing); the operator completes it once "
               f"every pod of the job is Running with its NPUs; raise AHJ_RANKTABLE_TIMEOUT_SECONDS to wait longer")
    assert last_line(launcher.text("stderr")) == f"[launcher pod 0] error: {message}"
    assert json.loads((tmp_path / "termination-log").read_text()) == {
        "cause": "RankTableTimeout", "rank": 0, "step": 0, "detail": message}


def test_a_diverging_dp2_job_stops_at_the_step_it_diverged_with_numerical_divergence(tmp_path):
    """Measured: the tiny preset at learning rate 1e6 goes from loss ~6.3 to ~2.4e13 at step 2 and
    stays finite. Both pods stop there — every rank sees the same global-batch loss — with NumericalDivergence."""
    spec = {"parallelism": {"data": 2}, "npu": {"chip": "910B", "perPod": 1}, "model": MODEL,
            "training": {"steps": 200, "globalBatchSize": 4, "seqLength": 32, "learningRate": 1e6}}
    envs = pod_launch_envs(tmp_path, render_job(tmp_path, spec, name="diverge"))
    processes = ProcessSet()
    pods = [processes.start(TRAINER + ["launch"], env) for env in envs]
    wall = processes.wait_all(240)
    losses = losses_of(pods[0].text("stdout"))
    print(f"\ndiverging DP 2 job: losses {losses}, both pods ended after {wall:.1f} s")
    assert sorted(losses) == [1, 2] and losses[2] > 10 * losses[1], processes.report()
    for index, pod in enumerate(pods):
        assert pod.process.returncode == EXIT_CODES[Cause.NUMERICAL_DIVERGENCE] == 15, processes.report()
        record = termination_record(tmp_path, index)
        assert (record["cause"], record["rank"], record["step"]) == ("NumericalDivergence", index, 2)
        assert re.match(r"loss [\d.e+]+ at step 2 is above 10 x its lowest value so far \([\d.]+ at step 1\)",
                        record["detail"]), record


def test_a_pod_whose_scheduler_cannot_be_reached_ends_with_hccl_connect_timeout(tmp_path):
    """Pod 1 of a DP 2 job pointed at a scheduler port nobody listens on, with the job's connect timeout at 5 s:
    MindSpore's cluster formation gives up after MS_TOPO_TIMEOUT, which the launcher sets from
    HCCL_CONNECT_TIMEOUT."""
    spec = {"parallelism": {"data": 2}, "npu": {"chip": "910B", "perPod": 1}, "model": MODEL,
            "hccl": {"connectTimeoutSeconds": 5}, "training": {"steps": 3}}
    env = pod_launch_envs(tmp_path, render_job(tmp_path, spec, name="unreachable"))[1]
    port = free_port()
    env["MS_SCHED_PORT"] = str(port)
    assert env["HCCL_CONNECT_TIMEOUT"] == "5"
    processes = ProcessSet()
    launcher = processes.start(TRAINER + ["launch"], env)
    wall = processes.wait_all(120)
    print(f"\nunreachable scheduler: pod 1 ended after {wall:.1f} s")
    assert launcher.process.returncode == EXIT_CODES[Cause.HCCL_CONNECT_TIMEOUT] == 11, processes.report()
    record = termination_record(tmp_path, 1)
    assert (record["cause"], record["rank"], record["step"]) == ("HCCLConnectTimeout", 1, 0)
    assert record["detail"].startswith(f"the MindSpore cluster did not form within MS_TOPO_TIMEOUT=5 s (scheduler "
                                       f"127.0.0.1:{port}, 2 ranks): ")
    assert wall < 60
