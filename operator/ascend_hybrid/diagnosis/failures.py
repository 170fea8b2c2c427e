"""Why an attempt broke, from what the operator observes (pure): the first failure of the gang, classified.

A cause comes from, in this order of trust:
  1. a fault the operator sees itself: the node of a pod NotReady (`NodeNotReady`), a chip a pod holds listed
     unusable by the Ascend device plugin's deviceinfo (`ChipUnhealthy`);
  2. the termination message of the first failed container (earliest `finishedAt`, ties by pod index): the
     trainer writes one JSON line `{"cause", "rank", "step", "detail"}` to /dev/termination-log; with
     `terminationMessagePolicy: FallbackToLogsOnError` a container that wrote none leaves its log's tail there;
  3. the container's reason (`OOMKilled`: the kernel killed it for host memory) or its exit code alone (`Unknown`);
  4. a pod of the running gang that disappeared (`PodDeleted`).
`PeerFailed` is an echo (a rank that ended because another died first): a real cause of another pod wins over
it, and while only echoes are in and other pods still run, the decision waits `PEER_GRACE_SECONDS` for the real one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TypedDict

from ascend_hybrid.contracts import untrusted
from ascend_hybrid.contracts.ascend import DeviceInfo, pod_chip_ids
from ascend_hybrid.contracts.conditions import parse_time, timestamp
from ascend_hybrid.contracts.names import CONTAINER_NAME
from ascend_hybrid.contracts.podview import (
    node_not_ready_since,
    node_of,
    phase_of,
    pod_index,
    ready_condition,
)
from ascend_hybrid.spec.api import FailureStatus
from ascend_hybrid.spec.causes import ECHO_CAUSE, FAULT_CAUSES

PEER_GRACE_SECONDS = 10.0
MAX_DETAIL = 1024
MAX_REPORTED = 2 ** 53  # ranks, steps and exit codes a termination record may state (JSON's exact integers)
_CAUSE_NAME = re.compile(r"^[A-Z][A-Za-z0-9]{0,62}$")


@dataclass(frozen=True)
class Failure:
    """The first failure of an attempt: what status.lastFailure, the condition, the event and the policy use."""

    cause: str
    detail: str
    pod: str | None = None
    index: int | None = None
    node: str | None = None
    exit_code: int | None = None
    reason: str | None = None              # the container's terminated reason (Error, OOMKilled, …)
    rank: int | None = None
    step: int | None = None
    time: datetime | None = None           # when it ended (finishedAt), or when the operator saw the fault
    conditions: frozenset[str] = frozenset()  # pod condition types that are True on that pod
    chips: tuple[int, ...] = ()            # ChipUnhealthy: the unusable chips the pod holds

    @property
    def fault(self) -> bool:
        return self.cause in FAULT_CAUSES

    @property
    def host_oom(self) -> bool:
        return self.reason == "OOMKilled"


@dataclass(frozen=True)
class Wait:
    """Nothing to decide yet: look again after `seconds` (a node within its grace, an echo without its cause).
    `hold`: the attempt is broken already, so nothing else is to be done with it meanwhile."""

    seconds: float
    hold: bool = False


# -- one container ----------------------------------------------------------------------------------------------
def terminated_state(pod: Mapping) -> Mapping | None:
    """The terminated state of the trainer container (`ascend`, else the first that ended)."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    ordered = sorted(statuses, key=lambda s: s.get("name") != CONTAINER_NAME)
    for status in ordered:
        terminated: Mapping | None = (status.get("state") or {}).get("terminated")
        if terminated is not None:
            return terminated
    return None


def _integer(value: object) -> int | None:
    """An int within what the status can hold (a rank or step past int64 would make every status write fail)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and abs(value) <= MAX_REPORTED else None


def parse_termination_message(message: str | None) -> dict | None:
    """The trainer's report: the last line of the message that is a JSON object with a string `cause`.
    None when there is none (the message is then the log's tail, or empty)."""
    for line in reversed((message or "").splitlines()):
        line = line.strip()
        if not line.startswith("{"):
            continue
        if untrusted.depth(line) > untrusted.MAX_DEPTH:
            continue
        try:  # not json_value: a rank past int64 leaves the cause readable, read as no rank below
            report = json.loads(line)
        except ValueError:
            continue
        if isinstance(report, dict) and isinstance(report.get("cause"), str):
            cause = report["cause"] if _CAUSE_NAME.match(report["cause"]) else "Unknown"
            detail = report.get("detail")
            return {"cause": cause, "rank": _integer(report.get("rank")), "step": _integer(report.get("step")),
                    "detail": (detail if isinstance(detail, str) else "")[:MAX_DETAIL]}
    return None


def _last_line(text: str | None) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1][:MAX_DETAIL] if lines else ""


def true_conditions(pod: Mapping) -> frozenset[str]:
    return frozenset(c.get("type") for c in (pod.get("status") or {}).get("conditions") or ()
                     if c.get("status") == "True" and c.get("type"))


class _PodFields(TypedDict):
    """The fields of a Failed pod's Failure that do not depend on how it is classified."""

    pod: str | None
    index: int | None
    node: str | None
    exit_code: int | None
    reason: str | None
    time: datetime | None
    conditions: frozenset[str]


def classify_failed_pod(pod: Mapping, node: str | None) -> Failure:
    """The Failure of one Failed pod, from its termination message, reason and exit code."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    terminated = terminated_state(pod) or {}
    code = _integer(terminated.get("exitCode"))
    reason = terminated.get("reason") or status.get("reason")
    report = parse_termination_message(terminated.get("message"))
    common: _PodFields = {"pod": meta.get("name"), "index": pod_index(pod), "node": node, "exit_code": code,
                          "reason": reason, "time": parse_time(terminated.get("finishedAt")),
                          "conditions": true_conditions(pod)}
    if report is not None:
        return Failure(report["cause"], report["detail"] or f"exit code {code}", rank=report["rank"],
                       step=report["step"], **common)
    if reason == "OOMKilled":
        return Failure("DeviceOutOfMemory", f"the kernel killed the container for host memory (OOMKilled, exit "
                                            f"code {code})", **common)
    said = _last_line(terminated.get("message")) or _last_line(status.get("message"))
    return Failure("Unknown", said or f"exit code {code} ({reason or 'no reason given'})", **common)


# -- the attempt ------------------------------------------------------------------------------------------------
def _finish_order(failure: Failure) -> tuple:
    return (failure.time is None, failure.time or datetime.max, failure.index if failure.index is not None else 1 << 30)


def first_failed(failed: list[Failure], still_running: bool, now: datetime) -> Failure | Wait:
    """The earliest real cause among the failed pods; echoes only when nothing else can come."""
    ordered = sorted(failed, key=_finish_order)
    real = [failure for failure in ordered if failure.cause != ECHO_CAUSE]
    if real:
        return real[0]
    first = ordered[0]
    waited = (now - first.time).total_seconds() if first.time else PEER_GRACE_SECONDS
    if still_running and waited < PEER_GRACE_SECONDS:
        return Wait(PEER_GRACE_SECONDS - waited, hold=True)
    return first


def _not_ready_detail(node: Mapping | None, name: str, waited: float) -> str:
    condition = ready_condition(node) or {}
    said = condition.get("message") or condition.get("reason") or "no Ready condition"
    return f"node {name} NotReady for {waited:.0f}s ({said})"


def node_fault(pods: dict[int, Mapping], nodes: Mapping[str, Mapping], now: datetime, grace: float,
               any_failed: bool) -> Failure | Wait | None:
    """A pod's node NotReady: past the grace period, or at once when a pod of the gang has failed already (its
    failure is then most likely the echo of the lost node)."""
    shortest: float | None = None
    for index in sorted(pods):
        pod = pods[index]
        name = node_of(pod)
        if not name or phase_of(pod) == "Succeeded":
            continue
        since = node_not_ready_since(nodes.get(name))
        if since is None:
            continue
        waited = (now - since).total_seconds()
        if waited >= grace or any_failed:
            return Failure("NodeNotReady", _not_ready_detail(nodes.get(name), name, waited),
                           pod=(pod.get("metadata") or {}).get("name"), index=index, node=name, time=now,
                           conditions=true_conditions(pod))
        left = grace - waited
        shortest = left if shortest is None else min(shortest, left)
    return Wait(shortest) if shortest is not None else None


def chip_fault(pods: dict[int, Mapping], device_infos: Mapping[str, DeviceInfo], now: datetime) -> Failure | None:
    """A chip a live pod holds is listed unusable (Unhealthy, NetworkUnhealthy, Recovering, separated by hand)."""
    for index in sorted(pods):
        pod = pods[index]
        name = node_of(pod)
        info = device_infos.get(name) if name else None
        held = pod_chip_ids(pod) if info is not None and phase_of(pod) in ("Pending", "Running") else None
        # `held` is only set when `info` is: the second test changes nothing, it tells the checker so
        broken = sorted(held & info.unusable) if held and info is not None else []
        if broken:
            listed = ", ".join(map(str, broken))
            return Failure("ChipUnhealthy", f"chip {listed} of node {name}, held by this pod, is listed unusable by "
                                            f"the Ascend device plugin", pod=(pod.get("metadata") or {}).get("name"),
                           index=index, node=name, time=now, conditions=true_conditions(pod), chips=tuple(broken))
    return None


def find_failure(pods: dict[int, Mapping], placed: list[str], nodes: Mapping[str, Mapping],
                 device_infos: Mapping[str, DeviceInfo], now: datetime, grace: float,
                 lost: list[tuple[int, str]]) -> Failure | Wait | None:
    """The failure that ends this attempt (pods by index; `lost`: (index, name) of pods that disappeared while the
    gang ran), a Wait, or None when the attempt is healthy."""
    failed = [classify_failed_pod(pod, node_of(pod) or (placed[i] if i < len(placed) else None) or None)
              for i, pod in sorted(pods.items()) if phase_of(pod) == "Failed"]
    fault = node_fault(pods, nodes, now, grace, bool(failed))
    if isinstance(fault, Failure):
        return fault
    chips = chip_fault(pods, device_infos, now)
    if chips is not None:
        return chips
    if failed:
        still_running = any(phase_of(pod) == "Running" for pod in pods.values())
        return first_failed(failed, still_running, now)
    if lost:
        index, name = lost[0]
        return Failure("PodDeleted", f"pod {name} (index {index}) disappeared while the gang ran", pod=name,
                       index=index, node=(placed[index] if index < len(placed) else None) or None, time=now)
    return fault  # a Wait for a node within its grace, or None


def summary(failure: Failure) -> str:
    """One line: which pod, where, how it ended, and what it said."""
    if failure.cause in FAULT_CAUSES or failure.cause in ("PodDeleted", "SchedServiceChanged"):
        return f"{failure.cause}: {failure.detail}" + (f" (pod {failure.pod})" if failure.pod else "")
    where = [f"exit code {failure.exit_code}" + (f" ({failure.reason})" if failure.reason else "")]
    where += [f"rank {failure.rank}"] if failure.rank is not None else []
    where += [f"step {failure.step}"] if failure.step is not None else []
    return (f"pod {failure.pod} on node {failure.node} failed: {', '.join(where)}: {failure.cause}: "
            f"{failure.detail}")


def last_failure(failure: Failure, action: str, attempt: int, hint: str, now: datetime) -> FailureStatus:
    """status.lastFailure; absent figures are left out (unset, so not dumped)."""
    moment = failure.time or now
    record = {"cause": failure.cause, "action": action, "attempt": attempt, "pod": failure.pod, "node": failure.node,
              "rank": failure.rank, "exit_code": failure.exit_code, "step": failure.step, "reason": failure.reason,
              "message": failure.detail, "hint": hint, "time": timestamp(moment)}
    return FailureStatus(**{key: value for key, value in record.items() if value is not None})
