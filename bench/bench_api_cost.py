"""What each kind of write a job makes costs the cluster's own processes, against a bare pod's create: N writes of
one kind at a time (no operator running), the CPU seconds each cluster process spent on them, per write, side by
side with N bare pods created (no NPUs, so no device plugin work) in the same run. It tells which of a job's writes
weigh on a 2-core machine (docs/performance.md, "What bounds many small jobs").

    .venv/bin/python bench/bench_api_cost.py [--count 300] [--rounds 3] [--nodes 8]

The last line is `job create ratio median: R (rounds: …)`: the cluster's CPU per AscendHybridJob create ÷ per bare pod
create.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from ascend_hybrid.contracts.names import GROUP
from ascend_hybrid.spec.api import PLURAL, VERSION
from benchkit import CREATE_WORKERS, DevCluster, bare_pods, gang_job, median_range, ratio_line, say

SSA = {"Content-Type": "application/apply-patch+yaml", "Accept": "application/json"}
MERGE = {"Content-Type": "application/merge-patch+json", "Accept": "application/json"}
JSON = {"Content-Type": "application/json", "Accept": "application/json"}


def config_map(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": {"bench": "cost"}},
            "data": {"job.json": "{\"name\": \"" + name + "\", \"worldSize\": 8}"}}


def each(dev: DevCluster, calls: list[tuple[str, str, dict, dict]]) -> None:
    """(method, url, headers, body) per call, CREATE_WORKERS at a time, through the REST layer."""
    def send(call: tuple[str, str, dict, dict]) -> None:
        method, url, headers, body = call
        response = dev.api.rest_client.request(method, url, headers=headers, body=body, _request_timeout=60)
        if response.status not in (200, 201):
            raise RuntimeError(f"{method} {url}: HTTP {response.status}: {response.data[:300]!r}")
    with ThreadPoolExecutor(CREATE_WORKERS) as pool:
        list(pool.map(send, calls))


def cluster_cpu(dev: DevCluster, work: Callable[[], None]) -> dict[str, float]:
    """CPU seconds each cluster process spent on `work` and the second after it (watch fan-out, GC)."""
    before = dev.component_cpu_seconds()
    work()
    time.sleep(1.0)
    return {name: seconds - before.get(name, 0.0) for name, seconds in dev.component_cpu_seconds().items()}


def kinds(dev: DevCluster, namespace: str, count: int, tag: str) -> dict[str, Callable[[], None]]:
    host = dev.api.configuration.host
    pods, cms = f"{host}/api/v1/namespaces/{namespace}/pods", f"{host}/api/v1/namespaces/{namespace}/configmaps"
    jobs = f"{host}/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"
    names = [f"{tag}-{i:05d}" for i in range(count)]
    status = {"status": {"phase": "Placing", "message": "attempt 1: 1 pod on 1 node in 1 rack", "attempt": 1}}
    return {
        "bare pod create": lambda: each(dev, [("POST", pods, JSON, body) for body in bare_pods(count, 0, prefix=tag)]),
        "job create": lambda: each(dev, [("POST", jobs, JSON, gang_job(name, 1, 8)) for name in names]),
        "job status merge patch": lambda: each(dev, [("PATCH", f"{jobs}/{name}/status", MERGE, status)
                                                     for name in names]),
        "ConfigMap create": lambda: each(dev, [("POST", cms, JSON, config_map(f"c-{name}")) for name in names]),
        "ConfigMap server-side apply (new)": lambda: each(dev, [
            ("PATCH", f"{cms}/a-{name}?fieldManager=bench&force=true", SSA, config_map(f"a-{name}"))
            for name in names]),
        "ConfigMap server-side apply (changed)": lambda: each(dev, [
            ("PATCH", f"{cms}/a-{name}?fieldManager=bench&force=true", SSA,
             {**config_map(f"a-{name}"), "data": {"hccl.json": "{\"status\": \"completed\"}"}}) for name in names]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=300, help="writes of each kind per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--name", default="ahj-bench-cost")
    parser.add_argument("--keep", action="store_true", help="leave the cluster up")
    args = parser.parse_args()
    results: dict[str, list[float]] = {}
    by_process: dict[str, list[dict[str, float]]] = {}
    with DevCluster(args.name, args.nodes, keep=args.keep) as dev:
        for number in range(1, args.rounds + 1):
            namespace = dev.namespace(f"bench-cost-{int(time.time())}-{number}")
            for kind, work in kinds(dev, namespace, args.count, f"r{number}").items():
                spent = cluster_cpu(dev, work)
                results.setdefault(kind, []).append(1000 * sum(spent.values()) / args.count)
                by_process.setdefault(kind, []).append({n: 1000 * s / args.count for n, s in spent.items()})
            say(f"  round {number}: " + ", ".join(f"{kind} {values[-1]:.1f} ms" for kind, values in results.items()))
            dev.custom.delete_collection_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)
            dev.remove_namespace(namespace)
    print(f"{args.count} writes of each kind per round, {args.rounds} rounds, {args.nodes} nodes, no operator")
    base = results["bare pod create"]
    for kind, values in results.items():
        top = sorted(by_process[kind][0], key=lambda n: -statistics.median(r.get(n, 0.0) for r in by_process[kind]))
        parts = ", ".join(f"{n} {statistics.median(r.get(n, 0.0) for r in by_process[kind]):.1f}" for n in top[:3])
        ratio = statistics.median(v / b for v, b in zip(values, base))
        print(f"  cluster CPU per {kind:<38}: {median_range(values, 1, ' ms')} ({ratio:.2f} × a bare pod's) — {parts}")
    print(ratio_line("job create ratio", [v / b for v, b in zip(results["job create"], base)]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
