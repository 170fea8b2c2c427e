"""The operator in Volcano mode on one gang: an AscendHybridJob with `spec.scheduling.schedulerName: volcano`
applied → Running with its rank table completed, against the same pods bare through Volcano (one PodGroup of
minMember = every pod, the pods `schedulerName: volcano`, no owner) → all Running with their chips' annotation,
side by side on one simulated cluster run with `dev-cluster up --volcano` (Volcano's scheduler and controller
manager, the stand-in for its Ascend plugin, the device plugin in Volcano mode).

Order as in bench_operator.py: one bare round before the operator starts, the first job timed at once (cold), then
`--rounds` warm bare/job pairs; every pod and PodGroup is gone before the next step. Single rounds are noisy on a
shared machine: the median ratio is the figure, with its rounds. Never asserts on time.

    .venv/bin/python bench/bench_volcano.py [--nodes 256] [--pods 128] [--chips 8] [--rounds 3] [--name N] [--keep]

The last line is `volcano gang ratio median: R (rounds: r1, r2, …)`. bench_operator.py gives the default mode's
(the operator binding the pods itself, against bare pods kube-scheduler binds) on the same sizes.
"""

from __future__ import annotations

import argparse
import statistics
import time

from ascend_hybrid.devcluster.volcano import manifests as volcano
from bench_operator import timeout_for
from benchkit import DevCluster, Operator, bare_pods, gang_job, median_range, ratio_line, say

GROUP_NAME_ANNOTATION = "scheduling.k8s.io/group-name"


def bare_round(dev: DevCluster, pods: int, chips: int, tag: str) -> float:
    """A PodGroup of `pods` plain pods through Volcano, as any Volcano user's gang: created → all Running with their
    chips annotated."""
    namespace = dev.namespace(f"bench-vbare-{tag}")
    watch = dev.pod_watch(namespace)
    try:
        started = time.monotonic()
        dev.custom.create_namespaced_custom_object(volcano.GROUP, volcano.VERSION, namespace, volcano.PODGROUPS,
                                                   volcano.podgroup_manifest("bare", pods))
        manifests = bare_pods(pods, chips)
        for manifest in manifests:
            manifest["metadata"]["annotations"] = {GROUP_NAME_ANNOTATION: "bare"}
            manifest["spec"]["schedulerName"] = volcano.SCHEDULER_NAME
        dev.create_all(dev.pods_url(namespace), manifests)
        finished = watch.wait_count(pods, timeout_for(pods), "bare pods Running with devices")
    finally:
        watch.close()
    dev.remove_namespace(namespace)
    return finished - started


def job_round(dev: DevCluster, operator: Operator, pods: int, chips: int, tag: str) -> float:
    namespace = dev.namespace(f"bench-vjob-{tag}")
    watch = dev.job_watch(namespace)
    try:
        job = gang_job("bench", pods, chips)
        job["spec"]["scheduling"] = {"schedulerName": volcano.SCHEDULER_NAME}
        started = time.monotonic()
        dev.create_all(dev.jobs_url(namespace), [job])
        finished = watch.wait_count(1, timeout_for(pods), "the job Running with its rank table")
    finally:
        watch.close()
    dev.remove_jobs(namespace)
    dev.remove_namespace(namespace)
    return finished - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=256)
    parser.add_argument("--pods", type=int, default=128)
    parser.add_argument("--chips", type=int, default=8, help="NPUs per pod (the nodes have 8)")
    parser.add_argument("--rounds", type=int, default=3, help="warm bare/job pairs; the ratio printed is their median")
    parser.add_argument("--name", default="ahj-bench-volcano", help="the dev cluster's name")
    parser.add_argument("--keep", action="store_true", help="leave the cluster up")
    args = parser.parse_args()
    run_id = int(time.time())
    with DevCluster(args.name, args.nodes, keep=args.keep, volcano=True) as dev:
        say(f"dev-cluster up --volcano, {args.nodes} nodes: {dev.up_seconds:.1f} s")
        cold_bare = bare_round(dev, args.pods, args.chips, f"{run_id}-cold")
        operator = Operator(dev).start()
        try:
            cold_job = job_round(dev, operator, args.pods, args.chips, f"{run_id}-cold")
            say(f"  cold: bare {cold_bare:.2f} s, first job after the operator started {cold_job:.2f} s")
            rounds = []
            for number in range(1, args.rounds + 1):
                bare = bare_round(dev, args.pods, args.chips, f"{run_id}-{number}")
                job = job_round(dev, operator, args.pods, args.chips, f"{run_id}-{number}")
                rounds.append((bare, job))
                say(f"  round {number}: bare {bare:.2f} s, job {job:.2f} s, ratio {job / bare:.2f}")
        finally:
            operator.stop_process()
    bare_s, job_s = [bare for bare, _ in rounds], [job for _, job in rounds]
    ratios = [job / bare for bare, job in rounds]
    print(f"{args.pods} pods × {args.chips} NPUs ({args.pods * args.chips} NPUs) on {args.nodes} nodes through "
          f"Volcano: dev-cluster up --volcano {dev.up_seconds:.1f} s, {args.rounds} warm rounds after one cold")
    print(f"  cold: bare {cold_bare:.2f} s, first job after operator start {cold_job:.2f} s, "
          f"ratio {cold_job / cold_bare:.2f}")
    print(f"  bare PodGroup created → all Running with devices : {median_range(bare_s, unit=' s')}")
    print(f"  AscendHybridJob applied → Running, rank table    : {median_range(job_s, unit=' s')}")
    print(f"  ratio job / bare                                 : {median_range(ratios)} "
          f"(median {statistics.median(ratios):.2f})")
    print(ratio_line("volcano gang ratio", ratios))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
