"""Pure manifests of the bare pods that tests and benchmarks run on the simulated cluster."""

from __future__ import annotations

import json

from ascend_hybrid.devcluster.deviceplugin.allocation import CONFIG_ANNOTATION
from ascend_hybrid.devcluster.nodes.manifests import RESOURCE

GANG_GATE = "hybrid.ascend.dev/gang"
OUTCOME_ANNOTATION = "sim.hybrid.ascend.dev/outcome"
EXIT_CODE_ANNOTATION = "sim.hybrid.ascend.dev/exit-code"
AFTER_SECONDS_ANNOTATION = "sim.hybrid.ascend.dev/after-seconds"
TERMINATION_MESSAGE_ANNOTATION = "sim.hybrid.ascend.dev/termination-message"
REASON_ANNOTATION = "sim.hybrid.ascend.dev/reason"


def termination_report(cause: str, rank: int | None = None, step: int | None = None, detail: str = "") -> str:
    """The one JSON line the trainer writes to /dev/termination-log when it ends (docs/troubleshooting.md)."""
    return json.dumps({"cause": cause, "rank": rank, "step": step, "detail": detail})


def outcome_annotations(outcome: str, exit_code: int | None = None, after_seconds: float | None = None,
                        termination_message: str | None = None, reason: str | None = None) -> dict:
    """The annotations the kwok stages read: outcome run | succeed | fail, exit code, delay, and a failing
    container's termination message and terminated reason (e.g. OOMKilled)."""
    if outcome not in ("run", "succeed", "fail"):
        raise ValueError(f"outcome {outcome!r} must be run, succeed or fail")
    annotations = {OUTCOME_ANNOTATION: outcome}
    if exit_code is not None:
        annotations[EXIT_CODE_ANNOTATION] = str(exit_code)
    if after_seconds is not None:
        annotations[AFTER_SECONDS_ANNOTATION] = f"{after_seconds:g}"
    if termination_message is not None:
        annotations[TERMINATION_MESSAGE_ANNOTATION] = termination_message
    if reason is not None:
        annotations[REASON_ANNOTATION] = reason
    return annotations


def pod_manifest(name: str, node: str | None = None, chips: int = 0, annotations: dict | None = None,
                 gated: bool = False, owner: dict | None = None, labels: dict | None = None) -> dict:
    """A minimal pod with container `ascend` asking for `chips` NPUs, pinned to `node` by a required node
    affinity (as the operator pins its pods), held by the gang scheduling gate when `gated`."""
    container: dict = {"name": "ascend", "image": "ascend-hybrid/sim:latest"}
    if chips:
        container["resources"] = {"limits": {RESOURCE: str(chips)}}
    spec: dict = {"containers": [container], "restartPolicy": "Never", "terminationGracePeriodSeconds": 0}
    if node:
        term = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [term]}}}
    if gated:
        spec["schedulingGates"] = [{"name": GANG_GATE}]
    metadata: dict = {"name": name}
    if annotations:
        metadata["annotations"] = dict(annotations)
    if labels:
        metadata["labels"] = dict(labels)
    if owner:
        metadata["ownerReferences"] = [owner]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def device_configuration(pod: dict) -> dict | None:
    """The parsed ascend-910-configuration annotation of a pod, None when absent or unparsable."""
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(CONFIG_ANNOTATION)
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None
