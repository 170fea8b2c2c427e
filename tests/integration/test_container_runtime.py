"""The container runtime end to end: pods annotated `sim.hybrid.ascend.dev/runtime: container` run their image
with podman (the images `make images` built, hack/images.sh's private config, the host network), with the
kubelet's contract. The chart, `helm install`ed with the built operator image, runs the operator as its
Deployment's pod with nothing but the chart's ServiceAccount token, and that operator trains a DP 2 job of
CPU-trainer containers to Succeeded, its losses equal to the local runner's, while its own container is killed
and restarted under it.

Run against a dev cluster (the runtime is one of its helpers), e.g.
    ascend-hybrid dev-cluster up --name cont --nodes 4
    AHJ_KUBECONFIG=$HOME/.cache/ascend-hybrid/clusters/cont/kubeconfig pytest tests/integration/test_container_runtime.py
The images are built first when missing (the `images` fixture: hack/images.sh, ≈ 3.5 min cold, 2 s warm).
"""

from __future__ import annotations

import os
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path

import psutil
import pytest
import yaml

from ascend_hybrid.contracts import names
from ascend_hybrid.devcluster.controlplane import ports, toolchain
from ascend_hybrid.devcluster.kube.client import read_raw
from ascend_hybrid.devcluster.runtime import helper as runtime_helper
from ascend_hybrid.devcluster.runtime.container import POD_UID_LABEL, RUNTIME_LABEL
from ascend_hybrid.devcluster.runtime.kubelet import apiserver_address, runtime_id
from ascend_hybrid.devcluster.runtime.launch import RUNTIME_ANNOTATION
from ascend_hybrid.devcluster.testing import procnet
from support.images import IMAGES_TIMEOUT_S
from support.losses import MODEL, local_losses, step_records
from support.operator_harness import REPO, Jobs, job_manifest, kubectl, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.images, pytest.mark.timeout(IMAGES_TIMEOUT_S)]

CONTAINER = {RUNTIME_ANNOTATION: "container"}
CHART = REPO / "charts" / "ascend-hybrid-operator"
# 150 steps of the 2-layer model: the operator is killed and back while the job still trains
SEED, STEPS, SEQ_LENGTH, GLOBAL_BATCH = 11, 150, 32, 2
FORBIDDEN_IN_LOG = ("Forbidden", "forbidden", "Not enough permissions", " 403")


@pytest.fixture(scope="module")
def cluster(dev_cluster):
    """The dev cluster with its runtime running container pods."""
    if dev_cluster.paths is None:
        pytest.fail("the container runtime is a helper of a dev cluster: point AHJ_KUBECONFIG at a dev cluster's "
                    "kubeconfig (its directory holds cluster.json)", pytrace=False)
    if not runtime_helper.runs_containers(dev_cluster.paths):
        pytest.fail(f"cluster {dev_cluster.paths.name} predates the container runtime: down and up it",
                    pytrace=False)
    runtime_helper.ensure_running(dev_cluster.paths)
    return dev_cluster


def unqualified(image: str) -> str:
    """What a user writes in a pod (ascend-hybrid/trainer:…): podman finds it as localhost/… in local storage."""
    return image.removeprefix("localhost/")


def our_containers(images, cluster) -> list[dict]:
    """podman's view of the runtime's containers: name, id, pod uid, host pid of PID 1 (0 once it ended)."""
    label = f"{RUNTIME_LABEL}={runtime_id(runtime_helper.runtime_root(cluster.paths))}"
    listed = images.podman("ps", "--all", "--filter", f"label={label}", "--format",
                           '{{.ID}} {{.Names}} {{index .Labels "' + POD_UID_LABEL + '"}}').stdout.split("\n")
    found = []
    for line in filter(None, listed):
        identifier, name, uid = line.split()
        pid = images.podman("inspect", "--format", "{{.State.Pid}}", identifier).stdout.strip()
        found.append({"id": identifier, "name": name, "uid": uid, "pid": int(pid or 0)})
    return found


def process_tree(pid: int) -> list[int]:
    try:
        root = psutil.Process(pid)
        return [pid, *(child.pid for child in root.children(recursive=True))]
    except psutil.Error:
        return []


def container_status(pod: dict) -> dict:
    return ((pod.get("status") or {}).get("containerStatuses") or [{}])[0]


def container_id(pod: dict) -> str:
    return container_status(pod).get("containerID") or ""


def test_a_container_pod_gets_the_kubelet_contract(cluster, images, namespace):
    """Env with the downward API, a ConfigMap volume kept in sync, the projected ServiceAccount token with ca.crt
    and namespace (usable against the apiserver), KUBERNETES_SERVICE_HOST/PORT, the image's user, CRI logs (and
    --previous), the exit code, restartPolicy OnFailure with restartCount and an emptyDir kept across the restart."""
    core = cluster.core
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "settings"}, "data": {"greeting": "hello"}})
    script = """
set -e
run=$(cat /scratch/runs 2>/dev/null || echo 0); echo $((run + 1)) > /scratch/runs
echo "run=$run pod=$POD_NAME ip=$POD_IP tier=$TIER host=$(hostname) uid=$(id -u)"
echo "api=$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT namespace=$(cat $SA/namespace)"
python3 - <<'PY'
from kubernetes import client, config
config.load_incluster_config()
review = client.AuthenticationV1Api().create_self_subject_review({"apiVersion": "authentication.k8s.io/v1",
                                                                  "kind": "SelfSubjectReview"})
print("user=" + review.status.user_info.username)
PY
if [ "$run" = 0 ]; then
  echo "greeting=$(cat /etc/settings/greeting)"
  until [ "$(cat /etc/settings/greeting)" = updated ]; do sleep 0.2; done
  echo "greeting=updated"
  exit 3
fi
echo second run
"""
    manifest = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "contract", "labels": {"tier": "gold"}, "annotations": CONTAINER},
        "spec": {
            "nodeName": "node-001", "restartPolicy": "OnFailure", "terminationGracePeriodSeconds": 5,
            "containers": [{
                "name": "main", "image": unqualified(images.operator), "command": ["sh", "-c", script],
                "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                        {"name": "TIER", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['tier']"}}},
                        {"name": "SA", "value": "/var/run/secrets/kubernetes.io/serviceaccount"}],
                "volumeMounts": [{"name": "settings", "mountPath": "/etc/settings"},
                                 {"name": "scratch", "mountPath": "/scratch"}]}],
            "volumes": [{"name": "settings", "configMap": {"name": "settings"}},
                        {"name": "scratch", "emptyDir": {}}]}}
    core.create_namespaced_pod(namespace, manifest)
    wait_for(lambda: "greeting=hello" in kubectl(cluster, "logs", "-n", namespace, "contract", check=False), 120,
             "the container to print the ConfigMap's greeting",
             lambda: kubectl(cluster, "describe", "pod", "-n", namespace, "contract", check=False))
    running = cluster.pod(namespace, "contract")
    assert running["status"]["phase"] == "Running" and container_id(running).startswith("podman://")
    core.patch_namespaced_config_map("settings", namespace, {"data": {"greeting": "updated"}})
    done = cluster.wait_phase(namespace, "contract", "Succeeded", timeout=120)

    status = container_status(done)
    assert status["restartCount"] == 1
    assert status["state"]["terminated"]["exitCode"] == 0
    assert status["lastState"]["terminated"]["exitCode"] == 3  # the first run, ended by the script
    assert status["containerID"] != status["lastState"]["terminated"]["containerID"]
    first = kubectl(cluster, "logs", "-n", namespace, "contract", "--previous")
    second = kubectl(cluster, "logs", "-n", namespace, "contract")
    ip, port = apiserver_address(cluster.api)
    for run, log in enumerate((first, second)):
        assert (f"run={run} pod=contract ip={done['status']['podIP']} tier=gold host=contract uid=10001"
                in log), log
        assert f"api=127.0.0.1:{port} namespace={namespace}" in log and ip == "127.0.0.1", log
        assert f"user=system:serviceaccount:{namespace}:default" in log, log  # the pod's own token
    assert "greeting=updated" in first and "second run" in second, (first, second)
    events = {e.reason for e in core.list_namespaced_event(namespace, field_selector="involvedObject.name="
                                                                                      "contract").items}
    assert "Started" in events

    core.delete_namespaced_pod("contract", namespace)
    wait_for(lambda: not core.list_namespaced_pod(namespace).items, 60, "the pod to go")
    assert not [c for c in our_containers(images, cluster) if c["uid"] == done["metadata"]["uid"]]


def test_deleting_a_container_pod_stops_its_container_after_the_grace_period(cluster, images, namespace):
    core = cluster.core
    manifest = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "stubborn", "annotations": CONTAINER},
        "spec": {"nodeName": "node-002", "terminationGracePeriodSeconds": 3, "containers": [{
            "name": "main", "image": unqualified(images.operator),
            "command": ["sh", "-c", "trap 'echo TERM ignored' TERM; echo ready; while true; do sleep 0.2; done"]}]}}
    core.create_namespaced_pod(namespace, manifest)
    wait_for(lambda: "ready" in kubectl(cluster, "logs", "-n", namespace, "stubborn", check=False), 120,
             "the shell to trap TERM")
    uid = cluster.pod(namespace, "stubborn")["metadata"]["uid"]
    assert [c for c in our_containers(images, cluster) if c["uid"] == uid and c["pid"]]
    deleted = time.monotonic()
    core.delete_namespaced_pod("stubborn", namespace)
    wait_for(lambda: not core.list_namespaced_pod(namespace).items, 30, "the pod to go once its container is gone")
    took = time.monotonic() - deleted
    assert 3 <= took < 15, f"the pod went {took:.1f}s after its deletion (grace period 3s, TERM ignored)"
    assert not [c for c in our_containers(images, cluster) if c["uid"] == uid]


class OperatorPod:
    """The chart's operator as the Deployment's pod: what Jobs needs of an operator (its log)."""

    def __init__(self, cluster, namespace: str, release: str, ports: tuple[int, int]):
        self.cluster, self.namespace, self.ports = cluster, namespace, ports  # (metrics, health)
        self.selector = f"app.kubernetes.io/instance={release}"

    def pod(self) -> dict | None:
        pods = self.cluster.core.list_namespaced_pod(self.namespace, label_selector=self.selector).items
        return read_raw(self.cluster.core.read_namespaced_pod, pods[0].metadata.name, self.namespace) if pods else None

    def log_tail(self, lines: int = 40, previous: bool = False) -> str:
        pod = self.pod()
        if pod is None:
            return "(no operator pod)"
        return kubectl(self.cluster, "logs", "-n", self.namespace, pod["metadata"]["name"], f"--tail={lines}",
                       *(["--previous"] if previous else []), check=False)


def helm(cluster, home: Path, *args: str) -> str:
    """The toolchain's helm against the dev cluster, with its own (empty) repositories and registry logins."""
    env = {**os.environ, "KUBECONFIG": cluster.kubeconfig, "HELM_CACHE_HOME": str(home / "cache"),
           "HELM_CONFIG_HOME": str(home / "config"), "HELM_DATA_HOME": str(home / "data")}
    result = subprocess.run([toolchain.binary("helm"), *args], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"helm {' '.join(args)}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def healthz(ip: str, port: int) -> int:
    with urllib.request.urlopen(f"http://{ip}:{port}/healthz", timeout=5) as response:
        return response.status


@pytest.fixture
def chart_operator(cluster, images, tmp_path):
    """`helm install` of the chart with the built operator image, run by the container runtime: metrics and health on
    free ports of the pod's IP only. Uninstalled afterwards, and its namespace deleted."""
    release = f"ahj-cont-{uuid.uuid4().hex[:6]}"
    metrics_port, health_port = ports.pick_free_ports(2)
    repository, tag = unqualified(images.operator).rsplit(":", 1)
    values = {"image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
              "podAnnotations": CONTAINER, "bindAddress": "$(POD_IP)",
              "metrics": {"port": metrics_port}, "health": {"port": health_port},
              "hardwareProfiles": [yaml.safe_load((REPO / "deploy" / "examples" / "hardware-cpu.yaml").read_text())]}
    values_file = tmp_path / "values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    home = tmp_path / "helm"
    helm(cluster, home, "install", release, str(CHART), "--namespace", release, "--create-namespace", "--values",
         str(values_file))
    operator = OperatorPod(cluster, release, release, (metrics_port, health_port))
    try:
        yield operator
    finally:
        helm(cluster, home, "uninstall", release, "--namespace", release, "--wait", "--timeout", "90s")
        wait_for(lambda: operator.pod() is None, 60, "the operator's pod to go")
        cluster.core.delete_namespace(release, propagation_policy="Background")


def wait_operator_serving(operator: OperatorPod, restarts: int, timeout: float = 120) -> dict:
    """The operator's pod Running, Ready, with `restarts` restarts, its container's /healthz answering."""
    def serving():
        pod = operator.pod()
        status = container_status(pod or {})
        if not pod or pod["status"].get("phase") != "Running" or not status.get("ready"):
            return None
        if status.get("restartCount") != restarts:
            return None
        try:
            return pod if healthz(pod["status"]["podIP"], operator.ports[1]) == 200 else None
        except OSError:
            return None
    return wait_for(serving, timeout, f"the operator's pod serving /healthz after {restarts} restarts",
                    lambda: f"{operator.pod()}\n{operator.log_tail()}", interval=0.5)


def test_the_chart_installed_operator_image_trains_a_dp2_job_of_trainer_containers(
        cluster, images, chart_operator, namespace):
    operator = chart_operator
    started = time.monotonic()
    pod = wait_operator_serving(operator, restarts=0)
    first_id = container_id(pod)
    assert first_id.startswith("podman://")
    assert pod["spec"]["serviceAccountName"].endswith("ascend-hybrid-operator")
    operator_up = time.monotonic() - started

    jobs = Jobs(cluster.api, namespace, operator)
    trainer_image = unqualified(images.trainer)
    jobs.create(job_manifest("cont-dp2", data=2, tensor=1, per_pod=1, annotations=CONTAINER,
                             npu={"hardwareProfile": "cpu-2core"}, template={"image": trainer_image}, model=MODEL,
                             training={"steps": STEPS, "seed": SEED, "seqLength": SEQ_LENGTH,
                                       "globalBatchSize": GLOBAL_BATCH}))
    pod_zero = names.pod_name("cont-dp2", 1, 0)
    sockets, killed_at, job_pods, phase = [], None, {}, None
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        phase = jobs.status("cont-dp2").get("phase")
        for trainer in jobs.pods("cont-dp2"):
            job_pods.setdefault(trainer["metadata"]["uid"], trainer["metadata"]["name"])
        pids = [pid for c in our_containers(images, cluster) if c["pid"] for pid in process_tree(c["pid"])]
        sockets += procnet.sockets_of(pids)
        if killed_at is None and step_records(kubectl(cluster, "logs", "-n", namespace, pod_zero, check=False)):
            # training: kill the operator's container (SIGKILL to its PID 1, as a crash); the job must not notice
            assert images.podman("kill", first_id.removeprefix("podman://")).returncode == 0
            killed_at = time.monotonic()
            restarted = wait_operator_serving(operator, restarts=1)
            restarted_at = time.monotonic()
        if phase in ("Succeeded", "Failed"):
            break
        time.sleep(0.5)
    wall = time.monotonic() - started
    assert killed_at is not None, f"the job ended ({phase}) before a step was logged: nothing was killed"
    print(f"\nchart operator (container) serving in {operator_up:.1f}s; DP 2 job of trainer containers "
          f"({STEPS} steps): {phase} {wall:.1f}s after the install; operator killed at {killed_at - started:.1f}s, "
          f"serving again {restarted_at - killed_at:.1f}s later")
    assert phase == "Succeeded", jobs.describe("cont-dp2")

    # the operator's container was restarted by the pod's restartPolicy (Always): same pod, restartCount 1
    assert restarted["metadata"]["uid"] == pod["metadata"]["uid"]
    status = container_status(restarted)
    assert status["lastState"]["terminated"]["exitCode"] == 137 and status["containerID"] != first_id
    # and the job never noticed: its first attempt's two pods, each one run of its container, exit code 0
    final = jobs.pods("cont-dp2")
    assert {p["metadata"]["uid"] for p in final} == set(job_pods) and len(final) == 2
    assert jobs.status("cont-dp2")["attempt"] == 1
    for trainer in final:
        trainer_status = container_status(trainer)
        assert trainer["status"]["phase"] == "Succeeded" and trainer_status["restartCount"] == 0
        assert trainer_status["state"]["terminated"]["exitCode"] == 0
        assert trainer_status["containerID"].startswith("podman://")
        assert trainer["spec"]["containers"][0]["image"] == trainer_image

    # the chart's RBAC was enough, before and after the restart
    for previous in (True, False):
        log = operator.log_tail(10_000, previous=previous)
        assert not [marker for marker in FORBIDDEN_IN_LOG if marker in log], f"permission problems:\n{log}"

    # every socket of every container stayed on 127.0.0.0/8; the operator listened on its pod IP, on its ports
    outside = [s for s in sockets if not all(procnet.is_loopback_v4(a) for a in s.addresses())]
    assert sockets and not outside, outside
    operator_ip = restarted["status"]["podIP"]
    listening = {s.local for s in sockets if s.listening}
    assert {(operator_ip, port) for port in operator.ports} <= listening, listening

    # pod 0's losses are the local runner's (after the job: one MindSpore job at a time on this machine)
    records = step_records(kubectl(cluster, "logs", "-n", namespace, pod_zero))
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    expected = local_losses(STEPS, seed=SEED, seq_length=SEQ_LENGTH, global_batch=GLOBAL_BATCH)
    assert [r["loss"] for r in records] == pytest.approx(expected, abs=1e-5)

    jobs.delete_all(timeout=90)
    leftover = {c["uid"] for c in our_containers(images, cluster)} & set(job_pods)
    assert not leftover, f"containers of deleted pods remain: {leftover}"
