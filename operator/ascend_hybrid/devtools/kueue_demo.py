"""`ascend-hybrid demo --kueue` (`make demo-kueue`): two teams, one quota. The simulated cluster with a real Kueue,
the operator, and a ClusterQueue `teams` of 16 NPUs shared by the LocalQueue `team` of namespaces team-a and
team-b. Each team submits a 16-NPU job (2 pods × 8): team-a's runs, team-b's waits with WaitingForQuota and
Kueue's message, none of its pods bound; deleting team-a's job lets team-b's run. Idempotent: a second run
starts the story again on the same cluster."""

from __future__ import annotations

import sys
import time
from typing import cast

from kubernetes import client

from ascend_hybrid.contracts.names import GROUP
from ascend_hybrid.devcluster import cluster as devcluster
from ascend_hybrid.devcluster.controlplane import toolchain
from ascend_hybrid.devcluster.kube.client import api_client
from ascend_hybrid.devcluster.kube.waiting import WaitTimeout, wait_until
from ascend_hybrid.devcluster.kueue import manager as kueue_manager
from ascend_hybrid.devcluster.kueue import manifests as kueue_manifests
from ascend_hybrid.devcluster.nodes import fleet
from ascend_hybrid.devtools import demo
from ascend_hybrid.spec.api import PLURAL, VERSION

TEAMS = ("team-a", "team-b")
CLUSTER_QUEUE, LOCAL_QUEUE, QUOTA_NPUS = "teams", "team", 16
DEMO_NODES = 4


def job(team: str) -> dict:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "AscendHybridJob",
            "metadata": {"name": f"{team}-llm", "namespace": team},
            "spec": {"parallelism": {"data": 2, "tensor": 8}, "model": {"preset": "tiny"},
                     "training": {"steps": 1000}, "scheduling": {"queue": LOCAL_QUEUE}}}


def queue_objects(nodes: list[dict]) -> list[dict]:
    quotas = {chip: {**amounts, kueue_manifests.RESOURCE: str(QUOTA_NPUS)}
              for chip, amounts in kueue_manifests.flavor_quotas(nodes).items() if chip == "910B"}
    return [kueue_manifests.cluster_queue(CLUSTER_QUEUE, quotas),
            *(kueue_manifests.local_queue(LOCAL_QUEUE, team, CLUSTER_QUEUE) for team in TEAMS)]


def _status(custom, team: str) -> dict:
    try:
        body = custom.get_namespaced_custom_object(GROUP, VERSION, team, PLURAL, f"{team}-llm")
    except client.ApiException as error:
        if error.status == 404:
            return {}
        raise
    return body.get("status") or {}


def _admitted(status: dict) -> dict:
    return next((c for c in status.get("conditions") or [] if c["type"] == "Admitted"), {})


def _clean_slate(custom, core) -> None:
    """Deletes the teams' jobs of an earlier run and waits for their pods: the story starts with a free quota."""
    for team in TEAMS:
        try:
            custom.delete_namespaced_custom_object(GROUP, VERSION, team, PLURAL, f"{team}-llm")
        except client.ApiException as error:
            if error.status != 404:
                raise
    wait_until(lambda: not any(_status(custom, team) or core.list_namespaced_pod(team).items for team in TEAMS),
               120, "the previous run's jobs and pods to go", interval=1)


def _show(kubectl: list[str]) -> None:
    for args in (["get", "ahj", "-A"], ["get", "workloads", "-A"], ["get", "clusterqueue", CLUSTER_QUEUE],
                 ["get", "pods", "-A", "-l", "kueue.x-k8s.io/queue-name", "-o", "wide"]):
        print(f"$ kubectl {' '.join(args)}")
        print(demo._run([*kubectl, *args], f"kubectl {' '.join(args)}"))


def run(args) -> int:
    started = time.monotonic()
    try:
        demo.say("building the toolchain and Kueue if missing (first time: minutes)")
        toolchain.ensure(with_kueue=True, log=lambda line: demo.say(line.strip()))
        paths = devcluster.up(args.name, nodes=DEMO_NODES, racks=2, log=demo.say, kueue=True)
        kubeconfig = str(paths.kubeconfig)
        demo.install_chart(kubeconfig, "--set", "kueue.enabled=true")
        demo.say(f"chart {demo.RELEASE} installed with kueue.enabled=true (CRD, RBAC for Workloads)")
        pid, _ = demo.start_operator(paths, None)
        demo.say(f"operator running as pid {pid}; log {demo.operator_helper(paths).log_file}")
        api = api_client(kubeconfig)
        custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
        for team in TEAMS:
            kueue_manager.label_managed(core, _namespace(core, team))
        kueue_manager.apply_queue_objects(api, queue_objects(fleet.simulated_nodes(core)))
        demo.say(f"ClusterQueue {CLUSTER_QUEUE}: {QUOTA_NPUS} NPUs shared by LocalQueue {LOCAL_QUEUE} of "
                 f"{' and '.join(TEAMS)}")
        _clean_slate(custom, core)
        custom.create_namespaced_custom_object(GROUP, VERSION, "team-a", PLURAL, job("team-a"))
        wait_until(lambda: _status(custom, "team-a").get("phase") == "Running", 120, "team-a-llm to run", interval=1)
        demo.say("team-a-llm: Running (16 NPUs: the whole quota)")
        custom.create_namespaced_custom_object(GROUP, VERSION, "team-b", PLURAL, job("team-b"))
        # wait_until returns only a truthy value: the condition's last operand, the Admitted condition
        held = cast(dict, wait_until(lambda: (_admitted(_status(custom, "team-b")).get("reason") == "WaitingForQuota"
                                              and "quota" in _admitted(_status(custom, "team-b")).get("message", "")
                                              and _admitted(_status(custom, "team-b"))),
                                     60, "team-b-llm to wait", interval=1))
        demo.say(f"team-b-llm: Pending, Admitted=False {held['reason']}: {held['message']}")
        kubectl = [toolchain.binary("kubectl"), "--kubeconfig", kubeconfig]
        print()
        _show(kubectl)
        demo.say("deleting team-a-llm: its quota goes to team-b")
        deleted = time.monotonic()
        custom.delete_namespaced_custom_object(GROUP, VERSION, "team-a", PLURAL, "team-a-llm")
        wait_until(lambda: _status(custom, "team-b").get("phase") == "Running", 120, "team-b-llm to run", interval=1)
        demo.say(f"team-b-llm: Running {time.monotonic() - deleted:.1f}s after team-a-llm was deleted")
        print()
        _show(kubectl)
    except (demo.DemoError, RuntimeError, FileNotFoundError, WaitTimeout) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"""done in {time.monotonic() - started:.0f}s. Look further:
  export KUBECONFIG={kubeconfig} PATH={toolchain.bin_dir()}:$PATH
  kubectl describe ahj -n team-b team-b-llm           # condition Admitted, events Admitted / GangReleased
  kubectl get workloads -A -o wide                    # one Kueue Workload per attempt: <job>-a<attempt>
  kubectl apply -f - <<< '{{"apiVersion": "{GROUP}/{VERSION}", "kind": "AscendHybridJob", "metadata": {{"name": "again", "namespace": "team-a"}}, "spec": {{"parallelism": {{"data": 2, "tensor": 8}}, "scheduling": {{"queue": "{LOCAL_QUEUE}"}}}}}}'
  ascend-hybrid dev-cluster status --name {args.name}     # Kueue's ports and the queues' usage
Stop everything: ascend-hybrid dev-cluster down --name {args.name}""")
    return 0


def _namespace(core, name: str) -> str:
    try:
        core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    except client.ApiException as error:
        if error.status != 409:
            raise
    wait_until(lambda: core.read_namespaced_service_account("default", name), 30,
               f"the default ServiceAccount of {name}")
    return name
