"""The container runtime's pure side: a pod as a `podman run` (container.py), its volumes' files with the
projected ServiceAccount token (volumes.py), restartPolicy and back-off (restart.py), the runtime decisions' restarts, the
status of a restarted container, and the cluster default for containers."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ascend_hybrid.contracts import names
from ascend_hybrid.devcluster.runtime import podstatus, runtime_default
from ascend_hybrid.devcluster.runtime.container import (
    CONTAINER_RUNTIME,
    RUNTIME_LABEL,
    ImageConfig,
    Mount,
    apiserver_env,
    container_spec,
    is_container_pod,
    run_arguments,
)
from ascend_hybrid.devcluster.runtime.decisions import ReportExit, Restart, Start, Tracked, decide
from ascend_hybrid.devcluster.runtime.kubelet import Modes, ProcessMode, apiserver_address, runtime_id
from ascend_hybrid.devcluster.runtime.launch import RUNTIME_ANNOTATION, NotRunnable, PodLayout
from ascend_hybrid.devcluster.runtime.restart import (
    RESET_AFTER_SECONDS,
    backoff_seconds,
    next_streak,
    restart_delay,
    restart_policy,
)
from ascend_hybrid.devcluster.runtime.volumes import (
    TokenSource,
    VolumeFile,
    format_map,
    refresh_due,
    token_sources,
    volume_files,
)
from ascend_hybrid.gang import render
from ascend_hybrid.spec.rules import parse
from support.builders import PodBuilder, job_body

ROOT = Path("/sim/runtime")
APISERVER = ("127.0.0.1", 29330)
MOMENT = datetime(2026, 11, 29, 17, 0, 0, tzinfo=UTC)
SA_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
TOKEN = TokenSource("default", "", 3607)


def api_access_volume() -> dict:
    """What the ServiceAccount admission plugin adds to every pod (Kubernetes 1.36)."""
    return {"name": "kube-api-access-x1", "projected": {"defaultMode": 420, "sources": [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace",
                                    "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}}


def container_pod(**container) -> dict:
    """A bound container pod with its IP, one container `main`, the API-access volume mounted."""
    mounts = [{"name": "kube-api-access-x1", "mountPath": SA_MOUNT, "readOnly": True}]
    return (PodBuilder.named("op", namespace="ns").uid("u-1").label("app", "op")
            .annotation(RUNTIME_ANNOTATION, CONTAINER_RUNTIME)
            .node("node-001").spec(serviceAccountName="default", volumes=[api_access_volume()])
            .container(**{"name": "main", "image": "ascend-hybrid/operator:0.1.0", "volumeMounts": mounts, **container})
            .status(podIP="127.16.0.9", hostIP="127.15.0.1").build())


CONFIGMAPS = {("ns", "kube-root-ca.crt"): {"data": {"ca.crt": "CA PEM"}},
              ("ns", "settings"): {"data": {"a": "1", "b": "2"}}}


def spec_of(pod: dict, image: ImageConfig = ImageConfig(user="10001"), restarts: int = 0):
    return container_spec(pod, CONFIGMAPS, PodLayout.of(ROOT, pod), image, APISERVER, {TOKEN: "tok"}, "rid",
                          restarts)


def test_a_container_pod_gets_its_env_the_apiserver_and_its_service_account_files():
    pod = container_pod(env=[{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                             {"name": "URL", "value": "https://$(KUBERNETES_SERVICE_HOST):$(PORT)"},
                             {"name": "PORT", "value": "1"}])
    spec = spec_of(pod)
    assert is_container_pod(pod)
    assert spec.env["POD_IP"] == "127.16.0.9"
    assert {key: spec.env[key] for key in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")} == \
        {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": "29330"}
    assert spec.env["URL"] == "https://$(KUBERNETES_SERVICE_HOST):$(PORT)"  # only names defined before it expand
    volume = PodLayout.of(ROOT, pod).volume_dir("kube-api-access-x1")
    termination = PodLayout.of(ROOT, pod).termination_file  # a fresh empty file per run, any user may write it
    assert spec.files == {volume / "token": VolumeFile(b"tok", 0o644), volume / "ca.crt": VolumeFile(b"CA PEM", 0o644),
                          volume / "namespace": VolumeFile(b"ns", 0o644), termination: VolumeFile(b"", 0o666)}
    assert spec.mounts == (Mount(volume, SA_MOUNT, True), Mount(termination, "/dev/termination-log", False))
    assert spec.hostname == "op" and spec.image == "ascend-hybrid/operator:0.1.0"
    assert spec.name == "k8s_main_op_ns_u-1_0" and spec.labels[RUNTIME_LABEL] == "rid"


def test_the_apiserver_variables_are_those_of_the_kubernetes_service():
    env = apiserver_env("127.0.0.1", 6443)
    assert env["KUBERNETES_PORT"] == env["KUBERNETES_PORT_6443_TCP"] == "tcp://127.0.0.1:6443"
    assert env["KUBERNETES_SERVICE_PORT_HTTPS"] == env["KUBERNETES_PORT_6443_TCP_PORT"] == "6443"


@pytest.mark.parametrize(("command", "args", "entrypoint", "arguments"), [
    (None, None, None, None),                          # the image's ENTRYPOINT and CMD
    (None, ["local", "--data", "2"], None, ("local", "--data", "2")),  # args replace CMD only
    (["sh", "-c"], None, ("sh", "-c"), ()),            # command drops CMD
    (["echo"], ["$(POD_NAME)", "$$(x)"], ("echo",), ("op", "$(x)")),
])
def test_command_and_args_follow_kubernetes_rules_over_the_image(command, args, entrypoint, arguments):
    container = {"env": [{"name": "POD_NAME", "value": "op"}]}
    if command is not None:
        container["command"] = command
    if args is not None:
        container["args"] = args
    spec = spec_of(container_pod(**container))
    assert (spec.entrypoint, spec.args) == (entrypoint, arguments)
    argv = run_arguments(spec)
    assert argv[argv.index(spec.image) + 1:] == list(arguments or ())
    if entrypoint is None:
        assert "--entrypoint" not in argv
    else:
        assert json.loads(argv[argv.index("--entrypoint") + 1]) == list(entrypoint)


def test_podman_runs_it_attached_on_the_host_network_never_pulling():
    argv = run_arguments(spec_of(container_pod()))
    assert argv[:2] == ["run", "--rm"]
    assert argv[argv.index("--network") + 1] == "host" and argv.count("--network") == 1
    assert argv[argv.index("--pull") + 1] == "never"
    assert argv[argv.index("--hostname") + 1] == "op"
    assert "--detach" not in argv and "-d" not in argv


def test_volumes_map_to_read_only_files_and_writable_directories():
    pod = container_pod(volumeMounts=[
        {"name": "settings", "mountPath": "/etc/settings"},
        {"name": "one", "mountPath": "/etc/one/a", "subPath": "a"},
        {"name": "tmp", "mountPath": "/tmp"},
        {"name": "ckpt", "mountPath": "/checkpoints"},
        {"name": "ckpt", "mountPath": "/frozen", "readOnly": True, "subPath": "run-1"}])
    pod["spec"]["volumes"] += [
        {"name": "settings", "configMap": {"name": "settings", "defaultMode": 0o600, "items": [
            {"key": "a", "path": "a"}, {"key": "b", "path": "deep/b", "mode": 0o755}]}},
        {"name": "one", "configMap": {"name": "settings"}},
        {"name": "tmp", "emptyDir": {}},
        {"name": "ckpt", "persistentVolumeClaim": {"claimName": "ckpt"}}]
    layout = PodLayout.of(ROOT, pod)
    spec = spec_of(pod)
    settings, claim = layout.volume_dir("settings"), layout.claim_dir("ckpt")
    assert spec.mounts == (
        Mount(settings, "/etc/settings", True), Mount(layout.volume_dir("one") / "a", "/etc/one/a", True),
        Mount(layout.volume_dir("tmp"), "/tmp", False), Mount(claim, "/checkpoints", False),
        Mount(claim / "run-1", "/frozen", True), Mount(layout.termination_file, "/dev/termination-log", False))
    assert spec.files[settings / "a"] == VolumeFile(b"1", 0o600)
    assert spec.files[settings / "deep" / "b"] == VolumeFile(b"2", 0o755)
    assert spec.directories[layout.volume_dir("tmp")] == spec.directories[claim] == 0o777
    assert spec.directories[settings] is None


@pytest.mark.parametrize("volume", [{"secret": {"secretName": "s"}}, {"hostPath": {"path": "/etc"}}])
def test_a_mounted_volume_the_runtime_cannot_provide_keeps_the_container_from_starting(volume):
    pod = container_pod(volumeMounts=[{"name": "v", "mountPath": "/v"}])
    pod["spec"]["volumes"].append({"name": "v", **volume})
    with pytest.raises(NotRunnable) as refused:
        spec_of(pod)
    assert refused.value.reason == "CreateContainerConfigError" and "not supported" in refused.value.message


def test_without_its_token_or_its_configmap_the_volume_cannot_be_set_up():
    pod = container_pod()
    layout = PodLayout.of(ROOT, pod)
    with pytest.raises(NotRunnable, match="no token"):
        volume_files(pod, CONFIGMAPS, layout, {})
    with pytest.raises(NotRunnable, match="kube-root-ca.crt"):
        volume_files(pod, {}, layout, {TOKEN: "tok"})


def test_downward_api_volumes_write_fields_and_label_maps():
    pod = container_pod()
    pod["metadata"]["labels"] = {"b": "two", "a": 'say "hi"'}
    pod["spec"]["volumes"] = [{"name": "info", "downwardAPI": {"items": [
        {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
        {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}, "mode": 0o400}]}}]
    files = volume_files(pod, {}, PodLayout.of(ROOT, pod), {})
    directory = PodLayout.of(ROOT, pod).volume_dir("info")
    assert files[directory / "labels"] == VolumeFile(b'a="say \\"hi\\""\nb="two"')
    assert files[directory / "name"] == VolumeFile(b"op", 0o400)
    assert format_map({}) == ""


def test_token_sources_and_their_refresh():
    pod = container_pod()
    pod["spec"]["volumes"].append({"name": "vault", "projected": {"sources": [
        {"serviceAccountToken": {"audience": "vault", "path": "t"}}]}})
    assert token_sources(pod) == [TokenSource("default", "", 3607), TokenSource("default", "vault", 3600)]
    assert not refresh_due(issued=0, expires=1000, now=799)
    assert refresh_due(issued=0, expires=1000, now=800)
    assert refresh_due(issued=0, expires=10 ** 9, now=24 * 3600)  # a year-long token is still replaced daily


@pytest.mark.parametrize(("context", "image_user", "user"), [
    ({}, "10001", None),                                       # the image's user
    ({"runAsUser": 1000, "runAsGroup": 2000}, "", "1000:2000"),
    ({"runAsGroup": 2000}, "10001", "10001:2000"),
    ({"runAsNonRoot": True}, "10001", None),
    ({"runAsNonRoot": True, "runAsUser": 5}, "root", "5"),
])
def test_the_user_comes_from_the_security_context_else_the_image(context, image_user, user):
    pod = container_pod()
    pod["spec"]["securityContext"] = context
    assert spec_of(pod, ImageConfig(user=image_user)).user == user


@pytest.mark.parametrize(("image_user", "message"), [
    ("", "will run as root"), ("0", "will run as root"), ("trainer", "non-numeric user")])
def test_run_as_non_root_refuses_an_image_that_would_run_as_root(image_user, message):
    pod = container_pod(securityContext={"runAsNonRoot": True})
    with pytest.raises(NotRunnable, match=message):
        spec_of(pod, ImageConfig(user=image_user))


def test_the_charts_security_context_becomes_podman_flags():
    pod = container_pod(securityContext={"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                         "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}})
    pod["spec"]["securityContext"] = {"runAsUser": 10001, "runAsGroup": 10001, "fsGroup": 3000,
                                      "supplementalGroups": [44]}
    spec = spec_of(pod)
    assert spec.security == ("--read-only", "--read-only-tmpfs=false", "--security-opt", "no-new-privileges",
                             "--cap-drop", "all")
    assert spec.groups == (44, 3000) and spec.user == "10001:10001"
    argv = run_arguments(spec)
    assert argv[argv.index("--user") + 1] == "10001:10001" and "--group-add" in argv


def test_an_operator_rendered_trainer_pod_keeps_its_container_paths():
    """Unlike the process runtime, nothing is rewritten: the rank table is read where the operator says."""
    body = job_body({"parallelism": {"data": 2}, "npu": {"perPod": 1}, "training": {"steps": 5},
                     "template": {"image": "ascend-hybrid/trainer:0.1.0-cpu",
                                  "metadata": {"annotations": {RUNTIME_ANNOTATION: CONTAINER_RUNTIME}}}},
                    name="real", uid="job-uid")
    pod = render.pod(parse(body), "ns", "job-uid", attempt=1, index=0, node="node-001", sched_ip="127.32.0.9")
    pod["metadata"]["uid"] = "pod-uid"
    pod["status"] = {"phase": "Pending", "podIP": "127.16.0.7", "hostIP": "127.15.0.1"}
    configmaps = {("ns", names.rank_table_config_map("real")): {"data": {"hccl.json": "{}", "job.json": "{}"}}}
    spec = container_spec(pod, configmaps, PodLayout.of(ROOT, pod), ImageConfig("10001"), APISERVER, {}, "rid")
    assert spec.env["RANK_TABLE_FILE"] == "/user/serverid/devindex/config/hccl.json"
    assert spec.env["POD_IP"] == "127.16.0.7" and spec.image == "ascend-hybrid/trainer:0.1.0-cpu"
    assert (spec.entrypoint, spec.args) == (None, None)  # the image's entrypoint: ascend-hybrid-trainer launch
    assert {m.target for m in spec.mounts} >= {"/user/serverid/devindex/config"}


def test_restart_policy_and_the_kubelets_back_off():
    assert restart_policy(container_pod()) == "Always"
    process_pod = container_pod()
    process_pod["metadata"]["annotations"][RUNTIME_ANNOTATION] = "process"
    assert restart_policy(process_pod) == "Never"  # the process runtime never restarts
    on_failure = container_pod()
    on_failure["spec"]["restartPolicy"] = "OnFailure"
    assert restart_delay(on_failure, 0, 0, 1.0) is None and restart_delay(on_failure, 1, 0, 1.0) == 0
    assert [backoff_seconds(n) for n in range(7)] == [0, 10, 20, 40, 80, 160, 300]
    assert next_streak(5, RESET_AFTER_SECONDS) == 0 and next_streak(5, 60) == 5
    assert restart_delay(container_pod(), 137, 3, 5.0) == 40


def test_the_plan_restarts_an_ended_container_after_its_back_off():
    pods = {"a": {**container_pod(), "metadata": {**container_pod()["metadata"], "uid": "a"},
                  "status": {"phase": "Running", "podIP": "127.16.0.9"}}}
    ended = Tracked(pid=1, workers=1, grace=30, exit_code=137, announced=True, streak=1, started_at=0.0,
                    finished_at=30.0)
    assert decide(pods, {"a": ended}, capacity=4, now=100) == [ReportExit("a", 10)]
    waiting = Tracked(pid=1, workers=3, grace=30, exit_code=137, reported=True, restart_at=110.0)
    assert decide(pods, {"a": waiting}, capacity=4, now=100) == []
    assert decide(pods, {"a": waiting}, capacity=4, now=110) == [Restart("a")]
    # its workers stay counted while it waits: a newcomer that would not fit beside it waits too
    newcomer = {**pods["a"], "metadata": {**pods["a"]["metadata"], "uid": "b", "name": "b"},
                "spec": {**pods["a"]["spec"], "containers": [{"name": "main", "image": "x", "env": [
                    {"name": "MS_LOCAL_WORKER", "value": "2"}]}]}, "status": {"phase": "Pending",
                                                                               "podIP": "127.16.0.10"}}
    assert Start("b") not in decide({**pods, "b": newcomer}, {"a": waiting}, capacity=4, now=100)


def test_a_restarted_container_reports_its_restart_count_and_last_state():
    pod = container_pod()
    last = podstatus.terminated_state(137, MOMENT, MOMENT, container_id="podman://old")
    waiting = podstatus.back_off_patch(pod, 1, last, 10, MOMENT)["status"]
    status = waiting["containerStatuses"][0]
    assert waiting["phase"] == "Running" and status["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert "back-off 10s" in status["state"]["waiting"]["message"] and status["restartCount"] == 1
    assert status["lastState"]["terminated"]["exitCode"] == 137
    running = podstatus.running_patch(pod, 7, MOMENT, container_id="podman://new", restarts=2,
                                      last_state=last)["status"]["containerStatuses"][0]
    assert (running["containerID"], running["restartCount"]) == ("podman://new", 2)
    assert running["lastState"] == {"waiting": None, "running": None, "terminated": last["terminated"]}
    logs = podstatus.logs_object(pod, "/p/container.2.log", "/p/container.1.log")["spec"]["logs"][0]
    assert (logs["logsFile"], logs["previousLogsFile"]) == ("/p/container.2.log", "/p/container.1.log")


def test_modes_pick_the_container_runtime_only_where_it_runs():
    pod, process_pod = container_pod(), container_pod()
    process_pod["metadata"]["annotations"][RUNTIME_ANNOTATION] = "process"
    without = Modes(ProcessMode({}), None)
    assert not without.runs(pod) and without.runs(process_pod)


def test_the_apiserver_address_and_the_runtime_id():
    class Api:
        class configuration:
            host = "https://127.0.0.1:29330"
    assert apiserver_address(Api) == ("127.0.0.1", 29330)
    assert runtime_id(Path("/a/runtime")) != runtime_id(Path("/b/runtime"))
    assert len(runtime_id(Path("/a/runtime"))) == 16


def test_the_cluster_default_for_containers_writes_the_container_annotation():
    policy = runtime_default.policy(CONTAINER_RUNTIME)
    expression = policy["spec"]["mutations"][0]["applyConfiguration"]["expression"]
    assert f'"{RUNTIME_ANNOTATION}": "container"' in expression
    assert policy["metadata"]["annotations"] == {RUNTIME_ANNOTATION: CONTAINER_RUNTIME}
    assert policy["metadata"]["name"] == runtime_default.policy()["metadata"]["name"]  # one default at a time
