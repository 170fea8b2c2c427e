"""200 jobs applied at once on a cluster that holds 20 at a time: they run in waves, oldest first, none starved,
no chip ever given twice."""

from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from kubernetes import client

from ascend_hybrid.contracts.names import GROUP
from ascend_hybrid.spec.api import PLURAL, VERSION
from support.faults import CaseResult, Monitor, live
from support.operator_harness import job_manifest, wait_for

JOBS = 200
SLOTS = 20  # 10 nodes × 2 pods of 4 chips
SUCCEED = {"sim.hybrid.ascend.dev/outcome": "succeed", "sim.hybrid.ascend.dev/after-seconds": "2"}


def manifest(index: int) -> dict:
    pods = 2 if index % 10 == 9 else 1  # every tenth a 2-pod gang: it needs two slots free at once
    return job_manifest(f"wave-{index:03d}", data=pods, tensor=4, per_pod=4, annotations=SUCCEED,
                        runPolicy={"cleanPodPolicy": "All"})


def test_two_hundred_jobs_on_room_for_twenty(jobs, fault_cluster, report):
    custom = client.CustomObjectsApi(fault_cluster.api)
    peak = Counter()
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.5):
            try:
                pods = jobs.core.list_namespaced_pod(jobs.namespace, _request_timeout=10).items
            except Exception:  # noqa: BLE001 - sampling only
                continue
            peak["pods"] = max(peak["pods"], sum(1 for p in pods if p.spec.node_name and live(
                client.ApiClient().sanitize_for_serialization(p))))

    def listed() -> list[dict]:
        return custom.list_namespaced_custom_object(GROUP, VERSION, jobs.namespace, PLURAL)["items"]

    def statuses() -> dict[str, dict]:
        return {job["metadata"]["name"]: job.get("status") or {} for job in listed()}

    sampler = threading.Thread(target=sample, daemon=True)
    with Monitor(fault_cluster.core, interval=1.0) as monitor:
        sampler.start()
        started = time.monotonic()
        with ThreadPoolExecutor(8) as pool:  # applied at once, as `kubectl apply -f` of a directory would
            list(pool.map(lambda index: jobs.create(manifest(index)), range(JOBS)))
        wait_for(lambda: Counter(s.get("phase") for s in statuses().values())["Succeeded"] == JOBS, 600,
                 f"all {JOBS} jobs to succeed",
                 lambda: str(Counter(s.get("phase") for s in statuses().values())), interval=2)
        seconds = time.monotonic() - started
        stop.set()
        sampler.join(timeout=30)
    assert monitor.double_booked == [] and monitor.max_duplicates == 0
    assert 0 < peak["pods"] <= SLOTS, peak
    placed = {name: next(c["lastTransitionTime"] for c in status["conditions"] if c["type"] == "Placed")
              for name, status in statuses().items()}
    # the queue's order: creation time (whole seconds), then namespace and name (backlog.queue_key)
    order = [job["metadata"]["name"] for job in sorted(listed(), key=lambda job: (
        job["metadata"]["creationTimestamp"], job["metadata"]["name"]))]
    overtakes = {older: sum(1 for younger in order[i + 1:] if placed[younger] < placed[older])
                 for i, older in enumerate(order)}
    overtaken = max(overtakes.values())
    worst = max(overtakes, key=overtakes.get)
    waves = len(set(placed.values()))
    assert overtaken <= SLOTS, (f"{worst} (placed {placed[worst]}, {order.index(worst)}th in the queue) was "
                                f"overtaken by {overtaken} younger jobs")
    assert all(status["restarts"] == 0 for status in statuses().values())
    report.add(CaseResult(f"{JOBS} jobs at once, room for {SLOTS} pods", JOBS, 0, 0, seconds,
                          f"all Succeeded; peak {peak['pods']} pods placed at once; placements over {waves} "
                          f"distinct seconds; most younger jobs placed before an older one: {overtaken}"))
    jobs.delete_all(timeout=300)
