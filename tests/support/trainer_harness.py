"""Running the trainer as the cluster would: processes with the operator's env, their output and their memory.

Only loopback addresses are used: the scheduler, the workers and the metrics endpoints all listen on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import yaml

from ascend_hybrid_trainer.local import free_port

LOCAL_HOST = "127.0.0.1"
# One configuration for every parity comparison: the reference (one process) and the DP=2 job must agree on it.
STEPS, GLOBAL_BATCH, SEQ_LENGTH, LEARNING_RATE, SEED = 6, 4, 32, 1e-3, 0
CHECKPOINT_EVERY = 3
TRAINER = [sys.executable, "-m", "ascend_hybrid_trainer"]
OPERATOR_CLI = Path(sys.executable).with_name("ascend-hybrid")
POD_INDEX_LABEL = "hybrid.ascend.dev/pod-index"


def losses_of(stdout: str) -> dict[int, float]:
    """The `{"step": n, "loss": x}` lines rank 0 prints, by step."""
    losses = {}
    for line in stdout.splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            losses[record["step"]] = record["loss"]
    return losses


@dataclass
class Proc:
    process: subprocess.Popen
    stdout: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)
    ended_at: float | None = None

    def text(self, stream: str) -> str:
        return "".join(getattr(self, stream))


class ProcessSet:
    """Starts commands, collects their output line by line and samples the RSS of their process trees."""

    def __init__(self):
        self.procs: list[Proc] = []
        self.started = time.monotonic()
        self.peak_total_rss = 0
        self.peak_rss_by_pid: dict[int, tuple[int, str]] = {}
        self._sampling = True
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def start(self, command: list[str], env: dict[str, str]) -> Proc:
        process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   bufsize=1)
        proc = Proc(process)
        for stream in ("stdout", "stderr"):
            threading.Thread(target=self._read, args=(proc, stream), daemon=True).start()
        self.procs.append(proc)
        return proc

    @staticmethod
    def _read(proc: Proc, stream: str) -> None:
        for line in getattr(proc.process, stream):
            getattr(proc, stream).append(line)

    def _note_exits(self) -> None:
        for proc in self.procs:
            if proc.ended_at is None and proc.process.poll() is not None:
                proc.ended_at = time.monotonic()

    def _sample(self) -> None:
        while self._sampling:
            self._note_exits()
            total = 0
            for proc in list(self.procs):
                try:
                    tree = [psutil.Process(proc.process.pid)]
                    tree += tree[0].children(recursive=True)
                except psutil.NoSuchProcess:
                    continue
                roles: dict[int, str] = {}
                for member in tree:
                    try:
                        rss = member.memory_info().rss
                        role = " ".join(member.cmdline()[-1:])
                        if roles.get(member.ppid()) == role:
                            role = f"{role} (forked child)"  # MindSpore forks helpers that keep the cmdline
                        roles[member.pid] = role
                    except psutil.Error:
                        continue
                    total += rss
                    if rss > self.peak_rss_by_pid.get(member.pid, (0, ""))[0]:
                        self.peak_rss_by_pid[member.pid] = (rss, role)
            self.peak_total_rss = max(self.peak_total_rss, total)
            time.sleep(0.1)

    def wait_for(self, predicate, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            self._note_exits()
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout} s waiting for {what}\n{self.report()}")
            time.sleep(0.1)

    def wait_all(self, timeout: float) -> float:
        """Seconds from start until the last process ended."""
        deadline = time.monotonic() + timeout
        for proc in self.procs:
            try:
                proc.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(f"processes still running after {timeout} s\n{self.report()}") from None
        self._note_exits()
        time.sleep(0.3)  # let the reader threads drain the pipes
        self._sampling = False
        return time.monotonic() - self.started

    def kill(self) -> None:
        for proc in self.procs:
            if proc.process.poll() is None:
                proc.process.kill()
                proc.process.wait()
        self._sampling = False

    def exited_at(self, proc: Proc) -> float:
        """When `proc` was first seen ended (monotonic clock)."""
        return proc.ended_at

    def report(self) -> str:
        parts = []
        for index, proc in enumerate(self.procs):
            parts.append(f"--- process {index} rc={proc.process.poll()} stderr (tail):\n"
                         + "".join(proc.stderr[-25:]))
        return "\n".join(parts)

    def worker_peak_rss_mb(self) -> list[float]:
        return sorted(rss / 2**20 for rss, role in self.peak_rss_by_pid.values() if role == "worker")


def run_local(arguments: list[str], timeout: float = 240) -> tuple[Proc, ProcessSet, float]:
    processes = ProcessSet()
    proc = processes.start(TRAINER + ["local"] + arguments, dict(os.environ))
    wall = processes.wait_all(timeout)
    return proc, processes, wall


def render_job(tmp_path: Path, spec: dict, name: str = "dp2") -> list[dict]:
    """`ascend-hybrid render` of a job on one 8-NPU 910B node, with the scheduler at 127.0.0.1."""
    from support.builders import JobBuilder, NodeBuilder  # the operator's package, imported only when used

    job = JobBuilder(name).spec(spec).build()
    node = NodeBuilder("node-a").chip("910B").build()
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    (tmp_path / "nodes.yaml").write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [node]}))
    result = subprocess.run([str(OPERATOR_CLI), "render", "-f", str(tmp_path / "job.yaml"), "--nodes",
                             str(tmp_path / "nodes.yaml"), "--sched-ip", LOCAL_HOST],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return list(yaml.safe_load_all(result.stdout))


def running_pod(pod: dict, chip: int) -> dict:
    """The rendered pod as the API returns it once Running on 127.0.0.1 with its chip from the device plugin."""
    from support.builders import PodBuilder

    return (PodBuilder.of(pod).uid(f"uid-{pod['metadata']['name']}")
            .running(node="node-a", pod_ip=LOCAL_HOST, host_ip=LOCAL_HOST).devices([chip]).build())


def pod_launch_envs(tmp_path: Path, manifests: list[dict]) -> list[dict[str, str]]:
    """Each pod's container env as rendered, with the files the pods would mount written under tmp_path:
    job.json from the job ConfigMap, hccl.json from the planning core's build_rank_table. Downward-API values
    are filled in (POD_IP 127.0.0.1); MS_SCHED_PORT and the metrics ports become free ports, so runs sharing
    this machine do not collide; each pod's /dev/termination-log is termination_log(tmp_path, index)."""
    from ascend_hybrid.gang.ranktable import build_rank_table

    pods = sorted((m for m in manifests if m["kind"] == "Pod"),
                  key=lambda pod: int(pod["metadata"]["labels"][POD_INDEX_LABEL]))
    job_config = next(m for m in manifests if m["kind"] == "ConfigMap" and "job.json" in m.get("data", {}))
    (tmp_path / "job.json").write_text(job_config["data"]["job.json"])
    table = build_rank_table([running_pod(pod, index) for index, pod in enumerate(pods)], per_pod=1)
    assert table["status"] == "completed", table
    (tmp_path / "hccl.json").write_text(json.dumps(table))
    sched_port = str(free_port())
    envs = []
    for index, pod in enumerate(pods):
        (container,) = pod["spec"]["containers"]
        assert not container.get("command"), "the trainer image's entrypoint is the launcher"
        env = dict(os.environ)
        for entry in container["env"]:
            if "value" in entry:
                env[entry["name"]] = entry["value"]
            else:
                path = entry["valueFrom"]["fieldRef"]["fieldPath"]
                env[entry["name"]] = {"metadata.name": pod["metadata"]["name"], "metadata.namespace": "default",
                                      "metadata.uid": f"uid-{pod['metadata']['name']}",  # as running_pod's
                                      "status.podIP": LOCAL_HOST}[path]
        assert env["MS_SCHED_HOST"] == LOCAL_HOST
        env.update(MS_SCHED_PORT=sched_port, RANK_TABLE_FILE=str(tmp_path / "hccl.json"),
                   AHJ_JOB_CONFIG=str(tmp_path / "job.json"), AHJ_METRICS_PORT=str(free_port()),
                   AHJ_TERMINATION_LOG=str(termination_log(tmp_path, index)))
        envs.append(env)
    return envs


def termination_log(tmp_path: Path, index: int) -> Path:
    return tmp_path / f"termination-log-pod-{index}"


def termination_record(tmp_path: Path, index: int) -> dict:
    """The termination message pod `index` left (one line of JSON)."""
    text = termination_log(tmp_path, index).read_text()
    assert text.count("\n") == 1 and text.endswith("\n"), text
    return json.loads(text)


def scrape(port: int) -> str | None:
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://{LOCAL_HOST}:{port}/metrics", timeout=2) as response:
            return response.read().decode()
    except OSError:
        return None


def metric_value(text: str, name: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None
