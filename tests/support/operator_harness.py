"""Helpers for the operator's integration tests: the operator as a real subprocess, job objects, waits."""

from __future__ import annotations

import copy
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import yaml
from kubernetes import client

from ascend_hybrid.contracts import names
from ascend_hybrid.contracts.names import GROUP
from ascend_hybrid.devcluster.controlplane import ports
from ascend_hybrid.spec.api import CHANNEL_PLURAL, PLURAL, VERSION
from support.builders import JobBuilder
from support.paths import REPO_ROOT as REPO


def kubectl(cluster, *args: str, check: bool = True) -> str:
    """The toolchain's kubectl against a dev cluster; a failure names the command and kubectl's complaint."""
    from ascend_hybrid.devcluster.controlplane import toolchain

    result = subprocess.run([toolchain.binary("kubectl"), "--kubeconfig", str(cluster.kubeconfig), *args],
                            capture_output=True, text=True, timeout=60)
    if check and result.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)}: {result.stderr.strip()}")
    return result.stdout


def install_crd(cluster) -> None:
    """As a user would: `kubectl apply --server-side -f crds/`, then wait until the API serves it."""
    kubectl(cluster, "apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"))
    # `kubectl wait` fails outright ("conditions accessor error") while a just-updated CRD has no conditions yet,
    # and so does a jsonpath filter over the missing list: until then it is "not yet", not an error
    for plural in (PLURAL, CHANNEL_PLURAL):
        crd = f"customresourcedefinition/{plural}.{GROUP}"
        wait_for(lambda crd=crd: "True" in kubectl(cluster, "get", crd, "-o",
                                                   "jsonpath={.status.conditions[?(@.type=='Established')].status}",
                                                   check=False),
                 30, f"{crd} to be Established")


def channel_data(custom: client.CustomObjectsApi, namespace: str, job: str) -> dict[str, str] | None:
    """The data of the job's LauncherChannel; None before the operator or a launcher wrote it."""
    try:
        channel = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, CHANNEL_PLURAL,
                                                      names.launcher_channel(job))
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise
    return dict(channel.get("data") or {})


def patch_channel(custom: client.CustomObjectsApi, namespace: str, job: str, data: dict[str, str]) -> None:
    """Merge-patches keys into the job's LauncherChannel, as the launchers do (the operator made it before the
    pods; a launcher may not make one)."""
    custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, CHANNEL_PLURAL, names.launcher_channel(job),
                                          {"data": data}, _content_type="application/merge-patch+json")


def free_port() -> int:
    return ports.free_server_port("127.0.0.1")


class OperatorProcess:
    """`ascend-hybrid run` against the simulated cluster, bound to loopback only."""

    START_ATTEMPTS = 3

    def __init__(self, kubeconfig: str, log_path: Path, node_grace_seconds: float = 3.0, extra_args: tuple = (),
                 prefix: tuple = ()):
        self.kubeconfig, self.log_path, self.grace = kubeconfig, log_path, node_grace_seconds
        self.extra_args = [str(arg) for arg in extra_args]  # more `ascend-hybrid run` flags, e.g. --prometheus-url
        self.prefix = [str(word) for word in prefix]  # what runs the operator, e.g. a profiler (bench --profile)
        self.process: subprocess.Popen | None = None
        self.metrics_port, self.health_port = free_port(), free_port()
        self.starts = 0

    def command(self) -> list[str]:
        return [*self.prefix, sys.executable, "-m", "ascend_hybrid.cli", "run", "--kubeconfig", self.kubeconfig,
                "--metrics-port", str(self.metrics_port), "--health-port", str(self.health_port),
                "--bind-address", "127.0.0.1", "--node-grace-seconds", str(self.grace), *self.extra_args]

    def start(self) -> OperatorProcess:
        """Start it and wait until its health endpoint listens. A port taken between choosing and binding it
        (another process can always win that race) means new ports and another try, not a failed test."""
        for _ in range(self.START_ATTEMPTS):
            self.starts += 1
            with open(self.log_path, "a") as log:
                log.write(f"--- start {self.starts} ---\n")
                log.flush()
                log_offset = log.tell()
                self.process = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                                start_new_session=True, cwd=REPO)
            wait_for(lambda: self.process.poll() is not None or self._health_listens(), 60,
                     "the operator's health endpoint to listen", self.log_tail)
            if self.process.poll() is None:
                return self
            with open(self.log_path) as log:
                log.seek(log_offset)
                if "address already in use" not in log.read():
                    raise AssertionError(f"the operator exited with {self.process.returncode}:\n{self.log_tail()}")
            self.metrics_port, self.health_port = free_port(), free_port()
        raise AssertionError(f"the operator found its ports taken {self.START_ATTEMPTS} times:\n{self.log_tail()}")

    def _health_listens(self) -> bool:
        with socket.socket() as probe:
            return probe.connect_ex(("127.0.0.1", self.health_port)) == 0

    def kill(self) -> None:
        """SIGKILL: no cleanup, as when the node running the operator dies."""
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as response:
            return response.read().decode()

    def healthz(self) -> int:
        """What a liveness probe asks."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/healthz", timeout=5) as response:
            return response.status

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text().splitlines()[-lines:])
        except OSError:
            return "(no operator log)"


def wait_for(predicate: Callable[[], object], timeout: float, what: str, describe: Callable[[], str] = lambda: "",
             interval: float = 0.25):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}\n{describe()}")
        time.sleep(interval)


def example(name: str) -> dict:
    return yaml.safe_load((REPO / "deploy" / "examples" / name).read_text())


def job_manifest(name: str, *, data=2, tensor=4, pipeline=1, per_pod=8, annotations=None, **spec_extra) -> dict:
    """A job for a real cluster: the tiny model for 10 steps, each of `spec_extra`'s sections merged over it."""
    job = (JobBuilder(name).namespace(None).parallelism(data=data, tensor=tensor, pipeline=pipeline).per_pod(per_pod)
           .section("model", preset="tiny").section("training", steps=10))
    if annotations:
        job.section("template", metadata={"annotations": annotations})
    for key, value in spec_extra.items():
        job.section(key, **value)
    return job.build()


class Jobs:
    """Thin access to jobs and their children in one namespace."""

    def __init__(self, api_client: client.ApiClient, namespace: str, operator: OperatorProcess):
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)
        self.namespace, self.operator = namespace, operator

    def create(self, manifest: dict) -> dict:
        body = copy.deepcopy(manifest)
        body["metadata"].pop("namespace", None)
        return self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, body)

    def get(self, name: str) -> dict | None:
        try:
            return self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name)
        except client.ApiException as error:
            if error.status == 404:
                return None
            raise

    def patch_spec(self, name: str, spec_patch: dict) -> None:
        self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name, {"spec": spec_patch})

    def delete_all(self, timeout: float = 60) -> None:
        """Deletes every job of the namespace and waits until their pods are gone (chips free for the next test)."""
        for job in self.custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL)["items"]:
            self.delete(job["metadata"]["name"])
        wait_for(lambda: not self.core.list_namespaced_pod(self.namespace).items, timeout, "the test's pods to go")

    def delete(self, name: str) -> None:
        self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name)

    def status(self, name: str) -> dict:
        return (self.get(name) or {}).get("status") or {}

    def pods(self, name: str, attempt: int | None = None) -> list[dict]:
        selector = f"{names.JOB_LABEL}={name}" + (f",{names.ATTEMPT_LABEL}={attempt}" if attempt else "")
        pods = self.core.list_namespaced_pod(self.namespace, label_selector=selector).items
        return [client.ApiClient().sanitize_for_serialization(pod) for pod in pods]

    def rank_table(self, name: str) -> dict:
        config_map = self.core.read_namespaced_config_map(names.rank_table_config_map(name), self.namespace)
        return json.loads(config_map.data["hccl.json"])

    def events(self, name: str) -> list[tuple[str, str, str]]:
        items = self.core.list_namespaced_event(self.namespace, field_selector=f"involvedObject.name={name}").items
        return [(event.type, event.reason, event.message) for event in items]

    def describe(self, name: str) -> str:
        job = self.get(name)
        pods = [(p["metadata"]["name"], p["status"].get("phase"), p["spec"].get("nodeName")) for p in self.pods(name)]
        return (f"status: {json.dumps((job or {}).get('status'), indent=1)[:3000]}\npods: {pods}\n"
                f"events: {self.events(name)[-10:]}\noperator log:\n{self.operator.log_tail()}")

    def wait_phase(self, name: str, phase: str, timeout: float = 60) -> dict:
        return wait_for(lambda: (self.status(name).get("phase") == phase) and self.status(name), timeout,
                        f"{name} to be {phase}", lambda: self.describe(name))

    def wait_running(self, name: str, timeout: float = 60, attempt: int | None = None) -> dict:
        def running():
            status = self.status(name)
            done = status.get("phase") == "Running" and (status.get("rankTable") or {}).get("status") == "completed"
            return done and (attempt is None or status.get("attempt") == attempt) and status
        return wait_for(running, timeout, f"{name} Running with its rank table completed", lambda: self.describe(name))
