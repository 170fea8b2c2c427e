"""The shell's side of reading what others write: each refusal counted in
ascend_hybrid_rejected_inputs_total{kind,reason} (and, for reports and rank tables, said in a Warning event on the
job); a trainer endpoint that answers too much, redirects, or breaks its parser costs only its own job's reading."""

from __future__ import annotations

import base64
import http.server
import json
import threading
import zlib
from contextlib import contextmanager

from prometheus_client import REGISTRY

from ascend_hybrid.contracts import names, untrusted
from ascend_hybrid.controller import telemetry
from ascend_hybrid.controller.loop import Controller
from ascend_hybrid.controller.records import Indexes
from ascend_hybrid.diagnosis import recovery
from ascend_hybrid.gang import ranktable
from support.builders import PodBuilder

KEY = ("default", "job")
REPORT = {"generation": 0, "state": "Started", "time": "2026-12-02T08:00:00Z", "resumedFrom": 0}


def rejected(kind: str, reason: str) -> float:
    return REGISTRY.get_sample_value("ascend_hybrid_rejected_inputs_total", {"kind": kind, "reason": reason}) or 0.0


def controller(pods: list[dict]) -> Controller:
    ctl = Controller(kube=None)  # type: ignore[arg-type] - nothing here calls the API
    ctl.indexes = Indexes(nodes=list, npu_pods=list, job_pods=lambda key: pods, device_infos=list)
    return ctl


def test_a_malformed_report_is_counted_and_said_and_a_stale_one_counted():
    pod = PodBuilder("job", 0).attempt(2).uid("pod-uid-0").running(node="n1").build()
    ctl = controller([pod])
    record = ctl.record_of(KEY)
    record.attempt, record.recovery_read, record.recovery_data = 2, True, {"generation": "1"}
    before = (rejected("launcher-report", untrusted.BAD_TIME), rejected("launcher-report", recovery.STALE))
    mine = json.dumps({**REPORT, "uid": pod["metadata"]["uid"]})
    data = {"generation": "1", pod["metadata"]["name"]: mine,
            "job-a1-0": json.dumps({**REPORT, "uid": "an-earlier-pod"}),
            "job-a2-1": json.dumps({**REPORT, "uid": "x", "time": "2026-12-02T08:00:00"})}
    ctl.child_changed(KEY, "LauncherChannel", names.launcher_channel("job"), "MODIFIED",
                      {"metadata": {"name": names.launcher_channel("job")}, "data": data})
    assert (rejected("launcher-report", untrusted.BAD_TIME), rejected("launcher-report", recovery.STALE)) == (
        before[0] + 1, before[1] + 1)
    assert [(e.type, e.reason) for e in record.events] == [("Warning", "LauncherReportRefused")]
    assert "job-a2-1" in record.events[0].message and "time zone" in record.events[0].message
    assert record.recovery_data == data
    ctl.child_changed(KEY, "LauncherChannel", names.launcher_channel("job"), "MODIFIED",
                      {"metadata": {"name": names.launcher_channel("job")}, "data": {**data, "generation": "2"}})
    assert rejected("launcher-report", recovery.STALE) == before[1] + 1 and len(record.events) == 1  # once each


def test_a_bombed_rank_table_is_counted_said_and_written_again():
    ctl = controller([])
    record = ctl.record_of(KEY)
    record.rank_table = {"status": "completed"}
    compressor = zlib.compressobj(9, zlib.DEFLATED, untrusted.GZIP_WINDOW)
    packed = b"".join([*(compressor.compress(b"\0" * (1 << 20)) for _ in range(64)), compressor.flush()])
    pointer = {"status": "completed", "compressed": ranktable.COMPRESSED_KEY}
    body = {"metadata": {"name": names.rank_table_config_map("job")},
            "data": {ranktable.TABLE_KEY: json.dumps(pointer), ranktable.VERSION_KEY: "2"},
            "binaryData": {ranktable.COMPRESSED_KEY: base64.b64encode(packed).decode()}}
    before = rejected("rank-table", untrusted.TOO_LARGE)
    ctl.child_changed(KEY, "ConfigMap", names.rank_table_config_map("job"), "MODIFIED", body)
    assert rejected("rank-table", untrusted.TOO_LARGE) == before + 1
    assert record.rank_table == {}  # differs from any table: the next pass writes the right one
    assert [(e.type, e.reason) for e in record.events] == [("Warning", "RankTableUnreadable")]


class Endpoint(http.server.BaseHTTPRequestHandler):
    """/metrics answers by path: a page too large, a redirect to /trap, a broken line; /trap counts visits."""

    visits: list[str] = []

    def do_GET(self):
        Endpoint.visits.append(self.path)
        if self.path == "/big/metrics":
            body = b"ascend_trainer_step 1\n" * (telemetry.PAGE_LIMIT // 10)
        elif self.path == "/redirect/metrics":
            self.send_response(302)
            self.send_header("Location", f"http://127.0.0.1:{self.server.server_address[1]}/trap")
            self.end_headers()
            return
        else:
            body = b"ascend_trainer_step abc\nascend_trainer_loss 2.5\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_):
        pass


@contextmanager
def endpoint():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Endpoint)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()


def read(port: int, prefix: str):
    source = telemetry.TelemetrySource()
    return source._get(f"http://127.0.0.1:{port}{prefix}/metrics")


def test_a_page_too_large_or_a_redirect_is_refused_and_a_broken_line_skipped():
    Endpoint.visits = []
    with endpoint() as port:
        for prefix, reason in (("/big", untrusted.TOO_LARGE), ("/redirect", "redirect")):
            try:
                read(port, prefix)
            except telemetry.PageRefused as refused:
                assert refused.reason == reason
            else:
                raise AssertionError(f"{prefix} was read")
        assert "/trap" not in Endpoint.visits  # the redirect was not followed
        source = telemetry.TelemetrySource()
        source.trainer_port = port
        before = rejected("metrics-page", untrusted.MALFORMED)
        pod = PodBuilder("job", 0).running(node="n1", pod_ip="127.0.0.1").build()
        sample = source.sample("default", "job", 1, [pod])
    assert sample.ok and sample.loss == 2.5 and sample.step is None and sample.rejected_lines == 1
    assert rejected("metrics-page", untrusted.MALFORMED) == before + 1


def test_one_jobs_telemetry_failing_is_its_own_and_the_loop_goes_on():
    class Broken(telemetry.TelemetrySource):
        def sample(self, namespace, job, attempt, pods):
            if job == "bad":
                raise ZeroDivisionError("a parser bug")
            return super().sample(namespace, job, attempt, [])
    ctl = controller([])
    offered = {}

    def offer(key, attempt, sample):
        offered[key[1]] = sample
        if key[1] == "good":
            ctl.queue.close()  # one round of the loop
    ctl.running_jobs = lambda: [(("default", "bad"), 1), (("default", "good"), 1)]  # type: ignore[method-assign]
    ctl.offer_sample = offer  # type: ignore[method-assign]
    telemetry.sampling_loop(ctl, Broken(), 0.0)()
    assert "ZeroDivisionError" in offered["bad"].error and offered["good"].error == "no running trainer pod to read"
