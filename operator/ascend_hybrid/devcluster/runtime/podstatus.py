"""Pure bodies the process runtime writes, as a kubelet would: pod status patches (strategic merge, with the
pod's uid as a precondition so a re-created pod of the same name is never touched), events, the kwok `Logs`
object that lets `kubectl logs` read the process's output, and that output's CRI log lines."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from ascend_hybrid.devcluster.runtime.launch import runtime_container

EVENT_SOURCE = "sim-process-runtime"
LOGS_GROUP, LOGS_VERSION, LOGS_PLURAL = "kwok.x-k8s.io", "v1alpha1", "logs"
LOST_EXIT_CODE = 137  # what the kubelet reports for a container it can no longer find
MAX_TERMINATION_BYTES = 4096     # the kubelet reads at most this much of the termination message file
FALLBACK_LOG_BYTES, FALLBACK_LOG_LINES = 2048, 80  # FallbackToLogsOnError: the log's tail, the smaller of the two


def timestamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _conditions(moment: datetime, ready: bool, reason: str | None = None, message: str | None = None) -> list[dict]:
    def condition(kind: str, status: bool, with_reason: bool = True) -> dict:
        entry = {"type": kind, "status": "True" if status else "False", "lastTransitionTime": timestamp(moment)}
        if with_reason and reason:
            entry["reason"] = reason
        if with_reason and message:
            entry["message"] = message
        return entry
    return [condition("PodReadyToStartContainers", True, with_reason=False),
            condition("Initialized", True, with_reason=False),
            condition("Ready", ready), condition("ContainersReady", ready)]


def _container_status(pod: dict, state: dict, ready: bool, pid: int | None, container_id: str | None = None,
                      restarts: int = 0, last_state: dict | None = None) -> dict:
    """container_id: the runtime's ID of the container (default process://<pid>); restarts and last_state: the
    restartCount and lastState of a container the container runtime restarted."""
    container = runtime_container(pod)
    status = {"name": container["name"], "image": container.get("image", ""), "imageID": "", "ready": ready,
              "started": "running" in state, "restartCount": restarts,
              # The other states are nulled: a strategic merge would otherwise keep the old one beside the new.
              "state": {kind: state.get(kind) for kind in ("waiting", "running", "terminated")}}
    if last_state is not None:
        status["lastState"] = {kind: last_state.get(kind) for kind in ("waiting", "running", "terminated")}
    if container_id is None and pid is not None:
        container_id = f"process://{pid}"
    if container_id is not None:
        status["containerID"] = container_id
    return status


def _patch(pod: dict, status: dict) -> dict:
    return {"metadata": {"uid": pod["metadata"]["uid"]}, "status": status}


def running_patch(pod: dict, pid: int, moment: datetime, **container) -> dict:
    """The process started: Running and Ready (no probes), containerID process://<pid> (its process group).
    `container`: container_id, restarts, last_state (see _container_status)."""
    started = timestamp(moment)
    return _patch(pod, {
        "phase": "Running", "reason": None, "message": None,
        "startTime": (pod.get("status") or {}).get("startTime") or started,
        "conditions": _conditions(moment, ready=True),
        "containerStatuses": [_container_status(pod, {"running": {"startedAt": started}}, True, pid, **container)]})


def terminated_state(exit_code: int, started: datetime, finished: datetime, reason: str | None = None,
                     message: str | None = None, container_id: str | None = None) -> dict:
    """A container state `terminated`: Completed on exit code 0, else Error (unless `reason` says otherwise)."""
    terminated = {"exitCode": exit_code, "reason": reason or ("Completed" if exit_code == 0 else "Error"),
                  "startedAt": timestamp(started), "finishedAt": timestamp(finished)}
    if message:
        terminated["message"] = message
    if container_id:
        terminated["containerID"] = container_id
    return {"terminated": terminated}


def terminated_patch(pod: dict, pid: int | None, exit_code: int, started: datetime, finished: datetime,
                     reason: str | None = None, message: str | None = None, **container) -> dict:
    """Succeeded on exit code 0, else Failed, with the exit code where `kubectl get pod` and the operator read it."""
    succeeded = exit_code == 0
    state = terminated_state(exit_code, started, finished, reason, message, container.get("container_id"))
    pod_reason = "PodCompleted" if succeeded else "PodFailed"
    return _patch(pod, {
        "phase": "Succeeded" if succeeded else "Failed",
        "conditions": _conditions(finished, ready=False, reason=pod_reason),
        "containerStatuses": [_container_status(pod, state, False, pid, **container)]})


def back_off_patch(pod: dict, restarts: int, last_state: dict, delay: float, now: datetime) -> dict:
    """The container ended and restarts in `delay` seconds: still Running, not Ready, CrashLoopBackOff."""
    container = runtime_container(pod)["name"]
    message = (f"back-off {delay:g}s restarting failed container={container} pod={pod['metadata']['name']}_"
               f"{pod['metadata']['namespace']}({pod['metadata']['uid']})")
    return _patch(pod, {
        "phase": "Running",
        "conditions": _conditions(now, ready=False, reason="ContainersNotReady",
                                  message=f"containers with unready status: [{container}]"),
        "containerStatuses": [_container_status(pod, {"waiting": {"reason": "CrashLoopBackOff", "message": message}},
                                                False, None, restarts=restarts, last_state=last_state)]})


def log_text(cri: bytes) -> str:
    """The container's output out of CRI log records (`<time> <stream> F|P <text>`); P records continue."""
    out: list[str] = []
    for record in cri.split(b"\n"):
        parts = record.split(b" ", 3)
        if len(parts) < 3:
            continue
        text = parts[3] if len(parts) == 4 else b""
        out.append(text.decode(errors="replace") + ("\n" if parts[2] == b"F" else ""))
    return "".join(out)


def termination_message(written: bytes, log_tail: bytes, policy: str | None, exit_code: int) -> str | None:
    """What the kubelet puts in `terminated.message`: the termination message file (at most 4096 bytes), or, with
    terminationMessagePolicy FallbackToLogsOnError, an empty file and a failed container, the log's last 80 lines
    (at most 2048 bytes)."""
    text = written[:MAX_TERMINATION_BYTES].decode(errors="replace")
    if text.strip() or policy != "FallbackToLogsOnError" or exit_code == 0:
        return text or None
    lines = log_text(log_tail).splitlines()[-FALLBACK_LOG_LINES:]
    tail = "\n".join(lines).encode()[-FALLBACK_LOG_BYTES:].decode(errors="ignore")
    return tail or None


def lost_patch(pod: dict, now: datetime) -> dict:
    """Running in the API, but no process of this runtime: it stopped (and took its processes with it)."""
    started = ((pod.get("status") or {}).get("startTime"))
    started_at = datetime.fromisoformat(started) if started else now
    return terminated_patch(pod, None, LOST_EXIT_CODE, started_at, now, reason="ContainerStatusUnknown",
                            message="the process runtime restarted; the container's process is gone")


def stopped_patch(pod: dict, now: datetime) -> dict:
    """Deleted before its process started: Failed, as a kubelet reports a container it never ran."""
    return terminated_patch(pod, None, LOST_EXIT_CODE, now, now, reason="ContainerStatusUnknown",
                            message="the pod was deleted before its process started")


def waiting_patch(pod: dict, reason: str, message: str, now: datetime, **container) -> dict:
    """Still Pending (or, for a container about to restart, Running), and why: `kubectl get pod` shows the
    reason, `describe` the message. `container`: restarts, last_state (see _container_status)."""
    return _patch(pod, {
        "conditions": [{"type": "ContainersReady", "status": "False", "reason": reason, "message": message,
                        "lastTransitionTime": timestamp(now)}],
        "containerStatuses": [_container_status(pod, {"waiting": {"reason": reason, "message": message}}, False,
                                                None, **container)]})


def event(pod: dict, kind: str, reason: str, message: str, now: datetime) -> dict:
    meta = pod["metadata"]
    stamp = timestamp(now)
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "namespace": meta["namespace"],
                           "uid": meta["uid"], "fieldPath": f"spec.containers{{{runtime_container(pod)['name']}}}"},
        "type": kind, "reason": reason, "message": message, "count": 1,
        "firstTimestamp": stamp, "lastTimestamp": stamp,
        "source": {"component": EVENT_SOURCE, "host": (pod.get("spec") or {}).get("nodeName", "")},
        "reportingComponent": EVENT_SOURCE, "reportingInstance": (pod.get("spec") or {}).get("nodeName", ""),
    }


def logs_object(pod: dict, log_file: str, previous_log_file: str | None = None) -> dict:
    """kwok serves `kubectl logs` from this file (CRI format), and `kubectl logs --previous` from the one before a
    restart; owned by the pod, so it goes with it."""
    meta = pod["metadata"]
    owner = {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}
    logs = {"containers": [runtime_container(pod)["name"]], "logsFile": log_file, "follow": True}
    if previous_log_file:
        logs["previousLogsFile"] = previous_log_file
    return {
        "apiVersion": f"{LOGS_GROUP}/{LOGS_VERSION}", "kind": "Logs",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"], "ownerReferences": [owner]},
        "spec": {"logs": [logs]},
    }


def cri_timestamp(epoch_ns: int) -> str:
    seconds, nanos = divmod(epoch_ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{nanos:09d}Z"


def cri_log_line(epoch_ns: int, stream: str, chunk: bytes) -> bytes:
    """One CRI log record: `<RFC3339Nano> stdout|stderr F|P <text>`; P marks a chunk cut before its newline."""
    complete = chunk.endswith(b"\n")
    text = chunk[:-1] if complete else chunk
    return f"{cri_timestamp(epoch_ns)} {stream} {'F' if complete else 'P'} ".encode() + text + b"\n"
