"""`ascend-hybrid-trainer local`: the pod launcher, run for N local CPU "pods" of one worker each.

Everything a pod would get from the operator is written here instead: job.json, a completed hccl.json for N
pods on 127.0.0.1, and the design §8 env with the scheduler on 127.0.0.1. Rank 0 prints one JSON line per step
on stdout; the exit code is the failing launcher's (0 when every pod succeeded).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import IO, cast

from . import failures
from .config import ConfigError, parse_job
from .launcher import POLL_SECONDS, die_with_parent, exit_code_of
from .rank_table import local_pods_rank_table, write_json_atomically
from .strategy import validate_run

LOCAL_HOST = "127.0.0.1"


# Below the kernel's ephemeral range (32768+): a port the kernel hands out for bind(0) can be taken as the local
# port of any outbound connection before the scheduler binds it; a random one from here only races other pickers.
LISTEN_PORTS = range(10000, 20000)


def free_port(host: str = LOCAL_HOST) -> int:
    for port in random.sample(LISTEN_PORTS, 200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((host, port))
                return port
            except OSError:
                continue
    raise RuntimeError(f"no free port in {LISTEN_PORTS.start}-{LISTEN_PORTS.stop - 1} on {host}")


def job_document(args) -> dict:
    model = {"preset": args.preset}
    for key, value in (("layers", args.layers), ("experts", args.experts), ("topK", args.top_k),
                       ("kvHeads", args.kv_heads), ("ffnType", args.ffn_type)):
        if value is not None:
            model[key] = value
    training = {"steps": args.steps, "seqLength": args.seq_length, "learningRate": args.learning_rate,
                "seed": args.seed, "checkpoint": {"everySteps": args.checkpoint_every}}
    for key, value in (("globalBatchSize", args.global_batch), ("recompute", args.recompute),
                       ("gradientClipNorm", args.gradient_clip_norm),
                       ("divergenceLossFactor", args.divergence_loss_factor),
                       ("divergenceGradFactor", args.divergence_grad_factor)):
        if value is not None:
            training[key] = value
    parallelism = {"data": args.data, "tensor": args.tensor, "pipeline": args.pipeline, "expert": args.expert}
    if args.micro_batches is not None:
        parallelism["microBatches"] = args.micro_batches
    return {"parallelism": parallelism, "model": model, "training": training}


def pod_env(pod: int, pods: int, workdir: str, sched_port: int, metrics_port: int, checkpoint_dir: str,
            parallel: dict, dataset: str | None = None) -> dict[str, str]:
    """The env the operator renders for pod `pod` (design §8), with loopback addresses and local paths."""
    env = {
        "MS_ROLE": "MS_WORKER", "MS_SCHED_HOST": LOCAL_HOST, "MS_SCHED_PORT": str(sched_port),
        "MS_WORKER_NUM": str(pods), "MS_LOCAL_WORKER": "1", "MS_NODE_RANK": str(pod),
        "RANK_TABLE_FILE": os.path.join(workdir, "hccl.json"), "RANK_SIZE": str(pods), "RANK_START": str(pod),
        "AHJ_PARALLEL": json.dumps(parallel), "AHJ_JOB_CONFIG": os.path.join(workdir, "job.json"),
        "POD_NAME": f"local-{pod}", "POD_NAMESPACE": "local", "POD_IP": LOCAL_HOST,
        "AHJ_CHECKPOINT_DIR": checkpoint_dir, "AHJ_METRICS_PORT": str(metrics_port), "AHJ_DEVICE_TARGET": "CPU",
        "AHJ_TERMINATION_LOG": termination_log(workdir, pod),
    }
    if dataset:
        env["AHJ_DATASET_PATH"] = os.path.abspath(dataset)
    return env


def termination_log(workdir: str, pod: int) -> str:
    """Where pod `pod`'s launcher writes its termination record (a pod's /dev/termination-log)."""
    return os.path.join(workdir, f"termination-pod-{pod}.json")


@dataclass
class Pod:
    index: int
    process: subprocess.Popen
    last_line: str = ""


def forward_stderr(pod: Pod) -> None:
    """Pass a pod's stderr through, remembering its last line (the launcher's verdict)."""
    for line in cast(IO[str], pod.process.stderr):  # started with stderr=PIPE, text=True
        sys.stderr.write(line)
        sys.stderr.flush()
        if line.strip():
            pod.last_line = line.strip()


def run_pods(envs: list[dict[str, str]], stop_grace: float) -> int:
    """Run one launcher per pod; on the first failure stop the others. The failing pod's termination record
    (its cause) is printed last."""
    command = [sys.executable, "-m", "ascend_hybrid_trainer", "launch"]
    pods = [Pod(index, subprocess.Popen(command, env={**os.environ, **env}, stderr=subprocess.PIPE, text=True,
                                        bufsize=1, preexec_fn=die_with_parent))
            for index, env in enumerate(envs)]
    readers = [threading.Thread(target=forward_stderr, args=(pod,), daemon=True) for pod in pods]
    for reader in readers:
        reader.start()
    try:
        while True:
            failed = next((pod for pod in pods if pod.process.poll() not in (None, 0)), None)
            if failed is not None:
                break
            if all(pod.process.poll() == 0 for pod in pods):
                for reader in readers:
                    reader.join()
                return 0
            time.sleep(POLL_SECONDS)
    except KeyboardInterrupt:
        failed = None
    for pod in pods:
        if pod.process.poll() is None:
            pod.process.terminate()  # the launcher stops its own workers and scheduler
    for pod in pods:
        try:
            pod.process.wait(timeout=stop_grace + 5)
        except subprocess.TimeoutExpired:
            pod.process.kill()
            pod.process.wait()
    for reader in readers:
        reader.join(timeout=5)
    if failed is None:
        print("[local] interrupted; stopped every pod", file=sys.stderr, flush=True)
        return 130
    code = exit_code_of(failed.process.returncode)
    print(f"[local] pod {failed.index} failed with exit code {code}: {failed.last_line}", file=sys.stderr,
          flush=True)
    record = failures.read_record(envs[failed.index]["AHJ_TERMINATION_LOG"])
    if record is not None:
        print(f"[local] pod {failed.index} termination message: {record.to_json()}", file=sys.stderr, flush=True)
    return code


def main(args) -> int:
    job = job_document(args)
    try:
        config = parse_job(job)
        # The same checks the launcher makes, once here, before N pods would each print the same refusal.
        validate_run(config.parallelism, config.model, config.training, config.parallelism.world_size, "CPU",
                     "dynamic")
    except ConfigError as error:
        print(f"[local] error: {error}", file=sys.stderr, flush=True)
        return 2
    pods = config.parallelism.world_size
    workdir = args.workdir or tempfile.mkdtemp(prefix="ahj-local-")
    os.makedirs(workdir, exist_ok=True)
    checkpoint_dir = args.checkpoint_dir or os.path.join(workdir, "checkpoints")
    try:
        write_json_atomically(os.path.join(workdir, "job.json"), job)
        write_json_atomically(os.path.join(workdir, "hccl.json"), local_pods_rank_table(pods, per_pod=1))
        sched_port = free_port()
        metrics_base = args.metrics_port if args.metrics_port is not None else 9400
        # port 0: every pod lets the kernel pick a free port (and logs which)
        envs = [pod_env(pod, pods, workdir, sched_port, metrics_base + pod if metrics_base else 0, checkpoint_dir,
                        job["parallelism"], args.dataset) for pod in range(pods)]
        return run_pods(envs, stop_grace=10)
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
