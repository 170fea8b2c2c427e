"""`dev-cluster up --process-runtime`: the process runtime as the cluster's default.

A MutatingAdmissionPolicy (admissionregistration.k8s.io/v1, GA in Kubernetes 1.36) writes
`sim.hybrid.ascend.dev/runtime: process` onto every pod created without that annotation. The choice is thus on
each pod, where kwok's stages, the runtime and the simulated metrics exporter all read it; a pod opts out with
`sim.hybrid.ascend.dev/runtime: kwok`. `--no-process-runtime` removes the policy (pods already created keep
their annotation).
"""

from __future__ import annotations

from kubernetes import client

from ..kube.client import with_retries
from ..kube.waiting import wait_until
from .launch import PROCESS_RUNTIME, RUNTIME_ANNOTATION

POLICY_NAME = "sim-process-runtime-default"


def policy() -> dict:
    annotate = f'Object{{metadata: Object.metadata{{annotations: {{"{RUNTIME_ANNOTATION}": "{PROCESS_RUNTIME}"}}}}}}'
    return {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": POLICY_NAME},
        "spec": {
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                                                    "resources": ["pods"]}]},
            "matchConditions": [{"name": "runtime-not-chosen", "expression": (
                f"!has(object.metadata.annotations) || !('{RUNTIME_ANNOTATION}' in object.metadata.annotations)")}],
            "failurePolicy": "Fail",
            "reinvocationPolicy": "Never",
            "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": annotate}}],
        },
    }


def binding() -> dict:
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicyBinding",
            "metadata": {"name": POLICY_NAME}, "spec": {"policyName": POLICY_NAME}}


def _probe_annotations(core: client.CoreV1Api) -> dict:
    probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "runtime-default-probe-"},
             "spec": {"containers": [{"name": "probe", "image": "busybox"}]}}
    created = core.create_namespaced_pod("default", probe, dry_run="All", _request_timeout=5)
    return created.metadata.annotations or {}


def is_cluster_default(core: client.CoreV1Api) -> bool:
    """What a new pod gets, asked of the apiserver itself (a dry-run create)."""
    return _probe_annotations(core).get(RUNTIME_ANNOTATION) == PROCESS_RUNTIME


def set_cluster_default(api: client.ApiClient, enabled: bool, timeout: float = 30) -> None:
    """Installs (or removes) the policy and returns once new pods get (or no longer get) the annotation: the
    apiserver loads policies asynchronously, about a second later."""
    admission, core = client.AdmissionregistrationV1Api(api), client.CoreV1Api(api)
    if enabled:
        for create, read, body in (
                (admission.create_mutating_admission_policy, admission.read_mutating_admission_policy, policy()),
                (admission.create_mutating_admission_policy_binding,
                 admission.read_mutating_admission_policy_binding, binding())):
            try:
                read(POLICY_NAME, _request_timeout=5)
            except client.ApiException as error:
                if error.status != 404:
                    raise
                with_retries(lambda create=create, body=body: create(body, _request_timeout=5),
                             f"create {body['kind']} {POLICY_NAME}")
    else:
        for delete in (admission.delete_mutating_admission_policy_binding, admission.delete_mutating_admission_policy):
            try:
                delete(POLICY_NAME, _request_timeout=5)
            except client.ApiException as error:
                if error.status != 404:
                    raise
    wait_until(lambda: is_cluster_default(core) == enabled, timeout,
               f"new pods to {'get' if enabled else 'lose'} {RUNTIME_ANNOTATION}={PROCESS_RUNTIME} by default")
