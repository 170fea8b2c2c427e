"""What a watched pod event costs the operator's own list-watch against kopf doing the same work, side by side on one
simulated cluster in one run (docs/architecture.md, "Which watch serves what").

Each round starts two watchers of every namespace's pods, each in its own subprocess, both keeping what the operator
keeps of a pod (`podview.project_pod`, by job and for the pods holding NPUs) and telling a change to a stub reaction:

  list-watch   controller/listwatch.ListWatch into a podwatch.PodStore, through controller/kube.Kube, as
               `ascend-hybrid run` starts it (main.py)
  kopf         `kopf.run` standalone with the settings the operator gives kopf (handlers.configure: no diff base,
               events posted at WARNING), the pod indexes and event handlers the operator had before it watched pods
               itself (0471f14^: an index by job, an index of NPU pods, an on.event per pod), each index keeping
               the projection

Then N pods rendered as a gang's (gang/render.gang_pods: the operator's labels, env, volumes, bound to their nodes)
are created, annotated by the simulated device plugin and run by kwok, then deleted: each pod's creation, its
device annotation, its Running, its deletion. The figures are each watcher's process CPU (user + system, less what
answering the bench's polls took) per event it handled and per pod, the ratio kopf ÷ list-watch, and the RSS each
gained per 1 000 pods while they ran. CPU, not wall time: the machine's cores are shared. Never asserts on time.

After each round, `--jobs` AscendHybridJobs are created, their status written 3 times and deleted, watched by kopf
in a third subprocess as handlers.py watches them (the `ahj_jobs` index, the `job_changed` event handler): kopf's
CPU per job event, where the jobs stay.

    .venv/bin/python bench/bench_watch.py [--pods 1000] [--per-pod 4] [--jobs 100] [--rounds 3] [--name N] [--keep]

The last line is `kopf/list-watch CPU per event ratio median: R (rounds: …)`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil

from benchkit import CREATE_WORKERS, DevCluster, gang_job, median_range, ratio_line, running_with_devices, say

SIDES = ("list-watch", "kopf")
POLL_SECONDS = 0.5
QUIET_SECONDS = 2.0  # no event for this long after the last awaited one: the watcher is done with the phase


# ---- the watchers (each `--side` runs in its own subprocess) -----------------------------------------------------

class Answers:
    """Reads the bench's requests from stdin and answers each in one JSON line; `state()` is asked for what the
    watcher holds. The thread CPU spent answering is reported, so the bench can take it off the watcher's."""

    def __init__(self, state: Callable[[str], dict]):
        self.state, self.spent = state, 0.0

    def serve(self) -> None:
        for line in sys.stdin:
            started = time.thread_time()
            request, _, namespace = line.strip().partition(" ")
            if request == "state":
                answer = self.state(namespace)
            else:
                answer = {"error": f"unknown request {line.strip()!r}"}
            self.spent += time.thread_time() - started
            print(json.dumps({**answer, "answer_cpu": self.spent}), flush=True)
        os._exit(0)  # stdin closed: the bench is done with this watcher


def summary(synced: bool, events: int, kept: list[dict], namespace: str) -> dict:
    """What the watcher holds of the round's namespace (its events: of every namespace)."""
    kept = [pod for pod in kept if pod["metadata"].get("namespace") == namespace]
    running = sum(1 for pod in kept if running_with_devices(pod))
    return {"synced": synced, "events": events, "kept": len(kept), "running": running,
            "kept_bytes": sum(len(json.dumps(pod)) for pod in kept)}


def run_list_watch(kubeconfig: str) -> None:
    from ascend_hybrid.controller.kube import Kube
    from ascend_hybrid.controller.listwatch import ListWatch
    from ascend_hybrid.controller.podwatch import PodStore

    class CountingStore(PodStore):
        events = 0
        types: dict[str, int] = {}

        def apply(self, event_type: str, pod: dict) -> None:
            self.events += 1
            self.types[event_type] = self.types.get(event_type, 0) + 1
            super().apply(event_type, pod)

    changes = [0]

    def changed(old: dict | None, new: dict | None) -> None:  # where main.py hands podwatch.reaction(controller)
        changes[0] += 1

    store = CountingStore(changed)
    watch = ListWatch(Kube.from_environment(kubeconfig), store, None)
    threading.Thread(target=watch.watch_forever, daemon=True).start()

    def state(namespace: str) -> dict:
        synced = store._synced.is_set()
        return {**summary(synced, store.events, store.npu_pods() if synced else [], namespace),
                "types": store.types}
    Answers(state).serve()


def kopf_registry(kubeconfig: str):
    """A registry of its own with the settings and login the operator gives kopf (handlers.configure, .login)."""
    import logging

    import kopf

    from ascend_hybrid.contracts import names
    from ascend_hybrid.controller.handlers import EventHandlersOnlyDiffBase

    logging.basicConfig(level=logging.WARNING)
    os.environ["KUBECONFIG"] = kubeconfig
    registry = kopf.OperatorRegistry()

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, **_) -> None:  # as handlers.configure
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=names.GROUP)
        settings.persistence.diffbase_storage = EventHandlersOnlyDiffBase(prefix=names.GROUP)
        settings.posting.level = logging.WARNING
        settings.watching.server_timeout = 300
        settings.watching.client_timeout = 330
        settings.watching.connect_timeout = 10
        settings.peering.standalone = True
        settings.execution.max_workers = 16

    @kopf.on.login(registry=registry)
    def login(**kwargs):
        return kopf.login_with_kubeconfig(**kwargs)
    return registry


def run_kopf(kubeconfig: str) -> None:
    import kopf

    from ascend_hybrid.contracts import names
    from ascend_hybrid.contracts.podview import holds_npus, project_pod

    registry = kopf_registry(kubeconfig)
    held: dict = {}
    counted = {"events": 0}
    types: dict[str, int] = {}

    def npus(spec, **_) -> bool:
        return holds_npus(spec or {})

    @kopf.index("pods", id="ahj_job_pods", labels={names.JOB_LABEL: kopf.PRESENT}, registry=registry)
    def ahj_job_pods(namespace, labels, body, **_):
        return {(namespace, labels[names.JOB_LABEL]): project_pod(body)}

    @kopf.index("pods", id="ahj_npu_pods", when=npus, registry=registry)
    def ahj_npu_pods(namespace, name, body, **_):
        return {(namespace, name): project_pod(body)}

    @kopf.on.startup(registry=registry)
    def bind_indexes(ahj_npu_pods, **_) -> None:
        held["npu_pods"] = ahj_npu_pods

    @kopf.on.event("pods", labels={names.JOB_LABEL: kopf.PRESENT}, registry=registry)
    def job_pod_changed(namespace, labels, type, **_) -> None:  # the job's key enqueued, in the operator
        counted["events"] += 1
        types[str(type)] = types.get(str(type), 0) + 1

    @kopf.on.event("pods", when=npus, registry=registry)
    def npu_pod_changed(type, status, **_) -> None:  # free chips woke the waiting jobs, in the operator
        if type == "DELETED" or (status or {}).get("phase") in ("Succeeded", "Failed"):
            counted.setdefault("finished", 0)
            counted["finished"] += 1

    def state(namespace: str) -> dict:
        index = held.get("npu_pods")
        if index is None:
            return summary(False, counted["events"], [], namespace)
        for _ in range(5):
            try:
                kept = [pod for store in list(index.values()) for pod in store]
                break
            except RuntimeError:  # changed size during iteration (kopf's loop thread)
                continue
        return {**summary(True, counted["events"], kept, namespace), "types": types}

    threading.Thread(target=Answers(state).serve, daemon=True).start()
    kopf.run(registry=registry, standalone=True, clusterwide=True)


def run_kopf_jobs(kubeconfig: str) -> None:
    """The jobs as the operator watches them: handlers.ahj_jobs's index and handlers.job_changed's event handler."""
    import kopf

    from ascend_hybrid.contracts.names import GROUP
    from ascend_hybrid.gang import backlog
    from ascend_hybrid.spec.api import PLURAL, VERSION

    registry = kopf_registry(kubeconfig)
    held: dict = {}
    counted = {"events": 0}

    @kopf.index(GROUP, VERSION, PLURAL, id="ahj_jobs", registry=registry)
    def ahj_jobs(namespace, name, body, **_):
        return {(namespace, name): backlog.entry(body)}

    @kopf.on.startup(registry=registry)
    def bind_indexes(ahj_jobs, **_) -> None:
        held["jobs"] = ahj_jobs

    @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry)
    def job_changed(namespace, name, type, meta, body, **_) -> None:  # Controller.job_changed, in the operator
        counted["events"] += 1

    def state(namespace: str) -> dict:
        index = held.get("jobs")
        kept = 0 if index is None else sum(1 for key in list(index.keys()) if key[0] == namespace)
        return {"synced": index is not None, "events": counted["events"], "kept": kept, "running": kept,
                "kept_bytes": 0}

    threading.Thread(target=Answers(state).serve, daemon=True).start()
    kopf.run(registry=registry, standalone=True, clusterwide=True)


# ---- the bench -----------------------------------------------------------------------------------------------

class Watcher:
    """One side's subprocess, its CPU and RSS read from outside, its state asked through its stdin."""

    def __init__(self, side: str, kubeconfig: str, log: Path, namespace: str):
        self.side, self.namespace = side, namespace
        self.log = log.open("ab")
        self.process = subprocess.Popen([sys.executable, __file__, "--side", side, "--kubeconfig", kubeconfig],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True)
        self.ps = psutil.Process(self.process.pid)

    def state(self) -> dict:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(f"state {self.namespace}\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.side} watcher ended (its log: {self.log.name})")
        return json.loads(line)

    def reading(self) -> dict:
        """CPU seconds less the answers', RSS bytes, and the state."""
        times, rss = self.ps.cpu_times(), self.ps.memory_info().rss
        state = self.state()
        return {**state, "cpu": times.user + times.system - state["answer_cpu"], "rss": rss}

    def stop(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


def wait_for(watchers: list[Watcher], done: Callable[[dict], bool], what: str, timeout: float) -> dict[str, dict]:
    """Until each watcher's state is `done` and its events stayed put for QUIET_SECONDS; then each one's reading."""
    started = time.monotonic()
    quiet_since: dict[str, tuple[int, float]] = {}
    finished: dict[str, dict] = {}
    while len(finished) < len(watchers):
        if time.monotonic() - started > timeout:
            states = {w.side: w.state() for w in watchers}
            raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}: {states}")
        time.sleep(POLL_SECONDS)
        for watcher in watchers:
            if watcher.side in finished:
                continue
            state = watcher.state()
            if not done(state):
                continue
            events, since = quiet_since.get(watcher.side, (-1, 0.0))
            if state["events"] != events:
                quiet_since[watcher.side] = (state["events"], time.monotonic())
            elif time.monotonic() - since >= QUIET_SECONDS:
                finished[watcher.side] = watcher.reading()
    return finished


def gang_pods(dev: DevCluster, namespace: str, count: int, per_pod: int) -> list[dict]:
    """`count` pods as the operator renders a gang's (data × `per_pod` tensor), each bound to a node with room."""
    from ascend_hybrid.gang import render
    from ascend_hybrid.spec import rules

    resolved = rules.parse({"metadata": {"name": "watch-bench", "namespace": namespace},
                            "spec": {"parallelism": {"data": count, "tensor": per_pod}, "npu": {"perPod": per_pod}}})
    nodes = sorted(node.metadata.name for node in dev.core.list_node().items)
    per_node = max(1, 8 // per_pod)
    if len(nodes) * per_node < count:
        raise SystemExit(f"{count} pods of {per_pod} NPUs need {-(-count // per_node)} nodes; the cluster has "
                         f"{len(nodes)}")
    placed = [(index, nodes[index // per_node]) for index in range(count)]
    pods = render.gang_pods(resolved, namespace, "00000000-0000-0000-0000-000000000000", 1, placed, "10.0.0.1")
    for pod in pods:
        pod["metadata"].pop("ownerReferences", None)  # no job here: the garbage collector would take them
    dev.core.create_namespaced_service_account(namespace, {"metadata": {"name": render.service_account(resolved)}})
    return pods


def delete_all(dev: DevCluster, url: str, names: list[str]) -> None:
    """One DELETE per object under `url`, CREATE_WORKERS at a time, with the pods' own grace (as the operator
    deletes)."""

    def delete(name: str) -> None:
        response = dev.api.rest_client.request("DELETE", f"{url}/{name}", headers={"Accept": "application/json"},
                                               _request_timeout=60)
        if response.status not in (200, 202):
            raise RuntimeError(f"delete {name}: HTTP {response.status}")
    with ThreadPoolExecutor(CREATE_WORKERS) as pool:
        list(pool.map(delete, names))


def one_round(dev: DevCluster, args, number: int, logs: Path) -> dict[str, dict]:
    namespace = dev.namespace(f"bench-watch-{int(time.time())}-{number}")
    pods = gang_pods(dev, namespace, args.pods, args.per_pod)
    watchers = [Watcher(side, str(dev.paths.kubeconfig), logs / f"bench-watch-{side}.log", namespace) for side in SIDES]
    timeout = max(300.0, args.pods * 0.5)
    try:
        idle = wait_for(watchers, lambda s: s["synced"], "the watchers to list", 120)
        dev.create_all(dev.pods_url(namespace), pods)
        running = wait_for(watchers, lambda s: s["running"] >= args.pods, f"{args.pods} pods Running", timeout)
        projecting = projection_cost(dev, namespace) if number == 1 else None
        delete_all(dev, dev.pods_url(namespace), [pod["metadata"]["name"] for pod in pods])
        gone = wait_for(watchers, lambda s: s["kept"] == 0, "the pods to go", timeout)
        say("  events by type: " + str({w.side: w.state()["types"] for w in watchers}))
    finally:
        for watcher in watchers:
            watcher.stop()
    dev.remove_namespace(namespace)
    result = {}
    for side in SIDES:
        events = gone[side]["events"] - idle[side]["events"]
        cpu = gone[side]["cpu"] - idle[side]["cpu"]
        result[side] = {
            "events": events, "cpu": cpu, "ms_per_event": 1000 * cpu / max(events, 1),
            "ms_per_pod": 1000 * cpu / args.pods,
            "start_ms_per_pod": 1000 * (running[side]["cpu"] - idle[side]["cpu"]) / args.pods,
            "rss_mb_per_1000": (running[side]["rss"] - idle[side]["rss"]) / 1e6 * 1000 / args.pods,
            "kept_kb_per_1000": running[side]["kept_bytes"] / 1e3 * 1000 / args.pods,
            "idle_rss_mb": idle[side]["rss"] / 1e6, "project_us": projecting}
    return result


def jobs_round(dev: DevCluster, count: int, number: int, logs: Path) -> dict:
    """`count` jobs created, their status written 3 times (as a job's start writes Placing, Starting, Running),
    deleted, with kopf watching them as the operator does: its CPU per job event."""
    namespace = dev.namespace(f"bench-watch-jobs-{int(time.time())}-{number}")
    url = dev.jobs_url(namespace)
    names = [f"job-{index:04d}" for index in range(count)]
    watcher = Watcher("kopf-jobs", str(dev.paths.kubeconfig), logs / "bench-watch-kopf-jobs.log", namespace)
    merge = {"Content-Type": "application/merge-patch+json", "Accept": "application/json"}

    def patch(name: str, phase: str) -> None:
        body = {"status": {"phase": phase, "attempt": 1, "message": f"attempt 1: {phase}"}}
        response = dev.api.rest_client.request("PATCH", f"{url}/{name}/status", headers=merge, body=body,
                                               _request_timeout=60)
        if response.status != 200:
            raise RuntimeError(f"patch {name}: HTTP {response.status}")
    try:
        idle = wait_for([watcher], lambda s: s["synced"], "the jobs' watcher to list", 120)["kopf-jobs"]
        dev.create_all(url, [gang_job(name, 1, 8) for name in names])
        for phase in ("Placing", "Starting", "Running"):
            with ThreadPoolExecutor(CREATE_WORKERS) as pool:
                list(pool.map(lambda name, phase=phase: patch(name, phase), names))
        wait_for([watcher], lambda s: s["kept"] >= count and s["events"] - idle["events"] >= 4 * count,
                 f"{count} jobs' events", 300)
        delete_all(dev, url, names)
        gone = wait_for([watcher], lambda s: s["kept"] == 0, "the jobs to go", 300)["kopf-jobs"]
    finally:
        watcher.stop()
    dev.remove_namespace(namespace)
    events = gone["events"] - idle["events"]
    return {"events": events, "ms_per_event": 1000 * (gone["cpu"] - idle["cpu"]) / max(events, 1)}


def projection_cost(dev: DevCluster, namespace: str, count: int = 200) -> dict[str, float]:
    """On the round's own Running pods as the apiserver lists them: µs of `podview.project_pod` per pod (the kopf
    side runs it twice per event, once per index; the list-watch once), and the bytes of a pod and of its projection
    as JSON."""
    from ascend_hybrid.contracts.podview import project_pod

    items = json.loads(dev.core.list_namespaced_pod(namespace, limit=count, _preload_content=False).data)["items"]
    started = time.process_time()
    for _ in range(5):
        for item in items:
            project_pod(item)
    spent = time.process_time() - started
    return {"us": 1e6 * spent / max(1, 5 * len(items)),
            "pod_bytes": statistics.mean(len(json.dumps(item)) for item in items),
            "projection_bytes": statistics.mean(len(json.dumps(project_pod(item))) for item in items)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--per-pod", type=int, default=4, help="NPUs per pod (8 per node: 8/N pods a node)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--name", default="ahj-bench-watch")
    parser.add_argument("--keep", action="store_true", help="leave the cluster up")
    parser.add_argument("--jobs", type=int, default=100, help="AscendHybridJobs per round through kopf (0: none)")
    parser.add_argument("--side", choices=(*SIDES, "kopf-jobs"), help=argparse.SUPPRESS)  # a watcher's subprocess
    parser.add_argument("--kubeconfig", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side == "list-watch":
        run_list_watch(args.kubeconfig)
        return 0
    if args.side == "kopf":
        run_kopf(args.kubeconfig)
        return 0
    if args.side == "kopf-jobs":
        run_kopf_jobs(args.kubeconfig)
        return 0
    nodes = -(-args.pods // max(1, 8 // args.per_pod))
    rounds: list[dict[str, dict]] = []
    jobs: list[dict] = []
    with DevCluster(args.name, nodes, keep=args.keep) as dev:
        for number in range(1, args.rounds + 1):
            rounds.append(one_round(dev, args, number, dev.paths.root))
            say(f"  round {number}: " + ", ".join(
                f"{side} {r['ms_per_event']:.3f} ms/event ({r['events']} events), {r['rss_mb_per_1000']:.1f} MB/1000"
                for side, r in rounds[-1].items()))
            if args.jobs:
                jobs.append(jobs_round(dev, args.jobs, number, dev.paths.root))
                say(f"  round {number}: kopf, jobs {jobs[-1]['ms_per_event']:.3f} ms/event ({jobs[-1]['events']} events)")
    print(f"{args.pods} pods × {args.per_pod} NPUs (a gang's, rendered), {nodes} nodes, {args.rounds} rounds: "
          "created, annotated, Running, deleted; every namespace watched")
    for side in SIDES:
        taken = [r[side] for r in rounds]

        def of(key: str, taken=taken) -> list[float]:
            return [r[key] for r in taken]
        print(f"  {side:<10}: CPU per event {median_range(of('ms_per_event'), 3, ' ms')}; per pod "
              f"{median_range(of('ms_per_pod'), 2, ' ms')} (its start {statistics.median(of('start_ms_per_pod')):.2f}); "
              f"events per pod {statistics.median(of('events')) / args.pods:.2f}; RSS per 1 000 Running pods "
              f"{median_range(of('rss_mb_per_1000'), 1, ' MB')}, kept {statistics.median(of('kept_kb_per_1000')):.0f} kB "
              f"of projections (idle RSS {statistics.median(of('idle_rss_mb')):.0f} MB)")
    projecting = rounds[0]["kopf"]["project_us"]
    print(f"  a Running pod as listed {projecting['pod_bytes'] / 1e3:.1f} kB of JSON, its projection "
          f"{projecting['projection_bytes'] / 1e3:.1f} kB; podview.project_pod alone {projecting['us']:.1f} µs per pod "
          "(round 1, in the bench's process)")
    if jobs:
        print(f"  kopf, {args.jobs} AscendHybridJobs (index + event handler as handlers.py's; created, 3 status "
              f"writes, deleted): CPU per job event {median_range([j['ms_per_event'] for j in jobs], 3, ' ms')}; "
              f"events per job {statistics.median(j['events'] for j in jobs) / args.jobs:.2f}")
    memory = [r["kopf"]["rss_mb_per_1000"] / max(r["list-watch"]["rss_mb_per_1000"], 1e-3) for r in rounds]
    print(ratio_line("  kopf/list-watch RSS per pod ratio", memory))
    print(ratio_line("kopf/list-watch CPU per event ratio",
                     [r["kopf"]["ms_per_event"] / r["list-watch"]["ms_per_event"] for r in rounds]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
