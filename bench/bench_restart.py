"""Whole-gang restart: one pod of a running gang fails → attempt 2 Running with a fresh rank table, against deleting
the same number of running bare pods and creating them again → all Running with devices, side by side.

The pod fails as the simulated cluster fails one: the kwok stage `ahj-pod-fail` turns a Running pod Failed (exit
code 3) once it carries `sim.hybrid.ascend.dev/outcome: fail`; the clock starts when that annotation is patched on.
Each round sets both up untimed (a bare namespace, then a job namespace, one at a time so that both find the same
free nodes), and removes them after. Never asserts on time.

    .venv/bin/python bench/bench_restart.py [--nodes 256] [--pods 128] [--chips 8] [--rounds 5] [--name N] [--keep]

The last line is `restart ratio median: R (rounds: r1, r2, …)`.
"""

from __future__ import annotations

import argparse
import time

from ascend_hybrid.contracts import names
from ascend_hybrid.devcluster.testing.pods import outcome_annotations
from benchkit import DevCluster, Operator, bare_pods, gang_job, job_running, median_range, ratio_line, say


def bare_restart(dev: DevCluster, pods: int, chips: int, tag: str) -> float:
    namespace = dev.namespace(f"bench-rebare-{tag}")
    watch = dev.pod_watch(namespace)
    try:
        dev.create_all(dev.pods_url(namespace), bare_pods(pods, chips, prefix="first"))
        watch.wait_count(pods, 600, "the first bare pods Running")
        started = time.monotonic()
        dev.core.delete_collection_namespaced_pod(namespace, label_selector="bench=first", grace_period_seconds=0)
        dev.create_all(dev.pods_url(namespace), bare_pods(pods, chips, prefix="again"))
        finished = watch.wait_count(pods, 600, "the bare pods Running again",
                                    accept=lambda pod: pod["metadata"]["name"].startswith("again-"))
    finally:
        watch.close()
    dev.remove_namespace(namespace)
    return finished - started


def job_restart(dev: DevCluster, operator: Operator, pods: int, chips: int, tag: str) -> tuple[float, float, float]:
    """Seconds from the failure to attempt 2 Running, and the operator's API calls and CPU seconds meanwhile."""
    namespace = dev.namespace(f"bench-restart-{tag}")
    watch = dev.job_watch(namespace)
    try:
        dev.create_all(dev.jobs_url(namespace), [gang_job("bench", pods, chips)])
        watch.wait_count(1, 600, "attempt 1 Running")
        victim = dev.core.list_namespaced_pod(
            namespace, label_selector=f"{names.JOB_LABEL}=bench,{names.ATTEMPT_LABEL}=1", limit=1).items[0]
        restarted = dev.job_watch(namespace, lambda job: job_running(job) and job["status"].get("attempt") == 2)
        before = operator.snapshot()
        started = time.monotonic()
        dev.core.patch_namespaced_pod(victim.metadata.name, namespace,
                                      {"metadata": {"annotations": outcome_annotations("fail", exit_code=3)}})
        try:
            finished = restarted.wait_count(1, 600, "attempt 2 Running with a fresh rank table")
        finally:
            restarted.close()
        spent = operator.snapshot().since(before)
    finally:
        watch.close()
    dev.remove_namespace(namespace)
    return finished - started, spent.calls, spent.cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=256)
    parser.add_argument("--pods", type=int, default=128)
    parser.add_argument("--chips", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--name", default="ahj-bench-restart")
    parser.add_argument("--keep", action="store_true", help="leave the cluster up")
    args = parser.parse_args()
    run_id = int(time.time())
    rounds = []
    with DevCluster(args.name, args.nodes, keep=args.keep) as dev:
        operator = Operator(dev).start()
        try:
            say(f"  operator settled {operator.wait_settled():.1f} s after it started")
            for number in range(1, args.rounds + 1):
                bare = bare_restart(dev, args.pods, args.chips, f"{run_id}-{number}")
                job, calls, cpu = job_restart(dev, operator, args.pods, args.chips, f"{run_id}-{number}")
                rounds.append((bare, job, calls, cpu))
                say(f"  round {number}: bare delete + create {bare:.2f} s, gang restart {job:.2f} s, "
                    f"ratio {job / bare:.2f}, {calls:.0f} API calls, operator CPU {cpu:.2f} s")
            peak_mb = operator.peak_rss / 1e6
        finally:
            operator.stop_process()
    bare_s, job_s, calls, cpu = (list(column) for column in zip(*rounds))
    ratios = [job / bare for bare, job, _, _ in rounds]
    print(f"whole-gang restart, {args.pods} pods × {args.chips} NPUs on {args.nodes} nodes, {args.rounds} rounds")
    print(f"  bare pods deleted and created again → Running : {median_range(bare_s, unit=' s')}")
    print(f"  one pod failed → attempt 2 Running, rank table: {median_range(job_s, unit=' s')}")
    print(f"  operator API calls per pod                    : {median_range([c / args.pods for c in calls])}")
    print(f"  operator CPU per pod                          : "
          f"{median_range([1000 * c / args.pods for c in cpu], unit=' ms')}")
    print(f"  operator peak RSS                             : {peak_mb:.0f} MB")
    print(f"  ratio restart / bare (goal ≤ 1.3)             : {median_range(ratios)}")
    print(ratio_line("restart ratio", ratios))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
