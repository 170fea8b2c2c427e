"""The process runtime's pure "kubelet": a pod's container as a command, env and files (podfiles), and the
status patches, events and CRI log records it writes (podstatus)."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ascend_hybrid.contracts import names
from ascend_hybrid.devcluster.runtime import podstatus
from ascend_hybrid.devcluster.runtime.launch import (
    TRAINER_IMAGE,
    NotRunnable,
    PodLayout,
    command_line,
    configmap_files,
    downward_value,
    expand_references,
    grace_seconds,
    is_process_pod,
    launch_spec,
    map_path,
    runtime_container,
)
from ascend_hybrid.gang import render
from ascend_hybrid.spec.rules import parse
from support.builders import PodBuilder, job_body

ROOT = Path("/sim/runtime")
BASE_ENV = {"PATH": "/venv/bin:/usr/bin", "LANG": "C.UTF-8"}
MOMENT = datetime(2026, 11, 29, 17, 0, 0, tzinfo=UTC)


def operator_pod(job_body, checkpoint: bool = True) -> dict:
    """Pod 1 of a DP 2 job as the operator renders it, bound, with its IP, as the API would return it."""
    training = {"steps": 20, "checkpoint": {"claimName": "ckpt", "everySteps": 5}} if checkpoint else {"steps": 20}
    body = job_body({"parallelism": {"data": 2}, "npu": {"perPod": 1}, "training": training,
                     "template": {"metadata": {"annotations": {"sim.hybrid.ascend.dev/runtime": "process"}}}},
                    name="real", uid="job-uid")
    pod = render.pod(parse(body), "ns", "job-uid", attempt=1, index=1, node="node-001", sched_ip="127.32.0.9")
    return (PodBuilder.of(pod, index=1).uid("pod-uid").node("node-001")
            .status(phase="Pending", podIP="127.16.0.7", podIPs=[{"ip": "127.16.0.7"}], hostIP="127.15.0.1").build())


def configmaps_of_job(table_status: str = "completed") -> dict:
    return {("ns", names.rank_table_config_map("real")): {"data": {"hccl.json": f'{{"status":"{table_status}"}}',
                                                                   "version": "1.0", "job.json": '{"name":"real"}'}}}


def test_an_operator_pod_becomes_the_trainer_entrypoint_with_its_env_and_local_paths():
    pod = operator_pod(job_body)
    layout = PodLayout.of(ROOT, pod)
    spec = launch_spec(pod, configmaps_of_job(), layout, BASE_ENV)
    assert is_process_pod(pod)
    assert spec.argv == ("ascend-hybrid-trainer", "launch")  # the image's ENTRYPOINT + CMD
    env = spec.env
    assert (env["POD_NAME"], env["POD_NAMESPACE"], env["POD_IP"]) == ("real-a1-1", "ns", "127.16.0.7")
    assert env["MS_SCHED_HOST"] == "127.32.0.9" and env["MS_NODE_RANK"] == "1" and env["RANK_START"] == "1"
    rank_table = layout.volume_dir("ascend-ranktable") / "hccl.json"
    assert env["RANK_TABLE_FILE"] == str(rank_table)
    assert env["AHJ_JOB_CONFIG"] == str(layout.volume_dir("ascend-job-config") / "job.json")
    assert env["AHJ_CHECKPOINT_DIR"] == str(ROOT / "claims" / "ns" / "ckpt")
    assert env["AHJ_TERMINATION_LOG"] == str(layout.termination_file)  # the container's terminationMessagePath
    assert spec.files[layout.termination_file] == b""  # exists, empty, before the process starts
    assert env["PATH"] == BASE_ENV["PATH"] and env["PYTHONUNBUFFERED"] == "1"
    assert env["HOME"] == str(layout.home_dir) and env["HOSTNAME"] == "real-a1-1"
    assert spec.files[rank_table] == b'{"status":"completed"}'
    job_config = layout.volume_dir("ascend-job-config")
    assert spec.files[job_config / "job.json"] == b'{"name":"real"}'
    assert not [path for path in spec.files if path.parent == job_config and path.name != "job.json"], \
        "the job's config directory holds job.json alone (its ConfigMap's other keys are the rank table's)"
    assert ROOT / "claims" / "ns" / "ckpt" in spec.directories and spec.cwd == layout.work_dir
    assert spec.grace_seconds == 30.0


def test_the_pod_directory_is_per_uid_and_the_claim_directory_outlives_it():
    pod = operator_pod(job_body)
    layout = PodLayout.of(ROOT, pod)
    assert layout.directory == ROOT / "pods" / "ns_real-a1-1_pod-uid"
    assert layout.log_file.parent == layout.directory
    assert ROOT / "pods" not in layout.claim_dir("ckpt").parents


def test_a_missing_configmap_is_a_failed_mount_and_an_optional_one_is_skipped():
    pod = operator_pod(job_body)
    with pytest.raises(NotRunnable) as refused:
        launch_spec(pod, {}, PodLayout.of(ROOT, pod), BASE_ENV)
    assert refused.value.reason == "FailedMount" and "rings-config-real" in refused.value.message
    for volume in pod["spec"]["volumes"]:
        if "configMap" in volume:
            volume["configMap"]["optional"] = True
    layout = PodLayout.of(ROOT, pod)
    assert launch_spec(pod, {}, layout, BASE_ENV).files == {layout.termination_file: b""}  # only the empty message


def test_configmap_items_binary_data_and_unsafe_paths():
    items = [{"key": "b", "path": "sub/b.bin"}]
    pod = {"metadata": {"namespace": "ns", "name": "p", "uid": "u"},
           "spec": {"volumes": [{"name": "v", "configMap": {"name": "cm", "items": items}}]}}
    layout = PodLayout.of(ROOT, pod)
    configmaps = {("ns", "cm"): {"data": {"a": "x"}, "binaryData": {"b": base64.b64encode(b"\x00\x01").decode()}}}
    assert configmap_files(pod, configmaps, layout) == {layout.volume_dir("v") / "sub" / "b.bin": b"\x00\x01"}
    pod["spec"]["volumes"][0]["configMap"]["items"] = [{"key": "a", "path": "../escape"}]
    with pytest.raises(NotRunnable, match="must be relative"):
        configmap_files(pod, configmaps, layout)


def test_command_and_args_follow_kubernetes_rules_over_the_image():
    env = {"WHO": "world"}
    assert command_line({}, env) == TRAINER_IMAGE.entrypoint + TRAINER_IMAGE.cmd
    assert command_line({"args": ["local", "--data", "2"]}, env) == ("ascend-hybrid-trainer", "local", "--data", "2")
    assert command_line({"command": ["echo"]}, env) == ("echo",)  # a command drops the image's CMD
    assert command_line({"command": ["echo"], "args": ["hello $(WHO)", "$$(WHO)"]}, env) == (
        "echo", "hello world", "$(WHO)")


@pytest.mark.parametrize("text, expected", [
    ("$(A)-$(B)", "1-$(B)"),          # undefined names stay as written
    ("$$(A)", "$(A)"),                # $$ escapes
    ("$(A", "$(A"), ("a$", "a$"), ("$$$(A)", "$1"),
    ("$(A)$(A)", "11"),
])
def test_expand_references(text, expected):
    assert expand_references(text, {"A": "1"}) == expected


@given(st.text(alphabet=st.characters(blacklist_characters="$"), max_size=30))
def test_text_without_dollars_is_left_alone(text):
    assert expand_references(text, {"A": "1"}) == text


def test_env_resolves_in_order_with_downward_api_and_configmap_references():
    pod = {"metadata": {"namespace": "ns", "name": "p", "uid": "u", "labels": {"app": "x"},
                        "annotations": {"hybrid/a": "y"}},
           "spec": {"nodeName": "node-003", "containers": [{"name": "ascend", "envFrom": [
               {"configMapRef": {"name": "shared"}, "prefix": "S_"}], "env": [
               {"name": "FIRST", "value": "one"},
               {"name": "SECOND", "value": "$(FIRST)-two-$(LATER)"},
               {"name": "LATER", "value": "late"},
               {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
               {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
               {"name": "NOTE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['hybrid/a']"}}},
               {"name": "KEY", "valueFrom": {"configMapKeyRef": {"name": "shared", "key": "k"}}},
               {"name": "GONE", "valueFrom": {"configMapKeyRef": {"name": "none", "key": "k", "optional": True}}}]}]},
           "status": {"podIP": "127.16.0.3"}}
    spec = launch_spec(pod, {("ns", "shared"): {"data": {"k": "v"}}}, PodLayout.of(ROOT, pod), BASE_ENV)
    env = spec.env
    assert env["SECOND"] == "one-two-$(LATER)"  # only names defined before it expand
    assert (env["NODE"], env["APP"], env["NOTE"], env["KEY"], env["S_k"]) == ("node-003", "x", "y", "v", "v")
    assert "GONE" not in env


def test_what_the_runtime_cannot_honour_is_refused_with_the_kubelets_reason():
    pod = {"metadata": {"namespace": "ns", "name": "p", "uid": "u"},
           "spec": {"containers": [{"name": "ascend", "env": [
               {"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}]}}
    with pytest.raises(NotRunnable) as refused:
        launch_spec(pod, {}, PodLayout.of(ROOT, pod), BASE_ENV)
    assert refused.value.reason == "CreateContainerConfigError" and "secretKeyRef" in refused.value.message
    with pytest.raises(NotRunnable, match="one container per pod"):
        runtime_container({"spec": {"containers": [{"name": "a"}, {"name": "b"}]}})
    assert runtime_container({"spec": {"containers": [{"name": "solo"}]}})["name"] == "solo"
    with pytest.raises(NotRunnable, match="not supported"):
        downward_value(pod, "status.phase")


def test_mount_paths_map_whole_values_and_subpaths_only():
    mounts = [("/etc/ascend-hybrid", Path("/l/job")), ("/data", Path("/l/data"))]
    assert map_path("/etc/ascend-hybrid/job.json", mounts) == "/l/job/job.json"
    assert map_path("/etc/ascend-hybrid", mounts) == "/l/job"
    assert map_path("/etc/ascend-hybrid-other", mounts) == "/etc/ascend-hybrid-other"
    assert map_path("launch", mounts) == "launch"


def test_the_deletion_grace_period_wins_over_the_spec():
    assert grace_seconds({"metadata": {}, "spec": {}}) == 30.0
    assert grace_seconds({"metadata": {}, "spec": {"terminationGracePeriodSeconds": 5}}) == 5.0
    assert grace_seconds({"metadata": {"deletionGracePeriodSeconds": 0},
                          "spec": {"terminationGracePeriodSeconds": 5}}) == 0.0


# podstatus ---------------------------------------------------------------------------------------------------

def small_pod() -> dict:
    return PodBuilder.named("p", namespace="ns").uid("u").node("node-001").container(image="trainer:1").build()


def test_running_then_terminated_patches_carry_the_uid_the_pid_and_the_exit_code():
    pod = small_pod()
    running = podstatus.running_patch(pod, 4242, MOMENT)
    assert running["metadata"] == {"uid": "u"}
    status = running["status"]
    assert status["phase"] == "Running" and status["startTime"] == "2026-11-29T17:00:00Z"
    container = status["containerStatuses"][0]
    assert container["containerID"] == "process://4242" and container["ready"] and container["started"]
    assert container["state"] == {"waiting": None, "running": {"startedAt": "2026-11-29T17:00:00Z"},
                                  "terminated": None}
    assert {c["type"]: c["status"] for c in status["conditions"]}["Ready"] == "True"

    failed = podstatus.terminated_patch(pod, 4242, 137, MOMENT, MOMENT)["status"]
    assert failed["phase"] == "Failed"
    assert failed["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 137
    assert failed["containerStatuses"][0]["state"]["terminated"]["reason"] == "Error"
    done = podstatus.terminated_patch(pod, 4242, 0, MOMENT, MOMENT)["status"]
    assert done["phase"] == "Succeeded" and done["containerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"


def test_a_lost_process_is_reported_as_the_kubelet_does():
    pod = small_pod()
    pod["status"] = {"phase": "Running", "startTime": "2026-11-29T16:00:00Z"}
    terminated = podstatus.lost_patch(pod, MOMENT)["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (137, "ContainerStatusUnknown")
    assert terminated["startedAt"] == "2026-11-29T16:00:00Z"


def test_waiting_patch_event_and_logs_object():
    pod = small_pod()
    waiting = podstatus.waiting_patch(pod, "ProcessRuntimeFull", "needs 9", MOMENT)["status"]
    assert "phase" not in waiting
    assert waiting["containerStatuses"][0]["state"]["waiting"] == {"reason": "ProcessRuntimeFull", "message": "needs 9"}
    event = podstatus.event(pod, "Warning", "ProcessRuntimeFull", "needs 9", MOMENT)
    assert event["involvedObject"]["uid"] == "u" and event["source"]["host"] == "node-001"
    logs = podstatus.logs_object(pod, "/x/container.log")
    assert logs["metadata"]["name"] == "p" and logs["metadata"]["ownerReferences"][0]["uid"] == "u"
    assert logs["spec"]["logs"] == [{"containers": ["ascend"], "logsFile": "/x/container.log", "follow": True}]


def test_cri_log_records():
    epoch_ns = int(MOMENT.timestamp()) * 1_000_000_000 + 1234
    assert podstatus.cri_log_line(epoch_ns, "stdout", b'{"step": 1}\n') == (
        b'2026-11-29T17:00:00.000001234Z stdout F {"step": 1}\n')
    assert podstatus.cri_log_line(epoch_ns, "stderr", b"cut") == b"2026-11-29T17:00:00.000001234Z stderr P cut\n"


def records(*lines: tuple[str, bytes]) -> bytes:
    return b"".join(podstatus.cri_log_line(int(MOMENT.timestamp()) * 10**9, stream, chunk) for stream, chunk in lines)


def test_the_termination_message_is_the_file_else_the_logs_tail_for_a_failed_container():
    report = b'{"cause": "ConfigError", "rank": 0, "step": null, "detail": "training.steps=0"}\n'
    log = records(("stdout", b'{"step": 1, "loss": 6.2}\n'), ("stderr", b"Traceback (most recent call last):\n"),
                  ("stderr", b"ModuleNotFoundError: No module named "), ("stderr", b"'mindspore'\n"))
    policy = "FallbackToLogsOnError"
    assert podstatus.termination_message(report, log, policy, 2) == report.decode()
    assert podstatus.termination_message(b"", log, policy, 3) == (
        '{"step": 1, "loss": 6.2}\nTraceback (most recent call last):\nModuleNotFoundError: No module named '
        "'mindspore'")
    assert podstatus.termination_message(b"", log, policy, 0) is None  # a success never falls back
    assert podstatus.termination_message(b"", log, "File", 3) is None
    assert len(podstatus.termination_message(b"x" * 9000, b"", policy, 1)) == 4096


def test_the_fallback_keeps_the_last_80_lines_and_at_most_2048_bytes():
    many = records(*[("stdout", f"line {i}\n".encode()) for i in range(200)])
    tail = podstatus.termination_message(b"", many, "FallbackToLogsOnError", 1).splitlines()
    assert len(tail) == 80 and tail[0] == "line 120" and tail[-1] == "line 199"
    wide = records(*[("stdout", b"y" * 100 + b"\n") for _ in range(60)])
    assert len(podstatus.termination_message(b"", wide, "FallbackToLogsOnError", 1).encode()) <= 2048


def test_the_message_reaches_the_terminated_state():
    patch = podstatus.terminated_patch(small_pod(), 7, 3, MOMENT, MOMENT, message="ModuleNotFoundError")["status"]
    assert patch["containerStatuses"][0]["state"]["terminated"]["message"] == "ModuleNotFoundError"
