"""Driving kwokctl's binary runtime: the arguments, the config (ports + stages), and running it.

Ports are chosen here, not by kwokctl: it hands out the first free ports below 32767 at create time, so a
cluster stopped and restarted later finds them taken by a cluster created meanwhile. Random free ports in a
range below the kernel's ephemeral range make that unlikely, and `up` checks them before a restart.
"""

from __future__ import annotations

import os
import random
import subprocess
from importlib import resources
from pathlib import Path

import yaml

from ascend_hybrid.devcluster.controlplane import ports
from ascend_hybrid.devcluster.paths import ClusterPaths

EXTRA_ARGS = (
    # Every address the simulation hands out is loopback: pods, nodes (set per Node) and services.
    # kwokctl 0.8 files an extra arg under the component whose first arg sat at the same index in this list, so
    # every component's first arg comes first, in order, and the rest after.
    "kwok-controller=cidr={pod_cidr}",
    "kube-apiserver=service-cluster-ip-range=127.32.0.0/16",
    # kwokctl's 25 s leaves a recovered node tainted not-ready:NoExecute for up to 25 s (and a failed one
    # untainted as long); faults are the point of this cluster, so the node lifecycle controller looks often.
    "kube-controller-manager=node-monitor-period=2s",
    "kwok-controller=node-ip=127.15.0.1",
    # `kubectl logs` reaches kwok's kubelet endpoint at the node's InternalIP (the Hostname resolves nowhere).
    "kube-apiserver=kubelet-preferred-address-types=InternalIP",
    # The device plugin's DaemonSet (deviceplugin/daemonset.py) describes the simulation's plugin process: no pods.
    "kube-controller-manager=controllers=*,-daemonset-controller",
    # Every other component listens on 127.0.0.1 only (bindAddress in the config). kwok serves each node's
    # kubelet endpoint at that node's own InternalIP in 127.15.0.0/16, and a socket bound to 127.0.0.1 takes no
    # connection to 127.15.x.y, so kwok alone keeps the wildcard (its flag given last wins).
    "kwok-controller=server-address=0.0.0.0:{kwok_port}",
)
BIND_ADDRESS = "127.0.0.1"  # etcd (no TLS), apiserver, controller-manager, scheduler: unreachable from the LAN
KWOK_BINARIES = {"etcd": "etcd", "kube-apiserver": "kube-apiserver",
                 "kube-controller-manager": "kube-controller-manager", "kube-scheduler": "kube-scheduler",
                 "kwok-controller": "kwok"}
PORT_OPTIONS = ("etcdPort", "etcdPeerPort", "kubeApiserverPort", "kubeControllerManagerPort", "kubeSchedulerPort",
                "kwokControllerPort")
PORT_RANGE = ports.CONTROL_PLANE_RANGE
# kwok plays every pod's stages (Running, the deletion of a pod marked for it) with 4 workers by default, one
# apiserver call each at a time, where a real cluster has a kubelet per node. At 2 048 pods those 4 workers bounded a
# restart to about 11 pods a second (docs/performance.md); 32 lets the apiserver's own CPU be the limit. The node
# leases get as many: with 4 workers, 4 096 leases (one renewal each per 50 s) fell behind once the pods' stages
# loaded the apiserver, and nodes of a running gang went NotReady.
KWOK_POD_WORKERS = 32
KWOK_LEASE_WORKERS = 32
# kwokctl hands a KwokConfiguration it was given to kwok without kwok's defaults: every switch left out reads false
# and every worker count 0 (which kwok refuses). So every option kwok defaults is given, at kwok 0.8's default.
KWOK_DEFAULTS = {"nodePlayStageParallelism": 4, "podsOnNodeSyncParallelism": 1,
                 "enableDebuggingHandlers": True, "enableProfilingHandler": True, "enableContentionProfiling": False,
                 "enablePodsOnNodeSyncListPager": True, "enablePodsOnNodeSyncStreamWatch": False}


def stages_file() -> Path:
    return Path(str(resources.files("ascend_hybrid.devcluster.controlplane") / "stages.yaml"))


def pick_ports(rng: random.Random | None = None) -> dict[str, int]:
    return dict(zip(PORT_OPTIONS, ports.pick_free_ports(len(PORT_OPTIONS), PORT_RANGE, rng=rng)))


def recorded_ports(paths: ClusterPaths) -> dict[str, int]:
    """The ports kwokctl recorded for an existing cluster."""
    for document in yaml.safe_load_all(paths.kwok_config.read_text()):
        if isinstance(document, dict) and document.get("kind") == "KwokctlConfiguration":
            options = document.get("options") or {}
            return {key: int(options[key]) for key in PORT_OPTIONS if options.get(key)}
    return {}


def config_text(ports: dict[str, int], stages: str) -> str:
    """kwokctl --config: a KwokctlConfiguration with the ports and the bind address, the KwokConfiguration kwokctl
    hands to kwok (its pod and lease workers), then the Stage documents."""
    options = {"apiVersion": "config.kwok.x-k8s.io/v1alpha1", "kind": "KwokctlConfiguration",
               "options": {**ports, "bindAddress": BIND_ADDRESS}}
    kwok = {"apiVersion": "config.kwok.x-k8s.io/v1alpha1", "kind": "KwokConfiguration",
            "options": {**KWOK_DEFAULTS, "podPlayStageParallelism": KWOK_POD_WORKERS,
                        "nodeLeaseParallelism": KWOK_LEASE_WORKERS}}
    return (yaml.safe_dump(options, sort_keys=False) + "---\n" + yaml.safe_dump(kwok, sort_keys=False) + "---\n"
            + stages)


def create_args(paths: ClusterPaths, bin_dir: Path, pod_cidr: str, kwok_port: int,
                wait_seconds: int = 60) -> list[str]:
    args = [str(bin_dir / "kwokctl"), "create", "cluster", "--name", paths.name, "--runtime", "binary",
            "--kubeconfig", str(paths.kubeconfig), "--config", str(paths.kwokctl_config), "--enable-crds", "Logs",
            "--disable-qps-limits", "--wait", f"{wait_seconds}s"]
    for flag, binary in KWOK_BINARIES.items():
        args += [f"--{flag}-binary", str(bin_dir / binary)]
    for extra in EXTRA_ARGS:
        args += ["--extra-args", extra.format(pod_cidr=pod_cidr, kwok_port=kwok_port)]
    return args


def run(paths: ClusterPaths, args: list[str], what: str, timeout: float = 180) -> None:
    """Runs kwokctl against the cluster's own workdir, its output appended to kwokctl.log."""
    bin_dir = str(Path(args[0]).parent)
    # kwokctl runs `kubectl` from PATH (else downloads one): give it ours, of the cluster's version.
    env = dict(os.environ, KWOK_WORKDIR=str(paths.kwok_workdir), KWOK_KUBECTL_BINARY=f"{bin_dir}/kubectl",
               PATH=os.pathsep.join([bin_dir, os.environ.get("PATH", "")]))
    with open(paths.kwokctl_log, "ab") as log:
        log.write(f"\n$ {' '.join(args)}\n".encode())
        log.flush()
        try:
            result = subprocess.run(args, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"{what} did not finish in {timeout:.0f}s; see {paths.kwokctl_log}") from None
    if result.returncode != 0:
        tail = paths.kwokctl_log.read_text(errors="replace").splitlines()[-15:]
        raise RuntimeError(f"{what} failed (exit {result.returncode}); kwokctl said:\n  " + "\n  ".join(tail))
