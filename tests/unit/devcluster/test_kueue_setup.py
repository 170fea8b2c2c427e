"""`dev-cluster up --kueue`, the pure part: Kueue's configuration, its CRDs and webhooks rewritten for a manager on
127.0.0.1, the default queues from the simulated nodes, and the CA (no cluster, no Kueue process).

The webhook and CRD tests read the files the toolchain copied from Kueue's module (`dev-cluster build
--with-kueue`, which `make toolchain` runs); without them they fail, they never skip.
"""

from __future__ import annotations

import datetime as dt
import ipaddress

import pytest
import yaml

from ascend_hybrid.devcluster.controlplane import toolchain
from ascend_hybrid.devcluster.kueue import certs, manifests
from ascend_hybrid.devcluster.kueue.manager import OVERLAY_SCRIPT, command
from ascend_hybrid.devcluster.nodes.manifests import node_manifest, plan_nodes
from ascend_hybrid.devcluster.paths import ClusterPaths

PORTS = {"health": 14001, "metrics": 14002, "webhook": 14003}
CA = "Y2E="


@pytest.fixture(scope="module")
def kueue_files():
    directory = toolchain.kueue_manifests_dir()
    if not (directory / "webhooks.yaml").is_file():
        pytest.fail(f"Kueue's manifests are not in {directory}: run `ascend-hybrid dev-cluster build --with-kueue`",
                    pytrace=False)
    return directory


def test_every_server_of_kueue_is_on_loopback_at_the_chosen_ports_and_the_visibility_server_is_off():
    config = manifests.configuration(PORTS, "/certs")
    assert config["health"]["healthProbeBindAddress"] == "127.0.0.1:14001"
    assert config["metrics"]["bindAddress"] == "127.0.0.1:14002"
    assert config["webhook"] == {"host": "127.0.0.1", "port": 14003, "certDir": "/certs"}
    assert config["featureGates"]["VisibilityOnDemand"] is False, "it would bind :8082 on every address"
    assert "pprofBindAddress" not in config
    assert config["internalCertManagement"] == {"enable": False} and config["leaderElection"]["leaderElect"] is False
    assert config["integrations"]["frameworks"] == ["pod"] and config["manageJobsWithoutQueueName"] is False
    assert config["managedJobsNamespaceSelector"] == {"matchLabels": {"kueue.x-k8s.io/managed": "true"}}


@pytest.mark.toolchain  # reads the Kueue manifests the toolchain build copies
def test_the_webhooks_are_called_by_url_on_loopback_and_pods_only_in_managed_namespaces(kueue_files):
    documents = manifests.webhook_configurations((kueue_files / "webhooks.yaml").read_text(), 14003, CA)
    names = {webhook["name"] for document in documents for webhook in document["webhooks"]}
    assert names == manifests.KEPT_WEBHOOKS
    for document in documents:
        for webhook in document["webhooks"]:
            assert webhook["clientConfig"]["url"].startswith("https://127.0.0.1:14003/")
            assert set(webhook["clientConfig"]) == {"url", "caBundle"} and webhook["clientConfig"]["caBundle"] == CA
            if webhook["name"] in manifests.POD_WEBHOOKS:
                assert webhook["namespaceSelector"] == manifests.managed_selector()
    paths = {w["name"]: w["clientConfig"]["url"].split("14003")[1] for d in documents for w in d["webhooks"]}
    assert paths["mpod.kb.io"] == "/mutate--v1-pod" and paths["vpod.kb.io"] == "/validate--v1-pod"


@pytest.mark.toolchain  # reads the Kueue manifests the toolchain build copies
def test_a_webhook_manifest_that_lost_a_webhook_we_need_is_an_error(kueue_files):
    text = (kueue_files / "webhooks.yaml").read_text().replace("name: mpod.kb.io", "name: mpod-renamed.kb.io")
    with pytest.raises(ValueError, match="mpod.kb.io"):
        manifests.webhook_configurations(text, 14003, CA)


@pytest.mark.toolchain  # reads the Kueue manifests the toolchain build copies
def test_crds_that_upstream_converts_by_webhook_get_our_url_and_the_others_stay_as_they_are(kueue_files):
    texts = [path.read_text() for path in sorted((kueue_files / "crds").glob("*.yaml"))]
    documents = manifests.crds(texts, 14003, CA)
    assert len(documents) == 11
    for crd, text in zip(documents, texts):
        plural = crd["spec"]["names"]["plural"]
        if plural in manifests.CONVERSION_CRDS:
            assert crd["spec"]["conversion"]["webhook"]["clientConfig"] == {
                "url": "https://127.0.0.1:14003/convert", "caBundle": CA}
        else:
            assert crd == yaml.safe_load(text)
        assert {v["name"] for v in crd["spec"]["versions"] if v.get("storage")} == {"v1beta2"}
    assert {crd["spec"]["names"]["plural"] for crd in documents} >= manifests.CONVERSION_CRDS


def test_default_queues_have_a_flavor_per_chip_type_and_the_nodes_totals_as_quota():
    nodes = [node_manifest(node) for node in [*plan_nodes(1, 4, "910B", 2), *plan_nodes(5, 2, "910A", 2)]]
    flavors, cluster_queue, local_queue = (lambda d: (d[:-2], d[-2], d[-1]))(manifests.default_queue_objects(nodes))
    assert {f["metadata"]["name"]: f["spec"]["nodeLabels"] for f in flavors} == {
        "ascend-910a": {"accelerator-type": "module"}, "ascend-910b": {"accelerator-type": "module-910b-8"}}
    (group,) = cluster_queue["spec"]["resourceGroups"]
    assert group["coveredResources"] == ["huawei.com/Ascend910", "cpu", "memory"], "cpu unquoted = never admitted"
    quotas = {f["name"]: {r["name"]: r["nominalQuota"] for r in f["resources"]} for f in group["flavors"]}
    assert quotas["ascend-910b"]["huawei.com/Ascend910"] == "32" and quotas["ascend-910a"]["huawei.com/Ascend910"] == "16"
    per_node = nodes[0]["status"]["allocatable"]
    assert quotas["ascend-910b"]["cpu"] == str(4 * int(per_node["cpu"]))
    assert cluster_queue["spec"]["preemption"] == {"withinClusterQueue": "LowerPriority"}
    assert local_queue["metadata"] == {"name": "ascend", "namespace": "default"}
    assert local_queue["spec"] == {"clusterQueue": "ascend"}


def test_quantities_add_up_in_their_units():
    assert manifests._quantity("1536Gi") == 1536 * 2**30 and manifests._quantity("2k") == 2000
    assert manifests._memory(3 * 1536 * 2**30) == "4608Gi" and manifests._memory(1000) == "1000"


def test_status_lines_show_each_queues_admitted_pending_and_npu_usage():
    queue = manifests.cluster_queue("ascend", {"910B": {"huawei.com/Ascend910": "32", "cpu": "8", "memory": "1Gi"}})
    queue["status"] = {"admittedWorkloads": 1, "pendingWorkloads": 2, "flavorsUsage": [
        {"name": "ascend-910b", "resources": [{"name": "huawei.com/Ascend910", "total": "16"},
                                              {"name": "cpu", "total": "0"}]}]}
    local = manifests.local_queue("ascend", "default", "ascend")
    lines = manifests.queue_summary([queue], [local])
    assert lines == ["  ClusterQueue ascend: 1 admitted, 2 pending; ascend-910b huawei.com/Ascend910 16/32",
                     "  LocalQueue default/ascend → ascend: 0 admitted, 0 pending"]


def test_the_manager_runs_under_a_private_etc_overlay_that_execs_into_kueue(tmp_path):
    paths = ClusterPaths("k", tmp_path / "k")
    args = command(paths, "/bin/kueue", tmp_path / "config.yaml", tmp_path / "certs")
    assert args[1:7] == ["--user", "--map-root-user", "--mount", "--propagation", "private", "sh"]
    assert args[args.index("-c") + 1] == OVERLAY_SCRIPT and 'exec "$@"' in OVERLAY_SCRIPT
    assert args[-4:] == ["/bin/kueue", f"--config={tmp_path / 'config.yaml'}", f"--kubeconfig={paths.kubeconfig}",
                         "--zap-log-level=2"]
    link = tmp_path / "k" / "kueue" / "etc-upper" / "kueue" / "metrics" / "certs"
    assert link.is_symlink() and link.readlink() == tmp_path / "certs", "Kueue's hard-coded metrics cert path"
    assert str(paths.root) in " ".join(args), "the pid is trusted by the cluster's directory in its command line"


def test_the_ca_signs_a_server_certificate_for_127_0_0_1_and_is_kept_while_valid(tmp_path):
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec

    files = certs.ensure(tmp_path / "certs")
    ca = x509.load_pem_x509_certificate(files.ca.read_bytes())
    cert = x509.load_pem_x509_certificate(files.cert.read_bytes())
    ca.public_key().verify(cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(cert.signature_hash_algorithm))
    assert cert.issuer == ca.subject and ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert (files.key.stat().st_mode & 0o777) == 0o600 and (files.ca_key.stat().st_mode & 0o777) == 0o600
    before = files.ca.read_bytes()
    assert certs.ensure(tmp_path / "certs").ca.read_bytes() == before, "a valid CA is kept: the caBundle stays right"
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=certs.VALIDITY_DAYS - certs.RENEW_BEFORE_DAYS + 1)
    assert not certs.still_valid(files, now=later)
    files.cert.write_text("not a certificate")
    assert certs.ensure(tmp_path / "certs").ca.read_bytes() != before
