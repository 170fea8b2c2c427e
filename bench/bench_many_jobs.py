"""Many small jobs: N one-pod AscendHybridJobs applied at once → all Running, against N bare pods created at once →
all Running with devices, side by side on one simulated cluster; jobs/s against bare pods/s, the operator's peak
RSS and CPU per pod, and the latency of each job from its POST to Running.

Reconcile latency: percentiles of the operator's `ascend_hybrid_reconcile_seconds` histogram when it exports one;
apply → Running per job, measured from the outside, always.
`--watched-pods M` first creates M more pods without NPUs (with the job label when `--watched-labelled`, naming
no job), so that the RSS figure is the operator's with N jobs and N + M pods in its watch.

    .venv/bin/python bench/bench_many_jobs.py [--nodes 1000] [--jobs 1000] [--chips 8] [--rounds 3]
        [--watched-pods 0] [--watched-labelled] [--name N] [--keep]

The last line is `jobs rate ratio median: R (rounds: r1, r2, …)` (jobs/s ÷ bare pods/s; goal ≥ 0.8).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from ascend_hybrid.contracts import names
from benchkit import (
    DevCluster,
    Operator,
    WaitTimedOut,
    bare_pods,
    calls_breakdown,
    gang_job,
    histogram_quantile,
    median_range,
    percentiles,
    ratio_line,
    say,
)


def timeout_for(count: int) -> float:
    return max(300.0, count * 0.6)


def cpu_since(dev: DevCluster, before: dict[str, float]) -> dict[str, float]:
    """CPU seconds each cluster process spent since `before` (component_cpu_seconds)."""
    return {name: seconds - before.get(name, 0.0) for name, seconds in dev.component_cpu_seconds().items()}


def bare_round(dev: DevCluster, count: int, chips: int, tag: str) -> tuple[float, dict[str, float]]:
    """Seconds from the first POST to every pod Running, and the CPU the cluster's processes spent meanwhile."""
    namespace = dev.namespace(f"bench-manybare-{tag}")
    watch = dev.pod_watch(namespace)
    try:
        cpu_before = dev.component_cpu_seconds()
        started = time.monotonic()
        dev.create_all(dev.pods_url(namespace), bare_pods(count, chips))
        finished = watch.wait_count(count, timeout_for(count), "bare pods Running with devices")
        cluster_cpu = cpu_since(dev, cpu_before)
    finally:
        watch.close()
    dev.remove_namespace(namespace)
    return finished - started, cluster_cpu


def jobs_round(dev: DevCluster, operator: Operator, count: int, chips: int, tag: str, timeout: float) -> dict:
    """The round's figures; when not every job ran within `timeout`, those of the jobs that did, `running` < count."""
    namespace = dev.namespace(f"bench-manyjobs-{tag}")
    watch = dev.job_watch(namespace)
    try:
        before, cpu_before = operator.snapshot(), dev.component_cpu_seconds()
        started = time.monotonic()
        sent = dev.create_all(dev.jobs_url(namespace), [gang_job(f"job-{i:05d}", 1, chips) for i in range(count)])
        try:
            finished, running = watch.wait_count(count, timeout, "jobs Running"), count
        except WaitTimedOut as timed_out:
            say(f"  {timed_out}")
            finished, running = time.monotonic(), timed_out.reached
        spent, cluster_cpu = operator.snapshot().since(before), cpu_since(dev, cpu_before)
        rss_mb = operator.rss() / 1e6
        say(f"  {running} jobs Running: operator RSS {rss_mb:.0f} MB, peak so far {operator.peak_rss / 1e6:.0f} MB")
        latencies = [watch.seen[name] - sent[name] for name in sent if name in watch.seen]
    finally:
        watch.close()
    dev.remove_jobs(namespace)
    dev.remove_namespace(namespace)
    operator.wait_settled()  # the jobs' removal is not the next round's work
    return {"seconds": finished - started, "running": running, "calls": spent.calls, "writes": spent.writes,
            "by_call": spent.by_call, "cpu": spent.cpu, "cluster_cpu": cluster_cpu,
            "buckets": spent.buckets, "latencies": latencies, "rss_mb": rss_mb}


def watched_pods(dev: DevCluster, count: int, labelled: bool) -> None:
    namespace = dev.namespace("bench-watched")
    labels = {names.JOB_LABEL: "no-such-job"} if labelled else {}
    watch = dev.pod_watch(namespace)
    try:
        dev.create_all(dev.pods_url(namespace), bare_pods(count, 0, prefix="watched", labels=labels))
        watch.wait_count(count, timeout_for(count), "watched pods Running")
    finally:
        watch.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--chips", type=int, default=8, help="NPUs per job (its one pod)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--watched-pods", type=int, default=0, help="extra pods without NPUs, created first")
    parser.add_argument("--watched-labelled", action="store_true", help="give the extra pods the job label")
    parser.add_argument("--timeout", type=float, default=1200, help="seconds the jobs of a round may take to run")
    parser.add_argument("--name", default="ahj-bench-many")
    parser.add_argument("--keep", action="store_true", help="leave the cluster up")
    parser.add_argument("--profile", type=Path, help="run the operator under py-spy, its raw stacks here, and "
                        "print where its CPU went")
    parser.add_argument("--operator-arg", action="append", default=[], metavar="FLAG",
                        help="one more `ascend-hybrid run` argument, repeatable (e.g. --operator-arg=--workers=8)")
    args = parser.parse_args()
    run_id = int(time.time())
    rounds = []
    with DevCluster(args.name, args.nodes, keep=args.keep) as dev:
        say(f"dev-cluster up, {args.nodes} nodes: {dev.up_seconds:.1f} s")
        if args.watched_pods:
            started = time.monotonic()
            watched_pods(dev, args.watched_pods, args.watched_labelled)
            say(f"  {args.watched_pods} watched pods Running in {time.monotonic() - started:.1f} s")
        operator = Operator(dev, profile=args.profile, extra_args=tuple(args.operator_arg)).start()
        try:
            say(f"  operator settled {operator.wait_settled():.1f} s after it started")
            idle_mb = operator.rss() / 1e6
            for number in range(1, args.rounds + 1):
                bare, bare_cpu = bare_round(dev, args.jobs, args.chips, f"{run_id}-{number}")
                jobs = jobs_round(dev, operator, args.jobs, args.chips, f"{run_id}-{number}", args.timeout)
                jobs["bare_cluster_cpu"] = bare_cpu
                rounds.append((bare, jobs))
                say(f"  round {number}: bare {args.jobs / bare:.1f} pods/s, jobs {jobs['running'] / jobs['seconds']:.1f} "
                    f"jobs/s ({jobs['running']} Running), operator RSS {jobs['rss_mb']:.0f} MB")
            peak_mb = operator.peak_rss / 1e6
        finally:
            operator.stop_process()
    report(args, rounds, idle_mb, peak_mb, operator.profile_summary())
    return 0


def print_cpu_bound(count: int, rounds: list[dict]) -> None:
    """The machine's CPU per bare pod and per job, by process (each side's window: first POST → all Running).
    Both sides share the same cores, so while each is CPU-bound the rate ratio cannot pass bare CPU ÷ job CPU."""
    def per_item(spent: dict[str, float]) -> dict[str, float]:
        return {name: 1000 * seconds / count for name, seconds in spent.items()}
    bare = [per_item(j["bare_cluster_cpu"]) for j in rounds]
    jobs = [{**per_item(j["cluster_cpu"]), "operator": 1000 * j["cpu"] / count} for j in rounds]
    for label, sides in (("bare pod", bare), ("job", jobs)):
        names_ = sorted({name for side in sides for name in side}, key=lambda n: -statistics.median(
            side.get(n, 0.0) for side in sides))
        parts = ", ".join(f"{name} {statistics.median(side.get(name, 0.0) for side in sides):.1f}" for name in names_)
        print(f"  CPU per {label + ' (ms, median)':<38}: total {median_range([sum(s.values()) for s in sides], 1)}"
              f" — {parts}")
    bounds = [sum(b.values()) / sum(j.values()) for b, j in zip(bare, jobs)]
    print(f"  CPU bound on the rate ratio (bare ÷ job CPU)  : {median_range(bounds)}")


def report(args, rounds: list[tuple[float, dict]], idle_mb: float, peak_mb: float, profile: str) -> None:
    rates = [(args.jobs / bare, jobs["running"] / jobs["seconds"]) for bare, jobs in rounds]
    ratios = [jobs_rate / bare_rate for bare_rate, jobs_rate in rates]
    short = [f"{jobs['running']}/{args.jobs}" for _, jobs in rounds if jobs["running"] < args.jobs]
    latencies = [latency for _, jobs in rounds for latency in jobs["latencies"]]
    watched = f", {args.watched_pods} more pods watched ({'labelled' if args.watched_labelled else 'unlabelled'})" \
        if args.watched_pods else ""
    flags = f", operator {' '.join(args.operator_arg)}" if args.operator_arg else ""
    print(f"{args.jobs} one-pod jobs × {args.chips} NPUs on {args.nodes} nodes{watched}, {args.rounds} rounds{flags}")
    print(f"  bare pods/s (created → Running with devices)  : {median_range([bare for bare, _ in rates], 1)}")
    print(f"  jobs/s (applied → Running, rank table)        : {median_range([jobs for _, jobs in rates], 3)}"
          + (f"  (timed out after {args.timeout:.0f} s with {', '.join(short)} Running: the rate of those)"
             if short else ""))
    print(f"  operator API calls per job applied            : {median_range([j['calls'] / args.jobs for _, j in rounds])}")
    print(f"  operator writes per job applied               : {median_range([j['writes'] / args.jobs for _, j in rounds])}")
    print(f"  per job by verb and resource (median)         : "
          f"{calls_breakdown([j['by_call'] for _, j in rounds], args.jobs)}")
    print(f"  operator CPU per job applied                  : "
          f"{median_range([1000 * j['cpu'] / args.jobs for _, j in rounds], unit=' ms')}")
    print_cpu_bound(args.jobs, [jobs for _, jobs in rounds])
    points = percentiles(latencies)
    print("  apply → Running per job (outside), all rounds : "
          + ", ".join(f"p{p} {value:.2f} s" for p, value in points.items())
          + (f" (of the {len(latencies)} jobs that ran)" if short else ""))
    buckets = [j["buckets"] for _, j in rounds if j["buckets"]]
    if buckets:
        summed: dict[float, float] = {}
        for round_buckets in buckets:
            for bound, count in round_buckets:
                summed[bound] = summed.get(bound, 0.0) + count
        merged = sorted(summed.items())
        print("  reconcile latency (ascend_hybrid_reconcile_seconds): "
              + ", ".join(f"p{int(q * 100)} {histogram_quantile(merged, q) * 1000:.1f} ms" for q in (0.5, 0.9, 0.99))
              + f" over {merged[-1][1]:.0f} reconciles")
    else:
        print("  reconcile latency: this operator exports no ascend_hybrid_reconcile_seconds; see apply → Running")
    print(f"  operator RSS: settled {idle_mb:.0f} MB, with {args.jobs} jobs applied "
          f"{median_range([j['rss_mb'] for _, j in rounds], 0, ' MB')}, peak {peak_mb:.0f} MB (goal < 400 MB)")
    if profile:
        print(profile)
    print(f"jobs rate ratio median: {statistics.median(ratios):.4f} (rounds: {', '.join(f'{r:.4f}' for r in ratios)})"
          if min(ratios) < 0.01 else ratio_line("jobs rate ratio", ratios))


if __name__ == "__main__":
    raise SystemExit(main())
