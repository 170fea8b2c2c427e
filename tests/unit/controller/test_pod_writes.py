"""Kube's pod writes past the client's models (Kube._send), against a local apiserver stand-in: what is sent, and
each answer as the model calls had it (409 on create and 404/422 fine, 500 retried, 422 on create refused)."""

from __future__ import annotations

import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from kubernetes import client

from ascend_hybrid.contracts import names
from ascend_hybrid.controller.kube import COLLECTION_CHUNK_MIN, Kube, collection_chunks
from ascend_hybrid.controller.refused import Refused


class Apiserver(BaseHTTPRequestHandler):
    answers: dict[tuple[str, str], list[int]] = {}
    seen: list[tuple[str, str, str, object]] = []

    def _answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        self.seen.append((self.command, self.path, self.headers.get("Content-Type"), body))
        statuses = self.answers.get((self.command, self.path.split("?")[0]), [200])
        status = statuses.pop(0) if len(statuses) > 1 else statuses[0]
        payload = json.dumps({"kind": "Status", "message": f"answered {status}"} if status >= 300
                             else {"kind": "Pod", "metadata": {"name": "p"}}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_POST = do_PATCH = do_DELETE = _answer

    def log_message(self, *args):
        pass


@pytest.fixture
def kube():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Apiserver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{server.server_address[1]}"
    Apiserver.answers, Apiserver.seen = {}, []
    yield Kube(client.ApiClient(configuration), attempts=3, first_backoff_seconds=0)
    server.shutdown()


def test_a_pod_is_created_as_its_manifest_with_the_field_manager_and_an_existing_one_is_fine(kube):
    manifest = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "job-a1-0", "namespace": "team"},
                "spec": {"containers": [{"name": "ascend", "image": "trainer"}]}}
    kube.create_pod(manifest)
    method, path, content_type, body = Apiserver.seen[0]
    assert (method, path, content_type, body) == (
        "POST", f"/api/v1/namespaces/team/pods?fieldManager={names.FIELD_MANAGER}", "application/json", manifest)
    Apiserver.answers[("POST", "/api/v1/namespaces/team/pods")] = [409]
    kube.create_pod(manifest)
    Apiserver.answers[("POST", "/api/v1/namespaces/team/pods")] = [422]
    with pytest.raises(Refused) as refused:
        kube.create_pod(manifest)
    assert (refused.value.name, refused.value.status, refused.value.message) == ("job-a1-0", 422, "answered 422")


def test_gates_are_removed_by_a_json_patch_retried_on_500_and_a_changed_pod_is_left_for_the_next_pass(kube):
    path = "/api/v1/namespaces/team/pods/job-a1-0"
    Apiserver.answers[("PATCH", path)] = [500, 200]
    kube.remove_gate("team", "job-a1-0", [names.GANG_GATE, "other/gate"])
    assert len(Apiserver.seen) == 2
    method, seen_path, content_type, patch = Apiserver.seen[-1]
    assert (method, seen_path, content_type) == ("PATCH", path, "application/json-patch+json")
    assert patch[1] == {"op": "replace", "path": "/spec/schedulingGates", "value": [{"name": "other/gate"}]}
    Apiserver.answers[("PATCH", path)] = [422]
    kube.remove_gate("team", "job-a1-0", [names.GANG_GATE])  # a test op failed: fine


def test_deleting_a_pod_that_is_gone_is_fine(kube):
    Apiserver.answers[("DELETE", "/api/v1/namespaces/team/pods/job-a1-0")] = [404]
    kube.delete_pod("team", "job-a1-0")
    assert Apiserver.seen[0][:2] == ("DELETE", "/api/v1/namespaces/team/pods/job-a1-0")


def test_a_whole_attempt_is_deleted_in_one_call_selected_by_its_labels_and_retried_on_500(kube):
    Apiserver.answers[("DELETE", "/api/v1/namespaces/team/pods")] = [500, 200]
    kube.delete_attempt_pods("team", "job", 3)
    assert len(Apiserver.seen) == 2
    method, path, _, _ = Apiserver.seen[-1]
    assert method == "DELETE" and urllib.parse.unquote(path) == (
        "/api/v1/namespaces/team/pods?labelSelector=hybrid.ascend.dev/job=job,hybrid.ascend.dev/attempt=3")
    # the pods' own grace: the kubelet's SIGTERM lets the ranks exit before their chips are handed out again
    kube.delete_attempt_pods("team", "job", 3, force=True)
    assert "gracePeriodSeconds=0" in Apiserver.seen[-1][1]
    kube.delete_attempt_pods("team", "job", 3, (0, 1, 2))
    assert urllib.parse.unquote(Apiserver.seen[-1][1]).endswith(",hybrid.ascend.dev/pod-index in (0,1,2)")


@pytest.mark.parametrize(("pods", "parallel", "calls"), [(2, 16, 1), (8, 16, 1), (9, 16, 2), (128, 16, 16),
                                                         (2048, 16, 16), (100, 1, 1), (17, 4, 3)])
def test_an_attempts_collection_delete_is_split_in_a_few_concurrent_calls(pods, parallel, calls):
    """The apiserver deletes one collection a pod at a time: a gang's restart splits it by index, at least
    COLLECTION_CHUNK_MIN pods a call and at most `parallel` calls, every index once, in order."""
    chunks = collection_chunks(tuple(range(pods)), parallel)
    assert len(chunks) == calls and [index for chunk in chunks for index in chunk] == list(range(pods))
    assert all(len(chunk) >= COLLECTION_CHUNK_MIN for chunk in chunks[:-1])
    assert collection_chunks((), parallel) == [()], "no index labels: the whole attempt in one call"
