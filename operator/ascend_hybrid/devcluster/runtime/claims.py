"""PersistentVolumeClaims for process-runtime pods (the demo's real job, the tests' checkpoints): a claim bound to
a volume made for it, so that the scheduler places the pods that mount it. The volume's own path is never used:
the runtime maps each claim to a directory of its own (`launch.claim_directory`), which outlives the pods — that
is what lets a restarted rank find its checkpoints."""

from __future__ import annotations

from kubernetes import client

from ascend_hybrid.devcluster.kube.waiting import wait_until


def volume_name(namespace: str, claim: str) -> str:
    return f"{claim}-{namespace}"[:63]


def bind_claim(core: client.CoreV1Api, namespace: str, claim: str, timeout: float = 60) -> str:
    """Claim `claim` in `namespace`, bound to a ReadWriteMany volume made for it (both made when absent); the
    volume's name."""
    volume = volume_name(namespace, claim)
    _create_absent(core.create_persistent_volume, {
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": volume},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"], "storageClassName": "",
                 "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": "/nonexistent/ahj-sim"},
                 "claimRef": {"namespace": namespace, "name": claim}}})
    _create_absent(lambda body: core.create_namespaced_persistent_volume_claim(namespace, body), {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": claim},
        "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "", "volumeName": volume,
                 "resources": {"requests": {"storage": "1Gi"}}}})
    wait_until(lambda: _phase(core.read_namespaced_persistent_volume_claim(claim, namespace)) == "Bound",
               timeout, f"claim {claim} to be bound")
    return volume


def _phase(claim: client.V1PersistentVolumeClaim) -> str | None:
    return claim.status.phase if claim.status else None


def _create_absent(create, body: dict) -> None:
    try:
        create(body)
    except client.ApiException as error:
        if error.status != 409:  # already there: a demo run again, a test's earlier claim
            raise
