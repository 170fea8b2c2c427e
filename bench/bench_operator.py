"""Operator overhead on one gang: an AscendHybridJob applied → Running with its rank table completed, against the
same pods created bare (same NPU requests, no gate, no affinity) and scheduled by kube-scheduler, side by side on
one simulated cluster in one run.

Order: one bare round before the operator starts (it also warms the apiserver), then the operator starts and the
first job is timed at once — the cold start users see after every upgrade or failover, reported apart — then
`--rounds` warm bare/job pairs. Every pod is gone before the next step. The cluster shares the machine's cores with
the operator, so single rounds are noisy: the median ratio is the figure, with its rounds. Never asserts on time.

    .venv/bin/python bench/bench_operator.py [--nodes 256] [--pods 128] [--chips 8] [--rounds 5] [--name N] [--keep]

Sizes of the issue: --nodes 4096 --pods 2048 (16 384 NPUs); --nodes 256 --pods 128; --nodes 128 --pods 64.
The last line is `gang ratio median: R (rounds: r1, r2, …)` (warm rounds, in the order they ran).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from benchkit import (
    CREATE_WORKERS,
    DevCluster,
    Operator,
    Snapshot,
    bare_pods,
    calls_breakdown,
    gang_job,
    median_range,
    ratio_line,
    say,
)


def timeout_for(pods: int) -> float:
    return max(300.0, pods * 0.5)


def bare_round(dev: DevCluster, pods: int, chips: int, tag: str, workers: int = CREATE_WORKERS) -> float:
    namespace = dev.namespace(f"bench-bare-{tag}")
    watch = dev.pod_watch(namespace)
    try:
        started = time.monotonic()
        dev.create_all(dev.pods_url(namespace), bare_pods(pods, chips), workers)
        finished = watch.wait_count(pods, timeout_for(pods), "bare pods Running with devices")
    finally:
        watch.close()
    dev.remove_namespace(namespace)
    return finished - started


def job_round(dev: DevCluster, operator: Operator, pods: int, chips: int, tag: str) -> tuple[float, Snapshot]:
    """Seconds to Running, and the operator's API calls and CPU seconds meanwhile."""
    namespace = dev.namespace(f"bench-job-{tag}")
    watch = dev.job_watch(namespace)
    try:
        before = operator.snapshot()
        started = time.monotonic()
        dev.create_all(dev.jobs_url(namespace), [gang_job("bench", pods, chips)])
        finished = watch.wait_count(1, timeout_for(pods), "the job Running with its rank table")
        spent = operator.snapshot().since(before)
    finally:
        watch.close()
    dev.remove_jobs(namespace)
    dev.remove_namespace(namespace)
    return finished - started, spent


def bare_only(args) -> int:
    run_id, rounds, spent = int(time.time()), [], {}
    with DevCluster(args.name, args.nodes, keep=args.keep) as dev:
        say(f"dev-cluster up, {args.nodes} nodes: {dev.up_seconds:.1f} s")
        for number in range(1, args.rounds + 1):
            before = dev.component_cpu_seconds()
            rounds.append(bare_round(dev, args.pods, args.chips, f"{run_id}-{number}", args.bare_workers))
            for name, seconds in dev.component_cpu_seconds().items():
                spent.setdefault(name, []).append(seconds - before.get(name, seconds))
            say(f"  round {number}: bare {rounds[-1]:.2f} s")
    print(f"{args.pods} bare pods × {args.chips} NPUs on {args.nodes} nodes, {args.rounds} rounds, no operator")
    print(f"  bare pods created → all Running with devices : {median_range(rounds, unit=' s')}")
    print("  CPU seconds per round (create → Running → namespace gone): "
          + ", ".join(f"{name} {statistics.median(values):.1f}" for name, values in sorted(spent.items())))
    print(f"bare pods median: {statistics.median(rounds):.2f} s (rounds: {', '.join(f'{r:.2f}' for r in rounds)})")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=256)
    parser.add_argument("--pods", type=int, default=128)
    parser.add_argument("--chips", type=int, default=8, help="NPUs per pod (the nodes have 8)")
    parser.add_argument("--rounds", type=int, default=5, help="warm bare/job pairs; the ratio printed is their median")
    parser.add_argument("--name", default="ahj-bench", help="the dev cluster's name")
    parser.add_argument("--keep", action="store_true", help="leave the cluster up")
    parser.add_argument("--profile", type=Path, help="run the operator under py-spy, its raw stacks here, and "
                        "print where its CPU went")
    parser.add_argument("--operator-arg", action="append", default=[], metavar="FLAG",
                        help="one more `ascend-hybrid run` argument, repeatable (e.g. --operator-arg=--workers=8)")
    parser.add_argument("--bare-workers", type=int, default=CREATE_WORKERS,
                        help="bare pods created this many at a time (default: as many as the operator creates at once; "
                        "1 is the serial baseline of the issue's before figures)")
    parser.add_argument("--bare-only", action="store_true",
                        help="no operator: `--rounds` bare rounds, with the CPU each cluster process spent on them "
                        "(to tell which part of the simulated cluster limits the baseline)")
    args = parser.parse_args()
    if args.bare_only:
        return bare_only(args)
    run_id = int(time.time())
    with DevCluster(args.name, args.nodes, keep=args.keep) as dev:
        say(f"dev-cluster up, {args.nodes} nodes: {dev.up_seconds:.1f} s; "
            + ", ".join(f"{name} {mb:.0f} MB" for name, mb in sorted(dev.component_rss_mb().items())))
        cold_bare = bare_round(dev, args.pods, args.chips, f"{run_id}-cold", args.bare_workers)
        operator = Operator(dev, profile=args.profile, extra_args=tuple(args.operator_arg)).start()
        try:
            cold_job, cold = job_round(dev, operator, args.pods, args.chips, f"{run_id}-cold")
            say(f"  cold: bare {cold_bare:.2f} s, first job after the operator started {cold_job:.2f} s, "
                f"ratio {cold_job / cold_bare:.2f}")
            rounds = []
            for number in range(1, args.rounds + 1):
                bare = bare_round(dev, args.pods, args.chips, f"{run_id}-{number}", args.bare_workers)
                job, spent = job_round(dev, operator, args.pods, args.chips, f"{run_id}-{number}")
                rounds.append((bare, job, spent))
                say(f"  round {number}: bare {bare:.2f} s, job {job:.2f} s, ratio {job / bare:.2f}, "
                    f"{spent.calls:.0f} API calls ({spent.writes:.0f} writes), operator CPU {spent.cpu:.2f} s")
            peak_mb = operator.peak_rss / 1e6
        finally:
            operator.stop_process()
        control_plane = dev.component_rss_mb()
    bare_s, job_s = [bare for bare, _, _ in rounds], [job for _, job, _ in rounds]
    calls, writes = [spent.calls for _, _, spent in rounds], [spent.writes for _, _, spent in rounds]
    cpu = [spent.cpu for _, _, spent in rounds]
    ratios = [job / bare for bare, job, _ in rounds]
    print(f"{args.pods} pods × {args.chips} NPUs ({args.pods * args.chips} NPUs) on {args.nodes} nodes: "
          f"dev-cluster up {dev.up_seconds:.1f} s, {args.rounds} warm rounds after one cold, "
          f"bare pods created {args.bare_workers} at a time"
          + (f", operator {' '.join(args.operator_arg)}" if args.operator_arg else ""))
    print("  control plane RSS at the end: "
          + ", ".join(f"{name} {mb:.0f} MB" for name, mb in sorted(control_plane.items())))
    print(f"  cold: bare {cold_bare:.2f} s, first job after operator start {cold_job:.2f} s, "
          f"ratio {cold_job / cold_bare:.2f}, {cold.calls / args.pods:.2f} API calls ({cold.writes / args.pods:.2f} "
          f"writes) and {1000 * cold.cpu / args.pods:.2f} ms operator CPU per pod")
    print(f"  bare pods created → all Running with devices  : {median_range(bare_s, unit=' s')}")
    print(f"  AscendHybridJob applied → Running, rank table : {median_range(job_s, unit=' s')}")
    print(f"  operator API calls per pod                    : {median_range([c / args.pods for c in calls])}")
    print(f"  operator writes per pod                       : {median_range([w / args.pods for w in writes])}")
    print(f"  per pod by verb and resource (median)         : "
          f"{calls_breakdown([spent.by_call for _, _, spent in rounds], args.pods)}")
    print(f"  operator CPU per pod                          : "
          f"{median_range([1000 * c / args.pods for c in cpu], unit=' ms')}")
    print(f"  operator peak RSS                             : {peak_mb:.0f} MB")
    print(f"  ratio job / bare                              : {median_range(ratios)} "
          f"(goal ≤ {1.25 if args.pods * args.chips >= 16384 else 1.2}; median {statistics.median(ratios):.2f})")
    if args.profile is not None:
        print(operator.profile_summary())
    print(ratio_line("gang ratio", ratios))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
