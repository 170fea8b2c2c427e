"""The Helm chart: lint, golden renderings, Kubernetes 1.36 schema validity, least-privilege RBAC derived from the
operator's own calls, and deploy/operator.yaml kept in step.

Golden files (tests/unit/deploy/golden/chart-*.yaml) change only on purpose; after a deliberate chart change run
    AHJ_UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/deploy/test_chart.py
and review the diff. deploy/operator.yaml is regenerated with `ascend-hybrid chart write`.
Needs the toolchain's helm (`ascend-hybrid dev-cluster build`); without it the tests fail, they never skip.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import kopf
import kubernetes_validate
import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase

from ascend_hybrid.contracts import names
from ascend_hybrid.controller import (
    handlers,  # noqa: F401 - importing it registers the operator's kopf handlers
    kube,
    leader,
    metrics,
    metrics_auth,
)
from ascend_hybrid.devcluster.controlplane import toolchain
from ascend_hybrid.devtools import chartgen
from ascend_hybrid.gang import render
from ascend_hybrid.spec import crd

pytestmark = pytest.mark.toolchain  # helm renders the chart: the Go toolchain must be built

GOLDEN = Path(__file__).parent / "golden"
UPDATE_ENV = "AHJ_UPDATE_GOLDEN"
VARIANTS = {"chart-default": (), "chart-namespaced-monitoring": (GOLDEN / "values-namespaced-monitoring.yaml",),
            "chart-kueue": (GOLDEN / "values-kueue.yaml",), "chart-volcano": (GOLDEN / "values-volcano.yaml",)}
MONITORING_GROUP = "monitoring.coreos.com/v1"
KUBERNETES_SCHEMA = "1.36.0"
ROLE_KINDS = ("ClusterRole", "Role")

# Every API call of operator/ascend_hybrid/controller/kube.py → the (apiGroup, resource, verb) it needs. A call missing here
# fails test_every_api_call_of_kube_py_is_known: add it, and the verb to charts/…/templates/rbac.yaml.
KUBE_PY_CALLS = {
    "read_custom_resource_definition": {("apiextensions.k8s.io", "customresourcedefinitions", "get")},
    "list_node": {("", "nodes", "list"), ("", "nodes", "watch")},
    "get_namespaced_custom_object": {("hybrid.ascend.dev", "ascendhybridjobs", "get"),
                                     ("hybrid.ascend.dev", "launcherchannels", "get")},
    # LauncherChannel <job>-recovery: created with the children, its generation by server-side apply.
    "patch_namespaced_custom_object": {("hybrid.ascend.dev", "launcherchannels", "patch"),
                                       ("hybrid.ascend.dev", "launcherchannels", "create")},
    "create_namespaced_custom_object": {("hybrid.ascend.dev", "launcherchannels", "create")},
    "patch_namespaced_custom_object_status": {("hybrid.ascend.dev", "ascendhybridjobs/status", "patch")},
    "delete_namespaced_custom_object": {("hybrid.ascend.dev", "ascendhybridjobs", "delete")},
    # Only ever called as server-side apply: an object that does not exist yet is created by the patch.
    "patch_namespaced_service": {("", "services", "patch"), ("", "services", "create")},
    "create_namespaced_service": {("", "services", "create")},
    "patch_namespaced_config_map": {("", "configmaps", "patch"), ("", "configmaps", "create")},
    "read_namespaced_config_map": {("", "configmaps", "get")},
    "patch_namespaced_endpoint_slice": {("discovery.k8s.io", "endpointslices", "patch"),
                                        ("discovery.k8s.io", "endpointslices", "create")},
    "delete_collection_namespaced_endpoint_slice": {("discovery.k8s.io", "endpointslices", "deletecollection")},
    "create_namespaced_pod": {("", "pods", "create")},
    "patch_namespaced_pod": {("", "pods", "patch")},
    "delete_namespaced_pod": {("", "pods", "delete")},
    "delete_collection_namespaced_pod": {("", "pods", "deletecollection")},
    "create_namespaced_event": {("", "events", "create")},
    # The pod watch (listwatch.py: list + watch, in every namespace or in each watched one); placement's
    # cluster-wide reads when only some namespaces are watched.
    "list_pod_for_all_namespaces": {("", "pods", "list"), ("", "pods", "watch")},
    "list_namespaced_pod": {("", "pods", "list"), ("", "pods", "watch")},
    "list_namespaced_config_map": {("", "configmaps", "list"), ("", "configmaps", "watch")},
    # devicePlugin.mode auto: the device plugin's DaemonSets tell each node's mode (listwatch.ListWatch).
    "list_namespaced_daemon_set": {("apps", "daemonsets", "list"), ("apps", "daemonsets", "watch")},
    # --network-policy: <job>-network by server-side apply.
    "patch_namespaced_network_policy": {("networking.k8s.io", "networkpolicies", "patch"),
                                        ("networking.k8s.io", "networkpolicies", "create")},
    # Each job's launchers' grant, only ever created: its own ServiceAccount, Role <job>-launcher, the RoleBinding.
    "create_namespaced_service_account": {("", "serviceaccounts", "create")},
    "create_namespaced_role": {("rbac.authorization.k8s.io", "roles", "create")},
    "create_namespaced_role_binding": {("rbac.authorization.k8s.io", "rolebindings", "create")},
    # The namespace-wide launcher Role of earlier versions, by its one name (NAMED_RULES).
    "delete_namespaced_role": {("rbac.authorization.k8s.io", "roles", "delete")},
    # --mark-slow-nodes (slowNodes.markNodes): the node condition AscendSlowNode.
    "patch_node_status": {("", "nodes/status", "patch")},
}
# Rules the chart limits to fixed names (resourceNames): (apiGroup, resource, verb) → the names.
NAMED_RULES = {("rbac.authorization.k8s.io", "roles", "delete"): ["ascend-hybrid-launcher"]}
# Kube's calls for queued jobs (get_workload, delete_workload), granted only with kueue.enabled. They reuse the
# custom-object methods above, so test_the_kueue_calls_of_kube_py_are_known reads them by the resource they name.
KUEUE_NEEDS = {("kueue.x-k8s.io", "workloads", "get"), ("kueue.x-k8s.io", "workloads", "delete")}
# Kube's calls for jobs Volcano schedules (apply_podgroup, get_podgroup, delete_podgroup), granted only with
# volcano.enabled; read by the resource they name as the Kueue ones are.
VOLCANO_NEEDS = {("scheduling.volcano.sh", "podgroups", verb) for verb in ("get", "create", "patch", "delete")}
NETWORK_POLICY_CALLS = {"patch_namespaced_network_policy"}
MARK_SLOW_NODES_CALLS = {"patch_node_status"}  # granted only with slowNodes.markNodes
# controller/leader.py (--leader-elect) and controller/metrics_auth.py (--metrics-auth): their calls and needs.
LEADER_CALLS = {"read_namespaced_lease": ("coordination.k8s.io", "leases", "get"),
                "create_namespaced_lease": ("coordination.k8s.io", "leases", "create"),
                "replace_namespaced_lease": ("coordination.k8s.io", "leases", "update")}
METRICS_AUTH_CALLS = {"create_token_review": ("authentication.k8s.io", "tokenreviews", "create"),
                      "create_subject_access_review": ("authorization.k8s.io", "subjectaccessreviews", "create")}
# The role the chart makes for Prometheus under metrics.auth (bound to readers, never to the operator).
METRICS_READER = "ascend-hybrid-operator-metrics-reader"
# kopf itself: the CRD observer, and events it posts for handler warnings and errors.
KOPF_OWN_NEEDS = {("apiextensions.k8s.io", "customresourcedefinitions", "list"),
                  ("apiextensions.k8s.io", "customresourcedefinitions", "watch"), ("", "events", "create")}
# kopf's namespace observer, only when it watches a list of namespaces.
KOPF_NAMESPACED_NEEDS = {("", "namespaces", "list"), ("", "namespaces", "watch")}
# Children carry blockOwnerDeletion owner references (render.py): OwnerReferencesPermissionEnforcement needs this.
OWNER_REFERENCE_NEEDS = {("hybrid.ascend.dev", "ascendhybridjobs/finalizers", "update")}


@pytest.fixture(scope="module", autouse=True)
def helm_is_built():
    if toolchain.missing(("helm",)):
        pytest.fail(f"helm is not built in {toolchain.bin_dir()}: run `ascend-hybrid dev-cluster build`", pytrace=False)


@pytest.fixture(scope="module")
def rendered() -> dict[str, str]:
    return {name: chartgen.template(values) for name, values in VARIANTS.items()}


def objects_of(text: str) -> list[dict]:
    return [document for document in yaml.safe_load_all(text) if document]


def one(objects: list[dict], kind: str, name: str | None = None) -> dict:
    matches = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(matches) == 1, f"expected one {kind} {name or ''}, found {len(matches)}"
    return matches[0]


def render_with(tmp_path: Path, values: dict) -> str:
    values_file = tmp_path / "values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    return chartgen.template([values_file])


def granted(objects: list[dict]) -> set[tuple[str, str, str]]:
    """What the operator's roles grant (the metrics-reader role is Prometheus', not the operator's)."""
    return {(group, resource, verb) for role in objects if role["kind"] in ROLE_KINDS
            and role["metadata"]["name"] != METRICS_READER for rule in role["rules"]
            for group in rule["apiGroups"] for resource in rule["resources"] for verb in rule["verbs"]}


def exported_metric_names() -> set[str]:
    """The series names metrics.py exports (a counter's family name gets the `_total` suffix on the wire)."""
    names = set()
    for collector in vars(metrics).values():
        if not isinstance(collector, MetricWrapperBase):
            continue
        for family in collector.describe():
            names.add(family.name + ("_total" if family.type == "counter" else ""))
    return names


def kopf_watch_needs() -> set[tuple[str, str, str]]:
    """list + watch for every resource the registered kopf handlers index or watch."""
    registry = kopf.get_default_registry()
    needs = set()
    for handler in [*registry._indexing.get_all_handlers(), *registry._watching.get_all_handlers()]:
        selector = handler.selector
        resource = selector.plural or selector.any_name
        group = selector.group or ""
        needs |= {(group, resource, "list"), (group, resource, "watch")}
    return needs


# --- lint and goldens ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_helm_lint_strict_passes(variant):
    assert "0 chart(s) failed" in chartgen.lint(VARIANTS[variant])


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_template_equals_the_golden_file(variant, rendered):
    golden = GOLDEN / f"{variant}.yaml"
    if os.environ.get(UPDATE_ENV):
        golden.write_text(rendered[variant])
    assert golden.exists(), f"{golden} is missing: run {UPDATE_ENV}=1 pytest {Path(__file__).name}"
    assert rendered[variant] == golden.read_text(), (
        f"the chart renders differently from {golden.name}; if intended, regenerate with {UPDATE_ENV}=1")


def test_rendering_is_deterministic(rendered):
    assert chartgen.template() == rendered["chart-default"]


# --- schema validity -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_object_validates_against_the_kubernetes_schema(variant, rendered):
    objects = objects_of(rendered[variant])
    core = [o for o in objects if o["apiVersion"] != MONITORING_GROUP]
    assert core, "nothing rendered"
    for obj in core:
        kubernetes_validate.validate(obj, KUBERNETES_SCHEMA, strict=True)


def test_the_schema_check_rejects_a_malformed_object(rendered):
    deployment = one(objects_of(rendered["chart-default"]), "Deployment")
    deployment["spec"]["replicas"] = "one"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_SCHEMA, strict=True)


def test_service_monitor_scrapes_the_metrics_service(rendered):
    objects = objects_of(rendered["chart-namespaced-monitoring"])
    service, monitor = one(objects, "Service"), one(objects, "ServiceMonitor")
    assert monitor["apiVersion"] == MONITORING_GROUP
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [service["metadata"]["namespace"]]}
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {port["name"] for port in service["spec"]["ports"]}
    assert endpoint["path"] == "/metrics" and endpoint["honorLabels"] is True
    assert re.fullmatch(r"\d+s", endpoint["interval"]) and re.fullmatch(r"\d+s", endpoint["scrapeTimeout"])
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_prometheus_rule_alerts_on_the_operators_metrics(rendered):
    values = yaml.safe_load(VARIANTS["chart-namespaced-monitoring"][0].read_text())["prometheusRule"]
    rule = one(objects_of(rendered["chart-namespaced-monitoring"]), "PrometheusRule")
    assert rule["apiVersion"] == MONITORING_GROUP
    (group,) = rule["spec"]["groups"]
    alerts = {alert["alert"]: alert for alert in group["rules"]}
    assert set(alerts) == {"AscendHybridJobFailed", "AscendHybridJobsPendingTooLong", "AscendHybridJobRestartsClimbing"}
    assert alerts["AscendHybridJobFailed"]["expr"] == 'ascend_hybrid_jobs{phase="Failed"} > 0'
    assert alerts["AscendHybridJobsPendingTooLong"]["expr"] == "ascend_hybrid_jobs_pending > 0"
    assert alerts["AscendHybridJobsPendingTooLong"]["for"] == f"{values['pendingMinutes']}m"
    assert alerts["AscendHybridJobRestartsClimbing"]["expr"] == (
        f"sum by (namespace) (increase(ascend_hybrid_job_restarts_total[30m])) > {values['restartsIn30Minutes']}")
    exported = exported_metric_names()
    for alert in alerts.values():
        assert set(re.findall(r"ascend_hybrid_\w+", alert["expr"])) <= exported, alert["expr"]
        assert alert["labels"]["severity"] == values["severity"]
        assert "{{ $labels" in alert["annotations"]["summary"] + alert["annotations"]["description"]


def test_monitoring_objects_need_metrics(tmp_path):
    with pytest.raises(chartgen.ChartError, match="need metrics.enabled=true"):
        render_with(tmp_path, {"metrics": {"enabled": False, "port": 8080}, "serviceMonitor": {"enabled": True}})
    objects = objects_of(render_with(tmp_path, {"metrics": {"enabled": False, "port": 8080}}))
    assert not [o for o in objects if o["kind"] == "Service"]
    assert "--metrics-port=0" in one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]


# --- values schema -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("values, complaint", [
    ({"logLevel": "TRACE"}, "logLevel"),
    ({"watchNamespaces": ["Team_A"]}, "watchNamespaces"),
    ({"prometheusUrl": "prometheus:9090"}, "prometheusUrl"),
    ({"metrics": {"enabled": True, "port": 0}}, "port"),
    ({"replicas": 2}, "replicas"),
    ({"replicaCount": 2, "leaderElection": {"enabled": False, "leaseDurationSeconds": 10, "renewDeadlineSeconds": 7,
                                            "retryPeriodSeconds": 2}}, "needs leaderElection.enabled"),
    ({"networkPolicy": {"enabled": "yes"}}, "networkPolicy"),
    # Prometheus in any namespace, or any pod of its namespace: not a peer the chart admits
    # (Helm merges a value into the default: null is how a key is taken out)
    ({"networkPolicy": {"enabled": True, "prometheus": {"namespaceSelector": {"matchLabels": None}}}},
     "namespaceSelector"),
    ({"networkPolicy": {"enabled": True, "prometheus": {"namespaceSelector": None}}}, "namespaceSelector"),
    ({"networkPolicy": {"enabled": True, "prometheus": {"podSelector": {"matchLabels": None}}}}, "podSelector"),
    ({"jobPodLabels": {"enforced": True, "operatorUsernames": [""]}}, "operatorUsernames"),
    ({"kueue": {"enabled": True}, "volcano": {"enabled": True}}, "one or the other per cluster"),
    ({"volcano": {"enabled": False, "allJobs": True}}, "volcano.allJobs needs volcano.enabled"),
])
def test_values_schema_refuses_bad_values(tmp_path, values, complaint):
    with pytest.raises(chartgen.ChartError, match=complaint):
        render_with(tmp_path, values)


# --- the Deployment --------------------------------------------------------------------------------------------

def test_deployment_runs_two_locked_down_replicas_behind_a_lease(rendered):
    objects = objects_of(rendered["chart-default"])
    deployment = one(objects, "Deployment")
    spec, pod = deployment["spec"], deployment["spec"]["template"]["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    (container,) = pod["containers"]
    assert container["image"] == "ascend-hybrid/operator:0.1.0"
    assert container["command"] == ["ascend-hybrid"]
    assert container["args"] == ["run", "--metrics-port=8080", "--health-port=8081", "--log-level=INFO",
                                 "--log-format=text",
                                 "--ranktable-expander-image=ascend-hybrid/operator:0.1.0",  # its own image
                                 "--device-plugin-mode=auto", "--device-plugin-namespace=kube-system",
                                 "--leader-elect", "--lease-name=ascend-hybrid-operator",
                                 "--lease-duration-seconds=10", "--lease-renew-deadline-seconds=7",
                                 "--lease-retry-seconds=2", "--metrics-auth"]
    env = {entry["name"]: entry.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") for entry in container["env"]}
    assert env["POD_NAME"] == "metadata.name" and env["POD_NAMESPACE"] == "metadata.namespace"
    selector = deployment["spec"]["selector"]["matchLabels"]
    (term,) = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"] == {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": selector}}
    budget = one(objects, "PodDisruptionBudget")
    assert budget["spec"] == {"minAvailable": 1, "selector": {"matchLabels": selector}}
    lease_role = one(objects, "Role", "ascend-hybrid-operator-leader-election")
    assert lease_role["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    assert granted([lease_role]) == set(LEADER_CALLS.values())
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports == {"metrics": 8080, "health": 8081}
    for probe in (container["livenessProbe"], container["readinessProbe"]):
        assert probe["httpGet"] == {"path": "/healthz", "port": "health"}
    security = container["securityContext"]
    assert security["runAsNonRoot"] and security["readOnlyRootFilesystem"]
    assert security["allowPrivilegeEscalation"] is False and security["capabilities"] == {"drop": ["ALL"]}
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["securityContext"]["runAsNonRoot"] and container["resources"]["requests"]
    assert pod["serviceAccountName"] == one(objects, "ServiceAccount")["metadata"]["name"]
    assert one(objects, "Service")["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()


def test_bind_address_pod_ip_binds_the_endpoints_to_the_pods_ip_only(tmp_path, rendered):
    """For pods that share the node's network (the simulated cluster's container runtime): the kubelet expands
    $(POD_IP) in args from the downward-API variable the chart then defines."""
    default = one(objects_of(rendered["chart-default"]), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert "POD_IP" not in {entry["name"] for entry in default["env"]}
    deployment = one(objects_of(render_with(tmp_path, {"bindAddress": "$(POD_IP)"})), "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert "--bind-address=$(POD_IP)" in container["args"]
    assert {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}} in container["env"]


def test_watch_namespaces_prometheus_and_placement_values_reach_the_pod(rendered):
    values = yaml.safe_load(VARIANTS["chart-namespaced-monitoring"][0].read_text())
    pod = one(objects_of(rendered["chart-namespaced-monitoring"]), "Deployment")["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    assert [arg for arg in args if arg.startswith("--namespace=")] == [
        f"--namespace={namespace}" for namespace in values["watchNamespaces"]]
    assert f"--prometheus-url={values['prometheusUrl']}" in args
    assert f"--log-level={values['logLevel']}" in args
    assert pod["nodeSelector"] == values["nodeSelector"] and pod["tolerations"] == values["tolerations"]
    default_args = one(objects_of(rendered["chart-default"]), "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not [arg for arg in default_args if arg.startswith(("--prometheus-url", "--namespace"))]


# --- RBAC ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_rbac_has_no_secrets_and_no_wildcards(variant, rendered):
    roles = [o for o in objects_of(rendered[variant]) if o["kind"] in ROLE_KINDS and o["metadata"]["name"] != METRICS_READER]
    assert roles
    for role in roles:
        for rule in role["rules"]:
            assert "nonResourceURLs" not in rule, role["metadata"]["name"]
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[field] and not any("*" in item for item in rule[field]), (field, rule)
            assert not {"secrets", "serviceaccounts/token"} & set(rule["resources"]), rule
            assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"]), rule


def test_role_and_binding_writes_are_creates_and_named_where_kubernetes_allows(rendered):
    """The operator never patches, updates or deletes a Role or RoleBinding it did not name: it only creates its
    jobs' (create cannot be limited by name: the name is not known when it is authorized), and deletes one Role by
    name. Every rule of NAMED_RULES carries exactly its resourceNames."""
    for variant in VARIANTS:
        rules = [rule for role in objects_of(rendered[variant]) if role["kind"] in ROLE_KINDS
                 and role["metadata"]["name"] != METRICS_READER for rule in role["rules"]]
        rbac = [rule for rule in rules if "rbac.authorization.k8s.io" in rule["apiGroups"]]
        verbs = {verb for rule in rbac for verb in rule["verbs"]}
        assert verbs == {"create", "delete"}, (variant, rbac)
        for rule in rules:
            for need in {(g, r, v) for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}:
                if need in NAMED_RULES:
                    assert rule.get("resourceNames") == NAMED_RULES[need], (variant, rule)


def test_metrics_are_authenticated_by_default_and_the_switch_is_documented(rendered, tmp_path):
    objects = objects_of(rendered["chart-default"])
    assert "--metrics-auth" in one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    one(objects, "ClusterRole", METRICS_READER)
    off = objects_of(render_with(tmp_path, {"metrics": {"enabled": True, "port": 8080, "auth": {"enabled": False}}}))
    assert "--metrics-auth" not in one(off, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    install = (Path(__file__).parents[3] / "docs" / "install.md").read_text()
    assert "metrics.auth.enabled=false" in install


def test_prometheus_is_admitted_from_its_own_namespace_by_default(tmp_path):
    objects = objects_of(render_with(tmp_path, {"networkPolicy": {"enabled": True}}))
    args = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    (peers,) = [json.loads(arg.split("=", 1)[1]) for arg in args if arg.startswith("--metrics-peers=")]
    assert peers[1] == {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
                        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}
    assert all(peer["namespaceSelector"] and peer["podSelector"] for peer in peers)


def test_only_the_operator_may_label_a_pod_a_member_of_a_job(rendered, tmp_path):
    """The ValidatingAdmissionPolicy that keeps the labels the operator and the NetworkPolicy trust the operator's:
    its ServiceAccount (and operatorUsernames) may set them; the binding follows the watched namespaces."""
    objects = objects_of(rendered["chart-default"])
    policy = one(objects, "ValidatingAdmissionPolicy")
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert (rule["resources"], rule["operations"]) == (["pods"], ["CREATE", "UPDATE"])
    (validation,) = policy["spec"]["validations"]
    assert 'request.userInfo.username in ["system:serviceaccount:ascend-hybrid-system:ascend-hybrid-operator"]' in \
        validation["expression"]
    assert names.GROUP + "/" in policy["spec"]["variables"][0]["expression"]
    binding = one(objects, "ValidatingAdmissionPolicyBinding")
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}
    scoped = objects_of(rendered["chart-namespaced-monitoring"])
    selector = one(scoped, "ValidatingAdmissionPolicyBinding")["spec"]["matchResources"]["namespaceSelector"]
    assert selector["matchExpressions"][0]["values"] == ["team-a", "team-b"]
    more = objects_of(render_with(tmp_path, {"jobPodLabels": {"enforced": True, "operatorUsernames": ["me"]}}))
    assert '"me"' in one(more, "ValidatingAdmissionPolicy")["spec"]["validations"][0]["expression"]
    off = objects_of(render_with(tmp_path, {"jobPodLabels": {"enforced": False}}))
    assert not [o for o in off if o["kind"].startswith("ValidatingAdmissionPolicy")]


def test_one_replica_without_a_lease_is_recreated_and_has_no_budget(tmp_path):
    objects = objects_of(render_with(tmp_path, {"replicaCount": 1, "leaderElection": {
        "enabled": False, "leaseDurationSeconds": 10, "renewDeadlineSeconds": 7, "retryPeriodSeconds": 2}}))
    deployment = one(objects, "Deployment")
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert "--leader-elect" not in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not [o for o in objects if o["kind"] == "PodDisruptionBudget" or "leader" in o["metadata"]["name"]]


def test_security_values_reach_the_operator_and_prometheus(rendered):
    values = yaml.safe_load(VARIANTS["chart-namespaced-monitoring"][0].read_text())
    objects = objects_of(rendered["chart-namespaced-monitoring"])
    args = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--metrics-auth" in args and "--network-policy" in args
    (peers,) = [json.loads(arg.split("=", 1)[1]) for arg in args if arg.startswith("--metrics-peers=")]
    operator_labels = one(objects, "Deployment")["spec"]["selector"]["matchLabels"]
    assert peers == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": chartgen.NAMESPACE}},
                      "podSelector": {"matchLabels": operator_labels}}, values["networkPolicy"]["prometheus"]]
    reader = one(objects, "ClusterRole", METRICS_READER)
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    binding = one(objects, "ClusterRoleBinding", METRICS_READER)
    assert binding["subjects"] == [{"kind": "ServiceAccount", **values["metrics"]["auth"]["readers"][0]}]
    (endpoint,) = one(objects, "ServiceMonitor")["spec"]["endpoints"]
    assert endpoint["scheme"] == "https" and endpoint["bearerTokenFile"].endswith("serviceaccount/token")


def test_marking_slow_nodes_is_off_by_default_and_its_grant_comes_with_it(rendered, tmp_path):
    default = objects_of(rendered["chart-default"])
    assert ("", "nodes/status", "patch") not in granted(default)
    assert "--mark-slow-nodes" not in one(default, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    marking = objects_of(render_with(tmp_path, {"slowNodes": {"markNodes": True}}))
    assert ("", "nodes/status", "patch") in granted(marking)
    assert "--mark-slow-nodes" in one(marking, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]


# kube.py's pod writes past the client's models (Kube._send): (method, resource) → the client method they stand for.
RAW_CALLS = {("POST", "pods"): "create_namespaced_pod", ("PATCH", "pods"): "patch_namespaced_pod",
             ("DELETE", "pods"): "delete_namespaced_pod"}


def test_every_api_call_of_kube_py_is_known():
    source = Path(kube.__file__).read_text()
    calls = set(re.findall(r"self\.(?:core|custom|extensions|networking|discovery|rbac|apps)\.(\w+)", source))
    raw = set(re.findall(r'self\._send, "(\w+)", f"/api/v1/namespaces/\{[^}]+\}/(\w+)', source))
    assert raw <= set(RAW_CALLS), f"kube.py sends requests the chart's RBAC does not know: {raw - set(RAW_CALLS)}"
    calls |= {RAW_CALLS[request] for request in raw}
    assert calls, "no API call found in kube.py: the pattern no longer matches its style"
    assert calls <= set(KUBE_PY_CALLS), f"kube.py makes calls the chart's RBAC does not know: {calls - set(KUBE_PY_CALLS)}"
    assert set(KUBE_PY_CALLS) <= calls, f"no longer called (drop from RBAC): {set(KUBE_PY_CALLS) - calls}"


def test_kopf_writes_nothing_to_the_job():
    """No change handlers, daemons or timers: kopf keeps no progress or finalizer on the job, so the chart grants
    no patch on ascendhybridjobs, and handlers.EventHandlersOnlyDiffBase may leave kopf's diff base empty.
    Adding one needs that verb, kopf's own diff base storage back (and this test updated)."""
    registry = kopf.get_default_registry()
    assert registry._watching.get_all_handlers(), "the kopf handlers are not registered"
    assert not registry._changing.get_all_handlers() and not registry._spawning.get_all_handlers()


def calls_of(module, pattern: str) -> set[str]:
    return set(re.findall(pattern, Path(module.__file__).read_text()))


def test_every_api_call_of_leader_election_and_metrics_auth_is_known():
    assert calls_of(leader, r"self\.api\.(\w+)") == set(LEADER_CALLS)
    assert calls_of(metrics_auth, r"self\.auth[nz]\.(\w+)") == set(METRICS_AUTH_CALLS)


def operator_needs(namespaced: bool, network_policy: bool = False, with_kueue: bool = False,
                   metrics_auth: bool = True, with_volcano: bool = False) -> set[tuple[str, str, str]]:
    calls = {name: needs for name, needs in KUBE_PY_CALLS.items()
             if (network_policy or name not in NETWORK_POLICY_CALLS) and name not in MARK_SLOW_NODES_CALLS}
    needs = set().union(*calls.values()) | kopf_watch_needs() | KOPF_OWN_NEEDS | set(LEADER_CALLS.values())
    if '"blockOwnerDeletion": True' in Path(render.__file__).read_text():
        needs |= OWNER_REFERENCE_NEEDS
    if metrics_auth:  # on by default
        needs |= set(METRICS_AUTH_CALLS.values())
    return (needs | (KOPF_NAMESPACED_NEEDS if namespaced else set()) | (KUEUE_NEEDS if with_kueue else set())
            | (VOLCANO_NEEDS if with_volcano else set()))


@pytest.mark.parametrize("variant, namespaced, with_kueue, with_volcano", [
    ("chart-default", False, False, False), ("chart-namespaced-monitoring", True, False, False),
    ("chart-kueue", False, True, False), ("chart-volcano", False, False, True)])
def test_rbac_grants_exactly_what_the_operator_uses(variant, rendered, namespaced, with_kueue, with_volcano):
    assert granted(objects_of(rendered[variant])) == operator_needs(namespaced, network_policy=namespaced,
                                                                    with_kueue=with_kueue, with_volcano=with_volcano)


def test_the_volcano_calls_of_kube_py_are_known():
    """Every Kube method that names Volcano's API calls a verb VOLCANO_NEEDS lists (apply is a patch that may
    create), and no Volcano resource but podgroups is named."""
    from ascend_hybrid.contracts import volcano

    source = Path(kube.__file__).read_text()
    methods = re.findall(r"    def (\w+)\(self[^)]*\)[^:]*:\n((?:        .*\n|\n)+)", source)
    verbs = {body_verb for name, body in methods if "volcano." in body
             for body_verb in re.findall(r'self\._call\("(\w+)", volcano\.PODGROUPS', body)}
    assert verbs == {"apply", "get", "delete"}, verbs
    assert {verb for _, _, verb in VOLCANO_NEEDS} == {"get", "create", "patch", "delete"}
    assert {resource for _, resource, _ in VOLCANO_NEEDS} == {volcano.PODGROUPS}
    assert set(re.findall(r"\bvolcano\.([A-Z_]+)\b", source)) == {"PODGROUPS", "GROUP", "VERSION"}


def test_volcano_all_jobs_runs_the_operator_with_scheduler_volcano(rendered):
    args = one(objects_of(rendered["chart-volcano"]), "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--scheduler=volcano" in args
    default = one(objects_of(rendered["chart-default"]), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert not [arg for arg in default["args"] if arg.startswith("--scheduler")]


def test_the_kueue_calls_of_kube_py_are_known():
    """Every Kube method that names Kueue's API calls a verb KUEUE_NEEDS lists, and no Kueue resource but
    workloads is named: anything more needs the chart's kueue rule widened (and this test)."""
    from ascend_hybrid.contracts import kueue

    source = Path(kube.__file__).read_text()
    methods = re.findall(r"    def (\w+)\(self[^)]*\)[^:]*:\n((?:        .*\n|\n)+)", source)
    verbs = {body_verb for name, body in methods if "kueue." in body
             for body_verb in re.findall(r'self\._call\("(\w+)", kueue\.WORKLOADS', body)}
    assert verbs == {verb for _, _, verb in KUEUE_NEEDS}, verbs
    assert {resource for _, resource, _ in KUEUE_NEEDS} == {kueue.WORKLOADS}
    assert set(re.findall(r"\bkueue\.([A-Z_]+)\b", source)) == {"WORKLOADS", "GROUP", "WORKLOAD_VERSION"}


def test_kueue_rbac_follows_the_watched_namespaces(tmp_path):
    objects = objects_of(render_with(tmp_path, {"kueue": {"enabled": True}, "watchNamespaces": ["team-a", "team-b"]}))
    job_roles = {o["metadata"]["namespace"]: granted([o]) for o in objects
                 if o["kind"] == "Role" and ("", "pods", "create") in granted([o])}
    assert set(job_roles) == {"team-a", "team-b"}
    assert all(KUEUE_NEEDS <= needs for needs in job_roles.values())
    assert not KUEUE_NEEDS & granted([o for o in objects if o["kind"] == "ClusterRole"])


def test_cluster_mode_binds_everything_cluster_wide(rendered):
    objects = objects_of(rendered["chart-default"])
    namespaced = sorted(o["metadata"]["name"] for o in objects if o["kind"] in ("Role", "RoleBinding"))
    # only the Lease, and the device plugin's DaemonSets in kube-system, are namespaced
    assert namespaced == ["ascend-hybrid-operator-device-plugin"] * 2 + ["ascend-hybrid-operator-leader-election"] * 2
    account = one(objects, "ServiceAccount")["metadata"]
    for binding in (o for o in objects if o["kind"] == "ClusterRoleBinding"):
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["name"],
                                        "namespace": account["namespace"]}]
        one(objects, "ClusterRole", binding["roleRef"]["name"])
    crd_get = [rule for role in objects if role["kind"] == "ClusterRole" for rule in role["rules"]
               if rule.get("resources") == ["customresourcedefinitions"] and "get" in rule["verbs"]]
    assert crd_get == [{"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
                        "resourceNames": [crd.build()["metadata"]["name"], crd.build_channel()["metadata"]["name"]],
                        "verbs": ["get"]}]


def test_namespaced_mode_uses_roles_per_namespace(rendered):
    values = yaml.safe_load(VARIANTS["chart-namespaced-monitoring"][0].read_text())
    objects = objects_of(rendered["chart-namespaced-monitoring"])
    reviews = set(METRICS_AUTH_CALLS.values())  # metrics.auth: cluster-wide by nature, create only
    cluster_wide = granted([o for o in objects if o["kind"] == "ClusterRole"])
    assert cluster_wide & reviews == reviews
    cluster_wide -= reviews
    assert {resource for _, resource, _ in cluster_wide} == {"nodes", "customresourcedefinitions", "namespaces", "pods"}
    assert {verb for _, resource, verb in cluster_wide if resource == "pods"} == {"list"}
    assert {verb for _, _, verb in cluster_wide} == {"get", "list", "watch"}
    job_roles = {o["metadata"]["namespace"] for o in objects
                 if o["kind"] == "Role" and ("", "pods", "create") in granted([o])}
    assert job_roles == set(values["watchNamespaces"])
    bound = {(o["metadata"]["namespace"], o["roleRef"]["name"]) for o in objects if o["kind"] == "RoleBinding"}
    assert {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in objects if o["kind"] == "Role"} == bound
    device_info = one(objects, "Role", "ascend-hybrid-operator-deviceinfo")
    assert device_info["metadata"]["namespace"] == "kube-system"
    assert granted([device_info]) == {("", "configmaps", "list"), ("", "configmaps", "watch")}


# --- deploy/operator.yaml --------------------------------------------------------------------------------------

def test_deploy_manifest_is_up_to_date():
    assert not chartgen.deploy_manifest_stale(), "deploy/operator.yaml is stale: run `ascend-hybrid chart write`"


def test_deploy_manifest_drift_is_detected(tmp_path):
    copy = tmp_path / "operator.yaml"
    assert chartgen.deploy_manifest_stale(copy)
    chartgen.write_deploy_manifest(copy)
    assert not chartgen.deploy_manifest_stale(copy)
    copy.write_text(copy.read_text().replace("replicas: 2", "replicas: 3"))
    assert chartgen.deploy_manifest_stale(copy)


def test_deploy_manifest_is_the_namespace_crd_and_chart():
    objects = objects_of(chartgen.deploy_manifest_path().read_text())
    assert objects[0] == {"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": chartgen.NAMESPACE, "labels": {"app.kubernetes.io/name": "ascend-hybrid-operator",
                                               "pod-security.kubernetes.io/enforce": "restricted",
                                               "pod-security.kubernetes.io/warn": "restricted"}}}
    assert [o for o in objects if o["kind"] == "CustomResourceDefinition"] == [crd.build(), crd.build_channel()]
    namespaced = [o for o in objects if "namespace" in o["metadata"]]
    elsewhere = {(o["kind"], o["metadata"]["name"], o["metadata"]["namespace"]) for o in namespaced
                 if o["metadata"]["namespace"] != chartgen.NAMESPACE}
    # reading the device plugin's DaemonSets where MindCluster installs them is all the operator holds elsewhere
    assert elsewhere == {(kind, "ascend-hybrid-operator-device-plugin", "kube-system") for kind in ("Role", "RoleBinding")}
    assert {o["kind"] for o in objects} == {"Namespace", "CustomResourceDefinition", "ServiceAccount",
                                           "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Service",
                                           "Deployment", "PodDisruptionBudget", "ValidatingAdmissionPolicy",
                                           "ValidatingAdmissionPolicyBinding"}
    for obj in objects:
        kubernetes_validate.validate(obj, KUBERNETES_SCHEMA, strict=True)
