"""Pure side of Volcano in the dev cluster: its API names, the scheduler configuration and the two binaries'
command lines.

The scheduler configuration is the one MindCluster ships (component/ascend-for-volcano/build/volcano-v1.15.0.yaml:
4635-4665) less Huawei's plugin (`volcano-npu_<version>`) and its `init-params`; the flags follow the same file's
Deployments (4568-4580, 4849-4861), with every listener on 127.0.0.1 and leader election off (one replica).
"""

from __future__ import annotations

from pathlib import Path

GROUP = "scheduling.volcano.sh"
VERSION = "v1beta1"
PODGROUPS = "podgroups"
QUEUES = "queues"
DEFAULT_QUEUE = "default"
NAMESPACE = "volcano-system"
SCHEDULER_NAME = "volcano"
HOST = "127.0.0.1"
PORT_NAMES = ("scheduler-metrics", "scheduler-healthz", "controllers-metrics", "controllers-healthz")
# The controllers the simulation needs: queues (opens `default`), PodGroups, and the garbage collector.
CONTROLLERS = ("queue-controller", "pg-controller", "gc-controller")

SCHEDULER_CONF = """\
actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: gang
    enableNodeOrder: false
  - name: priority
    enableNodeOrder: false
  - name: conformance
    enableNodeOrder: false
- plugins:
  - name: drf
    enableNodeOrder: false
  - name: predicates
    enableNodeOrder: false
    arguments:
      predicate.GPUSharingEnable: false
      predicate.GPUNumberEnable: false
  - name: proportion
    enableNodeOrder: false
  - name: nodeorder
  - name: binpack
    enableNodeOrder: false
"""


def scheduler_command(binary: str, kubeconfig: Path, conf: Path, ports: dict[str, int], dump_dir: Path) -> list[str]:
    return [binary, f"--kubeconfig={kubeconfig}", f"--scheduler-conf={conf}", "--leader-elect=false",
            f"--scheduler-name={SCHEDULER_NAME}", "--schedule-period=1s", "--percentage-nodes-to-find=100",
            "--kube-api-qps=2000", "--kube-api-burst=2000", "--enable-healthz=true", "--enable-metrics=true",
            f"--listen-address={HOST}:{ports['scheduler-metrics']}",
            f"--healthz-address={HOST}:{ports['scheduler-healthz']}", f"--cache-dump-dir={dump_dir}"]


def controllers_command(binary: str, kubeconfig: Path, ports: dict[str, int]) -> list[str]:
    return [binary, f"--kubeconfig={kubeconfig}", "--leader-elect=false", f"--controllers={','.join(CONTROLLERS)}",
            "--kube-api-qps=800", "--kube-api-burst=800", "--enable-healthz=true", "--enable-metrics=true",
            f"--listen-address={HOST}:{ports['controllers-metrics']}",
            f"--healthz-address={HOST}:{ports['controllers-healthz']}"]


def queue_state(queue: dict | None) -> str | None:
    """A Queue's status.state (Open, Closed, Closing, Unknown), None before the queue controller wrote one."""
    return ((queue or {}).get("status") or {}).get("state")


def podgroup_manifest(name: str, min_member: int, queue: str = DEFAULT_QUEUE, annotations: dict | None = None) -> dict:
    """A bare PodGroup, as tests and benchmarks create one beside their pods."""
    metadata: dict = {"name": name}
    if annotations:
        metadata["annotations"] = dict(annotations)
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "PodGroup", "metadata": metadata,
            "spec": {"minMember": min_member, "queue": queue}}


def queue_summary(queues: list[dict], podgroups: list[dict]) -> list[str]:
    """For `dev-cluster status`: each Queue's state and how many PodGroups it holds in each phase."""
    lines = []
    for queue in sorted(queues, key=lambda q: q["metadata"]["name"]):
        name = queue["metadata"]["name"]
        phases: dict[str, int] = {}
        for group in podgroups:
            if ((group.get("spec") or {}).get("queue") or DEFAULT_QUEUE) == name:
                phase = (group.get("status") or {}).get("phase") or "Pending"
                phases[phase] = phases.get(phase, 0) + 1
        held = ", ".join(f"{count} {phase}" for phase, count in sorted(phases.items())) or "no PodGroups"
        lines.append(f"  volcano queue {name}: {queue_state(queue) or '-'}; {held}")
    return lines
