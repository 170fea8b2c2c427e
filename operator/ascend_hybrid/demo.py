"""`ascend-hybrid demo`: the README's first command. A simulated Ascend cluster on a real control plane, the chart
installed, the operator running in the background, both example jobs applied and shown Running with their rank
tables. Idempotent: a second run reuses what is up."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from kubernetes import client

from . import layout as layouts, names, toolchain
from .devcluster import cluster as devcluster, processes
from .devcluster.kubeapi import api_client
from .rules import parse

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = ("seed-moe-128.yaml", "job.yaml")
CHART = REPO / "charts" / "ascend-hybrid-operator"
RELEASE, RELEASE_NAMESPACE = "ascend-hybrid", "ascend-hybrid-system"
DEMO_NODES, DEMO_RACKS = 20, 2
OPERATOR_METRICS_PORT, OPERATOR_HEALTH_PORT = 18080, 18081
GROUP, VERSION, PLURAL = "hybrid.ascend.dev", "v1alpha1", "ascendhybridjobs"


class DemoError(RuntimeError):
    pass


def say(message: str) -> None:
    print(f"[demo] {message}", flush=True)


def _run(args: list[str], what: str) -> str:
    result = subprocess.run(args, capture_output=True, text=True)
    if result.returncode != 0:
        raise DemoError(f"{what} failed: {(result.stderr or result.stdout).strip().splitlines()[-1:]}")
    return result.stdout


def operator_pid_file(paths) -> Path:
    paths.helpers_dir.mkdir(parents=True, exist_ok=True)
    return paths.helpers_dir / "operator.pid"


def install_chart(kubeconfig: str) -> None:
    """helm upgrade --install: the CRD and RBAC from the chart; the Deployment stays at 0 replicas, since here the
    operator runs as a local process (the simulated nodes run no containers)."""
    _run([toolchain.binary("helm"), "upgrade", "--install", RELEASE, str(CHART), "--namespace", RELEASE_NAMESPACE,
          "--create-namespace", "--kubeconfig", kubeconfig, "--set", "replicaCount=0", "--wait=false"],
         "helm install of the chart")


def start_operator(paths) -> int:
    pid_file = operator_pid_file(paths)
    pid = processes.read_pid(pid_file)
    if pid and processes.is_ours(pid, str(paths.root)):
        return pid
    log = open(paths.root / "operator.log", "a")
    process = subprocess.Popen(
        [sys.executable, "-m", "ascend_hybrid.cli", "run", "--kubeconfig", str(paths.kubeconfig),
         "--metrics-port", str(OPERATOR_METRICS_PORT), "--health-port", str(OPERATOR_HEALTH_PORT),
         "--bind-address", "127.0.0.1", "--telemetry-interval", "10"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=REPO)
    pid_file.write_text(f"{process.pid}\n")
    return process.pid


def apply_examples(kubeconfig: str) -> list[dict]:
    jobs = []
    for example in EXAMPLES:
        path = REPO / "deploy" / "examples" / example
        _run([toolchain.binary("kubectl"), "--kubeconfig", kubeconfig, "apply", "--server-side", "-f", str(path)],
             f"kubectl apply -f {path}")
        import yaml
        jobs.append(yaml.safe_load(path.read_text()))
    return jobs


def watch_until_running(custom, core, jobs: list[dict], timeout: float = 300) -> dict[str, dict]:
    deadline, last_line = time.monotonic() + timeout, ""
    while True:
        states, done = {}, True
        for job in jobs:
            name = job["metadata"]["name"]
            body = custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, name)
            status = body.get("status") or {}
            pods = core.list_namespaced_pod("default", label_selector=f"{names.JOB_LABEL}={name},"
                                            f"{names.ATTEMPT_LABEL}={status.get('attempt', 1)}").items
            bound = sum(1 for pod in pods if pod.spec.node_name)
            total = parse(body).pod_count
            table = (status.get("rankTable") or {}).get("status", "-")
            states[name] = body
            done &= status.get("phase") == "Running" and table == "completed"
            if status.get("phase") == "Failed":
                raise DemoError(f"{name} failed: {status.get('message')}")
        line = "  ".join(f"{n}: {(b.get('status') or {}).get('phase', 'Pending')} "
                         f"{sum(1 for p in core.list_namespaced_pod('default', label_selector=f'{names.JOB_LABEL}={n}').items if p.spec.node_name)}"
                         f"/{parse(b).pod_count} pods bound, rank table {((b.get('status') or {}).get('rankTable') or {}).get('status', '-')}"
                         for n, b in states.items())
        if line != last_line:
            say(line)
            last_line = line
        if done:
            return states
        if time.monotonic() > deadline:
            raise DemoError(f"not Running after {timeout:.0f}s: {line}")
        time.sleep(1)


def placement_report(body: dict, racks: dict[str, str]) -> list[str]:
    effective = parse(body)
    layout = layouts.from_effective(effective)
    placement = body["status"]["placement"]
    lines = [f"{effective.name}: world {effective.world_size} (DP {effective.data} × TP {effective.tensor} × "
             f"PP {effective.pipeline}, EP {effective.expert}) on {placement.get('summary')}, "
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
        paths = devcluster.up(args.name, nodes=DEMO_NODES, racks=DEMO_RACKS, log=lambda line: say(line))
        kubeconfig = str(paths.kubeconfig)
        install_chart(kubeconfig)
        say(f"chart {RELEASE} installed in {RELEASE_NAMESPACE} (CRD, RBAC)")
        pid = start_operator(paths)
        say(f"operator running as pid {pid}; log {paths.root / 'operator.log'}")
        jobs = apply_examples(kubeconfig)
        api = api_client(kubeconfig)
        custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
        states = watch_until_running(custom, core, jobs)
    except (DemoError, RuntimeError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    kubectl = [toolchain.binary("kubectl"), "--kubeconfig", kubeconfig]
    print()
    print(_run([*kubectl, "get", "ahj", "-o", "wide"], "kubectl get ahj"))
    racks = {node.metadata.name: (node.metadata.labels or {}).get("huawei.com/topotree.rackid", "?")
             for node in core.list_node().items}
    for body in states.values():
        print("\n".join(placement_report(body, racks)))
        print()
    small_name = jobs[-1]["metadata"]["name"]
    table = json.loads(core.read_namespaced_config_map(names.rank_table_config_map(small_name), "default").data["hccl.json"])
    print(f"rank table of {small_name} (ConfigMap {names.rank_table_config_map(small_name)}, head):")
    print("\n".join(json.dumps(table, indent=2).splitlines()[:18]) + "\n  ...")
    print(f"""
ready in {time.monotonic() - started:.0f}s. Look further:
  export KUBECONFIG={kubeconfig} PATH={toolchain.bin_dir()}:$PATH
  kubectl get ahj -o wide
  kubectl describe ahj {small_name}
  kubectl get pods -l {names.JOB_LABEL}={small_name} -o wide
  kubectl delete pod {names.pod_name(small_name, 1, 0)}   # then watch: a whole-gang restart as attempt 2
  curl -s 127.0.0.1:{OPERATOR_METRICS_PORT}/metrics | grep ascend_hybrid_
Stop everything: ascend-hybrid dev-cluster down --name {args.name}""")
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser("demo", help="simulated cluster + operator + the example jobs, shown Running")
    parser.add_argument("--name", default=devcluster.DEFAULT_NAME if hasattr(devcluster, "DEFAULT_NAME") else "ahj")
    parser.set_defaults(func=run_demo)
