"""The launcher's end of the recovery channel (control.py) against a stand-in apiserver on 127.0.0.1: the bearer
token on every call, the one LauncherChannel read and watched by name, this pod's report written by merge patch —
the only verbs its Role grants (get, watch, patch on that one object: never a list, never a create) — and what
makes the channel unusable. No MindSpore here."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ascend_hybrid_trainer import control
from ascend_hybrid_trainer.generations import pod_zero_name, resumed_from

PATH = "/apis/hybrid.ascend.dev/v1alpha1/namespaces/ns/launcherchannels/job-recovery"


class Handler(BaseHTTPRequestHandler):
    """The stand-in's HTTP side: `fake` is the FakeApiserver it serves."""

    fake: FakeApiserver

    def log_message(self, *args):
        pass

    def _denied(self) -> bool:
        self.fake.calls.append((self.command, self.path, self.headers.get("Authorization")))
        if self.headers.get("Authorization") != f"Bearer {self.fake.token}":
            self.send_response(403)
            self.end_headers()
            return True
        return False

    def _send(self, code: int, body: dict) -> None:
        payload = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_GET(self):
        if self._denied():
            return
        if "watch=1" in self.path:
            assert "fieldSelector=metadata.name%3Djob-recovery" in self.path
            self.send_response(200)
            self.end_headers()
            seen = 0
            while True:
                with self.fake.changed:
                    self.fake.changed.wait_for(lambda after=seen: self.fake.version > after, timeout=5)
                    if self.fake.version <= seen:
                        return
                    seen, data = self.fake.version, dict(self.fake.data or {})
                event = {"type": "MODIFIED", "object": {"metadata": {"resourceVersion": str(seen)},
                                                        "data": data}}
                self.wfile.write((json.dumps(event) + "\n").encode())
                self.wfile.flush()
        if self.fake.data is None:
            self._send(404, {"reason": "NotFound"})
        else:
            self._send(200, {"metadata": {"resourceVersion": str(self.fake.version)}, "data": self.fake.data})

    def do_PATCH(self):
        if self._denied():
            return
        assert self.headers["Content-Type"] == "application/merge-patch+json"
        patch = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.fake.data is None:
            self._send(404, {"reason": "NotFound"})
            return
        self.fake.set({**self.fake.data, **patch["data"]})
        self._send(200, {"data": self.fake.data})

    def do_POST(self):
        if self._denied():
            return
        assert self.path.startswith(PATH.removesuffix("/job-recovery") + "?fieldManager=")
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.fake.data is not None:
            self._send(409, {"reason": "AlreadyExists"})
            return
        self.fake.made = body
        self.fake.set(dict(body["data"]))
        self._send(201, body)


class FakeApiserver:
    """One LauncherChannel; GET, PATCH (merge; 404 while there is none), POST (409 once there is one) and a watch
    that sends every change; answers 403 to a wrong token."""

    def __init__(self, data: dict | None, token: str = "secret"):
        self.data, self.token, self.version = data, token, 1
        self.made: dict | None = None  # the object a POST made
        self.calls: list[tuple[str, str, str | None]] = []
        self.changed = threading.Condition()
        handler = type("BoundHandler", (Handler,), {"fake": self})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def set(self, data: dict) -> None:
        with self.changed:
            self.data, self.version = data, self.version + 1
            self.changed.notify_all()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def token(tmp_path):
    path = tmp_path / "token"
    path.write_text("secret\n")
    return path


def channel(server: FakeApiserver, token, pod: str = "job-a1-1") -> control.Channel:
    return control.Channel(server.url, str(token), None, "ns", "job-recovery", pod, "uid-1", lambda m: None)


def test_the_channel_reads_watches_and_reports(token):
    server = FakeApiserver({"generation": "0"})
    end = channel(server, token)
    try:
        assert end.start() == 0
        assert end.report(control.STARTED, 0, resumedFrom=8, step=None)
        report = json.loads(server.data["job-a1-1"])
        assert {key: report[key] for key in ("uid", "generation", "state", "resumedFrom")} == {
            "uid": "uid-1", "generation": 0, "state": "Started", "resumedFrom": 8}
        assert "step" not in report and report["time"].endswith("Z")
        server.set({**server.data, "generation": "3"})  # the operator's next generation arrives by the watch
        assert end.wait(lambda: end.generation() == 3, 5)
        assert end.report_of("job-a1-1")["state"] == "Started"
        assert all(auth == "Bearer secret" for _, _, auth in server.calls)
    finally:
        end.close()


def test_a_forbidden_channel_makes_the_channel_unavailable(token, monkeypatch):
    monkeypatch.setattr(control, "PRESENT_SECONDS", 0.3)
    monkeypatch.setattr(control, "RETRY_SECONDS", 0.1)
    with pytest.raises(control.ChannelUnavailable, match="403"):
        channel(FakeApiserver({"generation": "0"}, token="other"), token).start()


def test_no_channel_is_generation_0_and_a_launcher_never_makes_one(token, monkeypatch):
    """The operator makes the channel before the pods; a launcher whose channel is missing reads generation 0 and
    its report is not written (the operator's rung then times out): it never POSTs one, which its Role refuses."""
    monkeypatch.setattr(control, "RETRY_SECONDS", 0.001)
    server = FakeApiserver(None)
    end = channel(server, token)
    try:
        assert end.start() == 0
        assert not end.report(control.STARTED, 0, resumedFrom=0)
        assert server.made is None and server.data is None
        assert {method for method, _, _ in server.calls} <= {"GET", "PATCH"}
        assert all(path.startswith(PATH) or "fieldSelector=metadata.name%3Djob-recovery" in path
                   for _, path, _ in server.calls)  # the one object, or a watch narrowed to it by name
    finally:
        end.close()


def test_a_refusal_that_ends_while_the_channel_starts_is_waited_out(token, monkeypatch):
    monkeypatch.setattr(control, "RETRY_SECONDS", 0.1)
    server = FakeApiserver({"generation": "2"}, token="other")  # the pod's RoleBinding not in force yet
    threading.Timer(0.3, lambda: setattr(server, "token", "secret")).start()
    end = channel(server, token)
    try:
        assert end.start() == 2
    finally:
        end.close()


def test_from_env_needs_every_piece(tmp_path):
    said = []
    env = {"AHJ_LAUNCHER_CHANNEL": "job-recovery", "POD_NAME": "job-a1-1", "POD_UID": "u", "POD_NAMESPACE": "ns",
           "KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": "6443",
           "AHJ_SERVICE_ACCOUNT_DIR": str(tmp_path)}
    assert control.Channel.from_env(env, said.append) is None and "token" in said[-1]
    (tmp_path / "token").write_text("t")
    made = control.Channel.from_env(env, said.append)
    assert made is not None and made.base_url == "https://127.0.0.1:6443"
    assert control.Channel.from_env({**env, "POD_UID": ""}, said.append) is None and "POD_UID" in said[-1]


def test_pod_zero_and_the_step_resumed_from(tmp_path):
    assert pod_zero_name("job-a3-12", 12) == "job-a3-0"
    assert pod_zero_name("job-a1-0", 0) == "job-a1-0"
    assert resumed_from({}) == 0
    (tmp_path / "latest.json").write_text(json.dumps({"step": 16, "loss": 1.0}))
    assert resumed_from({"AHJ_CHECKPOINT_DIR": str(tmp_path)}) == 16


class StubChannel:
    """What Generations reads of the channel: the world, this pod's name (no apiserver)."""

    def __init__(self, pod_name: str, world: dict | None):
        self.pod_name, self.data = pod_name, {} if world is None else {"world": json.dumps(world)}

    def world(self):
        return control.Channel.world(self)  # type: ignore[arg-type]


def test_a_kept_pod_takes_its_new_index_ranks_world_and_job_json_from_the_channel(tmp_path):
    """An elastic shrink kept pod job-a1-2 (2 ranks) as pod 1 of a 2-pod world: its env said pod 2 of 4."""
    from ascend_hybrid_trainer.generations import Generations
    from ascend_hybrid_trainer.launcher import Launcher, PodLaunch

    launch = PodLaunch(pod_index=2, local_workers=2, rank_start=4, world_size=8, sched_host="127.0.0.9",
                       sched_port="2222", pod_ip="127.0.0.3", rank_table_file=str(tmp_path / "hccl.json"),
                       launch_mode="dynamic", ranktable_timeout=1, stop_grace=1)
    env = {"RANK_SIZE": "8", "MS_WORKER_NUM": "8", "MS_NODE_RANK": "2", "RANK_START": "4", "OTHER": "kept",
           "AHJ_PARALLEL": json.dumps({"data": 8, "microBatches": 1}), "AHJ_JOB_CONFIG": "/etc/ascend-hybrid/job.json"}
    world = {"attempt": 2, "worldSize": 4, "pods": {"job-a1-0": 0, "job-a1-2": 1}, "scheduler": "job-a1-0",
             "parallel": {"data": 4, "microBatches": 2}, "jobConfig": {"worldSize": 4, "parallelism": {"data": 4}}}
    launcher = Launcher(launch, lambda message: None)
    life = Generations(launcher, StubChannel("job-a1-2", world), env, [0, 1], ["0", "1"])  # type: ignore[arg-type]
    assert life.follow_world()  # it moved
    assert (life.launch.pod_index, life.launch.rank_start, life.launch.world_size) == (1, 2, 4)
    assert list(life.launch.ranks) == [2, 3] and not life.launch.runs_scheduler and launcher.launch is life.launch
    assert {key: life.env[key] for key in ("RANK_SIZE", "MS_WORKER_NUM", "MS_NODE_RANK", "RANK_START", "OTHER")} == {
        "RANK_SIZE": "4", "MS_WORKER_NUM": "4", "MS_NODE_RANK": "1", "RANK_START": "2", "OTHER": "kept"}
    assert json.loads(life.env["AHJ_PARALLEL"]) == {"data": 4, "microBatches": 2}
    with open(life.env["AHJ_JOB_CONFIG"], encoding="utf-8") as handle:
        assert json.load(handle)["parallelism"] == {"data": 4}
    assert life.pod_zero == "job-a1-0"
    assert not life.follow_world() and life.launch.rank_start == 2  # the same world again changes nothing
    # pod 0 of the new world runs the scheduler; a pod the world does not name runs by its env
    zero = Generations(Launcher(launch, lambda message: None), StubChannel("job-a1-0", world), env, [0, 1],
                       ["0", "1"])  # type: ignore[arg-type]
    assert zero.follow_world() and zero.launch.runs_scheduler
    other = Generations(Launcher(launch, lambda message: None), StubChannel("job-a3-1", world), env, [0, 1],
                        ["0", "1"])  # type: ignore[arg-type]
    assert not other.follow_world() and other.launch == launch and other.env == env
    # no world: the env's
    plain = Generations(Launcher(launch, lambda message: None), StubChannel("job-a1-2", None), env, [0, 1],
                        ["0", "1"])  # type: ignore[arg-type]
    assert not plain.follow_world() and plain.launch == launch and plain.env == env
