"""Kubernetes' own validation rules (k8s_validation/) against the cases Kubernetes tests them with, and the job
they make fail: a template the apiserver would refuse in every pod fails the job at once with InvalidSpec."""

from __future__ import annotations

from decimal import Decimal

import pytest

from ascend_hybrid.reconcile import decision as reconcile
from ascend_hybrid.reconcile.decision import decide
from ascend_hybrid.reconcile.state import Observed
from ascend_hybrid.spec import k8s_validation as k8s
from ascend_hybrid.spec import rules

# --- quantities: apimachinery v0.36.3 pkg/api/resource/quantity_test.go, TestQuantityParse -------------------------

PARSES = [  # (input, value) where ParseQuantity keeps the value exact (no rounding up to 1n, no cap at 2^63-1)
    ("0", 0), ("0n", 0), ("0Ki", 0), ("0T", 0), ("1", 1), ("1Ki", 1024), ("7Mi", 7 * 2 ** 20), ("3Ei", 3 * 2 ** 60),
    ("5n", Decimal("5e-9")), ("4u", Decimal("4e-6")), ("3m", Decimal("0.003")), ("8k", 8000), ("50k", 50000),
    ("2P", 2 * 10 ** 15), ("1E", 10 ** 18), ("1E-3", Decimal("0.001")), ("1e3", 1000), ("1E18", 10 ** 18),
    ("100.035k", 100035), ("0.0005k", Decimal("0.5")), ("0.00500", Decimal("0.005")), ("0.5e-2", Decimal("0.005")),
    ("10.035M", 10035000), ("1.3E+6", 1300000), ("1.53E12", 153 * 10 ** 10), ("6.987654321G", 6987654321),
    ("1.01E", 101 * 10 ** 16), ("100.035Ki", Decimal("102435.84")), ("0.5Mi", 2 ** 19), (".001", Decimal("0.001")),
    ("1.", 1), ("1.G", 10 ** 9), ("12E", 12 * 10 ** 18), ("-3", -3), ("+5m", Decimal("0.005")),
    # corners of parseQuantityString that ParseQuantity's int64 fast path reads as 0 (so the apiserver takes them)
    ("Gi", 0), (".", 0), ("+", 0), ("-", 0), ("e5", 0),
]
REFUSED = ["", "1.1.M", "1+1.0M", "0.1mi", "0.1am", "aoeu", ".5i", "1i", "-3.01i", "-3.01e-", " 1", "1 ",
           "16 GB", "2 cores", "1e1.5", "1ee5"]


@pytest.mark.parametrize("text, value", PARSES, ids=[p[0] for p in PARSES])
def test_quantities_kubernetes_parses(text, value):
    assert k8s.parse_quantity(text) == Decimal(value)


@pytest.mark.parametrize("text", REFUSED)
def test_quantities_kubernetes_refuses(text):
    with pytest.raises(k8s.QuantityError):
        k8s.parse_quantity(text)


def test_the_apiserver_trims_a_quantity_from_json_first():
    assert k8s.json_quantity(" 2 ") == 2
    with pytest.raises(k8s.QuantityError, match=r"must match the regular expression"):
        k8s.json_quantity("2 cores")


# --- names: apimachinery content tests (kube_test.go, dns_test.go) -----------------------------------------------

@pytest.mark.parametrize("key", ["simple", "now-with-dashes", "1-starts-with-num", "1234", "simple/simple",
                                 "now-with-dashes/simple", "now-with-dashes/now-with-dashes", "now.with.dots/simple",
                                 "now-with.dashes-and.dots/simple", "1-num.2-num/3-num", "1234/5678", "1.2.3.4/5678",
                                 "Uppercase_Is_OK_123", "example.com/Uppercase_Is_OK_123", "a" * 63,
                                 "a" * 253 + "/" + "b" * 63])
def test_label_keys_kubernetes_accepts(key):
    assert k8s.label_key_errors(key) == []


@pytest.mark.parametrize("key", ["nospecialchars%^=@", "cantendwithadash-", "-cantstartwithadash-", "only/one/slash",
                                 "Example.com/abc", "example_com/abc", "example.com/", "/simple", "a" * 64,
                                 "a" * 254 + "/abc", ""])
def test_label_keys_kubernetes_refuses(key):
    assert k8s.label_key_errors(key)


@pytest.mark.parametrize("value, ok", [("", True), ("simple", True), ("now-with-dashes", True), ("1-starts-with-num", True),
                                       ("end-with-num-1", True), ("1234", True), ("a" * 63, True), ("a" * 64, False),
                                       ("nospecialchars%^=@", False), ("Tama-nui-te-rā.is.Māori.sun", False),
                                       ("\\backslashes\\are\\bad", False), ("-starts-with-dash", False),
                                       ("ends-with-dash-", False), (".starts.with.dot", False)])
def test_label_values(value, ok):
    assert (k8s.label_value_errors(value) == []) is ok


@pytest.mark.parametrize("name, ok", [("a", True), ("ab", True), ("a-b", True), ("0", True), ("a.b", True),
                                      ("a" * 253, True), ("a" * 254, False), ("A", False), ("a_b", False),
                                      ("-a", False), ("a-", False), ("a..b", False), ("", False)])
def test_dns1123_subdomains(name, ok):
    assert (k8s.dns1123_subdomain_errors(name) == []) is ok


def test_a_dns_label_with_dots_says_so():
    assert k8s.dns1123_label_errors("a.b") == ["must not contain dots"]


@pytest.mark.parametrize("name, ok", [("A", True), ("my.env-name", True), ("MY_ENV.NAME", True), ("1st", True),
                                      ("with space", True), ("!\"#$%&'()*+,-./:;<>?@[\\]^_`{|}~", True),
                                      ("A=B", False), ("", False), ("tab\there", False), ("é", False),
                                      ("new\nline", False)])
def test_env_names_are_the_relaxed_rule(name, ok):
    """IsRelaxedEnvVarName: printable ASCII but '=' (the gate went GA, Kubernetes 1.36 has no other rule)."""
    assert (k8s.env_var_name_errors(name) == []) is ok


# --- images: distribution/reference (the kubelet's ParseNormalizedNamed) -----------------------------------------

@pytest.mark.parametrize("image", ["ubuntu", "ubuntu:22.04", "library/ubuntu", "docker.io/library/ubuntu:latest",
                                   "registry.example.com:5000/team/trainer:1.0", "localhost/trainer",
                                   "[::1]:5000/a/b:c", "Registry.Example.com/a", "a__b", "a--b", "a.b/c_d:TAG",
                                   "x@sha256:" + "a" * 64, "x:1@sha512:" + "0" * 128])
def test_images_the_kubelet_can_pull(image):
    assert k8s.is_image_reference(image) and k8s.image_detail_errors(image) == []


@pytest.mark.parametrize("image", ["", "Ubuntu", "team/Trainer", "trainer:", "trainer :1", " trainer", "a___b",
                                   "-a", "a/-b", "trainer:" + "t" * 129, "a:b:c", "a@sha256:abc", "http://a/b"])
def test_images_that_do_not_parse(image):
    assert not k8s.is_image_reference(image)


@pytest.mark.parametrize("image, error", [
    ("a" * 64, "cannot specify 64-byte hexadecimal strings"),
    ("x@sha256:" + "A" * 64, "a sha256 digest is 64 lower-case hexadecimal characters"),
    ("x@sha256:" + "a" * 63 + "aa", "a sha256 digest is 64"),
    ("x@md5:" + "a" * 32, "unsupported digest algorithm 'md5'"),
    ("/".join(["abcdefghij"] * 24), "repository name must not be more than 255 characters"),  # docker.io/…
    ("a" * 250, "repository name must not be more than 255 characters"),  # docker.io/library/a…

])
def test_what_only_the_kubelets_parser_refuses(image, error):
    assert k8s.is_image_reference(image)
    assert any(message.startswith(error) for message in k8s.image_detail_errors(image))


# --- objects given to the CLI ------------------------------------------------------------------------------------

def test_object_shapes_accept_what_the_api_returns_and_name_what_is_wrong():
    from support.builders import NodeBuilder, PodBuilder

    assert k8s.object_problems(NodeBuilder("a").chip("910B").rack("r").taint("k").build()) == []
    assert k8s.object_problems(PodBuilder("job", 0).running().devices(count=8).build()) == []
    bad = NodeBuilder("a").chip("910B").condition("MemoryPressure", "False").build()
    bad["metadata"]["labels"]["rack"] = 3
    bad["status"]["conditions"].append("Ready")
    bad["status"]["allocatable"]["huawei.com/Ascend910"] = True
    assert k8s.object_problems(bad) == [
        'metadata.labels["rack"]=3: must be a string',
        "status.allocatable[\"huawei.com/Ascend910\"]=true: must be a quantity (e.g. '8', '500m', '16Gi')",
        'status.conditions[2]="Ready": must be an object']
    assert k8s.object_problems({"kind": "Pod", "metadata": {}}) == ["metadata.name: is required", "spec: is required"]


# --- the operator: a spec the apiserver would refuse in its pods fails the job, once, with InvalidSpec ------------

def test_a_template_only_python_can_check_fails_the_job_with_invalid_spec():
    from datetime import UTC, datetime

    body = {"apiVersion": "hybrid.ascend.dev/v1alpha1", "kind": "AscendHybridJob",
            "metadata": {"name": "demo", "namespace": "ns", "uid": "u", "generation": 1,
                         "creationTimestamp": "2026-11-29T11:59:00Z"},
            "spec": {"parallelism": {"data": 2}, "npu": {"perPod": 1},
                     "template": {"metadata": {"labels": {"team name": "nlp"}},
                                  "env": [{"name": "LOG=LEVEL", "value": "1"}]}}}
    with pytest.raises(rules.SpecError) as raised:
        rules.parse(body)
    observed = Observed(job=body, resolved=None, spec_problems=tuple(raised.value.problems), pods=(), rank_table=None,
                        children_ready=False, sched_ip=None, nodes={}, now=datetime(2026, 11, 29, 12, tzinfo=UTC))
    decision = decide(observed)
    assert decision.status["phase"] == "Failed"
    failed = next(c for c in decision.status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "InvalidSpec"
    assert 'spec.template.metadata.labels: key "team name" is not a valid label key' in failed["message"]
    assert 'spec.template.env[0].name="LOG=LEVEL"' in failed["message"]
    assert not any(type(action).__name__ in ("CreatePods", "Place", "EnsureChildren") for action in decision.actions)
    assert reconcile.decide(Observed(**{**observed.__dict__, "job": {**body, "status": decision.status}})).actions == []
