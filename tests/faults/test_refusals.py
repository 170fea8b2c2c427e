"""What the apiserver refuses: a pod template it can never accept fails the job at once with its message; a
forbidden verb is named in a condition; the per-job NetworkPolicy is accepted as rendered."""

from __future__ import annotations

import base64
import contextlib
import time
from pathlib import Path

import yaml
from kubernetes import client

from ascend_hybrid.contracts import names
from support.faults import CaseResult, converge
from support.operator_harness import Jobs, job_manifest, wait_for


def condition(jobs: Jobs, name: str, kind: str) -> dict | None:
    return next((c for c in jobs.status(name).get("conditions", []) if c["type"] == kind), None)


DENIAL = "this namespace admits no pods of job unfixable (a cluster policy)"


@contextlib.contextmanager
def _pods_of_job_denied(fault_cluster, namespace: str, job: str):
    """A ValidatingAdmissionPolicy that refuses the job's pods with 422 Invalid, as a cluster's own policy would
    refuse what the operator's validation cannot know about: enforced on entry, gone on exit."""
    admission = client.AdmissionregistrationV1Api(fault_cluster.api)
    name = f"{namespace}-deny"
    label = f"object.metadata.labels['{names.JOB_LABEL}']"
    admission.create_validating_admission_policy({"metadata": {"name": name}, "spec": {
        "failurePolicy": "Fail",
        "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                                                "resources": ["pods"]}]},
        "validations": [{"expression": f"!has(object.metadata.labels) || !('{names.JOB_LABEL}' in "
                                       f"object.metadata.labels) || {label} != '{job}'",
                         "message": DENIAL, "reason": "Invalid"}]}})
    admission.create_validating_admission_policy_binding({"metadata": {"name": name}, "spec": {
        "policyName": name, "validationActions": ["Deny"],
        "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}}})
    probe = {"metadata": {"name": "probe", "labels": {names.JOB_LABEL: job}},
             "spec": {"containers": [{"name": "c", "image": "busybox"}]}}

    def enforced() -> bool:
        try:
            fault_cluster.core.create_namespaced_pod(namespace, probe, dry_run="All")
        except client.ApiException as error:
            return error.status == 422
        return False
    try:
        wait_for(enforced, timeout=30, what="the admission policy to be enforced")
        yield
    finally:
        admission.delete_validating_admission_policy_binding(name)
        admission.delete_validating_admission_policy(name)


def test_an_unfixable_pod_template_fails_at_once_with_the_apiservers_message(fault_cluster, namespace, jobs, report):
    name = "unfixable"
    body = job_manifest(name, data=2, tensor=4, per_pod=4)  # valid by every rule the operator knows
    with _pods_of_job_denied(fault_cluster, namespace, name):
        started = time.monotonic()
        jobs.create(body)
        status = jobs.wait_phase(name, "Failed", timeout=60)
        seconds = time.monotonic() - started
    failed = condition(jobs, name, "Failed")
    assert failed["reason"] == "InvalidPodTemplate"
    assert "unfixable-a1-" in failed["message"] and DENIAL in failed["message"], failed
    assert status["restarts"] == 0 and status["attempt"] == 1
    warnings = [e for e in jobs.events(name) if e[:2] == ("Warning", "InvalidPodTemplate")]
    assert len(warnings) == 1
    log = jobs.operator.log_path.read_text()
    assert log.count("create pods unfixable-a1-") <= 2, "refused once per pod, never retried"
    report.add(CaseResult("pod the apiserver refuses (422, an admission policy)", 1, 0, 0, seconds,
                          f"Failed/InvalidPodTemplate: {failed['message'][:90]}…"))


def _token_kubeconfig(cluster, namespace: str, account: str, path: Path) -> Path:
    token = cluster.core.create_namespaced_service_account_token(account, namespace, client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600))).status.token
    admin = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    server = admin["clusters"][0]["cluster"]
    ca = server.get("certificate-authority-data") or base64.b64encode(
        Path(server["certificate-authority"]).read_bytes()).decode()
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "limited",
        "clusters": [{"name": "sim", "cluster": {"server": server["server"], "certificate-authority-data": ca}}],
        "users": [{"name": "limited", "user": {"token": token}}],
        "contexts": [{"name": "limited", "context": {"cluster": "sim", "user": "limited"}}]}))
    return path


def test_a_forbidden_pod_creation_is_a_condition_naming_verb_and_resource(fault_cluster, namespace, start_operator,
                                                                         tmp_path, report):
    rbac = client.RbacAuthorizationV1Api(fault_cluster.api)
    account = "no-pod-create"
    fault_cluster.core.create_namespaced_service_account(namespace, {"metadata": {"name": account}})
    role = f"{namespace}-limited"
    rules = [(["" ], ["nodes"], ["list", "watch"]),
             ([""], ["namespaces"], ["list", "watch"]),  # kopf's namespace observer (--namespace), as the chart
             (["apiextensions.k8s.io"], ["customresourcedefinitions"], ["get", "list", "watch"]),
             (["hybrid.ascend.dev"], ["ascendhybridjobs"], ["get", "list", "watch", "delete"]),
             (["hybrid.ascend.dev"], ["ascendhybridjobs/status"], ["patch"]),
             (["hybrid.ascend.dev"], ["ascendhybridjobs/finalizers"], ["update"]),
             ([""], ["pods"], ["list", "watch", "patch", "delete"]),  # everything but create
             ([""], ["serviceaccounts"], ["create"]),  # the launchers' grant, as the chart
             (["rbac.authorization.k8s.io"], ["roles", "rolebindings"], ["create"]),
             (["hybrid.ascend.dev"], ["launcherchannels"], ["get", "list", "watch", "create", "patch"]),
             ([""], ["services"], ["list", "watch", "create", "patch"]),
             ([""], ["configmaps"], ["get", "list", "watch", "create", "patch"]),
             ([""], ["events"], ["create"]),
             (["apps"], ["daemonsets"], ["list", "watch"])]  # the device plugin's mode, as the chart (kube-system)
    rbac.create_cluster_role({"metadata": {"name": role}, "rules": [
        {"apiGroups": groups, "resources": resources, "verbs": verbs} for groups, resources, verbs in rules]})
    rbac.create_cluster_role_binding({"metadata": {"name": role}, "roleRef": {
        "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]})
    try:
        kubeconfig = _token_kubeconfig(fault_cluster, namespace, account, tmp_path / "limited.kubeconfig")
        jobs = Jobs(fault_cluster.api, namespace, start_operator("--namespace", namespace,
                                                                 kubeconfig=str(kubeconfig)))
        started = time.monotonic()
        jobs.create(job_manifest("forbidden", data=2, tensor=4, per_pod=4))
        wait_for(lambda: condition(jobs, "forbidden", "Authorized"), 60, "the Authorized condition",
                 lambda: jobs.describe("forbidden"))
        seconds = time.monotonic() - started
        authorized = condition(jobs, "forbidden", "Authorized")
        assert authorized["status"] == "False" and authorized["reason"] == "Forbidden"
        assert f"create pods in namespace {namespace}" in authorized["message"], authorized
        assert jobs.status("forbidden")["phase"] != "Failed"  # an administrator may still grant it
        report.add(CaseResult("pod creation forbidden by RBAC (403)", 1, 0, 0, seconds,
                              f"Authorized=False/Forbidden: {authorized['message'][:80]}…"))
        jobs.delete_all()
    finally:
        rbac.delete_cluster_role_binding(role)
        rbac.delete_cluster_role(role)


def test_the_network_policy_is_accepted_by_the_apiserver(fault_cluster, namespace, start_operator, report):
    peers = '[{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ops"}}, ' \
            '"podSelector": {"matchLabels": {"app.kubernetes.io/name": "ascend-hybrid-operator"}}}]'
    jobs = Jobs(fault_cluster.api, namespace, start_operator("--network-policy", "--metrics-peers", peers))
    started = time.monotonic()
    jobs.create(job_manifest("fenced", data=2, tensor=4, per_pod=4))
    converge(jobs, "fenced")
    seconds = time.monotonic() - started
    policy = client.NetworkingV1Api(fault_cluster.api).read_namespaced_network_policy(
        names.network_policy("fenced"), namespace)
    assert policy.metadata.owner_references[0].name == "fenced"
    assert policy.spec.pod_selector.match_labels == {names.JOB_LABEL: "fenced"}
    same_job, metrics = policy.spec.ingress
    assert same_job._from[0].pod_selector.match_labels == {names.JOB_LABEL: "fenced"}
    assert [(p.port, p.end_port) for p in same_job.ports] == [(1, names.METRICS_PORT - 1), (names.METRICS_PORT + 1, 65535)]
    assert [p.port for p in metrics.ports] == [names.METRICS_PORT]
    assert metrics._from[0].namespace_selector.match_labels == {"kubernetes.io/metadata.name": "ops"}
    report.add(CaseResult("per-job NetworkPolicy created on the real apiserver", 0, 0, 0, seconds,
                          "accepted as rendered (no CNI here enforces it)"))
    jobs.delete_all()
