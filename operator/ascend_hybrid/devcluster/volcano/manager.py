"""Volcano in the dev cluster (`dev-cluster up --volcano`): its CRDs, vc-controller-manager and vc-scheduler
(built from Volcano's module by the toolchain) as helper processes against the apiserver, and the stand-in for
Huawei's Ascend plugin (stand_in.py).

Both binaries run out of cluster with the cluster's admin kubeconfig, leader election off. Every port they open
(each one's metrics and health) is chosen free on 127.0.0.1 and recorded under <cluster>/volcano/, kept while
free. There is no webhook manager, as in MindCluster's own deployment: nothing defaults or validates Volcano's
objects at admission. The three run or are restarted together, so their ports always agree with the record.

`up --volcano` returns once both answer on /healthz, the stand-in has its first lists, and the queue controller
has opened the `default` Queue the scheduler creates at start.
"""

from __future__ import annotations

import functools
import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import cast

import urllib3
import yaml
from kubernetes import client

from ascend_hybrid.devcluster.controlplane import ports, toolchain
from ascend_hybrid.devcluster.helpers import Helper
from ascend_hybrid.devcluster.kube import processes
from ascend_hybrid.devcluster.kube.client import with_retries
from ascend_hybrid.devcluster.kube.waiting import WaitTimeout, wait_until
from ascend_hybrid.devcluster.paths import ClusterPaths
from ascend_hybrid.devcluster.volcano import manifests

STAND_IN_MODULE = "ascend_hybrid.devcluster.volcano.stand_in"
FIELD_MANAGER = "ascend-hybrid-dev-cluster"
READY_TIMEOUT_SECONDS = 90.0
QUEUE_TIMEOUT_SECONDS = 60.0


def home(paths: ClusterPaths) -> Path:
    return paths.root / "volcano"


def controllers(paths: ClusterPaths) -> Helper:
    return Helper("volcano-controllers", paths)


def scheduler(paths: ClusterPaths) -> Helper:
    return Helper("volcano-scheduler", paths)


def stand_in(paths: ClusterPaths) -> Helper:
    return Helper("volcano-ascend-plugin", paths)


def helpers(paths: ClusterPaths) -> tuple[Helper, ...]:
    return controllers(paths), scheduler(paths), stand_in(paths)


def _ports_file(paths: ClusterPaths) -> Path:
    return home(paths) / "ports.json"


def recorded_ports(paths: ClusterPaths) -> dict[str, int] | None:
    try:
        recorded = json.loads(_ports_file(paths).read_text())
        return {name: int(recorded[name]) for name in manifests.PORT_NAMES}
    except (FileNotFoundError, ValueError, KeyError):
        return None


def configured(paths: ClusterPaths) -> bool:
    """Whether `up --volcano` set Volcano up in this cluster once (a later `up` keeps it running)."""
    return recorded_ports(paths) is not None


def _choose_ports(paths: ClusterPaths) -> dict[str, int]:
    recorded = recorded_ports(paths)
    if recorded and all(ports.port_is_free(port, manifests.HOST) for port in recorded.values()):
        return recorded
    names = manifests.PORT_NAMES
    chosen = dict(zip(names, ports.pick_free_ports(len(names), ports.SERVER_RANGE, manifests.HOST)))
    home(paths).mkdir(parents=True, exist_ok=True)
    _ports_file(paths).write_text(json.dumps(chosen) + "\n")
    return chosen


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{manifests.HOST}:{port}/healthz", timeout=2) as response:
            return response.status == 200
    except (OSError, urllib.error.URLError):
        return False


def apply_crds(api: client.ApiClient, directory: Path | None = None) -> list[str]:
    """Server-side applies every CRD Volcano's module ships (the scheduler's cache waits for all of them) and
    waits until they are established."""
    extensions = client.ApiextensionsV1Api(api)
    directory = directory or toolchain.volcano_manifests_dir() / "crds"
    documents = [document for path in sorted(directory.glob("*.yaml"))
                 for document in yaml.safe_load_all(path.read_text()) if document]
    if not documents:
        raise RuntimeError(f"no Volcano CRDs in {directory}: run `ascend-hybrid dev-cluster build --with-volcano`")
    for crd in documents:
        name = crd["metadata"]["name"]
        # The ignore: mypy cannot type a lambda whose defaults have no counterpart in Callable[[], T]. The cast:
        # with _preload_content=False the client returns the raw response, not the model it declares.
        with_retries(lambda crd=crd, name=name: cast(urllib3.HTTPResponse,  # type: ignore[misc]
                     extensions.patch_custom_resource_definition(
                         name, crd, field_manager=FIELD_MANAGER, force=True,
                         _content_type="application/apply-patch+yaml", _preload_content=False)).data,
                     f"apply CRD {name}")

    def established(name: str) -> bool:
        status = cast(client.V1CustomResourceDefinitionStatus, extensions.read_custom_resource_definition(name).status)
        return any(c.type == "Established" and c.status == "True" for c in status.conditions or [])

    names = [crd["metadata"]["name"] for crd in documents]
    wait_until(lambda: all(established(name) for name in names), 60, "Volcano's CRDs to be established")
    return names


def _ensure_namespace(core: client.CoreV1Api, name: str) -> None:
    try:
        # validate_call builds the V1Namespace from the dict
        core.create_namespace(cast(client.V1Namespace, {"apiVersion": "v1", "kind": "Namespace",
                                                        "metadata": {"name": name}}), _preload_content=False)
    except client.ApiException as error:
        if error.status != 409:
            raise


def default_queue(api: client.ApiClient) -> dict | None:
    try:
        # a custom object comes back as the JSON the apiserver sent
        return cast(dict, client.CustomObjectsApi(api).get_cluster_custom_object(
            manifests.GROUP, manifests.VERSION, manifests.QUEUES, manifests.DEFAULT_QUEUE, _request_timeout=5))
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise


def running(paths: ClusterPaths) -> bool:
    chosen = recorded_ports(paths)
    return (chosen is not None and all(helper.running() for helper in helpers(paths))
            and healthy(chosen["scheduler-healthz"]) and healthy(chosen["controllers-healthz"]))


def stop(paths: ClusterPaths) -> bool:
    """Stops the stand-in, the scheduler and the controller manager (by pid); True when none is left."""
    return all([helper.stop() for helper in reversed(helpers(paths))])


def ensure_running(paths: ClusterPaths, api: client.ApiClient, progress=print) -> dict[str, int]:
    """Starts Volcano unless all of it runs and answers; returns once the `default` Queue is Open. The pids."""
    bin_dir = toolchain.ensure(with_volcano=True, log=lambda line: progress(line.strip()))
    if running(paths):
        progress("volcano already running")
    else:
        if not stop(paths):
            raise RuntimeError("could not stop what is left of Volcano to restart it")
        _start(paths, api, bin_dir, progress)
    try:
        wait_until(lambda: manifests.queue_state(default_queue(api)) == "Open", QUEUE_TIMEOUT_SECONDS,
                   f"Volcano's `{manifests.DEFAULT_QUEUE}` Queue to be Open")
    except WaitTimeout as error:
        raise RuntimeError(f"{error}; the controller manager's log ({controllers(paths).log_file}) ends:\n"
                           f"{controllers(paths).log_tail()}") from None
    pids = {helper.name: helper.pid() or 0 for helper in helpers(paths)}
    progress(f"volcano running ({', '.join(f'{name} pid {pid}' for name, pid in pids.items())}); "
             f"Queue {manifests.DEFAULT_QUEUE} Open")
    return pids


def _start(paths: ClusterPaths, api: client.ApiClient, bin_dir: Path, progress) -> None:
    names = apply_crds(api)
    progress(f"volcano: {len(names)} CRDs established")
    _ensure_namespace(client.CoreV1Api(api), manifests.NAMESPACE)
    chosen = _choose_ports(paths)
    conf = home(paths) / "scheduler.conf"
    conf.write_text(manifests.SCHEDULER_CONF)
    for helper, command, port in (
            (controllers(paths), manifests.controllers_command(str(bin_dir / "vc-controller-manager"),
                                                               paths.kubeconfig, chosen), "controllers-healthz"),
            (scheduler(paths), manifests.scheduler_command(str(bin_dir / "vc-scheduler"), paths.kubeconfig, conf,
                                                           chosen, home(paths)), "scheduler-healthz")):
        pid = helper.start(command)
        helper.wait_ready(pid, functools.partial(healthy, chosen[port]), READY_TIMEOUT_SECONDS)
    plugin = stand_in(paths)
    plugin.ensure(processes.python_module_command(
        STAND_IN_MODULE, "--kubeconfig", str(paths.kubeconfig), "--ready-file", str(plugin.ready_file),
        "--cluster-dir", str(paths.root)), timeout=READY_TIMEOUT_SECONDS)
    progress(f"volcano: scheduler health {manifests.HOST}:{chosen['scheduler-healthz']}, metrics "
             f"{manifests.HOST}:{chosen['scheduler-metrics']}; controllers health "
             f"{manifests.HOST}:{chosen['controllers-healthz']}")


def status_lines(paths: ClusterPaths, api: client.ApiClient) -> list[str]:
    """For `dev-cluster status`: where Volcano listens and what its queues hold."""
    chosen = recorded_ports(paths)
    if chosen is None:
        return []
    lines = [f"  volcano: scheduler health {manifests.HOST}:{chosen['scheduler-healthz']}, controllers health "
             f"{manifests.HOST}:{chosen['controllers-healthz']}"]
    custom = client.CustomObjectsApi(api)
    try:
        # custom objects come back as the JSON the apiserver sent: a dict with the list's items
        queues = cast(dict, custom.list_cluster_custom_object(manifests.GROUP, manifests.VERSION, manifests.QUEUES,
                                                              _request_timeout=5))["items"]
        groups = cast(dict, custom.list_cluster_custom_object(manifests.GROUP, manifests.VERSION,
                                                              manifests.PODGROUPS, _request_timeout=5))["items"]
    except client.ApiException as error:
        return [*lines, f"  volcano queues: unreadable ({error.status} {error.reason})"]
    return lines + manifests.queue_summary(queues, groups)
