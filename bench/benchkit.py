"""What the cluster benchmarks share: a dev cluster up and down, the operator as a subprocess with its metrics port,
its CPU time and peak RSS, its API-call counter and reconcile histogram, bare pods created as fast as the operator
creates its own, a watch that notes when each object first reached a state, and median/range formatting.

Not named bench_*.py: `make bench` runs every bench_*.py, and this module is no benchmark.
"""

from __future__ import annotations

import functools
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ascend_hybrid.contracts.names import GROUP
from ascend_hybrid.devcluster import cluster
from ascend_hybrid.devcluster.deviceplugin.allocation import CONFIG_ANNOTATION
from ascend_hybrid.devcluster.kube.client import api_client
from ascend_hybrid.devcluster.kube.informer import run_informer
from ascend_hybrid.devcluster.kube.waiting import wait_until
from ascend_hybrid.devcluster.testing.pods import pod_manifest
from ascend_hybrid.devtools import profiles
from ascend_hybrid.spec import crd
from ascend_hybrid.spec.api import CHANNEL_PLURAL, PLURAL, VERSION
from support.operator_harness import OperatorProcess

REPO = Path(__file__).resolve().parents[1]
# The operator keeps this many pod creations in flight (OperatorSettings.parallel_calls): bare pods get the same,
# so the baseline is what the operator could at best do with the same client concurrency.
CREATE_WORKERS = 16


def say(line: str) -> None:
    """Progress goes to stderr, so that stdout holds only the results."""
    print(line, file=sys.stderr, flush=True)


# ---- formatting --------------------------------------------------------------------------------------------------

def median_range(values: Iterable[float], digits: int = 2, unit: str = "") -> str:
    values = sorted(values)
    if not values:
        return "n/a"
    median = statistics.median(values)
    if len(values) == 1:
        return f"{median:.{digits}f}{unit} (1 round)"
    return f"{median:.{digits}f}{unit} (range {values[0]:.{digits}f}–{values[-1]:.{digits}f}, {len(values)} rounds)"


def ratio_line(label: str, ratios: list[float]) -> str:
    """`<label> median: R (rounds: r1, r2, …)`, the rounds in the order they ran."""
    return f"{label} median: {statistics.median(ratios):.2f} (rounds: {', '.join(f'{r:.2f}' for r in ratios)})"


def percentiles(values: Iterable[float], points=(50, 90, 99)) -> dict[int, float]:
    values = sorted(values)
    if not values:
        return {}
    return {p: values[min(len(values) - 1, round(p / 100 * (len(values) - 1)))] for p in points}


# ---- the cluster -------------------------------------------------------------------------------------------------

class DevCluster:
    """`dev-cluster up` timed (with Volcano when `volcano`), the CRD installed; down at the end unless kept."""

    def __init__(self, name: str, nodes: int, racks: int | None = None, keep: bool = False, volcano: bool = False):
        self.name, self.nodes, self.keep, self.volcano = name, nodes, keep, volcano
        self.racks = racks or max(1, min(16, nodes // 32))
        self.up_seconds = 0.0

    def __enter__(self) -> DevCluster:
        started = time.monotonic()
        self.paths = cluster.up(self.name, nodes=self.nodes, racks=self.racks, volcano=self.volcano, log=say)
        self.up_seconds = time.monotonic() - started
        self.api = api_client(str(self.paths.kubeconfig))
        self.core, self.custom = client.CoreV1Api(self.api), client.CustomObjectsApi(self.api)
        for definition in (crd.build(), crd.build_channel()):
            client.ApiextensionsV1Api(self.api).patch_custom_resource_definition(
                definition["metadata"]["name"], definition, field_manager="ascend-hybrid-bench", force=True,
                _content_type="application/apply-patch+yaml")
        for plural in (PLURAL, CHANNEL_PLURAL):
            wait_until(lambda plural=plural: self.custom.list_cluster_custom_object(GROUP, VERSION, plural, limit=1),
                       30, f"the CRD {plural} to be served")
        return self

    def __exit__(self, *_) -> None:
        if not self.keep:
            cluster.down(self.name, log=say)

    def component_rss_mb(self) -> dict[str, float]:
        """RSS of each process the cluster owns (etcd, kube-apiserver, kwok-controller, helpers), in MB."""
        sizes = {}
        for name, pid in cluster.owned_processes(self.paths).items():
            try:
                sizes[name] = psutil.Process(pid).memory_info().rss / 1e6
            except psutil.Error:
                continue
        return sizes

    def component_cpu_seconds(self) -> dict[str, float]:
        """CPU seconds (user + system) each process of the cluster has used so far."""
        spent = {}
        for name, pid in cluster.owned_processes(self.paths).items():
            try:
                times = psutil.Process(pid).cpu_times()
            except psutil.Error:
                continue
            spent[name] = times.user + times.system
        return spent

    def namespace(self, name: str) -> str:
        self.core.create_namespace({"metadata": {"name": name}})
        wait_until(lambda: self.core.read_namespaced_service_account("default", name), 30,
                   f"the default ServiceAccount of {name}")
        return name

    def remove_jobs(self, namespace: str, timeout: float = 600) -> None:
        """The namespace's jobs deleted and gone with their pods, as a user cleans up. Deleting the namespace at
        once would delete pods of jobs still there: the operator would take each for a lost pod and try to
        replace it in a terminating namespace, writes that a next round would count."""
        try:
            self.custom.delete_collection_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)
        except ApiException as error:
            if error.status != 504:  # the apiserver's request timeout: it goes on deleting, the wait below sees it
                raise
        wait_until(lambda: not self.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                                                          limit=1)["items"],
                   timeout, f"the jobs of {namespace} to go", interval=0.5)
        wait_until(lambda: not self.core.list_namespaced_pod(namespace, limit=1).items, timeout,
                   f"the pods of {namespace}'s jobs to go", interval=0.5)

    def remove_namespace(self, name: str, timeout: float = 600) -> None:
        """Deleted and its pods gone, so that the next measurement finds every chip free."""
        self.core.delete_namespace(name)
        wait_until(lambda: not self.core.list_namespaced_pod(name, limit=1).items, timeout, f"the pods of {name} to go",
                   interval=0.5)

    def pods_url(self, namespace: str) -> str:
        return f"{self.api.configuration.host}/api/v1/namespaces/{namespace}/pods"

    def jobs_url(self, namespace: str) -> str:
        return f"{self.api.configuration.host}/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"

    def create_all(self, url: str, manifests: list[dict], workers: int = CREATE_WORKERS) -> dict[str, float]:
        """POSTs every manifest, `workers` at a time, through the REST layer (the typed client's model
        validation would make the client what this measures); name → monotonic time its POST was sent."""
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        sent: dict[str, float] = {}

        def create(manifest: dict) -> None:
            sent[manifest["metadata"]["name"]] = time.monotonic()
            response = self.api.rest_client.request("POST", url, headers=headers, body=manifest,
                                                    _request_timeout=60)
            if response.status != 201:
                raise RuntimeError(f"create {manifest['metadata']['name']}: HTTP {response.status}")
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(create, manifests))
        return sent

    def pod_watch(self, namespace: str, **params) -> FirstSeen:
        return FirstSeen(self.core.list_namespaced_pod, running_with_devices, namespace=namespace, **params)

    def job_watch(self, namespace: str, predicate: Callable[[dict], bool] | None = None) -> FirstSeen:
        lister = functools.partial(self.custom.list_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL)
        return FirstSeen(lister, predicate or job_running)


def bare_pods(count: int, chips: int, prefix: str = "bare", labels: dict | None = None) -> list[dict]:
    """The pods the operator would create, bare: same NPU requests, no gate, no affinity, no owner."""
    manifests = []
    for index in range(count):
        manifest = pod_manifest(f"{prefix}-{index:05d}", chips=chips, labels={"bench": prefix, **(labels or {})})
        if chips:
            resources = manifest["spec"]["containers"][0]["resources"]
            resources["requests"] = dict(resources["limits"])
        manifests.append(manifest)
    return manifests


def gang_job(name: str, pods: int, chips: int, annotations: dict | None = None) -> dict:
    """An AscendHybridJob of `pods` pods × `chips` NPUs (data parallel across pods, tensor parallel inside)."""
    spec: dict = {"parallelism": {"data": pods, "tensor": chips}, "npu": {"perPod": chips},
                  "training": {"steps": 10}}
    if annotations:
        spec["template"] = {"metadata": {"annotations": dict(annotations)}}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "AscendHybridJob", "metadata": {"name": name}, "spec": spec}


def running_with_devices(pod: dict) -> bool:
    """Running with an IP and, when it asked for NPUs, the device plugin's annotation: what a rank table needs."""
    status, metadata = pod.get("status") or {}, pod["metadata"]
    asks_npus = any("huawei.com/Ascend910" in ((c.get("resources") or {}).get("limits") or {})
                    for c in pod["spec"].get("containers") or ())
    return (status.get("phase") == "Running" and bool(status.get("podIP"))
            and (not asks_npus or CONFIG_ANNOTATION in (metadata.get("annotations") or {})))


def job_running(job: dict) -> bool:
    status = job.get("status") or {}
    return status.get("phase") == "Running" and (status.get("rankTable") or {}).get("status") == "completed"


class WaitTimedOut(SystemExit):
    """Fewer objects than awaited reached the state in time; `reached` says how many did."""

    def __init__(self, message: str, reached: int):
        super().__init__(message)
        self.reached = reached


class FirstSeen:
    """A list+watch that notes the monotonic time each object first met `predicate` (polling thousands of
    objects would load the apiserver being measured)."""

    def __init__(self, list_call: Callable, predicate: Callable[[dict], bool], **params):
        self.predicate, self.lock, self.stop = predicate, threading.Lock(), threading.Event()
        self.seen: dict[str, float] = {}
        self.latest: dict[str, dict] = {}
        self.synced = threading.Event()
        self.thread = threading.Thread(target=run_informer, daemon=True, kwargs=dict(
            list_call=list_call, name="bench-watch", on_sync=self._sync, on_event=self._event, stop=self.stop,
            log=lambda line: None if self.stop.is_set() else say(f"  watch: {line}"), **params))
        self.thread.start()
        wait_until(self.synced.is_set, 60, "the benchmark's watch to list")

    def _sync(self, items: list[dict]) -> None:
        for item in items:
            self._event("ADDED", item)
        self.synced.set()

    def _event(self, kind: str, obj: dict) -> None:
        name = obj["metadata"]["name"]
        with self.lock:
            if kind == "DELETED":
                self.latest.pop(name, None)
                return
            self.latest[name] = obj
            if name not in self.seen and self.predicate(obj):
                self.seen[name] = time.monotonic()

    def count(self, accept: Callable[[dict], bool] = lambda obj: True) -> int:
        with self.lock:
            return sum(1 for name in self.seen if name in self.latest and accept(self.latest[name]))

    def wait_count(self, count: int, timeout: float, what: str, accept: Callable[[dict], bool] = lambda obj: True,
                   progress_every: float = 30) -> float:
        """Until `count` objects met the predicate (and `accept`); the monotonic time the last one did."""
        started = last_report = time.monotonic()
        while (reached := self.count(accept)) < count:
            now = time.monotonic()
            if now - started > timeout:
                raise WaitTimedOut(f"timed out after {timeout:.0f} s waiting for {what} ({reached}/{count})",
                                   reached)
            if now - last_report > progress_every:
                say(f"  … {reached}/{count} {what}")
                last_report = now
            time.sleep(0.02)
        with self.lock:
            return max(t for name, t in self.seen.items() if name in self.latest and accept(self.latest[name]))

    def close(self) -> None:
        self.stop.set()


# ---- the operator ------------------------------------------------------------------------------------------------

class Operator:
    """`ascend-hybrid run` against the cluster, with a thread sampling its RSS (the peak is what a memory limit
    must cover) and its CPU time read at will."""

    SAMPLE_SECONDS = 0.05

    def __init__(self, dev: DevCluster, log_name: str = "bench-operator.log", profile: Path | None = None,
                 extra_args: tuple[str, ...] = ()):
        """`profile`: run it under py-spy, its raw stacks written there (devtools/profiles.py); `extra_args`: more
        `ascend-hybrid run` flags (e.g. `--workers 8`)."""
        self.profile = profile
        prefix = tuple(profiles.record_prefix(profile)) if profile is not None else ()
        self.harness = OperatorProcess(str(dev.paths.kubeconfig), dev.paths.root / log_name, prefix=prefix,
                                       extra_args=extra_args)
        self.peak_rss, self.stop = 0, threading.Event()

    def start(self) -> Operator:
        self.harness.start()
        self.process = psutil.Process(self.harness.process.pid)
        if self.profile is not None:  # py-spy runs the operator as its child: measure the operator
            self.process = next(child for child in self.process.children() if "ascend_hybrid.cli" in child.cmdline())
        wait_until(self._answers, 60, "the operator's metrics endpoint", interval=0.05)
        self.sampler = threading.Thread(target=self._sample, daemon=True)
        self.sampler.start()
        return self

    def wait_settled(self, idle_share: float = 0.1, window: float = 2.0, timeout: float = 900) -> float:
        """Until the operator uses less than `idle_share` of a core over `window` seconds: its first lists and
        indexes filled, so that a bare round is not timed against its start-up. Seconds waited."""
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            before = self.cpu_seconds()
            time.sleep(window)
            if self.cpu_seconds() - before < idle_share * window:
                break
        return time.monotonic() - started

    def stop_process(self) -> None:
        self.stop.set()
        if self.profile is not None:
            # SIGINT to py-spy alone: it writes the stacks and ends the operator (SIGTERM to the group loses them)
            spy = self.harness.process
            spy.send_signal(signal.SIGINT)
            try:
                spy.wait(timeout=60)
            except subprocess.TimeoutExpired:
                say("  py-spy did not stop within 60 s: its profile may be missing")
        self.harness.stop()

    def profile_summary(self, top: int = 15) -> str:
        """Where the operator's CPU went while it ran, once stopped (empty without a profile)."""
        if self.profile is None:
            return ""
        return f"operator CPU profile (py-spy, {self.profile}):\n{profiles.summarize_file(self.profile).table(top)}"

    def _sample(self) -> None:
        while not self.stop.wait(self.SAMPLE_SECONDS):
            try:
                self.peak_rss = max(self.peak_rss, self.rss())
            except psutil.Error:
                return

    def rss(self) -> int:
        return self.process.memory_info().rss

    def cpu_seconds(self) -> float:
        times = self.process.cpu_times()
        return times.user + times.system

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.harness.metrics_port}/metrics", timeout=10) as answer:
            return answer.read().decode()

    def _answers(self) -> bool:
        try:
            return bool(self.metrics())
        except OSError:
            return False

    def api_calls(self) -> dict[tuple[str, str], float]:
        """`ascend_hybrid_api_calls_total` by (verb, resource)."""
        calls: dict[tuple[str, str], float] = {}
        for labels, value in re.findall(r"^ascend_hybrid_api_calls_total\{([^}]*)\} (\S+)$", self.metrics(), re.M):
            named = dict(re.findall(r'(\w+)="([^"]*)"', labels))
            key = (named.get("verb", "?"), named.get("resource", "?"))
            calls[key] = calls.get(key, 0.0) + float(value)
        return calls

    def reconcile_buckets(self) -> list[tuple[float, float]] | None:
        """(upper bound, cumulative count) of `ascend_hybrid_reconcile_seconds`, summed over its labels; None when
        this operator does not export it."""
        buckets: dict[float, float] = {}
        for bound, value in re.findall(r'^ascend_hybrid_reconcile_seconds_bucket\{[^}]*le="([^"]+)"[^}]*\} (\S+)$',
                                       self.metrics(), re.M):
            buckets[float(bound)] = buckets.get(float(bound), 0.0) + float(value)
        return sorted(buckets.items()) or None

    def snapshot(self) -> Snapshot:
        return Snapshot(self.api_calls(), self.cpu_seconds(), self.reconcile_buckets())


WRITE_VERBS = frozenset({"create", "apply", "patch", "update", "delete"})  # controller/kube.py's MUTATING_VERBS


class Snapshot:
    """The operator's counters at one moment; `since` gives what happened between two. `by_call` is the API calls
    by (verb, resource); `calls` their sum, `writes` the sum of the mutating verbs'."""

    def __init__(self, by_call: dict[tuple[str, str], float], cpu: float, buckets: list[tuple[float, float]] | None):
        self.by_call, self.cpu, self.buckets = by_call, cpu, buckets
        self.calls = sum(by_call.values())
        self.writes = sum(count for (verb, _), count in by_call.items() if verb in WRITE_VERBS)

    def since(self, earlier: Snapshot) -> Snapshot:
        buckets = None
        if self.buckets is not None:
            before = dict(earlier.buckets or ())
            buckets = [(bound, count - before.get(bound, 0.0)) for bound, count in self.buckets]
        by_call = {key: count - earlier.by_call.get(key, 0.0) for key, count in self.by_call.items()}
        return Snapshot({key: count for key, count in by_call.items() if count}, self.cpu - earlier.cpu, buckets)


def calls_breakdown(rounds: list[dict[tuple[str, str], float]], per: int) -> str:
    """The median over rounds of each (verb, resource)'s calls, divided by `per` (pods or jobs); writes first."""
    keys = sorted({key for by_call in rounds for key in by_call}, key=lambda k: (k[0] not in WRITE_VERBS, k))
    return ", ".join(f"{verb} {resource} {statistics.median([r.get((verb, resource), 0.0) for r in rounds]) / per:.2f}"
                     for verb, resource in keys)


def histogram_quantile(buckets: list[tuple[float, float]], quantile: float) -> float | None:
    """As Prometheus' histogram_quantile: linear inside the bucket the rank falls in."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = quantile * buckets[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if bound == float("inf"):
                return lower_bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / max(count - lower_count, 1e-12)
        lower_bound, lower_count = bound, count
    return lower_bound
