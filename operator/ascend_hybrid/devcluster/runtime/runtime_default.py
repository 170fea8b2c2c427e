"""`dev-cluster up --process-runtime` (or `--container-runtime`): the process runtime (or its container mode) as the
cluster's default.

A MutatingAdmissionPolicy (admissionregistration.k8s.io/v1, GA in Kubernetes 1.36) writes
`sim.hybrid.ascend.dev/runtime: process` (or `container`) onto every pod created without that annotation. The
choice is thus on each pod, where kwok's stages, the runtime and the simulated metrics exporter all read it; a
pod opts out with `sim.hybrid.ascend.dev/runtime: kwok`. One policy at a time: choosing the other runtime
replaces it. `--no-process-runtime` (`--no-container-runtime`) removes the policy when it makes that runtime the
default (pods already created keep their annotation).
"""

from __future__ import annotations

from typing import cast

from kubernetes import client

from ascend_hybrid.devcluster.kube.client import with_retries
from ascend_hybrid.devcluster.kube.waiting import wait_until
from ascend_hybrid.devcluster.runtime.container import CONTAINER_RUNTIME
from ascend_hybrid.devcluster.runtime.launch import PROCESS_RUNTIME, RUNTIME_ANNOTATION

POLICY_NAME = "sim-process-runtime-default"
RUNTIMES = (PROCESS_RUNTIME, CONTAINER_RUNTIME)


def policy(runtime: str = PROCESS_RUNTIME) -> dict:
    annotate = f'Object{{metadata: Object.metadata{{annotations: {{"{RUNTIME_ANNOTATION}": "{runtime}"}}}}}}'
    return {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicy",
        # the runtime it writes, for the next `up` to read (a policy without it is the process runtime's)
        "metadata": {"name": POLICY_NAME, "annotations": {RUNTIME_ANNOTATION: runtime}},
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
    # validate_call builds the V1Pod from the dict; an answer from the apiserver always carries metadata
    created = core.create_namespaced_pod("default", cast(client.V1Pod, probe), dry_run="All", _request_timeout=5)
    return cast(client.V1ObjectMeta, created.metadata).annotations or {}


def cluster_default(core: client.CoreV1Api) -> str | None:
    """The runtime a new pod gets (process or container), asked of the apiserver itself (a dry-run create)."""
    chosen = _probe_annotations(core).get(RUNTIME_ANNOTATION)
    return chosen if chosen in RUNTIMES else None


def is_cluster_default(core: client.CoreV1Api, runtime: str = PROCESS_RUNTIME) -> bool:
    return cluster_default(core) == runtime


def _installed_runtime(admission: client.AdmissionregistrationV1Api) -> str | None:
    try:
        installed = admission.read_mutating_admission_policy(POLICY_NAME, _request_timeout=5)
    except client.ApiException as error:
        if error.status != 404:
            raise
        return None
    # an object read from the apiserver always carries metadata
    return (cast(client.V1ObjectMeta, installed.metadata).annotations or {}).get(RUNTIME_ANNOTATION, PROCESS_RUNTIME)


def _remove(admission: client.AdmissionregistrationV1Api) -> None:
    for delete in (admission.delete_mutating_admission_policy_binding, admission.delete_mutating_admission_policy):
        try:
            delete(POLICY_NAME, _request_timeout=5)
        except client.ApiException as error:
            if error.status != 404:
                raise


def set_cluster_default(api: client.ApiClient, enabled: bool, timeout: float = 30,
                        runtime: str = PROCESS_RUNTIME) -> None:
    """Installs (or removes) the policy for `runtime` and returns once new pods get (or no longer get) it: the
    apiserver loads policies asynchronously, about a second later."""
    admission, core = client.AdmissionregistrationV1Api(api), client.CoreV1Api(api)
    installed = _installed_runtime(admission)
    if enabled:
        if installed not in (None, runtime):
            _remove(admission)  # the other runtime's
        for create, read, body in (
                (admission.create_mutating_admission_policy, admission.read_mutating_admission_policy,
                 policy(runtime)),
                (admission.create_mutating_admission_policy_binding,
                 admission.read_mutating_admission_policy_binding, binding())):
            try:
                read(POLICY_NAME, _request_timeout=5)
            except client.ApiException as error:
                if error.status != 404:
                    raise
                # mypy cannot type a lambda whose defaults have no counterpart in Callable[[], T]
                with_retries(lambda create=create, body=body: create(body, _request_timeout=5),  # type: ignore[misc]
                             f"create {body['kind']} {POLICY_NAME}")
    elif installed == runtime:
        _remove(admission)
    wait_until(lambda: is_cluster_default(core, runtime) == enabled, timeout,
               f"new pods to {'get' if enabled else 'lose'} {RUNTIME_ANNOTATION}={runtime} by default")
