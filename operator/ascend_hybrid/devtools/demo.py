"""`ascend-hybrid demo`: the README's first command. A simulated Ascend cluster on a real control plane, the chart
installed, the operator running in the background, both example jobs applied and shown Running with their rank
tables. Idempotent: a second run reuses what is up."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import cast

import yaml
from kubernetes import client

from ascend_hybrid.contracts import names
from ascend_hybrid.contracts.ascend import RACK_LABEL
from ascend_hybrid.contracts.conditions import TERMINAL_JOB_PHASES
from ascend_hybrid.contracts.names import GROUP
from ascend_hybrid.devcluster import cluster as devcluster
from ascend_hybrid.devcluster.controlplane import ports, toolchain
from ascend_hybrid.devcluster.helpers import Helper
from ascend_hybrid.devcluster.kube import processes
from ascend_hybrid.devcluster.kube.client import api_client
from ascend_hybrid.devcluster.kube.waiting import WaitTimeout, wait_until
from ascend_hybrid.devcluster.runtime import claims
from ascend_hybrid.devcluster.runtime import helper as runtime_helper
from ascend_hybrid.devcluster.runtime.launch import claim_directory
from ascend_hybrid.devcluster.telemetry import figures as sim_figures
from ascend_hybrid.devcluster.telemetry import prometheus
from ascend_hybrid.devtools.repo import chart_dir, repo_root
from ascend_hybrid.gang import layout as layouts
from ascend_hybrid.planner.observed import MIN_STEADY_STEPS
from ascend_hybrid.spec.api import PLURAL, VERSION
from ascend_hybrid.spec.rules import parse

EXAMPLES = ("seed-moe-128.yaml", "job.yaml")
REAL_JOB = "tiny-dp2-real.yaml"  # its pods run the real trainer through the process runtime
REAL_CLAIM, REAL_CHECKPOINT_EVERY = "tiny-dp2-real-ckpt", 20  # as the example says; the demo makes the claim
LEDGER_COLUMNS = ("{range .status.recoveries[*]}incident: {.cause} of rank {.rank} at step {.step}, rungs {.rungs}, "
                  "recovered by {.recoveredBy} in {.seconds}s (detected {.detected}, first step after "
                  "{.firstStepAfter}), resumed from step {.resumedFromStep}, {.stepsRedone} steps redone{\"\\n\"}{end}")
CPU_PROFILE = "hardware-cpu.yaml"  # the planner's profile of this machine's CPU, for the real job's prediction
RELEASE, RELEASE_NAMESPACE = "ascend-hybrid", "ascend-hybrid-system"
DEMO_NODES, DEMO_RACKS = 20, 2
OPERATOR_METRICS_PORT, OPERATOR_HEALTH_PORT = 18080, 18081


TRAINER_EXTRA = "pip install 'ascend-hybrid[trainer]'"


class DemoError(RuntimeError):
    pass


def mindspore_missing() -> bool:
    """The process runtime runs the real trainer with this Python (its console script lives beside it)."""
    return importlib.util.find_spec("mindspore") is None


def say(message: str) -> None:
    print(f"[demo] {message}", flush=True)


def _run(args: list[str], what: str, stdin: str | None = None) -> str:
    result = subprocess.run(args, capture_output=True, text=True, input=stdin)
    if result.returncode != 0:
        raise DemoError(f"{what} failed: {(result.stderr or result.stdout).strip().splitlines()[-1:]}")
    return result.stdout


def operator_helper(paths) -> Helper:
    """The demo's operator: a helper process of the cluster, so `dev-cluster down` stops it too."""
    return Helper("operator", paths)


def install_chart(kubeconfig: str, *extra: str) -> None:
    """helm upgrade --install: the CRDs and RBAC from the chart; the Deployment stays at 0 replicas, since here the
    operator runs as a local process (the simulated nodes run no containers). `extra`: more helm arguments. The
    CRDs are applied first, as docs/install.md says for an upgrade: Helm installs them only with a new release, and
    a demo cluster kept from an older checkout has one."""
    _run([toolchain.binary("kubectl"), "--kubeconfig", kubeconfig, "apply", "--server-side", "--force-conflicts",
          "-f", str(repo_root() / "crds")], "kubectl apply of crds/")
    _run([toolchain.binary("helm"), "upgrade", "--install", RELEASE, str(chart_dir()), "--namespace", RELEASE_NAMESPACE,
          "--create-namespace", "--kubeconfig", kubeconfig, "--set", "replicaCount=0",
          # the demo's operator is a local process with the cluster admin's kubeconfig, not the chart's ServiceAccount
          "--set", "jobPodLabels.enforced=false", "--wait=false", *extra],
         "helm install of the chart")


def _operator_ports(paths) -> Path:
    return paths.helpers_dir / "operator-ports.json"


def _listen_ports() -> tuple[int, int]:
    """18080/18081 when free, else other free ones: a busy port must not kill the demo's operator."""
    chosen: list[int] = []
    for preferred in (OPERATOR_METRICS_PORT, OPERATOR_HEALTH_PORT):
        port = preferred
        while port in chosen or not ports.port_is_free(port, "127.0.0.1"):
            port = ports.free_server_port("127.0.0.1")
        chosen.append(port)
    return chosen[0], chosen[1]


def start_operator(paths, prometheus_url: str | None) -> tuple[int, int]:
    """The operator as a local process (pid, metrics port); one already running for this cluster is reused."""
    operator = operator_helper(paths)
    pid = operator.pid()
    if pid is not None:
        try:
            return pid, json.loads(_operator_ports(paths).read_text())["metrics"]
        except (FileNotFoundError, ValueError, KeyError):  # started by a demo that did not record its ports
            return pid, OPERATOR_METRICS_PORT
    metrics_port, health_port = _listen_ports()
    pid = operator.start([sys.executable, "-m", "ascend_hybrid.cli", "run", "--kubeconfig", str(paths.kubeconfig),
                          "--metrics-port", str(metrics_port), "--health-port", str(health_port),
                          "--bind-address", "127.0.0.1", "--telemetry-interval", "10",
                          *(["--prometheus-url", prometheus_url] if prometheus_url else []),
                          "--hardware-profiles", str(example(CPU_PROFILE))])
    _operator_ports(paths).write_text(json.dumps({"metrics": metrics_port, "health": health_port}) + "\n")
    healthz = f"http://127.0.0.1:{health_port}/healthz"
    try:
        operator.wait_ready(pid, lambda: _answers(healthz))
    except RuntimeError as error:
        raise DemoError(str(error)) from None
    return pid, metrics_port


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except OSError:
        return False


def example(name: str) -> Path:
    return repo_root() / "deploy" / "examples" / name


def following_the_prediction(body: dict) -> dict:
    """The example job with its pods asking the simulated telemetry for step times at the plan's own prediction
    (within the declared noise), so the StepRatio column shows how a measurement that agrees with the plan reads."""
    template = body.setdefault("spec", {}).setdefault("template", {})
    annotations = template.setdefault("metadata", {}).setdefault("annotations", {})
    annotations[sim_figures.STEP_SECONDS_ANNOTATION] = sim_figures.PREDICTED
    return body


def apply_examples(kubeconfig: str) -> list[dict]:
    jobs = []
    for name in EXAMPLES:
        path = example(name)
        body = following_the_prediction(yaml.safe_load(path.read_text()))
        _run([toolchain.binary("kubectl"), "--kubeconfig", kubeconfig, "apply", "--server-side", "-f", "-"],
             f"kubectl apply -f {path}", stdin=yaml.safe_dump(body))
        jobs.append(body)
    return jobs


def progress_columns() -> str:
    """For `kubectl get ahj -o custom-columns=…`: the printer columns have Step but no loss. STEP_S is the mean
    with graph compilation in it; STEADY_S (the steps after the first 20) is what RATIO reads once it has 5."""
    return ("NAME:.metadata.name,PHASE:.status.phase,STEP:.status.training.step,LOSS:.status.training.loss,"
            "PROGRESS%:.status.training.progressPercentage,STEP_S:.status.training.stepSeconds,"
            "STEADY_S:.status.plan.measured.steadyStepSeconds,PREDICTED_S:.status.plan.time.stepSeconds,"
            "RATIO:.status.plan.stepTimeRatio")


def prometheus_queries(name: str, namespace: str = "default", attempt: int = 1) -> dict[str, str]:
    """PromQL for the step and loss that pod 0's trainer serves on its IP:9400 (the operator reads pod 0 too)."""
    selector = f'namespace="{namespace}",pod="{names.pod_name(name, attempt, 0)}"'
    return {"step": f"ascend_trainer_step{{{selector}}}", "loss": f"ascend_trainer_loss{{{selector}}}"}


def start_real_job(custom, core, paths) -> dict:
    """The small job whose pods run the real trainer as local processes; a finished one is started again, from
    no checkpoint (an earlier run's would end it at once)."""
    body = yaml.safe_load(example(REAL_JOB).read_text())
    name = body["metadata"]["name"]
    try:
        existing = custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, name)
    except client.ApiException as error:
        if error.status != 404:
            raise
        existing = None
    if existing and (existing.get("status") or {}).get("phase") in TERMINAL_JOB_PHASES:
        custom.delete_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, name)
        _wait_gone(custom, name)
        existing = None
    if existing is None:
        shutil.rmtree(claim_directory(runtime_helper.runtime_root(paths), "default", REAL_CLAIM), ignore_errors=True)
        claims.bind_claim(core, "default", REAL_CLAIM)
        custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, body)
    return body


def jobs_to_watch(paths, custom, core) -> tuple[list[dict], bool]:
    """The simulated example jobs, applied, and the real trainer's job when MindSpore is there to run it (else one
    line says what to install); whether the real job is among them."""
    jobs = apply_examples(str(paths.kubeconfig))
    if mindspore_missing():
        say(f"MindSpore is not installed, so the real-trainer job {REAL_JOB} is skipped: `{TRAINER_EXTRA}` runs it")
        return jobs, False
    jobs.append(start_real_job(custom, core, paths))
    return jobs, True


def _wait_gone(custom, name: str, timeout: float = 60) -> None:
    def gone() -> bool:
        try:
            custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, name)
            return False
        except client.ApiException as error:
            if error.status == 404:
                return True
            raise
    try:
        wait_until(gone, timeout, f"{name} to be deleted", interval=1)
    except WaitTimeout as error:
        raise DemoError(str(error)) from None


def show_real_training(custom, kubectl: list[str], prometheus_url: str | None, name: str) -> None:
    """Waits for the real job's first steps and their measured step time, then shows step, loss and measured
    against predicted step seconds moving, in the CR and in Prometheus: first with the graph compilation in the
    ratio, then once the steps past the warm-up give it alone."""
    def status() -> dict:
        return custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, name).get("status") or {}

    def stepped() -> bool:
        now = status()
        trained = ((now.get("training") or {}).get("step") or 0) >= 1
        return trained and (now.get("plan") or {}).get("stepTimeRatio") is not None

    def steady() -> bool:  # the ratio over the steps after the first 20: graph compilation left out
        measured = (status().get("plan") or {}).get("measured") or {}
        return (measured.get("steadySteps") or 0) >= MIN_STEADY_STEPS
    try:
        wait_until(stepped, 180, f"{name}'s first training steps", interval=2)
    except WaitTimeout:
        say(f"{name}: no training step reported yet; see `kubectl logs {names.pod_name(name, 1, 0)}`")
        return
    for round_ in range(2):
        print(_run([*kubectl, "get", "ahj", name, "-o", f"custom-columns={progress_columns()}"], "kubectl get ahj"))
        if prometheus_url is None:
            print("  prometheus: not running, so no figures from it")
        else:
            for figure, query in prometheus_queries(name).items():
                print(f"  prometheus {figure:<5} {query} = {_prometheus_value(prometheus_url, query)}")
        if round_ == 0:
            try:
                wait_until(steady, 90, f"{name}'s steady step time", interval=2)
            except WaitTimeout:
                say(f"{name}: no {MIN_STEADY_STEPS} steps past the first 20 yet; its ratio still holds the "
                    "graph compilation")


def worker_pid(core, name: str, index: int) -> int | None:
    """Pod `index`'s MindSpore worker: the process runtime names the pod's process group in its container ID
    (process://<pgid>), and a worker's command line is the trainer's `worker`."""
    pod = core.read_namespaced_pod(names.pod_name(name, 1, index), "default")
    for status in pod.status.container_statuses or ():
        if (status.container_id or "").startswith("process://"):
            group = int(status.container_id.removeprefix("process://"))
            workers = [pid for pid in processes.group_members(group)
                       if "ascend_hybrid_trainer worker" in processes.cmdline(pid)]
            return workers[0] if workers else None
    return None


def show_in_place_recovery(custom, core, kubectl: list[str], name: str) -> None:
    """Kills rank 1's worker, a real MindSpore process on this machine, once a checkpoint is committed, and shows
    the recovery ladder's first rung: the same pods restart their ranks from the checkpoint (the ledger entry)."""
    def job_status() -> dict:
        return custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, name).get("status") or {}
    before = len(job_status().get("recoveries") or [])

    def recovered() -> bool:
        ledger = job_status().get("recoveries") or []
        return len(ledger) > before and ledger[-1].get("outcome") == "Recovered"
    try:
        wait_until(lambda: ((job_status().get("training") or {}).get("step") or 0) > REAL_CHECKPOINT_EVERY, 180,
                   f"{name}'s first checkpoint", interval=1)
        pid = worker_pid(core, name, 1)
        if pid is None:
            raise DemoError(f"no MindSpore worker process found in pod {names.pod_name(name, 1, 1)}")
        os.kill(pid, signal.SIGKILL)
        say(f"killed rank 1's MindSpore worker (pid {pid}) in pod {names.pod_name(name, 1, 1)}: recovering in place")
        wait_until(recovered, 240, f"{name} to recover in place", interval=1)
    except (WaitTimeout, DemoError, ProcessLookupError) as error:
        say(f"{name}: the in-place recovery was not shown ({error}); see `kubectl describe ahj {name}`")
        return
    print(_run([*kubectl, "get", "ahj", name, "-o", "jsonpath=" + LEDGER_COLUMNS], "kubectl get ahj"))
    print(_run([*kubectl, "get", "ahj", name, "-o", "wide"], "kubectl get ahj"))


def _prometheus_value(base: str, query: str) -> str:
    try:
        with urllib.request.urlopen(f"{base}/api/v1/query?{urllib.parse.urlencode({'query': query})}", timeout=5) as r:
            result = json.loads(r.read())["data"]["result"]
        return result[0]["value"][1] if result else "(no sample yet)"
    except (OSError, ValueError, KeyError) as error:
        return f"(unavailable: {error})"


def watch_until_running(custom, core, jobs: list[dict], timeout: float = 300) -> dict[str, dict]:
    """Prints each job's phase, pods bound and rank table whenever one changes, until all run (or one fails)."""
    deadline, last_line = time.monotonic() + timeout, ""
    while True:
        states, parts, done = {}, [], True
        for job in jobs:
            name = job["metadata"]["name"]
            body = custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, name)
            status = body.get("status") or {}
            selector = f"{names.JOB_LABEL}={name},{names.ATTEMPT_LABEL}={status.get('attempt', 1)}"
            bound = sum(1 for pod in core.list_namespaced_pod("default", label_selector=selector).items
                        if pod.spec.node_name)
            table = (status.get("rankTable") or {}).get("status", "-")
            if status.get("phase") == "Failed":
                raise DemoError(f"{name} failed: {status.get('message')}")
            states[name] = body
            done &= status.get("phase") == "Running" and table == "completed"
            parts.append(f"{name}: {status.get('phase', 'Pending')} {bound}/{parse(body).pod_count} pods bound, "
                         f"rank table {table}")
        line = "  ".join(parts)
        if line != last_line:
            say(line)
            last_line = line
        if done:
            return states
        if time.monotonic() > deadline:
            raise DemoError(f"not Running after {timeout:.0f}s: {line}")
        time.sleep(1)


def placement_report(body: dict, racks: dict[str, str]) -> list[str]:
    resolved = parse(body)
    layout = layouts.from_resolved(resolved)
    placement = body["status"]["placement"]
    lines = [f"{resolved.name}: world {resolved.world_size} (DP {resolved.data} × TP {resolved.tensor} × "
             f"PP {resolved.pipeline}, EP {resolved.expert}) on {placement.get('summary')}, "
             f"TP groups node-local {placement['tensorGroupsNodeLocal']}"]
    for pod in layout.pods:
        node = placement["nodes"][pod.index]
        stage = layout.coordinates(pod.first).stage
        lines.append(f"  {node:<10} rack {racks.get(node, '?'):<4} pod {pod.index:<3} ranks {pod.first:>4}-{pod.last:<4} "
                     f"stage {stage}")
    return lines


def run_demo(args) -> int:
    started = time.monotonic()
    try:
        say("building the simulated cluster's toolchain if missing (first time ≈ 8-15 min on 2 cores)")
        toolchain.ensure(log=lambda line: say(line.strip()))
        paths = devcluster.up(args.name, nodes=DEMO_NODES, racks=DEMO_RACKS, log=lambda line: say(line),
                              with_prometheus=True)
        kubeconfig = str(paths.kubeconfig)
        prometheus_url = prometheus.url(paths)
        install_chart(kubeconfig)
        say(f"chart {RELEASE} installed in {RELEASE_NAMESPACE} (CRD, RBAC)")
        pid, metrics_port = start_operator(paths, prometheus_url)
        say(f"operator running as pid {pid}; log {operator_helper(paths).log_file}")
        api = api_client(kubeconfig)
        custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
        jobs, real_job = jobs_to_watch(paths, custom, core)
        states = watch_until_running(custom, core, jobs)
    except (DemoError, RuntimeError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    kubectl = [toolchain.binary("kubectl"), "--kubeconfig", kubeconfig]
    print()
    print(_run([*kubectl, "get", "ahj", "-o", "wide"], "kubectl get ahj"))
    # a listed node always has its metadata and name
    metas = [cast(client.V1ObjectMeta, node.metadata) for node in core.list_node().items]
    racks = {cast(str, meta.name): (meta.labels or {}).get(RACK_LABEL, "?") for meta in metas}
    for body in states.values():
        print("\n".join(placement_report(body, racks)))
        print()
    small_name = jobs[1]["metadata"]["name"]
    # the rank table's ConfigMap, written by the operator, always has data
    table_data = cast("dict[str, str]",
                      core.read_namespaced_config_map(names.rank_table_config_map(small_name), "default").data)
    table = json.loads(table_data["hccl.json"])
    print(f"rank table of {small_name} (ConfigMap {names.rank_table_config_map(small_name)}, head):")
    print("\n".join(json.dumps(table, indent=2).splitlines()[:18]) + "\n  ...")
    real_logs = ""
    if real_job:
        real = jobs[-1]["metadata"]["name"]
        print(f"{real}: real MindSpore data-parallel training (2 pods × 1 NPU, trainer processes on this machine):")
        show_real_training(custom, kubectl, prometheus_url, real)
        show_in_place_recovery(custom, core, kubectl, real)
        real_logs = f"\n  kubectl logs -f {names.pod_name(real, 1, 0)}          # the real trainer's per-step loss"
    prometheus_hint = (f"Prometheus at {prometheus_url}, e.g. {prometheus_url}/api/v1/query?query=ascend_trainer_loss"
                       if prometheus_url else "Prometheus: not running")
    print(f"""
ready in {time.monotonic() - started:.0f}s. Look further:
  export KUBECONFIG={kubeconfig} PATH={toolchain.bin_dir()}:$PATH
  kubectl get ahj -o wide
  kubectl describe ahj {small_name}
  kubectl get pods -l {names.JOB_LABEL}={small_name} -o wide
  kubectl delete pod {names.pod_name(small_name, 1, 0)}   # then watch: a whole-gang restart as attempt 2{real_logs}
  curl -s 127.0.0.1:{metrics_port}/metrics | grep ascend_hybrid_
  {prometheus_hint}
Stop everything: ascend-hybrid dev-cluster down --name {args.name}""")
    return 0

