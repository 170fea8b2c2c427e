"""Benchmark of the simulated Ascend cluster, with the toolchain already built:

  1. `dev-cluster up` for 4 nodes            (goal < 20 s)
  2. `dev-cluster up` for 256 nodes          (goal < 60 s)
  3. 1 000 bare pods created → all Running on the 256 nodes, as pods/s; once without NPUs (kwok alone), once
     with one huawei.com/Ascend910 each (the simulated device plugin annotates every pod before it may run)

    .venv/bin/python bench/bench_devcluster.py [--nodes 256] [--pods 1000] [--workers 16] [--json FILE]

Uses clusters named ahj-bench-*, brought down at the end. Everything runs on loopback.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from kubernetes import client

from ascend_hybrid.devcluster import cluster
from ascend_hybrid.devcluster.controlplane import toolchain
from ascend_hybrid.devcluster.kube.informer import run_informer
from ascend_hybrid.devcluster.testing.pods import pod_manifest


def timed_up(name: str, nodes: int) -> float:
    cluster.down(name, log=lambda line: None)
    started = time.monotonic()
    cluster.up(name, nodes=nodes, racks=max(1, nodes // 32), log=lambda line: print(f"  {line}"))
    return time.monotonic() - started


class RunningCounter:
    """Counts pods of one namespace that reached Running, from a watch (polling 1 000 pods would load the
    apiserver we are measuring)."""

    def __init__(self, core: client.CoreV1Api, namespace: str):
        self.running: set[str] = set()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=run_informer, daemon=True, kwargs=dict(
            list_call=core.list_namespaced_pod, namespace=namespace, name="bench", on_sync=self.sync,
            on_event=self.event, stop=self.stop, log=self.log))
        self.thread.start()

    def log(self, line: str) -> None:
        if not self.stop.is_set():  # the cluster going down ends the watch: not worth a line
            print(f"  watch: {line}")

    def sync(self, items):
        for pod in items:
            self.event("ADDED", pod)

    def event(self, kind, pod):
        if (pod.get("status") or {}).get("phase") == "Running":
            with self.lock:
                self.running.add(pod["metadata"]["name"])

    def count(self) -> int:
        with self.lock:
            return len(self.running)


def pods_to_running(core: client.CoreV1Api, namespace: str, count: int, chips: int, workers: int,
                    timeout: float = 600) -> dict:
    core.create_namespace({"metadata": {"name": namespace}})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            core.read_namespaced_service_account("default", namespace)
            break
        except client.ApiException:
            time.sleep(0.1)
    counter = RunningCounter(core, namespace)
    manifests = [pod_manifest(f"bare-{i:05d}", chips=chips) for i in range(count)]
    api = core.api_client
    url = f"{api.configuration.host}/api/v1/namespaces/{namespace}/pods"
    headers = {"Content-Type": "application/json", "Accept": "application/json"}

    def create(manifest: dict) -> None:
        # The REST layer directly: the typed client's model validation costs ~40% of the create rate here,
        # and the client should not be what this measures.
        response = api.rest_client.request("POST", url, headers=headers, body=manifest)
        if response.status != 201:
            raise RuntimeError(f"create {manifest['metadata']['name']}: HTTP {response.status}")

    started = time.monotonic()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(create, manifests))
    created = time.monotonic() - started
    while counter.count() < count and time.monotonic() - started < timeout:
        time.sleep(0.05)
    elapsed = time.monotonic() - started
    counter.stop.set()
    return {"pods": count, "chips_per_pod": chips, "created_s": round(created, 2),
            "all_running_s": round(elapsed, 2), "running": counter.count(),
            "pods_per_s": round(counter.count() / elapsed, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=256)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=16, help="concurrent pod creations")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    if toolchain.missing():
        print(f"error: build the toolchain first (`ascend-hybrid dev-cluster build`); missing {toolchain.missing()}",
              file=sys.stderr)
        return 2
    results: dict = {}
    try:
        print("up, 4 nodes:")
        results["up_4_nodes_s"] = round(timed_up("ahj-bench-small", 4), 2)
        cluster.down("ahj-bench-small", log=lambda line: None)
        print(f"up, {args.nodes} nodes:")
        results[f"up_{args.nodes}_nodes_s"] = round(timed_up("ahj-bench-large", args.nodes), 2)
        core = cluster.core_api(cluster.cluster_paths("ahj-bench-large"))
        for label, chips in (("plain", 0), ("npu", 1)):
            print(f"{args.pods} {label} pods → Running on {args.nodes} nodes:")
            results[f"pods_{label}"] = pods_to_running(core, f"bench-{label}", args.pods, chips, args.workers)
            print(f"  {results[f'pods_{label}']}")
    finally:
        for name in ("ahj-bench-small", "ahj-bench-large"):
            cluster.down(name, log=lambda line: None)
    print(json.dumps(results, indent=2))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
