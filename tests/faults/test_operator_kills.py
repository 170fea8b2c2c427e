"""The operator SIGKILLed at seeded random moments, many times in a row, while jobs are created, fail, restart and
finish: after each kill a new process starts from nothing but the API objects."""

from __future__ import annotations

import random
import time

from support.faults import CaseResult, Monitor, check_job, converge
from support.operator_harness import job_manifest

SEED = 20261201
KILLS = 20
FAIL = {"sim.hybrid.ascend.dev/outcome": "fail", "sim.hybrid.ascend.dev/exit-code": "3"}
SUCCEED = {"sim.hybrid.ascend.dev/outcome": "succeed", "sim.hybrid.ascend.dev/after-seconds": "4"}


def test_the_operator_killed_twenty_times_at_random_moments(jobs, fault_cluster, report):
    rng = random.Random(SEED)
    shapes = {"kill-a": (4, 4), "kill-b": (2, 8), "kill-c": (6, 2)}  # name → (pods, chips per pod)
    steps = [lambda: jobs.create(job_manifest("kill-a", data=4, tensor=4, per_pod=4)),
             lambda: jobs.create(job_manifest("kill-b", data=2, tensor=8, per_pod=8, runPolicy={"backoffLimit": 5})),
             lambda: fail_one(jobs, "kill-a"),
             lambda: jobs.create(job_manifest("kill-c", data=6, tensor=2, per_pod=2)),
             lambda: fail_one(jobs, "kill-b"),
             lambda: jobs.create(job_manifest("kill-done", data=1, tensor=2, per_pod=2, annotations=SUCCEED))]
    delays = []
    with Monitor(fault_cluster.core) as monitor:
        started = time.monotonic()
        for kill in range(KILLS):
            if kill < len(steps):
                steps[kill]()
            delay = rng.uniform(0.0, 2.0)  # from the middle of a pass to well after it
            delays.append(delay)
            time.sleep(delay)
            jobs.operator.kill()
            jobs.operator.start()
        for name in shapes:
            converge(jobs, name, timeout=180)
        converge(jobs, "kill-done", phase="Succeeded", timeout=120)
        seconds = time.monotonic() - started
    results = [check_job(jobs, name, pods) for name, (pods, _) in shapes.items()]
    duplicated, lost = sum(r[0] for r in results), sum(r[1] for r in results)
    assert (duplicated, lost, monitor.max_duplicates, monitor.double_booked) == (0, 0, 0, [])
    restarts = {name: jobs.status(name)["restarts"] for name in shapes}
    assert restarts == {"kill-a": 1, "kill-b": 1, "kill-c": 0}, restarts  # each failure counted once, kills never
    report.add(CaseResult(f"operator SIGKILLed {KILLS} times (seed {SEED}, 0–2 s after each start) across 4 jobs", KILLS,
                          duplicated, lost, seconds, f"restarts {restarts}: only the two pod failures counted"))


def fail_one(jobs, name: str) -> None:
    pods = [p for p in jobs.pods(name) if p["status"].get("phase") == "Running"]
    if not pods:  # not running yet: fail it as soon as it does
        converge(jobs, name, timeout=120)
        pods = jobs.pods(name, attempt=jobs.status(name)["attempt"])
    jobs.core.patch_namespaced_pod(pods[0]["metadata"]["name"], jobs.namespace, {"metadata": {"annotations": FAIL}})
