"""The process runtime: a helper process of the dev cluster (`up` starts it, `down` stops it by pid) that runs
the `ascend` container of every pod annotated `sim.hybrid.ascend.dev/runtime: process` as a real local process
group, that of every pod annotated `…/runtime: container` as a podman container of its image (kubelet.py: the
two modes; container.py), and forwards every ClusterIP Service to its ready pods (forwarder.py).

kwok gives such a pod its IPs once the device plugin annotated it and otherwise leaves it alone
(devcluster/controlplane/stages.yaml); from there this runtime is its kubelet: it writes the ConfigMap volumes into the pod's
directory (and keeps them in sync), starts the process with the container's env (launch.py), turns the pod
Running, serves its output to `kubectl logs` through a kwok Logs object, reports Succeeded or Failed with the
exit code (or restarts a container as its restartPolicy says: restart.py), stops the group on deletion (SIGTERM,
SIGKILL after the grace period) and then deletes the pod. The decisions are decisions.decide(); this module
carries them out. A process pod on a node `dev-cluster fault NODE --slow F` slowed runs in duty cycles of SIGSTOP
and SIGCONT, 1/F of the time (throttle.py).

    python -m ascend_hybrid.devcluster.runtime.service --kubeconfig FILE --cluster-dir DIR [--ready-file F]
        [--capacity N] [--containers]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import cast

from kubernetes import client
from kubernetes.client.rest import ApiException

from ascend_hybrid.devcluster.kube.client import api_client, describe, with_retries
from ascend_hybrid.devcluster.kube.informer import Source, start_informers, wait_synced
from ascend_hybrid.devcluster.kube.processes import helper_main, log, run_until_signalled
from ascend_hybrid.devcluster.runtime import podstatus
from ascend_hybrid.devcluster.runtime.decisions import (
    Announce,
    Forget,
    Kill,
    Remove,
    ReportExit,
    ReportLost,
    ReportStopped,
    Restart,
    Start,
    Stop,
    SyncVolumes,
    Tracked,
    Wait,
    decide,
)
from ascend_hybrid.devcluster.runtime.forwarder import Forwarder, service_routes
from ascend_hybrid.devcluster.runtime.guard import default_capacity, requested_workers
from ascend_hybrid.devcluster.runtime.kubelet import (
    ContainerMode,
    Modes,
    ProcessMode,
    read_bytes,
    write_atomically,
)
from ascend_hybrid.devcluster.runtime.launch import NotRunnable, PodLayout, runtime_container
from ascend_hybrid.devcluster.runtime.process import PodProcess
from ascend_hybrid.devcluster.runtime.restart import next_streak
from ascend_hybrid.devcluster.runtime.throttle import Throttle
from ascend_hybrid.devcluster.runtime.volumes import VolumeFile
from ascend_hybrid.devcluster.telemetry import coupled

TICK_SECONDS = 0.2
ROUTES_EVERY_SECONDS = 0.5
RETRY_REMOVE_SECONDS = 5.0
SHUTDOWN_GRACE_SECONDS = 5.0
RUNTIME_DIR = "runtime"  # under the cluster's directory: pods/<ns>_<name>_<uid>/, claims/<ns>/<claim>/


def _slowness_of(node: dict) -> str:
    return (node["metadata"].get("annotations") or {}).get(coupled.SLOW_COMPUTE_ANNOTATION) or ""


def _uid(item: dict) -> str:
    return item["metadata"]["uid"]


def _namespaced_name(item: dict) -> tuple[str, str]:
    return item["metadata"]["namespace"], item["metadata"]["name"]


@dataclass
class Handle:
    process: PodProcess
    layout: PodLayout
    started: datetime
    written: dict[Path, VolumeFile]
    mode: ProcessMode | ContainerMode
    log_file: Path
    previous_log_file: Path | None = None  # the run before a restart (`kubectl logs --previous`)
    last_state: dict | None = None          # how that run ended (lastState)


class ProcessRuntime:
    def __init__(self, api: client.ApiClient, root: Path, capacity: int, log=log, containers: bool = False):
        self.core, self.custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        self.root, self.capacity, self.log = root, capacity, log
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.pods: dict[str, dict] = {}          # uid → every bound pod (the forwarder needs them all)
        self.process_pods: dict[str, dict] = {}  # uid → the bound pods this runtime runs
        self.services: dict[str, dict] = {}
        self.configmaps: dict[tuple[str, str], dict] = {}
        self.configmap_view: dict[tuple[str, str], dict] = {}  # the loop's copy, taken once per tick
        self.routes_dirty, self.routes_at = True, 0.0
        self.tracked: dict[str, Tracked] = {}
        self.handles: dict[str, Handle] = {}
        self.told: dict[str, tuple[str, str]] = {}   # uid → (reason, message) of its last waiting status
        self.removing: dict[str, float] = {}
        self.node_slowness: dict[str, str] = {}  # node → its slow-compute history (dev-cluster fault --slow)
        self.forwarder = Forwarder(log)
        bin_dir = str(Path(sys.executable).parent)  # the trainer's console script lives beside this Python
        self.base_env = {"PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
        if os.environ.get("PYTHONPATH"):  # "the image" holds the packages this runtime runs (a worktree's own)
            self.base_env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        self.modes = Modes(ProcessMode(self.base_env, api, log), ContainerMode(api, root, log) if containers else None)

    # Informer callbacks (their threads). Only what process pods depend on wakes the loop at once: in a
    # simulation of thousands of kwok pods, their events only mark the forwarder's routes for the next tick.
    def _store_all(self, store: dict, items: list[dict], key) -> None:
        with self.lock:
            store.clear()
            store.update({key(item): item for item in items})
            self.routes_dirty = True

    def _store_one(self, store: dict, kind: str, item: dict, key) -> None:
        with self.lock:
            if kind == "DELETED":
                store.pop(key(item), None)
            else:
                store[key(item)] = item
            self.routes_dirty = True

    def sync_pods(self, items: list[dict]) -> None:
        self._store_all(self.pods, items, _uid)
        self._store_all(self.process_pods, [pod for pod in items if self.modes.runs(pod)], _uid)
        self.wake.set()

    def pod_event(self, kind: str, item: dict) -> None:
        self._store_one(self.pods, kind, item, _uid)
        if self.modes.runs(item):
            self._store_one(self.process_pods, kind, item, _uid)
            self.wake.set()

    def sync_nodes(self, items: list[dict]) -> None:
        with self.lock:
            self.node_slowness = {node["metadata"]["name"]: text for node in items
                                  if (text := _slowness_of(node))}

    def node_event(self, kind: str, node: dict) -> None:
        name, text = node["metadata"]["name"], _slowness_of(node)
        with self.lock:
            if kind == "DELETED" or not text:
                self.node_slowness.pop(name, None)
            else:
                self.node_slowness[name] = text

    def throttled(self) -> dict[int, float]:
        """Process group → slowness factor of the running process pods on slowed nodes (not those going)."""
        now = time.time()
        with self.lock:
            slowness, pods = dict(self.node_slowness), dict(self.process_pods)
        found = {}
        for uid, handle in list(self.handles.items()):
            pod, process = pods.get(uid), self.tracked.get(uid)
            node = ((pod or {}).get("spec") or {}).get("nodeName")
            if not node or node not in slowness or process is None or not process.running or uid in self.removing \
                    or not isinstance(handle.mode, ProcessMode) or handle.process.process is None:
                continue
            factor = coupled.at(coupled.parse_history(slowness[node]), now)
            if factor > 1:
                found[handle.process.pid] = factor
        return found

    def sync_services(self, items: list[dict]) -> None:
        self._store_all(self.services, items, _uid)

    def service_event(self, kind: str, item: dict) -> None:
        self._store_one(self.services, kind, item, _uid)

    def sync_configmaps(self, items: list[dict]) -> None:
        self._store_all(self.configmaps, items, _namespaced_name)
        self.wake.set()

    def configmap_event(self, kind: str, item: dict) -> None:
        self._store_one(self.configmaps, kind, item, _namespaced_name)
        self.wake.set()  # a rank table turning "completed" must reach the pods' files without delay

    # The loop (one long-lived thread: the processes' PR_SET_PDEATHSIG is tied to it) -----------------------
    def run(self, stop: threading.Event) -> None:
        self.forwarder.start()
        threading.Thread(target=Throttle(self.throttled).run, args=(stop,), name="throttle", daemon=True).start()
        while not stop.is_set():
            self.wake.wait(TICK_SECONDS)
            self.wake.clear()
            try:
                self.tick()
            except Exception as error:  # noqa: BLE001 - the kubelet of every process pod must not die
                self.log(f"error: {describe(error)}")
        self.shutdown()

    def tick(self) -> None:
        for uid, handle in self.handles.items():
            process = self.tracked[uid]
            if process.running and handle.process.poll() is not None:
                self.tracked[uid] = replace(process, exit_code=handle.process.exit_code, finished_at=time.monotonic())
        with self.lock:
            process_pods, self.configmap_view = dict(self.process_pods), dict(self.configmaps)
            routes = None
            if self.routes_dirty and time.monotonic() - self.routes_at >= ROUTES_EVERY_SECONDS:
                routes = service_routes(list(self.services.values()), list(self.pods.values()))
                self.routes_dirty, self.routes_at = False, time.monotonic()
        if routes is not None:
            self.forwarder.update(routes)
        handlers: dict[type, Callable[..., None]] = {
            Start: self.start, Wait: self.tell_waiting, Announce: self.announce, SyncVolumes: self.sync_volumes,
            Stop: self.stop, Kill: self.kill, ReportExit: self.report_exit, Restart: self.restart,
            ReportLost: self.report_lost, ReportStopped: self.report_stopped, Remove: self.remove,
            Forget: self.forget}
        for action in decide(process_pods, dict(self.tracked), self.capacity, time.monotonic()):
            handlers[type(action)](action, process_pods.get(action.uid))
        for notes in (self.told, self.removing):  # what was noted about pods that are gone for good
            for uid in [uid for uid in notes if uid not in process_pods and uid not in self.tracked]:
                del notes[uid]

    # Actions ---------------------------------------------------------------------------------------------
    def start(self, action: Start, pod: dict) -> None:
        self._launch(action.uid, pod)

    def restart(self, action: Restart, pod: dict) -> None:
        process, handle = self.tracked[action.uid], self.handles[action.uid]
        self._launch(action.uid, pod, process.restarts + 1, next_streak(process.streak, process.ran_seconds) + 1,
                     handle)

    def _launch(self, uid: str, pod: dict, restarts: int = 0, streak: int = 0, before: Handle | None = None) -> None:
        """Starts the pod's container (a restart when `before` is its last run's handle)."""
        layout, mode = PodLayout.of(self.root, pod), self.modes.of(pod)
        try:
            prepared = mode.prepare(pod, self.configmap_view, layout, restarts)
        except NotRunnable as error:
            self.tell_waiting(Wait(uid, error.reason, error.message), pod)
            return
        prepared.lay_out()
        process, now = prepared.process, datetime.now(UTC)
        workers = requested_workers(runtime_container(pod))
        previous, last_state = (before.log_file, before.last_state) if before else (None, None)
        handle = Handle(process, layout, now, dict(prepared.files), mode, prepared.log_file, previous, last_state)
        try:
            pid = process.start()
        except OSError as error:
            self.tracked[uid] = Tracked(pid=0, workers=0, grace=prepared.grace_seconds, exit_code=128, reported=True,
                                        restarts=restarts)
            self.handles[uid] = handle
            message = f"cannot run {prepared.what}: {error}"
            self._status(pod, podstatus.terminated_patch(pod, None, 128, now, now, "StartError", message,
                                                         restarts=restarts, last_state=last_state))
            self._record_event(pod, "Warning", "Failed", message)
            return
        self.tracked[uid] = Tracked(pid=pid, workers=workers, grace=prepared.grace_seconds, restarts=restarts,
                                    streak=streak, started_at=time.monotonic())
        self.handles[uid] = handle
        self.told.pop(uid, None)
        self._publish_logs(pod, prepared.log_file, previous)
        self.announce(Announce(uid), pod)
        self._record_event(pod, "Normal", "Started", f"Started container {prepared.container} as {prepared.what} "
                                                     f"(pid {pid})")
        self.log(f"started {self._name(pod)}: pid {pid}, {workers} worker(s)"
                 + (f", restart {restarts}" if restarts else ""))

    def announce(self, action: Announce, pod: dict) -> None:
        process, handle = self.tracked[action.uid], self.handles[action.uid]
        container_id = handle.process.container_id()
        if container_id is None:
            return  # podman has not created the container yet: Running once it has
        if self._status(pod, podstatus.running_patch(pod, process.pid, handle.started, container_id=container_id,
                                                     restarts=process.restarts, last_state=handle.last_state)):
            self.tracked[action.uid] = replace(process, announced=True)

    def tell_waiting(self, action: Wait, pod: dict) -> None:
        previous = self.told.get(action.uid)
        if previous == (action.reason, action.message):
            return
        self.told[action.uid] = (action.reason, action.message)
        process, handle = self.tracked.get(action.uid), self.handles.get(action.uid)  # set while it restarts
        counts = {"restarts": process.restarts, "last_state": handle.last_state} if process and handle else {}
        self._status(pod, podstatus.waiting_patch(pod, action.reason, action.message, datetime.now(UTC), **counts))
        if previous is None or previous[0] != action.reason:
            self._record_event(pod, "Warning", action.reason, action.message)
            self.log(f"waiting: {self._name(pod)}: {action.reason}: {action.message}")

    def sync_volumes(self, action: SyncVolumes, pod: dict) -> None:
        handle = self.handles[action.uid]
        try:
            files = handle.mode.files(pod, self.configmap_view, handle.layout)  # refreshes tokens as due
        except NotRunnable:
            return  # a ConfigMap went away: the kubelet keeps the last content, so do we
        for path, file in files.items():
            if handle.written.get(path) != file:
                write_atomically(path, file)
                handle.written[path] = file

    def stop(self, action: Stop, pod: dict | None) -> None:
        handle = self.handles[action.uid]
        handle.process.signal_group(signal.SIGTERM)
        self.tracked[action.uid] = self.tracked[action.uid].stopping(time.monotonic() + action.grace)
        if pod is not None:
            self._record_event(pod, "Normal", "Killing", f"Stopping container (SIGTERM to process group "
                                                         f"{handle.process.pid}, SIGKILL after {action.grace:g}s)")

    def kill(self, action: Kill, pod: dict | None) -> None:
        self.handles[action.uid].process.signal_group(signal.SIGKILL)
        self.tracked[action.uid] = self.tracked[action.uid].stopping(time.monotonic() + SHUTDOWN_GRACE_SECONDS)

    def report_exit(self, action: ReportExit, pod: dict) -> None:
        process, handle = self.tracked[action.uid], self.handles[action.uid]
        # decide() reports only a process that has exited: its exit_code is set
        code, now = cast(int, process.exit_code), datetime.now(UTC)
        container_id = handle.process.container_id()
        message = podstatus.termination_message(read_bytes(handle.layout.termination_file),
                                                read_bytes(handle.log_file, tail=64 * 1024),
                                                runtime_container(pod).get("terminationMessagePolicy"), code)
        if action.restart_in is not None:
            self._restarts_later(action, pod, podstatus.terminated_state(code, handle.started, now, message=message,
                                                                         container_id=container_id))
            return
        if self._status(pod, podstatus.terminated_patch(pod, process.pid, code, handle.started, now, message=message,
                                                        container_id=container_id, restarts=process.restarts,
                                                        last_state=handle.last_state)):
            self.tracked[action.uid] = replace(process, reported=True)
            if code == 0:
                self._record_event(pod, "Normal", "Completed", "Container exited with code 0")
            else:
                self._record_event(pod, "Warning", "Failed", f"Container exited with code {code}")
            self.log(f"ended {self._name(pod)}: exit code {code}")

    def _restarts_later(self, action: ReportExit, pod: dict, ended: dict) -> None:
        """The container ended and its restartPolicy restarts it: now (the first time), or after its back-off."""
        process, handle = self.tracked[action.uid], self.handles[action.uid]
        # report_exit calls this only when restart_in is set
        delay, code = cast(float, action.restart_in), ended["terminated"]["exitCode"]
        if delay > 0:
            if not self._status(pod, podstatus.back_off_patch(pod, process.restarts, ended, delay, datetime.now(UTC))):
                return
            self._record_event(pod, "Warning", "BackOff", f"Back-off {delay:g}s restarting failed container")
        handle.last_state = ended
        self.tracked[action.uid] = replace(process, reported=True, restart_at=time.monotonic() + delay)
        self.log(f"ended {self._name(pod)}: exit code {code}; restarts in {delay:g}s")

    def report_lost(self, action: ReportLost, pod: dict) -> None:
        patch = podstatus.lost_patch(pod, datetime.now(UTC))
        if self._status(pod, patch):
            message = patch["status"]["containerStatuses"][0]["state"]["terminated"]["message"]
            self._record_event(pod, "Warning", "ContainerLost", message)

    def report_stopped(self, action: ReportStopped, pod: dict) -> None:
        self._status(pod, podstatus.stopped_patch(pod, datetime.now(UTC)))

    def remove(self, action: Remove, pod: dict) -> None:
        if time.monotonic() - self.removing.get(action.uid, -RETRY_REMOVE_SECONDS) < RETRY_REMOVE_SECONDS:
            return
        self.removing[action.uid] = time.monotonic()
        meta = pod["metadata"]
        options = client.V1DeleteOptions(grace_period_seconds=0, preconditions=client.V1Preconditions(uid=meta["uid"]))
        try:
            with_retries(lambda: self.core.delete_namespaced_pod(meta["name"], meta["namespace"], body=options,
                                                                 _preload_content=False), f"delete {self._name(pod)}")
        except RuntimeError as error:
            if not isinstance(error.__cause__, ApiException) or error.__cause__.status not in (404, 409):
                self.log(f"error: {error}")

    def forget(self, action: Forget, pod: dict | None) -> None:
        self.tracked.pop(action.uid, None)
        self.told.pop(action.uid, None)
        self.removing.pop(action.uid, None)
        handle = self.handles.pop(action.uid, None)
        if handle is not None:
            handle.mode.forget(action.uid)
            shutil.rmtree(handle.layout.directory, ignore_errors=True)

    # API writes ------------------------------------------------------------------------------------------
    @staticmethod
    def _name(pod: dict) -> str:
        return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"

    def _status(self, pod: dict, patch: dict) -> bool:
        """True when there is nothing left to do: written, or the pod is gone or was re-created (its uid no longer
        matches); False after a failure worth another try on a later tick."""
        meta = pod["metadata"]
        try:
            with_retries(lambda: self.core.patch_namespaced_pod_status(
                meta["name"], meta["namespace"], patch, _content_type="application/strategic-merge-patch+json",
                _preload_content=False), f"patch status of {self._name(pod)}", timeout=30)
            return True
        except RuntimeError as error:
            cause = error.__cause__
            if isinstance(cause, ApiException) and cause.status in (404, 409, 422):
                return True  # nothing left to tell
            self.log(f"error: {error}")
            return False

    def _record_event(self, pod: dict, kind: str, reason: str, message: str) -> None:
        body = podstatus.event(pod, kind, reason, message, datetime.now(UTC))
        try:
            # validate_call builds the CoreV1Event from the dict
            self.core.create_namespaced_event(pod["metadata"]["namespace"], cast(client.CoreV1Event, body),
                                              _preload_content=False, _request_timeout=5)
        except Exception as error:  # noqa: BLE001 - an event is worth a try, not a failure
            self.log(f"event {reason} for {self._name(pod)} not recorded: {describe(error)}")

    def _publish_logs(self, pod: dict, log_file: Path, previous: Path | None = None) -> None:
        body = podstatus.logs_object(pod, str(log_file), str(previous) if previous else None)
        meta = pod["metadata"]
        args = (podstatus.LOGS_GROUP, podstatus.LOGS_VERSION, meta["namespace"], podstatus.LOGS_PLURAL)
        try:
            try:
                self.custom.create_namespaced_custom_object(*args, body, _request_timeout=5)
            except ApiException as error:
                if error.status != 409:
                    raise
                # one left from an earlier pod of the same name (its owner's GC has not run yet): point it here
                self.custom.patch_namespaced_custom_object(*args, meta["name"], {
                    "metadata": {"ownerReferences": body["metadata"]["ownerReferences"]}, "spec": body["spec"]},
                    _request_timeout=5)
        except Exception as error:  # noqa: BLE001 - without it only `kubectl logs` is missing, the pod still runs
            self.log(f"logs of {self._name(pod)} not published: {describe(error)}")

    def shutdown(self) -> None:
        """The runtime stops: so do its processes (SIGTERM, then SIGKILL), as a node going down."""
        running = [h for uid, h in self.handles.items() if self.tracked[uid].running]
        for handle in running:
            handle.process.signal_group(signal.SIGTERM)
        deadline = time.monotonic() + SHUTDOWN_GRACE_SECONDS
        while time.monotonic() < deadline and any(h.process.poll() is None for h in running):
            time.sleep(0.1)
        for handle in running:
            handle.process.signal_group(signal.SIGKILL)
            handle.process.poll()
        try:
            self.forwarder.stop()
            if self.modes.container is not None:
                self.modes.container.sweep()
        except Exception:  # noqa: BLE001 - leaving anyway
            pass


def serve(kubeconfig: str, root: Path, capacity: int, ready_file: Path | None, stop: threading.Event,
          containers: bool = False) -> None:
    api = api_client(kubeconfig)
    core = client.CoreV1Api(api)
    runtime = ProcessRuntime(api, root, capacity, containers=containers)
    if runtime.modes.container is not None:  # what a killed runtime left: its pods are reported lost below
        for name in runtime.modes.container.sweep():
            log(f"removed container {name}, left by an earlier runtime")
    synced = start_informers((
        Source("services", core.list_service_for_all_namespaces, runtime.sync_services, runtime.service_event),
        Source("configmaps", core.list_config_map_for_all_namespaces, runtime.sync_configmaps,
               runtime.configmap_event),
        Source("pods", core.list_pod_for_all_namespaces, runtime.sync_pods, runtime.pod_event,
               {"field_selector": "spec.nodeName!="}),
        Source("nodes", core.list_node, runtime.sync_nodes, runtime.node_event)), stop, log)
    # Ready (and running its tick loop) only once the ConfigMaps and Services pods need are known.
    if wait_synced(synced, stop) and ready_file:
        ready_file.write_text(f"{os.getpid()}\n")
    log(f"process runtime ready: up to {capacity} trainer workers at once; pods in {root / 'pods'}"
        + ("; container pods run with podman" if containers else ""))
    runtime.run(stop)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ascend-hybrid-sim-process-runtime", description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--cluster-dir", required=True, type=Path,
                        help="the cluster's directory: pods' files go under it (and `down` finds us by it)")
    parser.add_argument("--ready-file", type=Path, help="written (with the pid) once the first lists are in")
    parser.add_argument("--capacity", type=int, default=0,
                        help="trainer workers allowed at once (default 0: 2 per core)")
    parser.add_argument("--containers", action="store_true",
                        help="also run pods annotated sim.hybrid.ascend.dev/runtime: container, with podman")
    args = parser.parse_args(argv)
    capacity = args.capacity or default_capacity()
    run_until_signalled(lambda stop: serve(args.kubeconfig, args.cluster_dir / RUNTIME_DIR, capacity,
                                           args.ready_file, stop, args.containers), args.ready_file)
    log("process runtime stopped")
    return 0


if __name__ == "__main__":
    helper_main(main)  # informer threads may sit in a watch; nothing they hold needs saving
