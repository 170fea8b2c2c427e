"""Operator overhead: a 128-pod (1 024-NPU) job applied → Running with its rank table completed, against the same
128 pods created bare and scheduled by kube-scheduler, side by side on one simulated cluster of 256 nodes.

Each round times both, bare first, with every pod gone before the next step; the simulated cluster shares two
cores with the operator, so single rounds are noisy and the median ratio is what it reports, with the operator's
API calls and CPU time per pod. Never asserts on time.
Run: .venv/bin/python bench/bench_operator.py [--nodes 256] [--pods 128] [--rounds 3] [--keep]
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
from kubernetes import client, config

from ascend_hybrid import crd
from ascend_hybrid.devcluster import cluster
from ascend_hybrid.devcluster.controlplane import ports

GROUP, VERSION, PLURAL = "hybrid.ascend.dev", "v1alpha1", "ascendhybridjobs"
REPO = Path(__file__).resolve().parents[1]


def wait(predicate, timeout: float, what: str, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise SystemExit(f"timed out waiting for {what}")


def namespace(core, name: str) -> str:
    core.create_namespace({"metadata": {"name": name}})
    wait(lambda: core.list_namespaced_service_account(name).items, 30, "the default ServiceAccount")
    return name


def bare_pods(core, ns: str, count: int, chips: int) -> float:
    started = time.monotonic()
    for index in range(count):
        core.create_namespaced_pod(ns, {
            "metadata": {"name": f"bare-{index}", "labels": {"bench": "bare"}},
            "spec": {"restartPolicy": "Never", "containers": [{
                "name": "ascend", "image": "ascend-hybrid/trainer:0.1.0",
                "resources": {"limits": {"huawei.com/Ascend910": str(chips)}, "requests": {"huawei.com/Ascend910": str(chips)}}}]},
        }, _preload_content=False)

    def all_running():
        pods = core.list_namespaced_pod(ns, label_selector="bench=bare").items
        annotated = [p for p in pods if p.status.phase == "Running" and p.status.pod_ip
                     and "ascend.kubectl.kubernetes.io/ascend-910-configuration" in (p.metadata.annotations or {})]
        return len(annotated) == count
    wait(all_running, 600, "the bare pods to run")
    return time.monotonic() - started


def operator_job(custom, ns: str, count: int, chips: int) -> float:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "AscendHybridJob", "metadata": {"name": "bench"},
            "spec": {"parallelism": {"data": count, "tensor": chips}, "npu": {"perPod": chips},
                     "training": {"steps": 10}}}
    started = time.monotonic()
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)

    def running():
        status = custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "bench").get("status") or {}
        return status.get("phase") == "Running" and (status.get("rankTable") or {}).get("status") == "completed"
    wait(running, 600, "the job to run", interval=0.05)
    return time.monotonic() - started


def remove_namespace(core, name: str) -> None:
    """Deleted and gone, so that the next round finds every chip free."""
    core.delete_namespace(name)
    wait(lambda: not core.list_namespaced_pod(name).items, 300, f"the pods of {name} to go")


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def api_calls(port: int) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return sum(float(value) for value in re.findall(r"^ascend_hybrid_api_calls_total\{[^}]*\} (\S+)$", text, re.M))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=256)
    parser.add_argument("--pods", type=int, default=128)
    parser.add_argument("--chips", type=int, default=8)
    parser.add_argument("--name", default="ahj-bench")
    parser.add_argument("--rounds", type=int, default=3, help="bare/job pairs; the ratio printed is their median")
    parser.add_argument("--keep", action="store_true", help="leave the cluster up")
    args = parser.parse_args()
    paths = cluster.up(args.name, nodes=args.nodes, racks=8, log=lambda line: print(line, file=sys.stderr))
    config.load_kube_config(str(paths.kubeconfig))
    core, custom = client.CoreV1Api(), client.CustomObjectsApi()
    definition = crd.build()
    client.ApiextensionsV1Api().patch_custom_resource_definition(
        definition["metadata"]["name"], definition, field_manager="ascend-hybrid-bench", force=True,
        _content_type="application/apply-patch+yaml")
    wait(lambda: _served(custom), 30, "the CRD to be served")
    port = ports.free_server_port("127.0.0.1")
    log = open(paths.root / "bench-operator.log", "w")
    operator = subprocess.Popen([sys.executable, "-m", "ascend_hybrid.cli", "run", "--kubeconfig", str(paths.kubeconfig),
                                 "--metrics-port", str(port), "--health-port", str(ports.free_server_port("127.0.0.1")),
                                 "--bind-address", "127.0.0.1"], stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=REPO)
    try:
        wait(lambda: _answers(port), 60, "the operator's metrics endpoint")
        operator_process = psutil.Process(operator.pid)
        rounds = []
        for number in range(args.rounds):
            suffix = f"{int(time.time())}-{number}"
            bare = bare_pods(core, namespace(core, f"bench-bare-{suffix}"), args.pods, args.chips)
            remove_namespace(core, f"bench-bare-{suffix}")
            calls_before, cpu_before = api_calls(port), cpu_seconds(operator_process)
            job = operator_job(custom, namespace(core, f"bench-job-{suffix}"), args.pods, args.chips)
            calls, cpu = api_calls(port) - calls_before, cpu_seconds(operator_process) - cpu_before
            remove_namespace(core, f"bench-job-{suffix}")
            rounds.append((bare, job, calls, cpu))
            print(f"  round {number + 1}: bare {bare:5.2f} s, job {job:5.2f} s, ratio {job / bare:4.2f}, "
                  f"{calls:.0f} API calls, operator CPU {cpu:4.2f} s", file=sys.stderr)
        ratios = sorted(job / bare for bare, job, _, _ in rounds)
        median = statistics.median(ratios)
        print(f"{args.pods} pods × {args.chips} NPUs on {args.nodes} nodes, {args.rounds} rounds side by side")
        print(f"  bare pods created → all Running with devices : {statistics.median(r[0] for r in rounds):7.2f} s (median)")
        print(f"  AscendHybridJob applied → Running, rank table : {statistics.median(r[1] for r in rounds):7.2f} s (median)")
        print(f"  ratio operator / bare                         : {median:7.2f}  median of {', '.join(f'{r:.2f}' for r in ratios)}  (goal ≤ 1.3)")
        print(f"  operator API calls per pod                    : {statistics.median(r[2] for r in rounds) / args.pods:7.2f}")
        print(f"  operator CPU per pod                          : {1000 * statistics.median(r[3] for r in rounds) / args.pods:7.2f} ms")
    finally:
        os.killpg(operator.pid, signal.SIGTERM)
        operator.wait(timeout=30)
        if not args.keep:
            cluster.down(args.name, log=lambda line: print(line, file=sys.stderr))
    return 0


def _served(custom) -> bool:
    try:
        custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)
        return True
    except client.ApiException:
        return False


def _answers(port: int) -> bool:
    try:
        api_calls(port)
        return True
    except OSError:
        return False


if __name__ == "__main__":
    raise SystemExit(main())
