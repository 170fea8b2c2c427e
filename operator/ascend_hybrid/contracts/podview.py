"""What the operator reads off observed Pods and Nodes, each accessor written once (pure).

Pods and Nodes are dicts as the API returns them. Pod phases (`Pending` … `Failed`, Kubernetes' own) are not job
phases (`conditions.JOB_PHASES`); the names below keep the two apart.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, cast

from ascend_hybrid.contracts import names
from ascend_hybrid.contracts.ascend import DEVICE_ANNOTATION, DEVICE_NAME_ANNOTATIONS, RESOURCE
from ascend_hybrid.contracts.conditions import parse_time
from ascend_hybrid.contracts.kueue import GROUP_TOTAL_COUNT_ANNOTATION

TERMINAL_POD_PHASES = frozenset({"Succeeded", "Failed"})


def labels_of(obj: Mapping) -> Mapping:
    metadata = obj.get("metadata")
    return (metadata.get("labels") if isinstance(metadata, Mapping) else None) or {}


def _label_number(pod: Mapping, label: str) -> int | None:
    value = labels_of(pod).get(label)
    return int(value) if value is not None and str(value).isdecimal() else None


def attempt_of(pod: Mapping) -> int:
    """The attempt a pod belongs to; 0 for a pod without a readable attempt label (it belongs to none)."""
    return _label_number(pod, names.ATTEMPT_LABEL) or 0


def pod_index(pod: Mapping) -> int | None:
    return _label_number(pod, names.POD_INDEX_LABEL)


def phase_of(pod: Mapping) -> str:
    return (pod.get("status") or {}).get("phase") or "Pending"


def is_finished(pod: Mapping) -> bool:
    return phase_of(pod) in TERMINAL_POD_PHASES


def exit_code(pod: Mapping) -> int | None:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated")
        if terminated is not None:
            return cast("int | None", terminated.get("exitCode"))  # the API's int32
    return None


def container_env(pod: Mapping, name: str) -> str | None:
    """The literal value of env `name` in the first container that sets it (None for valueFrom or absent)."""
    for container in (pod.get("spec") or {}).get("containers") or ():
        for entry in container.get("env") or ():
            if entry.get("name") == name and "value" in entry:
                return cast(str, entry["value"])  # EnvVar.value is a string
    return None


def is_gated(pod: Mapping) -> bool:
    return any(gate.get("name") == names.GANG_GATE for gate in (pod.get("spec") or {}).get("schedulingGates") or [])


def is_deleting(pod: Mapping) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def node_of(pod: Mapping) -> str | None:
    return (pod.get("spec") or {}).get("nodeName")


def unschedulable_message(pod: Mapping) -> str | None:
    """The scheduler's word on an unbound pod it could not place (PodScheduled=False, reason Unschedulable): for a
    pod pinned to its placed node, that node refused it (another pod took the chips there). None otherwise."""
    for entry in (pod.get("status") or {}).get("conditions") or ():
        if entry.get("type") == "PodScheduled" and entry.get("status") == "False" \
                and entry.get("reason") == "Unschedulable":
            return str(entry.get("message") or "Unschedulable")
    return None


# The kubelet's admission refusals (pkg/kubelet kubelet.go rejectPod): the pod is set Failed before any container
# starts, its reason the admit handler's ("OutOf<resource>" from the resource fit, "UnexpectedAdmissionError" when
# the device manager cannot allocate, "NodeAffinity", "Taint", ...) and its message prefixed so.
ADMISSION_REJECTED_PREFIX = "Pod was rejected"
ADMISSION_REASONS_PREFIXED = ("OutOf",)
ADMISSION_REASONS = frozenset({"UnexpectedAdmissionError", "NodeAffinity", "NodeName", "NodePorts", "Taint",
                               "InvalidNodeInfo"})


def admission_refusal(pod: Mapping) -> str | None:
    """The kubelet's word on a bound pod it refused to admit (phase Failed, no container started): "reason:
    message". None for any other pod, a training failure included."""
    status = pod.get("status") or {}
    if status.get("phase") != "Failed" or any(
            {"running", "terminated"} & set(entry.get("state") or ()) for entry in status.get("containerStatuses") or ()):
        return None
    reason, message = str(status.get("reason") or ""), str(status.get("message") or "")
    if message.startswith(ADMISSION_REJECTED_PREFIX) or reason in ADMISSION_REASONS \
            or reason.startswith(ADMISSION_REASONS_PREFIXED):
        return f"{reason or 'Rejected'}: {message}" if message else reason
    return None


def ready_for_table(pod: Mapping) -> bool:
    """Whether the pod shows what its entry of the rank table needs: Running, its addresses and the device plugin's
    annotation (read, not parsed: ranktable.assess judges it; this only tells a pass worth making from one that can
    only wait)."""
    status = pod.get("status") or {}
    return (status.get("phase") == "Running" and bool(status.get("podIP")) and bool(status.get("hostIP"))
            and DEVICE_ANNOTATION in ((pod.get("metadata") or {}).get("annotations") or {}))


def only_progress(old: Mapping | None, new: Mapping | None) -> bool:
    """Whether a pod's change only moves it on towards running: created, bound, started. Not a deletion, a
    finish, a refusal by the scheduler or the kubelet, or a pod going away."""
    if new is None or is_deleting(new) or phase_of(new) not in ("Pending", "Running"):
        return False
    if old is not None and (is_deleting(old) or phase_of(old) not in ("Pending", "Running")):
        return False
    return unschedulable_message(new) is None


def live_names(pods: Iterable[Mapping]) -> tuple[str, ...]:
    return tuple(pod["metadata"]["name"] for pod in pods if not is_deleting(pod))


def pod_counts(pods: list[dict], total: int) -> dict:
    phases = [phase_of(pod) for pod in pods]
    return {"total": total, "pending": total - sum(p in ("Running", *TERMINAL_POD_PHASES) for p in phases),
            "running": phases.count("Running"), "succeeded": phases.count("Succeeded"), "failed": phases.count("Failed")}


# -- NPU requests ------------------------------------------------------------------------------------------------
def quantity(value: object) -> int:
    """Extended resources are whole numbers; anything unreadable counts as none rather than crashing."""
    try:
        return int(str(value).strip())
    except ValueError:
        try:
            return int(float(str(value).strip()))
        except (ValueError, OverflowError):  # NaN, or 1e999 read as infinity
            return 0


def npu_request(pod: Mapping) -> int:
    """Chips a pod asks for: requests (or limits, which requests default to), init containers included."""
    return spec_npu_request(pod.get("spec") or {})


def spec_npu_request(spec: Mapping) -> int:
    def of(container: Mapping) -> int:
        resources = container.get("resources") or {}
        for kind in ("requests", "limits"):
            value = (resources.get(kind) or {}).get(RESOURCE)
            if value is not None:
                return quantity(value)
        return 0

    app = sum(of(c) for c in spec.get("containers") or ())
    init = max((of(c) for c in spec.get("initContainers") or ()), default=0)
    return max(app, init)


def holds_npus(spec: Mapping) -> bool:
    """Whether a pod (by its spec) takes NPUs: the one predicate of the indexes, the lists and the inventory."""
    return spec_npu_request(spec) > 0


# -- Nodes -------------------------------------------------------------------------------------------------------
def ready_condition(node: Mapping | None) -> Mapping | None:
    for condition in ((node or {}).get("status") or {}).get("conditions") or ():
        if condition.get("type") == "Ready":
            return cast(Mapping, condition)
    return None


def is_node_ready(node: Mapping | None) -> bool:
    condition = ready_condition(node)
    return condition is not None and condition.get("status") == "True"


def node_not_ready_since(node: Mapping | None) -> datetime | None:
    if node is None:
        return None
    condition = ready_condition(node)
    if condition is not None and condition.get("status") != "True":
        return parse_time(condition.get("lastTransitionTime"))
    return None


# -- the projection the watch keeps -------------------------------------------------------------------------------
# What any reader above (and ascend, inventory, ranktable, failures, kueue, reconcile, telemetry) takes off a pod;
# the rest of a pod (managedFields, images, volumes, most of its env, probes, …) is most of its bytes and nobody
# here reads it. A new reader of a pod field adds the field here: tests/unit/core/test_podview.py checks that every
# accessor answers the same on a pod and on its projection.
PROJECTED_METADATA = ("name", "namespace", "uid", "creationTimestamp", "deletionTimestamp", "labels")
# the pod group's size: an elastic queued job whose group was made for another size queues anew (queue_steps)
PROJECTED_ANNOTATIONS = (DEVICE_ANNOTATION, *DEVICE_NAME_ANNOTATIONS, GROUP_TOTAL_COUNT_ANNOTATION)
PROJECTED_SPEC = ("nodeName", "schedulingGates", "nodeSelector", "tolerations")
PROJECTED_ENV = frozenset({names.SCHED_HOST_ENV})
PROJECTED_STATUS = ("phase", "podIP", "hostIP", "reason", "message", "startTime")
PROJECTED_CONDITION = ("type", "status", "reason", "message")
PROJECTED_CONTAINER_STATUS = ("name", "restartCount")
PROJECTED_TERMINATED = ("exitCode", "reason", "message", "finishedAt")
INTERNED_LENGTH = 64


def _some(source: Mapping, keys: Iterable[str]) -> dict:
    return {key: source[key] for key in keys if source.get(key) is not None}


def _container(container: Mapping) -> dict:
    resources = container.get("resources") or {}
    kept: dict = {"name": container.get("name")}
    npus = {kind: {RESOURCE: resources[kind][RESOURCE]} for kind in ("requests", "limits")
            if RESOURCE in (resources.get(kind) or {})}
    if npus:
        kept["resources"] = npus
    env = [entry for entry in container.get("env") or () if entry.get("name") in PROJECTED_ENV and "value" in entry]
    if env:
        kept["env"] = env
    return kept


def _container_status(entry: Mapping) -> dict:
    kept = _some(entry, PROJECTED_CONTAINER_STATUS)
    state = entry.get("state")
    if isinstance(state, Mapping):  # which state, and of a terminated one what failures.py reads
        kept["state"] = {kind: _some(detail or {}, PROJECTED_TERMINATED) if kind == "terminated" else {}
                         for kind, detail in state.items()}
    return kept


def project_pod(pod: Mapping) -> dict:
    """The part of a pod the operator reads, shaped as the pod itself (every accessor works on either)."""
    metadata, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    kept_metadata = _some(metadata, PROJECTED_METADATA)
    annotations = _some(metadata.get("annotations") or {}, PROJECTED_ANNOTATIONS)
    if annotations:
        kept_metadata["annotations"] = annotations
    kept_spec = _some(spec, PROJECTED_SPEC)
    if "affinity" in spec:  # only the node affinity is read; an affinity without one still tells kueue's patch
        node_affinity = (spec.get("affinity") or {}).get("nodeAffinity")
        kept_spec["affinity"] = {} if node_affinity is None else {"nodeAffinity": node_affinity}
    for kind in ("containers", "initContainers"):
        if spec.get(kind):
            kept_spec[kind] = [_container(container) for container in spec[kind]]
    kept_status = _some(status, PROJECTED_STATUS)
    if status.get("conditions"):
        kept_status["conditions"] = [_some(condition, PROJECTED_CONDITION) for condition in status["conditions"]]
    if status.get("containerStatuses"):
        kept_status["containerStatuses"] = [_container_status(entry) for entry in status["containerStatuses"]]
    return cast(dict, _shared({"metadata": kept_metadata, "spec": kept_spec, "status": kept_status}))


def _shared(value: Any) -> Any:
    """The same value with its keys and short strings interned: 20 000 watched pods repeat "Running", "True",
    label keys and condition types; each parse would otherwise keep its own copies (about a third of a pod)."""
    if isinstance(value, dict):
        return {sys.intern(key): _shared(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_shared(item) for item in value]
    if isinstance(value, str) and len(value) <= INTERNED_LENGTH:
        return sys.intern(value)
    return value
