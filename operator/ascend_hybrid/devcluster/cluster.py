"""Lifecycle of a named simulated Ascend cluster: kwokctl (binary runtime) + Ascend nodes + the device plugin.

Everything a cluster owns lives under its directory (see `paths`); `down` stops exactly the processes recorded
there, by pid, and removes the directory.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import cast

from kubernetes import client

from ascend_hybrid.devcluster.controlplane import kwokctl, ports, toolchain
from ascend_hybrid.devcluster.deviceplugin import daemonset
from ascend_hybrid.devcluster.deviceplugin.allocation import KUBELET, LIST_WATCH_PERIOD, VOLCANO
from ascend_hybrid.devcluster.helpers import Helper, recorded_helpers
from ascend_hybrid.devcluster.kube import processes
from ascend_hybrid.devcluster.kube.client import api_client, with_retries
from ascend_hybrid.devcluster.kube.waiting import wait_until
from ascend_hybrid.devcluster.kueue import manager as kueue_manager
from ascend_hybrid.devcluster.nodes import fleet
from ascend_hybrid.devcluster.nodes.manifests import nodes_per_rack, plan_nodes, profile
from ascend_hybrid.devcluster.paths import (
    DEFAULT_NAME,
    POD_NETWORK,
    ClusterPaths,
    Settings,
    cluster_paths,
    free_pod_cidr,
    load_settings,
    other_pod_cidrs,
    save_settings,
)
from ascend_hybrid.devcluster.runtime import helper as runtime_helper
from ascend_hybrid.devcluster.runtime import runtime_default
from ascend_hybrid.devcluster.telemetry import exporter, prometheus
from ascend_hybrid.devcluster.volcano import manager as volcano_manager

DEVICE_PLUGIN_MODULE = "ascend_hybrid.devcluster.deviceplugin.plugin"


def core_api(paths: ClusterPaths) -> client.CoreV1Api:
    return client.CoreV1Api(api_client(str(paths.kubeconfig)))


def api_is_up(paths: ClusterPaths) -> bool:
    if not paths.kubeconfig.exists():
        return False
    try:
        core_api(paths).list_namespace(limit=1, _request_timeout=3)
        return True
    except Exception:  # noqa: BLE001 - any failure means "not serving"
        return False


class Progress:
    """One line per step, with the time since `up` started."""

    def __init__(self, name: str, log=print):
        self.name, self.log, self.started = name, log, time.monotonic()

    def __call__(self, message: str) -> None:
        self.log(f"[dev-cluster {self.name}] {message} ({time.monotonic() - self.started:.1f}s)")


def up(name: str = DEFAULT_NAME, nodes: int = 4, chip: str | None = None, racks: int = 2,
       log=print, telemetry: bool = False, with_prometheus: bool = False,
       process_runtime: bool | None = None, container_runtime: bool | None = None,
       kueue: bool = False, volcano: bool = False, plugin_mode: str | None = None,
       list_watch_period: float | None = None) -> ClusterPaths:
    """Creates (or resumes) the cluster with nodes 1..`nodes` and returns once it accepts pods. Idempotent: what
    exists is kept (faults too); `chip` defaults to the existing cluster's, else 910B. `telemetry` adds the
    simulated trainer endpoints and npu-exporter (telemetry/exporter.py); `with_prometheus` also a Prometheus scraping them.
    `process_runtime` True makes real local processes the default for new pods, False takes that back, None
    leaves it as it is (devcluster/runtime/service.py; a pod always opts in by annotation); `container_runtime` the
    same for podman containers of the pods' images (devcluster/runtime/container.py). `kueue` adds Kueue
    (devcluster/kueue/manager.py); a cluster that has it keeps it running on every later `up`. `volcano` adds
    Volcano and the stand-in for Huawei's Ascend plugin (devcluster/volcano/manager.py), kept the same way.
    `plugin_mode` is the simulated Ascend device plugin's mode (kubelet or volcano; a new cluster with Volcano
    defaults to volcano, as MindCluster deploys it) and `list_watch_period` its annotation period, both fixed when
    the cluster is created (None: the cluster's, else kubelet and 5 s)."""
    if process_runtime and container_runtime:
        raise ValueError("--process-runtime and --container-runtime exclude each other: pods get one default")
    progress = Progress(name, log)
    paths = cluster_paths(name)
    if (kueue or kueue_manager.configured(paths)) and (volcano or volcano_manager.configured(paths)):
        raise ValueError(f"cluster {name} would run both Kueue and Volcano: a cluster queues its jobs with one of "
                         "them (`down`, then `up` with the other)")
    settings = load_settings(paths)
    chip = chip or (settings.chip if settings else "910B")
    profile(chip)
    bin_dir = toolchain.ensure(with_prometheus=with_prometheus, log=lambda line: progress(line.strip()))
    paths.root.mkdir(parents=True, exist_ok=True)
    if settings is None:
        settings = Settings(chip=chip, racks=racks, nodes_per_rack=nodes_per_rack(nodes, racks),
                            pod_cidr=free_pod_cidr(other_pod_cidrs(name)),
                            device_plugin=plugin_mode or (VOLCANO if volcano else KUBELET),
                            list_watch_period=list_watch_period or LIST_WATCH_PERIOD)
        save_settings(paths, settings)
    elif settings.chip != chip:
        raise RuntimeError(f"cluster {name} exists with {settings.chip} nodes; add {chip} nodes with "
                           f"`dev-cluster add-nodes N --chip {chip}` or run `dev-cluster down --name {name}` first")
    _check_fixed(name, settings, plugin_mode, list_watch_period)
    _ensure_control_plane(paths, bin_dir, progress)
    core = core_api(paths)
    wait_until(lambda: core.read_namespaced_service_account("default", "default", _request_timeout=3),
               60, "the default ServiceAccount (pods are refused until it exists)")
    progress("control plane serving")
    wanted = plan_nodes(1, nodes, settings.chip, settings.nodes_per_rack)
    existing = fleet.existing_sim_nodes(core)
    created = fleet.create_nodes(core, [n for n in wanted if n.index not in existing])
    progress(f"{created} nodes created, {len(existing)} already there")
    _apply_daemonset(core, settings)
    plugin_pid = ensure_device_plugin(paths, settings)
    fleet.wait_nodes_ready(core, {n.name for n in wanted}, timeout=120)
    device_plugin(paths).wait_ready(plugin_pid)
    _check_pods_admitted(core)
    _ensure_process_runtime(paths, core, process_runtime, progress, container_runtime)
    if kueue or kueue_manager.configured(paths):
        if "ahj-pod-terminate" not in paths.kwokctl_config.read_text():
            progress("warning: this cluster's kwok stages predate ahj-pod-terminate: Running pods of queued jobs "
                     "would stay Terminating once deleted (`down`, then `up --kueue`, to get it)")
        kueue_manager.ensure_running(paths, core.api_client, fleet.simulated_nodes(core), progress)
    if volcano or volcano_manager.configured(paths):
        volcano_manager.ensure_running(paths, core.api_client, progress)
    if telemetry or with_prometheus:
        exporter.ensure_running(paths)
        progress(f"telemetry simulation serving; npu-exporter at {exporter.exporter_address(paths)}")
    if with_prometheus:
        progress(f"prometheus at {prometheus.ensure_running(paths, log=lambda line: progress(line.strip()))}")
    progress(f"ready: {len(wanted)} {settings.chip} nodes; kubeconfig {paths.kubeconfig}")
    return paths


def _ensure_control_plane(paths: ClusterPaths, bin_dir: Path, progress) -> None:
    if paths.kwok_config.exists():
        if api_is_up(paths) and all(processes.is_alive(p) for p in paths.component_pids().values()):
            progress("control plane already running")
            return
        # The plugin's client holds the old apiserver's address and certificates: start it afresh later.
        device_plugin(paths).stop()
        runtime_helper.stop_running(paths)  # the same for the process runtime
        kueue_manager.helper(paths).stop()  # and for Kueue
        volcano_manager.stop(paths)  # and for Volcano
        if _restart_control_plane(paths, bin_dir, progress):
            return
        progress("its ports are taken by other processes now: creating the control plane afresh (state lost)")
        _delete_control_plane(paths, bin_dir)
    progress("starting etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok-controller")
    chosen = kwokctl.pick_ports()
    paths.kwokctl_config.write_text(kwokctl.config_text(chosen, kwokctl.stages_file().read_text()))
    settings = cast(Settings, load_settings(paths))  # up() saved them before it called this
    try:
        kwokctl.run(paths, kwokctl.create_args(paths, bin_dir, settings.pod_cidr or POD_NETWORK,
                                               chosen["kwokControllerPort"]),
                    "kwokctl create cluster")
    except RuntimeError:
        _delete_control_plane(paths, bin_dir)
        raise


def _restart_control_plane(paths: ClusterPaths, bin_dir: Path, progress) -> bool:
    """Part of it died (a reboot, or a killed apiserver, which takes the scheduler and controller-manager with
    it as they lose their leases): stop what is left and start it all again. False when its ports are taken."""
    progress("restarting the control plane (some of it was stopped)")
    command = str(bin_dir / "kwokctl")
    kwokctl.run(paths, [command, "stop", "cluster", "--name", paths.name], "kwokctl stop cluster", timeout=120)
    recorded = kwokctl.recorded_ports(paths)
    try:
        wait_until(lambda: all(ports.port_is_free(p) for p in recorded.values()), 5, "the cluster's ports to free")
    except AssertionError:
        return False
    kwokctl.run(paths, [command, "start", "cluster", "--name", paths.name, "--wait", "60s"],
                "kwokctl start cluster", timeout=180)
    wait_until(lambda: api_is_up(paths), 60, "the restarted apiserver to answer")
    return True


def _check_pods_admitted(core: client.CoreV1Api) -> None:
    """A server-side dry-run pod create: passes only once admission (ServiceAccount, quota…) accepts pods."""
    probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "admission-probe-"},
             "spec": {"containers": [{"name": "probe", "image": "busybox"}]}}
    # validate_call builds the V1Pod from the dict
    wait_until(lambda: core.create_namespaced_pod("default", cast(client.V1Pod, probe), dry_run="All",
                                                  _request_timeout=5) or True,
               60, "the apiserver to admit pods")


def _ensure_process_runtime(paths: ClusterPaths, core: client.CoreV1Api, default: bool | None, progress,
                            containers: bool | None = None) -> None:
    """The process runtime (devcluster/runtime/service.py) runs in every cluster: a pod opts in by annotation."""
    pid = runtime_helper.ensure_running(paths)
    if pid is None:
        progress("no process runtime: this cluster's kwok stages predate it (`down`, then `up`, to get it)")
        if default or containers:
            raise RuntimeError(f"cluster {paths.name} cannot run pods as processes: recreate it (down, then up)")
        return
    if containers and not runtime_helper.runs_containers(paths):
        raise RuntimeError(f"cluster {paths.name} predates the container runtime: recreate it (down, then up)")
    for choice, runtime in ((default, "process"), (containers, "container")):
        if choice is not None:
            runtime_default.set_cluster_default(core.api_client, choice, runtime=runtime)
    chosen = runtime_default.cluster_default(core)
    kinds = "processes and podman containers" if runtime_helper.runs_containers(paths) else "processes"
    progress(f"process runtime running (pid {pid}); real {kinds}: "
             + (f"{chosen} is the default for new pods" if chosen else "opt-in per pod"))


def device_plugin(paths: ClusterPaths) -> Helper:
    return Helper("device-plugin", paths)


def ensure_device_plugin(paths: ClusterPaths, settings: Settings | None = None) -> int:
    """Starts the simulated device plugin unless it runs, in the cluster's mode; `up` waits for it once the nodes
    are Ready."""
    settings = settings or load_settings(paths) or Settings(chip="910B", racks=1, nodes_per_rack=1)
    plugin = device_plugin(paths)
    command = processes.python_module_command(
        DEVICE_PLUGIN_MODULE, "--kubeconfig", str(paths.kubeconfig), "--ready-file", str(plugin.ready_file),
        "--mode", settings.device_plugin, "--list-watch-period", f"{settings.list_watch_period:g}",
        "--cluster-dir", str(paths.root))
    return plugin.ensure(command, wait=False)


def _check_fixed(name: str, settings: Settings, device_plugin: str | None, period: float | None) -> None:
    """The plugin's mode and period are the cluster's: an `up` asking for others is refused, not ignored."""
    for flag, asked, kept in (("--device-plugin", device_plugin, settings.device_plugin),
                              ("--list-watch-period", period, settings.list_watch_period)):
        if asked is not None and asked != kept:
            raise RuntimeError(f"cluster {name} runs with {flag} {kept}; run `dev-cluster down --name {name}` "
                               "first to change it")


def _apply_daemonset(core: client.CoreV1Api, settings: Settings) -> None:
    """The plugin's DaemonSet, as MindCluster's manifests make it: what shows the cluster which mode it runs."""
    manifest = daemonset.daemonset_manifest(settings.device_plugin, settings.list_watch_period)
    apps = client.AppsV1Api(core.api_client)
    with_retries(lambda: apps.patch_namespaced_daemon_set(
        daemonset.NAME, daemonset.NAMESPACE, manifest, field_manager="ascend-hybrid-dev-cluster", force=True,
        _content_type="application/apply-patch+yaml", _preload_content=False),
        "apply the device plugin's DaemonSet")


def _delete_control_plane(paths: ClusterPaths, bin_dir: Path | None) -> None:
    if bin_dir is None or not paths.kwok_config.exists():
        return
    try:
        kwokctl.run(paths, [str(bin_dir / "kwokctl"), "delete", "cluster", "--name", paths.name],
                    "kwokctl delete cluster", timeout=120)
    except RuntimeError as error:
        print(f"warning: {error}")


def owned_processes(paths: ClusterPaths) -> dict[str, int]:
    """Every process `up` started for this cluster that is still alive: kwok's components and the helpers."""
    alive = {name: pid for name, pid in paths.component_pids().items()
             if processes.is_ours(pid, str(paths.kwok_cluster))}
    alive.update((helper.name, pid) for helper in recorded_helpers(paths) if (pid := helper.pid()))
    return alive


def down(name: str = DEFAULT_NAME, log=print) -> bool:
    """Stops everything `up` started (the helpers and kwok's components, by pid) and removes the cluster's
    directory. True when nothing of it is left running."""
    paths = cluster_paths(name)
    if not paths.root.exists():
        log(f"[dev-cluster {name}] no such cluster (nothing under {paths.root})")
        return True
    recorded = paths.component_pids()
    helpers = stop_helpers(paths, log)
    if helpers is None:
        return False
    bin_dir = toolchain.bin_dir() if not toolchain.missing(("kwokctl",)) else None
    _delete_control_plane(paths, bin_dir)
    # kwokctl stops its components; anything it missed is stopped here, by the pid it recorded.
    survivors = [f"{n} ({p})" for n, p in recorded.items()
                 if not processes.stop(p, marker=str(paths.kwok_cluster))]
    if survivors:
        log(f"[dev-cluster {name}] could not stop: {', '.join(survivors)}; left {paths.root} in place")
        return False
    shutil.rmtree(paths.root, ignore_errors=True)
    log(f"[dev-cluster {name}] down: stopped {len(recorded) + helpers} processes, removed {paths.root}")
    return True


def stop_helpers(paths: ClusterPaths, log=print) -> int | None:
    """Stops the cluster's helper processes, the device plugin last (the others' pods hold its chips), the
    process runtime with its own grace (it stops its pods' processes first). Their count, or None if one
    survived."""
    helpers = {helper.name: helper for helper in recorded_helpers(paths)}
    known = {helper.name: helper for helper in (runtime_helper.helper(paths), device_plugin(paths))}
    helpers.update((name, helper) for name, helper in known.items() if name in helpers)
    plugin = helpers.pop("device-plugin", None)
    stopped = 0
    for helper in [*helpers.values(), *([plugin] if plugin else [])]:
        was_running = helper.running()
        if not helper.stop():
            log(f"[dev-cluster {paths.name}] could not stop the {helper.name} (pid {helper.pid()})")
            return None
        stopped += was_running
    return stopped


def status(name: str = DEFAULT_NAME) -> tuple[bool, list[str]]:
    """(healthy, report lines) for `dev-cluster status`."""
    paths = cluster_paths(name)
    if not paths.root.exists():
        return False, [f"cluster {name}: absent (run `ascend-hybrid dev-cluster up --name {name}`)"]
    lines = [f"cluster {name}: {paths.root}"]
    recorded = paths.component_pids()
    alive = owned_processes(paths)
    pid: int | None  # a component's is known; a helper's pid file may be gone
    for component, pid in sorted(recorded.items()):
        lines.append(f"  {component:<24} pid {pid:<8} {'running' if component in alive else 'STOPPED'}")
    for helper in recorded_helpers(paths):
        pid = processes.read_pid(helper.pid_file)
        lines.append(f"  {helper.name:<24} pid {pid or '-':<8} {'running' if helper.name in alive else 'STOPPED'}")
    healthy = bool(recorded) and "device-plugin" in alive and all(component in alive for component in recorded)
    if api_is_up(paths):
        core = core_api(paths)
        try:
            nodes = fleet.simulated_nodes(core)
            ready = sum(fleet.ready_status(n) == "True" for n in nodes)
            chips: dict[str, int] = {}
            for node in nodes:
                chip = (node["metadata"].get("labels") or {}).get("accelerator-type", "?")
                chips[chip] = chips.get(chip, 0) + 1
            kinds = ", ".join(f"{count}× {kind}" for kind, count in sorted(chips.items()))
            lines.append(f"  nodes: {len(nodes)} ({kinds}), {ready} Ready")
        except RuntimeError as error:
            lines.append(f"  nodes: unknown ({error})")
            healthy = False
        lines += kueue_manager.status_lines(paths, core.api_client)
        healthy &= not kueue_manager.configured(paths) or "kueue" in alive
        lines += volcano_manager.status_lines(paths, core.api_client)
        healthy &= not volcano_manager.configured(paths) or all(
            helper.name in alive for helper in volcano_manager.helpers(paths))
    else:
        lines.append("  apiserver: not answering")
        healthy = False
    prometheus_url = prometheus.url(paths)
    if prometheus_url:
        lines.append(f"  prometheus: {prometheus_url}")
    lines.append(f"  kubeconfig: {paths.kubeconfig}")
    return healthy, lines


def log_tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return f"({path} does not exist)"


def add_nodes(name: str, count: int, chip: str | None = None, log=print) -> list[str]:
    """Adds `count` nodes after the highest existing index, continuing the rack layout."""
    paths = cluster_paths(name)
    settings = load_settings(paths)
    if settings is None or not api_is_up(paths):
        raise RuntimeError(f"cluster {name} is not running (run `ascend-hybrid dev-cluster up --name {name}`)")
    core = core_api(paths)
    existing = fleet.existing_sim_nodes(core)
    first = max(existing, default=0) + 1
    new = plan_nodes(first, count, chip or settings.chip, settings.nodes_per_rack)
    fleet.create_nodes(core, new)
    fleet.wait_nodes_ready(core, {n.name for n in new}, timeout=120)
    log(f"[dev-cluster {name}] added {', '.join(n.name for n in new)} ({chip or settings.chip})")
    return [n.name for n in new]


def require_running(name: str) -> ClusterPaths:
    paths = cluster_paths(name)
    if not api_is_up(paths):
        raise RuntimeError(f"cluster {name} is not running (run `ascend-hybrid dev-cluster up --name {name}`)")
    return paths

