"""Whole-gang restart: one pod of a running gang fails → attempt 2 Running with a fresh rank table, against deleting
the same number of running bare pods and creating them again → all Running with devices, side by side; and the
finer rungs of the recovery ladder (docs/reliability.md) on the same gang size:

- RestartRanks: a launcher reports its ranks Failed → every launcher told the next rank generation (the
  operator's write to `<job>-recovery`) → the first step after (status.recoveries Recovered);
- ReplacePod: a pod deleted without grace (as a lost node's pod is) → the replacement Running with the rank
  table completed again → the first step after;
- Shrink and Grow (spec.elastic, docs/reliability.md "Elastic data parallelism"): an elastic gang with every
  other chip of the cluster held by bare filler pods; one of its nodes NotReady → ReplacePod finds no node, so
  the gang shrinks to half its data degree (the largest that splits its global batch of 2 × pods) keeping half of
  its running pods, the rank table completed and the launchers told → the first step after; the node Ready again
  → the gang back at its whole degree → the first step after.

The simulated pods run no trainer, so the bench plays every launcher (one writer, all the reports of the gang
in one merge patch each time, as fast as launchers that restart at once): what is measured is the control
plane's part — detection, decision, the generation's write and its watch, placement and start of one pod —
not MindSpore's start (the real-training test measures that on CPU).

The pod fails as the simulated cluster fails one: the kwok stage `ahj-pod-fail` turns a Running pod Failed (exit
code 3) once it carries `sim.hybrid.ascend.dev/outcome: fail`; the clock starts when that annotation is patched on.
Each round sets both up untimed (a bare namespace, then a job namespace, one at a time so that both find the same
free nodes), and removes them after. Never asserts on time.

    .venv/bin/python bench/bench_restart.py [--nodes 256] [--pods 128] [--chips 8] [--rounds 5] [--name N] [--keep]
                                            [--no-rungs] [--no-elastic]

The last line is `restart ratio median: R (rounds: r1, r2, …)`.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from ascend_hybrid.contracts import names
from ascend_hybrid.contracts.names import GROUP
from ascend_hybrid.devcluster.nodes.fleet import set_node_ready
from ascend_hybrid.devcluster.testing.pods import outcome_annotations
from ascend_hybrid.spec.api import PLURAL, VERSION
from benchkit import (
    DevCluster,
    Operator,
    bare_pods,
    gang_job,
    job_running,
    median_range,
    ratio_line,
    say,
)
from support.operator_harness import channel_data, patch_channel


def bare_restart(dev: DevCluster, pods: int, chips: int, tag: str, graceful: bool = False) -> float:
    namespace = dev.namespace(f"bench-rebare-{tag}")
    watch = dev.pod_watch(namespace)
    try:
        dev.create_all(dev.pods_url(namespace), bare_pods(pods, chips, prefix="first"))
        watch.wait_count(pods, 600, "the first bare pods Running")
        started = time.monotonic()
        # grace 0 (the default baseline) skips the kubelet's confirmation, which the operator cannot; --bare-graceful
        # deletes them as the operator does, with their grace period
        dev.core.delete_collection_namespaced_pod(namespace, label_selector="bench=first",
                                                  grace_period_seconds=None if graceful else 0)
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


# ---- the finer rungs, with simulated launchers -------------------------------------------------------------------

IN_FLIGHT_SECONDS = 15.0  # controller/settings.py in_flight_seconds


def report(uid: str, generation: int, state: str, **fields) -> str:
    return json.dumps({"uid": uid, "generation": generation, "state": state,
                       "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"), **fields})


class Launchers:
    """Every launcher of one job, played by the bench through the job's LauncherChannel <job>-recovery."""

    def __init__(self, dev: DevCluster, namespace: str, job: str):
        self.dev, self.namespace, self.job = dev, namespace, job

    def pods(self) -> dict[str, str]:
        """Name → UID of the job's pods not being deleted. Read as plain JSON: the typed client's models of 2 048
        pods take seconds to build, a bench cost that would count as the operator's (a launcher knows its UID)."""
        found = self.dev.core.list_namespaced_pod(self.namespace, label_selector=f"{names.JOB_LABEL}={self.job}",
                                                  _preload_content=False)
        return {pod["metadata"]["name"]: pod["metadata"]["uid"] for pod in json.loads(found.data)["items"]
                if not pod["metadata"].get("deletionTimestamp")}

    def uid_of(self, pod: str) -> str:
        found = self.dev.core.read_namespaced_pod(pod, self.namespace, _preload_content=False)
        return json.loads(found.data)["metadata"]["uid"]

    def generation(self) -> int:
        """The generation the operator wrote into the channel; 0 while it wrote none (a start writes none)."""
        return int((channel_data(self.dev.custom, self.namespace, self.job) or {}).get("generation") or 0)

    def say_all(self, generation: int, state: str, pods: dict[str, str] | None = None, **fields) -> None:
        """Every launcher of the job reports `state`, in one merge patch."""
        pods = pods or self.pods()
        self.say({name: report(uid, generation, state, **fields) for name, uid in pods.items()})

    def say(self, reports: dict[str, str]) -> None:
        """Reports written into the channel by pod name, in one merge patch, as the launchers write theirs (the
        first makes the channel when the operator has not written one)."""
        patch_channel(self.dev.custom, self.namespace, self.job, reports)

    def wait_generation(self, wanted: int, timeout: float = 600) -> float:
        deadline = time.monotonic() + timeout
        while self.generation() < wanted:
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out waiting for rank generation {wanted} of {self.job}")
            time.sleep(0.02)
        return time.monotonic()


def recovered(job: dict) -> bool:
    ledger = (job.get("status") or {}).get("recoveries") or []
    return bool(ledger) and ledger[-1].get("outcome") == "Recovered"


def in_place_rungs(dev: DevCluster, pods: int, chips: int, tag: str) -> tuple[float, float, float, float]:
    """RestartRanks: a launcher reports Failed → every launcher told → Recovered; ReplacePod: a pod deleted →
    its replacement Running with the rank table completed → Recovered. Seconds of each, from the fault."""
    namespace = dev.namespace(f"bench-rungs-{tag}")
    watch = dev.job_watch(namespace)
    launchers = Launchers(dev, namespace, "bench")
    try:
        dev.create_all(dev.jobs_url(namespace), [gang_job("bench", pods, chips, annotations=None)])
        watch.wait_count(1, 600, "attempt 1 Running")
        running = launchers.pods()  # the same pods after the fault: each launcher restarts its ranks in place
        launchers.say_all(0, "Started", running, resumedFrom=0)  # the first report makes the channel (generation 0)
        time.sleep(1.0)  # the operator's watch has the reports
        victim, uid = sorted(running.items())[-1]
        ranks_done = dev.job_watch(namespace, recovered)
        started = time.monotonic()
        launchers.say({victim: report(uid, 0, "Failed", cause="Unknown", rank=pods - 1, step=5, detail="bench")})
        told = launchers.wait_generation(1) - started
        launchers.say_all(1, "Started", running, resumedFrom=4)
        launchers.say_all(1, "Stepping", running, resumedFrom=4, step=5)
        ranks_recovered = ranks_done.wait_count(1, 600, "RestartRanks recovered") - started
        ranks_done.close()

        # a pod this operator created or released in the last 15 s (--in-flight window) and now missing is taken
        # for one its watch has not shown yet, not for a deleted one: a real fault hits a pod that ran for long
        time.sleep(IN_FLIGHT_SECONDS)
        replaced_done = dev.job_watch(namespace, lambda job: len((job.get("status") or {}).get("recoveries") or [])
                                      == 2 and recovered(job))
        before = running
        started = time.monotonic()
        dev.core.delete_namespaced_pod(victim, namespace, grace_period_seconds=0)  # lost: no graceful end
        launchers.wait_generation(2)
        pod_watch = dev.pod_watch(namespace)
        try:
            back = pod_watch.wait_count(1, 600, "the replacement Running with its devices",
                                        accept=lambda pod: pod["metadata"]["name"] == victim
                                        and pod["metadata"]["uid"] != before[victim])
        finally:
            pod_watch.close()
        deadline = time.monotonic() + 600
        while (dev.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "bench").get("status") or {
                }).get("phase") not in ("Running", "Restarting") or not rank_table_completed(dev, namespace):
            if time.monotonic() > deadline:
                raise SystemExit("timed out waiting for the rank table to complete again")
            time.sleep(0.05)
        replaced = max(back, time.monotonic()) - started
        after = {**before, victim: launchers.uid_of(victim)}  # only the replacement's launcher is new
        launchers.say_all(2, "Started", after, resumedFrom=4)
        launchers.say_all(2, "Stepping", after, resumedFrom=4, step=5)
        replaced_recovered = replaced_done.wait_count(1, 600, "ReplacePod recovered") - started
        replaced_done.close()
    finally:
        watch.close()
    dev.remove_namespace(namespace)
    return told, ranks_recovered, replaced, replaced_recovered


# ---- elasticity: shrink and grow, with simulated launchers ----------------------------------------------------

def elastic_job(pods: int, chips: int) -> dict:
    """The bench's gang, elastic: its global batch of 2 × pods splits over `pods` and `pods / 2` data ways and no
    degree between (every one of those needs a micro-batch count that divides it), so a lost node shrinks it to
    half; it may shrink at once (no wait for a replacement) and grows back as soon as it fits (no checkpoint
    boundary to wait for)."""
    job = gang_job("bench", pods, chips, annotations=None)
    job["spec"]["training"]["globalBatchSize"] = 2 * pods
    job["spec"]["elastic"] = {"minData": pods // 2, "replacementTimeoutSeconds": 0}
    return job


def at_world(data: int, attempt_after: int) -> Callable[[dict], bool]:
    """Every pod of an attempt after `attempt_after` running at `data` data ways, the rank table completed (and the
    launchers told their generation): a shrink that kept its pods stays Restarting until they step in it."""
    def reached(job: dict) -> bool:
        status = job.get("status") or {}
        return ((status.get("rankTable") or {}).get("status") == "completed"
                and status.get("phase") in ("Running", "Restarting")
                and int(status.get("attempt") or 0) > attempt_after
                and (status.get("parallelism") or {}).get("data") == data)
    return reached


def step_after_new_attempt(launchers: Launchers, incidents: int, started: float, dev: DevCluster,
                           namespace: str) -> float:
    """Every launcher of the new attempt starts and steps (at once, simulated); seconds from `started` until the
    ledger's `incidents`-th incident is Recovered."""
    done = dev.job_watch(namespace, lambda job: len((job.get("status") or {}).get("recoveries") or []) == incidents
                         and recovered(job))
    try:
        generation = launchers.generation() or 0
        pods = launchers.pods()
        launchers.say_all(generation, "Started", pods, resumedFrom=0)
        launchers.say_all(generation, "Stepping", pods, resumedFrom=0, step=1)
        return done.wait_count(1, 600, f"incident {incidents} recovered") - started
    finally:
        done.close()


def elastic_rungs(dev: DevCluster, nodes: int, pods: int, chips: int, tag: str) -> tuple[float, float, float, float]:
    """Shrink: a node of the gang NotReady with no free chip anywhere → Running at pods / 2 data ways → the first
    step after; Grow: the node Ready again → Running at `pods` → the first step after. Seconds of each, from the
    node's label change (the shrink's include the operator's node grace, 3 s here)."""
    namespace = dev.namespace(f"bench-elastic-{tag}")
    launchers = Launchers(dev, namespace, "bench")
    lost = None
    try:
        first = dev.job_watch(namespace)
        dev.create_all(dev.jobs_url(namespace), [elastic_job(pods, chips)])
        first.wait_count(1, 600, "attempt 1 Running")
        first.close()
        launchers.say_all(0, "Started", resumedFrom=0)
        launchers.say_all(0, "Stepping", resumedFrom=0, step=1)
        fillers = dev.pod_watch(namespace, label_selector="bench=filler")
        try:
            dev.create_all(dev.pods_url(namespace), bare_pods(nodes - pods, chips, prefix="filler"))
            fillers.wait_count(nodes - pods, 600, "the filler pods Running: no free chip left")
        finally:
            fillers.close()
        victim = dev.core.list_namespaced_pod(
            namespace, label_selector=f"{names.JOB_LABEL}=bench,{names.ATTEMPT_LABEL}=1").items[-1]
        lost = victim.spec.node_name
        shrunk = dev.job_watch(namespace, at_world(pods // 2, 1))
        started = time.monotonic()
        set_node_ready(dev.core, lost, False)
        try:
            shrink_running = shrunk.wait_count(1, 600, f"Running at data {pods // 2}") - started
        finally:
            shrunk.close()
        attempt = dev.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "bench")["status"][
            "attempt"]
        shrink_stepping = step_after_new_attempt(launchers, 1, started, dev, namespace)

        grown = dev.job_watch(namespace, at_world(pods, int(attempt)))
        started = time.monotonic()
        set_node_ready(dev.core, lost, True)
        lost = None
        try:
            grow_running = grown.wait_count(1, 600, f"Running at data {pods} again") - started
        finally:
            grown.close()
        grow_stepping = step_after_new_attempt(launchers, 2, started, dev, namespace)
    finally:
        if lost is not None:
            set_node_ready(dev.core, lost, True)
    dev.remove_namespace(namespace)
    return shrink_running, shrink_stepping, grow_running, grow_stepping


def rank_table_completed(dev: DevCluster, namespace: str) -> bool:
    data = dev.core.read_namespaced_config_map(names.rank_table_config_map("bench"), namespace).data or {}
    return '"completed"' in "".join(data.values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=256)
    parser.add_argument("--pods", type=int, default=128)
    parser.add_argument("--chips", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--name", default="ahj-bench-restart")
    parser.add_argument("--keep", action="store_true", help="leave the cluster up")
    parser.add_argument("--no-rungs", action="store_true", help="only the whole-gang restart against bare pods")
    parser.add_argument("--no-elastic", action="store_true", help="without the shrink and grow rungs")
    parser.add_argument("--bare-graceful", action="store_true",
                        help="delete the bare pods with their grace period, as the operator deletes a gang's pods "
                        "(default: grace 0, a forced delete)")
    parser.add_argument("--profile", type=Path, help="run the operator under py-spy, its raw stacks here, and "
                        "print where its CPU went")
    args = parser.parse_args()
    run_id = int(time.time())
    rounds, rungs, elastic = [], [], []
    with DevCluster(args.name, args.nodes, keep=args.keep) as dev:
        operator = Operator(dev, profile=args.profile).start()
        try:
            say(f"  operator settled {operator.wait_settled():.1f} s after it started")
            for number in range(1, args.rounds + 1):
                bare = bare_restart(dev, args.pods, args.chips, f"{run_id}-{number}", args.bare_graceful)
                job, calls, cpu = job_restart(dev, operator, args.pods, args.chips, f"{run_id}-{number}")
                rounds.append((bare, job, calls, cpu))
                say(f"  round {number}: bare delete + create {bare:.2f} s, gang restart {job:.2f} s, "
                    f"ratio {job / bare:.2f}, {calls:.0f} API calls, operator CPU {cpu:.2f} s")
                if not args.no_rungs:
                    rungs.append(in_place_rungs(dev, args.pods, args.chips, f"{run_id}-{number}"))
                    say(f"  round {number}: RestartRanks told {rungs[-1][0]:.2f} s, recovered {rungs[-1][1]:.2f} s; "
                        f"ReplacePod pod back {rungs[-1][2]:.2f} s, recovered {rungs[-1][3]:.2f} s")
                if not args.no_rungs and not args.no_elastic:
                    elastic.append(elastic_rungs(dev, args.nodes, args.pods, args.chips, f"{run_id}-{number}"))
                    say(f"  round {number}: Shrink running {elastic[-1][0]:.2f} s, stepping {elastic[-1][1]:.2f} s; "
                        f"Grow running {elastic[-1][2]:.2f} s, stepping {elastic[-1][3]:.2f} s")
            peak_mb = operator.peak_rss / 1e6
        finally:
            operator.stop_process()
    profile = operator.profile_summary()
    bare_s, job_s, calls, cpu = (list(column) for column in zip(*rounds))
    ratios = [job / bare for bare, job, _, _ in rounds]
    print(f"whole-gang restart, {args.pods} pods × {args.chips} NPUs on {args.nodes} nodes, {args.rounds} rounds")
    print(f"  bare pods deleted{' (graceful)' if args.bare_graceful else ' (grace 0)'} and created again → Running: "
          f"{median_range(bare_s, unit=' s')}")
    print(f"  one pod failed → attempt 2 Running, rank table: {median_range(job_s, unit=' s')}")
    print(f"  operator API calls per pod                    : {median_range([c / args.pods for c in calls])}")
    print(f"  operator CPU per pod                          : "
          f"{median_range([1000 * c / args.pods for c in cpu], unit=' ms')}")
    print(f"  operator peak RSS                             : {peak_mb:.0f} MB")
    print(f"  ratio restart / bare (goal ≤ 1.3)             : {median_range(ratios)}")
    if rungs:
        told, ranks, replaced, replaced_done = (list(column) for column in zip(*rungs))
        print(f"  RestartRanks: fault → every rank relaunched   : {median_range(told, unit=' s')} "
              f"(the generation written; simulated launchers restart at once)")
        print(f"  RestartRanks: fault → first step after        : {median_range(ranks, unit=' s')}")
        print(f"  ReplacePod: pod deleted → back, table complete: {median_range(replaced, unit=' s')}")
        print(f"  ReplacePod: pod deleted → first step after    : {median_range(replaced_done, unit=' s')}")
        print(f"  RestartRanks / RestartGang (goal ≤ 0.1)       : "
              f"{median_range([rank / job for rank, job in zip(ranks, job_s)])}")
        print(f"  ReplacePod / RestartGang (goal ≤ 0.2)         : "
              f"{median_range([done / job for done, job in zip(replaced_done, job_s)])}")
    if elastic:
        shrink_running, shrink_stepping, grow_running, grow_stepping = (list(column) for column in zip(*elastic))
        half = args.pods // 2
        print(f"  {f'Shrink: node NotReady → data {half} running':<46}: {median_range(shrink_running, unit=' s')} "
              f"(the 3 s node grace included; every other chip held by filler pods)")
        print(f"  {f'Shrink: node NotReady → first step at {half}':<46}: {median_range(shrink_stepping, unit=' s')}")
        print(f"  {f'Grow: node Ready → data {args.pods} running':<46}: {median_range(grow_running, unit=' s')} "
              f"(from the label's removal: the node Ready, its taints lifted, then the operator's probe for room "
              f"every 5 s)")
        print(f"  {f'Grow: node Ready → first step at {args.pods}':<46}: {median_range(grow_stepping, unit=' s')}")
    if profile:
        print(profile)
    print(ratio_line("restart ratio", ratios))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
