"""Isolation on the real apiserver (docs/reliability.md, "Security"): one job's pods cannot touch another job, and
nothing a pod, a channel or a ConfigMap says can stall or crash the operator.

- a pod of job A, with a real token of its own ServiceAccount (TokenRequest, bound to the pod as the kubelet asks
  it), is refused (403) every use of job B's channel, and any list or create; B runs on untouched;
- a pod claiming job B's labels is refused at admission by the chart's ValidatingAdmissionPolicy, while the
  operator's own pods pass it;
- a gzip bomb in a rank-table ConfigMap is refused while it expands: the operator stays up, within its memory, says
  why on the job and writes the table back;
- malformed reports and metrics pages (a parser error, a redirect, a page too large) are skipped and counted: every
  job keeps reconciling, its telemetry too.
"""

from __future__ import annotations

import base64
import http.server
import json
import re
import threading
import time
import zlib
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path

import yaml
from kubernetes import client, config

from ascend_hybrid.contracts import names
from ascend_hybrid.devtools import chartgen
from ascend_hybrid.gang import ranktable
from ascend_hybrid.spec.api import CHANNEL_PLURAL, VERSION
from support.faults import CaseResult, Monitor, check_job, converge
from support.operator_harness import Jobs, job_manifest, kubectl, patch_channel, wait_for

GROUP = names.GROUP
TOKEN_SECONDS = 600


def token_client(fault_cluster, token: str, path: Path) -> client.ApiClient:
    """An API client holding only `token` (the cluster's server and CA from the admin kubeconfig)."""
    admin = yaml.safe_load(Path(fault_cluster.kubeconfig).read_text())
    context = next(c["context"] for c in admin["contexts"] if c["name"] == admin["current-context"])
    cluster = next(c["cluster"] for c in admin["clusters"] if c["name"] == context["cluster"])
    ca_data = cluster.get("certificate-authority-data") or base64.b64encode(
        Path(cluster["certificate-authority"]).read_bytes()).decode()
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "pod",
        "clusters": [{"name": "sim", "cluster": {"server": cluster["server"], "certificate-authority-data": ca_data}}],
        "users": [{"name": "pod", "user": {"token": token}}],
        "contexts": [{"name": "pod", "context": {"cluster": "sim", "user": "pod"}}]}))
    return config.new_client_from_config(config_file=str(path))


def service_account_token(fault_cluster, namespace: str, account: str, pod: dict | None = None) -> str:
    """A token of `account` from the TokenRequest API; bound to `pod` as its kubelet asks it, when given: what code
    running in that pod can present."""
    bound = None if pod is None else client.V1BoundObjectReference(
        kind="Pod", api_version="v1", name=pod["metadata"]["name"], uid=pod["metadata"]["uid"])
    return fault_cluster.core.create_namespaced_service_account_token(account, namespace, client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=TOKEN_SECONDS, bound_object_ref=bound))
    ).status.token


def status_of(call) -> int:
    try:
        call()
    except client.ApiException as error:
        return error.status
    return 200


def a_report(pod: dict, state: str, generation: int = 0, **fields) -> str:
    return json.dumps({"uid": pod["metadata"]["uid"], "generation": generation, "state": state,
                       "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"), **fields})


def rejected(operator, kind: str, reason: str) -> float:
    found = re.search(rf'^ascend_hybrid_rejected_inputs_total{{kind="{kind}",reason="{reason}"}} ([0-9.e+]+)$',
                      operator.metrics(), re.M)
    return float(found.group(1)) if found else 0.0


def test_a_pod_of_one_job_cannot_touch_another_jobs_channel(jobs, fault_cluster, report, tmp_path):
    with Monitor(fault_cluster.core) as monitor:
        jobs.create(job_manifest("iso-a", data=2, tensor=4, per_pod=4))
        jobs.create(job_manifest("iso-b", data=2, tensor=4, per_pod=4))
        converge(jobs, "iso-a")
        converge(jobs, "iso-b")
        began = time.monotonic()
        (pod_a, other_a), pods_b = sorted(jobs.pods("iso-a"), key=lambda p: p["metadata"]["name"]), jobs.pods("iso-b")
        token = service_account_token(fault_cluster, jobs.namespace, pod_a["spec"]["serviceAccountName"], pod_a)
        custom = client.CustomObjectsApi(token_client(fault_cluster, token, tmp_path / "a.kubeconfig"))
        ns, channel_b, channel_a = jobs.namespace, names.launcher_channel("iso-b"), names.launcher_channel("iso-a")
        forged = {"data": {pods_b[0]["metadata"]["name"]: a_report(pods_b[0], "Failed", cause="ConfigError"),
                           "generation": "99999999"}}
        merge = {"_content_type": "application/merge-patch+json"}
        attempts = {
            "patch B's channel": lambda: custom.patch_namespaced_custom_object(
                GROUP, VERSION, ns, CHANNEL_PLURAL, channel_b, forged, **merge),
            "read B's channel": lambda: custom.get_namespaced_custom_object(GROUP, VERSION, ns, CHANNEL_PLURAL,
                                                                           channel_b),
            "watch B's channel": lambda: custom.list_namespaced_custom_object(
                GROUP, VERSION, ns, CHANNEL_PLURAL, field_selector=f"metadata.name={channel_b}", watch=True,
                timeout_seconds=1, _preload_content=False).read(),
            "list every channel": lambda: custom.list_namespaced_custom_object(GROUP, VERSION, ns, CHANNEL_PLURAL),
            "delete B's channel": lambda: custom.delete_namespaced_custom_object(GROUP, VERSION, ns, CHANNEL_PLURAL,
                                                                                channel_b),
            "make a channel": lambda: custom.create_namespaced_custom_object(GROUP, VERSION, ns, CHANNEL_PLURAL, {
                "apiVersion": f"{GROUP}/{VERSION}", "kind": "LauncherChannel", "metadata": {"name": "mine"},
                "data": {}}),
        }
        refused = {what: status_of(call) for what, call in attempts.items()}
        assert refused == dict.fromkeys(attempts, 403), refused
        # its own channel, by name only: read, watched, its report written
        own = {
            "read": lambda: custom.get_namespaced_custom_object(GROUP, VERSION, ns, CHANNEL_PLURAL, channel_a),
            "watch": lambda: custom.list_namespaced_custom_object(
                GROUP, VERSION, ns, CHANNEL_PLURAL, field_selector=f"metadata.name={channel_a}", watch=True,
                timeout_seconds=1, _preload_content=False).read(),
            "report": lambda: custom.patch_namespaced_custom_object(
                GROUP, VERSION, ns, CHANNEL_PLURAL, channel_a,
                {"data": {pod_a["metadata"]["name"]: a_report(pod_a, "Started", resumedFrom=0)}}, **merge),
        }
        assert {what: status_of(call) for what, call in own.items()} == dict.fromkeys(own, 200)
        # a report under the name of a pod of another attempt is read by no one, and counted
        before = rejected(jobs.operator, "launcher-report", "not-current-attempt")
        custom.patch_namespaced_custom_object(GROUP, VERSION, ns, CHANNEL_PLURAL, channel_a, {"data": {
            names.pod_name("iso-a", 7, 1): a_report(other_a, "Failed", cause="ConfigError")}}, **merge)
        wait_for(lambda: rejected(jobs.operator, "launcher-report", "not-current-attempt") > before, 30,
                 "the stale report counted", jobs.operator.log_tail)
        time.sleep(5)  # what a forged report would have done, it would have done by now
        seconds = time.monotonic() - began
        for name in ("iso-a", "iso-b"):
            status = jobs.status(name)
            assert (status["phase"], status["attempt"], status.get("restarts", 0), status.get("lastFailure")) == (
                "Running", 1, 0, None), (name, status)
        channel = client.CustomObjectsApi(fault_cluster.api).get_namespaced_custom_object(
            GROUP, VERSION, ns, CHANNEL_PLURAL, channel_b)
        assert "generation" not in (channel.get("data") or {}), channel  # B's generation untouched
    duplicated, lost = check_job(jobs, "iso-b", 2)
    assert (duplicated, lost, monitor.max_duplicates, monitor.double_booked) == (0, 0, 0, [])
    report.add(CaseResult("a pod of job A forging job B's reports with its own ServiceAccount token", len(attempts),
                          duplicated, lost, seconds, "every use of B's channel 403; B Running, attempt 1"))


def admin_username(fault_cluster) -> str:
    review = client.AuthenticationV1Api(fault_cluster.api).create_self_subject_review(
        client.V1SelfSubjectReview(api_version="authentication.k8s.io/v1", kind="SelfSubjectReview"))
    return review.status.user_info.username


def test_only_the_operator_may_make_a_pod_a_member_of_a_job(jobs, fault_cluster, report, tmp_path, namespace):
    """The chart's ValidatingAdmissionPolicy, bound to this namespace, with the operator (here: the cluster admin's
    identity it runs with) as the one that may set the job labels. A tenant allowed to create pods is refused one
    that claims job B's labels; the operator's own pods of a new job pass."""
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"watchNamespaces": [namespace], "jobPodLabels": {
        "enforced": True, "operatorUsernames": [admin_username(fault_cluster)]}}))
    rendered = [o for o in yaml.safe_load_all(chartgen.template([values], release=f"iso-{namespace[-5:]}"))
                if o and o["kind"].startswith("ValidatingAdmissionPolicy")]
    manifest = tmp_path / "policy.yaml"
    manifest.write_text(yaml.safe_dump_all(rendered))
    core, rbac = fault_cluster.core, client.RbacAuthorizationV1Api(fault_cluster.api)
    with ExitStack() as undo:
        kubectl(fault_cluster, "apply", "-f", str(manifest))
        undo.callback(kubectl, fault_cluster, "delete", "-f", str(manifest), "--ignore-not-found", check=False)
        jobs.create(job_manifest("iso-b", data=2, tensor=4, per_pod=4))
        converge(jobs, "iso-b")
        began = time.monotonic()
        core.create_namespaced_service_account(namespace, {"metadata": {"name": "tenant"}})
        rbac.create_namespaced_role(namespace, {"metadata": {"name": "tenant"}, "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "patch", "delete"]}]})
        rbac.create_namespaced_role_binding(namespace, {
            "metadata": {"name": "tenant"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                                        "name": "tenant"},
            "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": namespace}]})
        tenant = client.CoreV1Api(token_client(fault_cluster, service_account_token(fault_cluster, namespace, "tenant"),
                                               tmp_path / "tenant.kubeconfig"))
        victim = jobs.pods("iso-b")[0]
        impostor = {"metadata": {"name": "impostor", "labels": dict(victim["metadata"]["labels"])},
                    "spec": {"serviceAccountName": "tenant", "containers": [{"name": "c", "image": "busybox"}]}}

        def refusal() -> str | None:
            try:
                tenant.create_namespaced_pod(namespace, impostor)
            except client.ApiException as error:
                return f"{error.status} {error.body}"
            tenant.delete_namespaced_pod("impostor", namespace, grace_period_seconds=0)  # admitted: not in force yet
            wait_for(lambda: status_of(lambda: core.read_namespaced_pod("impostor", namespace)) == 404, 30,
                     "the admitted impostor to go")
            return None
        # the apiserver learns a new policy from a watch: it is in force within seconds
        answer = wait_for(refusal, 60, "the policy in force")
        assert answer.startswith(("403", "422")) and names.JOB_LABEL in answer, answer
        plain = {"metadata": {"name": "plain", "labels": {"app": "mine"}},
                 "spec": {"serviceAccountName": "tenant", "containers": [{"name": "c", "image": "busybox"}]}}
        tenant.create_namespaced_pod(namespace, plain)  # a pod that claims no job is the tenant's business
        relabel = {"metadata": {"labels": {names.JOB_LABEL: "iso-b"}}}
        assert status_of(lambda: tenant.patch_namespaced_pod("plain", namespace, relabel)) in (403, 422)
        tenant.delete_namespaced_pod("plain", namespace)
        jobs.create(job_manifest("iso-c", data=2, tensor=4, per_pod=4))  # the operator's own pods pass it
        converge(jobs, "iso-c")
        seconds = time.monotonic() - began
    status = jobs.status("iso-b")
    assert (status["phase"], status["attempt"], len(jobs.pods("iso-b"))) == ("Running", 1, 2), status
    report.add(CaseResult("a tenant's pod claiming job B's labels (the chart's admission policy)", 2, 0, 0, seconds,
                          "refused at admission naming the label; the operator's pods admitted"))


def peak_memory_bytes(pid: int) -> int:
    """The process's peak resident memory (VmHWM)."""
    found = re.search(r"^VmHWM:\s+(\d+) kB$", Path(f"/proc/{pid}/status").read_text(), re.M)
    return int(found.group(1)) * 1024 if found else 0


def test_a_gzip_bomb_in_a_rank_table_configmap_is_refused_and_the_job_says_why(jobs, fault_cluster, report):
    """512 MiB of zeros in half a megabyte of binaryData, pointed at by hccl.json: anyone who may edit ConfigMaps
    in the namespace can write it. The operator refuses it at 32 MiB of expansion, says so on the job, writes the
    table back, and goes on reconciling every job."""
    with Monitor(fault_cluster.core) as monitor:
        jobs.create(job_manifest("bomb", data=2, tensor=4, per_pod=4))
        converge(jobs, "bomb")
        table = jobs.rank_table("bomb")
        pid = jobs.operator.process.pid
        peak = peak_memory_bytes(pid)
        compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        packed = b"".join([*(compressor.compress(b"\0" * (1 << 20)) for _ in range(512)), compressor.flush()])
        assert len(packed) < 1024 * 1024  # a ConfigMap holds it
        pointer = {"status": "completed", "version": "1.0", "server_count": "2",
                   ranktable.COMPRESSED_FIELD: ranktable.COMPRESSED_KEY}
        began = time.monotonic()
        fault_cluster.core.patch_namespaced_config_map(names.rank_table_config_map("bomb"), jobs.namespace, {
            "data": {ranktable.TABLE_KEY: json.dumps(pointer)},
            "binaryData": {ranktable.COMPRESSED_KEY: base64.b64encode(packed).decode()}})
        wait_for(lambda: any(reason == "RankTableUnreadable" and "expands past" in message
                             for _, reason, message in jobs.events("bomb")), 60, "the job to say why",
                 lambda: jobs.describe("bomb"))
        wait_for(lambda: jobs.rank_table("bomb") == table, 60, "the table written back", lambda: jobs.describe("bomb"))
        assert jobs.operator.process.poll() is None and jobs.operator.healthz() == 200
        grown = peak_memory_bytes(pid) - peak
        assert grown < 200 * 1024 * 1024, f"the operator's peak memory grew {grown / 2 ** 20:.0f} MiB"
        jobs.create(job_manifest("after-bomb", data=2, tensor=4, per_pod=4))  # and every other job goes on
        converge(jobs, "after-bomb")
        seconds = time.monotonic() - began
        assert jobs.status("bomb")["phase"] == "Running" and jobs.status("bomb")["attempt"] == 1
    duplicated, lost = check_job(jobs, "bomb", 2)
    assert (duplicated, lost, monitor.max_duplicates, monitor.double_booked) == (0, 0, 0, [])
    report.add(CaseResult("a gzip bomb (512 MiB in 0.5 MB) in a rank-table ConfigMap", 1, duplicated, lost, seconds,
                          f"refused at 32 MiB; the operator's peak grew {grown / 2 ** 20:.0f} MiB; table written back"))


class Pages(http.server.BaseHTTPRequestHandler):
    """A trainer pod's :9400/metrics as the test wants it: by the address asked, a page with a broken line, a
    redirect to the trap, a page too large, or a good one. /trap counts visits."""

    pages: dict[str, bytes | str] = {}
    trapped: list[str] = []

    def do_GET(self):
        host = self.server.server_address[0]
        if self.path == "/trap":
            Pages.trapped.append(host)
        page = Pages.pages.get(host, b"")
        if isinstance(page, str):  # a redirect
            self.send_response(302)
            self.send_header("Location", page)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)

    def log_message(self, *_):
        pass


FIGURES = b"ascend_trainer_loss 2.5\nascend_trainer_step_seconds_sum 14\nascend_trainer_step_seconds_count 7\n"
GOOD_PAGE = b"ascend_trainer_step 7\n" + FIGURES
BROKEN_PAGE = b"ascend_trainer_step abc\n" + FIGURES  # the line that stopped telemetry for every job


def test_malformed_reports_and_metrics_pages_leave_every_job_reconciling(fault_cluster, namespace, start_operator,
                                                                        report):
    operator = start_operator("--telemetry-interval", "1")
    jobs = Jobs(fault_cluster.api, namespace, operator)
    Pages.trapped = []
    with ExitStack() as stack, Monitor(fault_cluster.core) as monitor:
        for name in ("junk-r", "junk-m", "big-m", "good-m"):
            jobs.create(job_manifest(name, data=2, tensor=4, per_pod=4))
        for name in ("junk-r", "junk-m", "big-m", "good-m"):
            converge(jobs, name)
        began = time.monotonic()
        ips = {name: [p["status"]["podIP"] for p in sorted(jobs.pods(name), key=lambda p: p["metadata"]["name"])]
               for name in ("junk-m", "big-m", "good-m")}
        trap = f"http://{ips['good-m'][1]}:{names.METRICS_PORT}/trap"
        Pages.pages = {ips["junk-m"][0]: BROKEN_PAGE, ips["junk-m"][1]: trap,
                       ips["big-m"][0]: b"ascend_trainer_step 1\n" * 60_000, ips["big-m"][1]: b"",
                       ips["good-m"][0]: GOOD_PAGE, ips["good-m"][1]: GOOD_PAGE}
        for ip in Pages.pages:
            server = http.server.ThreadingHTTPServer((ip, names.METRICS_PORT), Pages)
            threading.Thread(target=server.serve_forever, daemon=True).start()
            stack.callback(server.server_close)
            stack.callback(server.shutdown)
        # the reports: junk that stays (too deep, under no member's name) and junk a member's launcher overwrites
        pods = sorted(jobs.pods("junk-r"), key=lambda p: p["metadata"]["name"])
        patch_channel(jobs.custom, namespace, "junk-r", {
            names.pod_name("junk-r", 9, 0): '{"state": "Started", "x": ' + "[" * 3000 + "]" * 3000 + "}",
            names.pod_name("junk-r", 9, 1): a_report(pods[0], "Started"),
            pods[0]["metadata"]["name"]: a_report(pods[0], "Failed", cause="Pwned", time="2026-01-01T00:00:00"),
            pods[1]["metadata"]["name"]: '{"uid": "x", "generation": 0, "state": "Started", "resumedFrom": -'
                                         + "9" * 400 + "}"})
        wait_for(lambda: any(reason == "LauncherReportRefused" for _, reason, _ in jobs.events("junk-r")), 30,
                 "the refused reports said", lambda: jobs.describe("junk-r"))
        # every job's telemetry goes on: the good job's figures, the broken page's other lines
        wait_for(lambda: (jobs.status("good-m").get("training") or {}).get("step") == 7, 60,
                 "the good job's step", lambda: jobs.describe("good-m"))
        wait_for(lambda: (jobs.status("junk-m").get("training") or {}).get("loss") == 2.5, 60,
                 "the broken page's other lines", lambda: jobs.describe("junk-m"))
        metrics_available = next(c for c in jobs.status("junk-m")["conditions"] if c["type"] == "MetricsAvailable")
        assert metrics_available["reason"] == "PartlyRefused" and "redirect" in metrics_available["message"]
        assert any(reason == "MetricsRefused" for _, reason, _ in jobs.events("junk-m"))
        wait_for(lambda: "bytes" in str(jobs.status("big-m").get("conditions")), 60, "the page too large said",
                 lambda: jobs.describe("big-m"))
        assert Pages.trapped == [], "a redirect was followed"
        # the channel's junk costs nothing: the launchers report, one fails, and its ranks restart in place
        patch_channel(jobs.custom, namespace, "junk-r", {
            pod["metadata"]["name"]: a_report(pod, "Started", resumedFrom=0) for pod in pods})
        patch_channel(jobs.custom, namespace, "junk-r", {
            pods[1]["metadata"]["name"]: a_report(pods[1], "Failed", cause="HCCLExecTimeout", rank=4, step=3)})
        wait_for(lambda: (jobs.status("junk-r").get("recovery") or {}).get("generation") == 1, 60,
                 "RestartRanks of the job with junk on its channel", lambda: jobs.describe("junk-r"))
        seconds = time.monotonic() - began
        for kind, reason in (("launcher-report", "too-deep"), ("launcher-report", "not-current-attempt"),
                             ("launcher-report", "bad-time"), ("launcher-report", "out-of-range"),
                             ("metrics-page", "malformed"), ("metrics-page", "redirect"),
                             ("metrics-page", "too-large")):
            assert rejected(operator, kind, reason) >= 1, (kind, reason, operator.metrics())
    for name in ("junk-m", "big-m", "good-m"):
        assert jobs.status(name)["phase"] == "Running" and not jobs.status(name).get("restarts"), name
    duplicated, lost = check_job(jobs, "good-m", 2)
    assert (duplicated, lost, monitor.max_duplicates, monitor.double_booked) == (0, 0, 0, [])
    report.add(CaseResult("malformed reports and metrics pages (too deep, naive time, huge integers, a broken line, "
                          "a redirect, a page past 1 MiB)", 8, duplicated, lost, seconds,
                          "each skipped and counted; every job reconciling, its telemetry too"))
    jobs.delete_all(timeout=120)
