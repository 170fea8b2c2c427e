"""The shell's side of refusals (an ApiException → a Refused naming the call) and the metrics endpoint's
TokenReview + SubjectAccessReview filter, against a local HTTPS server and a fake reviewer API."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ascend_hybrid.controller import metrics_auth
from ascend_hybrid.controller.kube import Kube
from ascend_hybrid.controller.refused import Refused


def api_error(status, message, name=None):
    error = ApiException(status=status, reason={400: "Bad Request", 403: "Forbidden", 422: "Unprocessable Entity"}[status])
    error.body = json.dumps({"kind": "Status", "message": message, "details": {"name": name, "kind": "pods"}})
    return error


@pytest.mark.parametrize("status", [400, 403, 422])
def test_a_refusal_is_raised_once_naming_the_call(status):
    calls = []

    def refuse(namespace, body):
        calls.append(namespace)
        raise api_error(status, f'Pod "{body["metadata"]["name"]}" is invalid: spec.containers[0].image: Required value',
                        name=body["metadata"]["name"])

    kube = Kube(client.ApiClient(), attempts=5, first_backoff_seconds=0)
    manifest = {"metadata": {"name": "demo-a1-0", "namespace": "team"}}
    with pytest.raises(Refused) as refused:
        kube._call("create", "pods", refuse, "team", manifest)
    assert calls == ["team"]  # never retried
    refusal = refused.value.refusal("fallback")
    assert (refusal.verb, refusal.resource, refusal.name, refusal.namespace, refusal.status) == (
        "create", "pods", "demo-a1-0", "team", status)
    assert refusal.message.endswith("spec.containers[0].image: Required value")
    assert isinstance(refused.value, ApiException)  # existing `except ApiException` handlers still catch it


def test_a_conflict_is_still_retried_not_refused():
    answers = [api_error(422, "x"), None]
    answers[0].status = 409
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) == 1:
            raise answers[0]
        return "ok"
    assert Kube(client.ApiClient(), attempts=3, first_backoff_seconds=0)._call("patch", "pods", flaky) == "ok"


class FakeReviews:
    def __init__(self, tokens: dict[str, str], allowed: set[str]):
        self.tokens, self.allowed, self.reviews = tokens, allowed, []

    def create_token_review(self, review):
        self.reviews.append("token")
        user = self.tokens.get(review.spec.token)
        return client.V1TokenReview(spec=review.spec, status=client.V1TokenReviewStatus(
            authenticated=user is not None, user=client.V1UserInfo(username=user, groups=["g"]) if user else None))

    def create_subject_access_review(self, review):
        self.reviews.append("access")
        attributes = review.spec.non_resource_attributes
        assert (attributes.path, attributes.verb) == ("/metrics", "get")
        return client.V1SubjectAccessReview(spec=review.spec, status=client.V1SubjectAccessReviewStatus(
            allowed=review.spec.user in self.allowed))


@pytest.fixture
def server():
    fake = FakeReviews({"prom-token": "system:serviceaccount:monitoring:prometheus", "nobody-token": "nobody"},
                       {"system:serviceaccount:monitoring:prometheus"})
    reviewer = metrics_auth.Reviewer(client.ApiClient())
    reviewer.authn = reviewer.authz = fake
    running = metrics_auth.serve_authenticated("127.0.0.1", 0, client.ApiClient(), reviewer=reviewer)
    yield running.server_address[1], fake
    running.shutdown()


def scrape(port, token=None, path="/metrics"):
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # self-signed, as Prometheus' insecureSkipVerify
    request = urllib.request.Request(f"https://127.0.0.1:{port}{path}",
                                     headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_metrics_need_a_token_allowed_to_get_them(server):
    port, fake = server
    assert scrape(port)[0] == 401
    assert scrape(port, "forged")[0] == 401
    assert scrape(port, "nobody-token")[0] == 403
    code, text = scrape(port, "prom-token")
    assert code == 200 and "ascend_hybrid_api_calls_total" in text
    reviews = len(fake.reviews)
    assert scrape(port, "prom-token")[0] == 200 and len(fake.reviews) == reviews  # cached
    assert scrape(port, "prom-token", "/other")[0] == 404
