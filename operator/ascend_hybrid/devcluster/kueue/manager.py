"""Kueue in the dev cluster (`dev-cluster up --kueue`): its CRDs, its manager as a helper process against the
apiserver, its webhooks, and the default queues.

The manager runs out of cluster with the cluster's admin kubeconfig. Every port it opens (health, metrics,
webhook) is chosen free on 127.0.0.1 and recorded under <cluster>/kueue/, and kept while free, so a resumed
cluster finds it at the same address; the visibility server is off. The apiserver reaches the webhooks by `url`
and trusts them through the cluster's own CA (certs.py).

Kueue 0.17 reads its metrics certificate from the hard-coded /etc/kueue/metrics/certs when internal cert
management is off (cmd/kueue/main.go), even with metrics disabled, and exits without it. The manager therefore
runs in a private user and mount namespace (util-linux `unshare`, no privilege needed) where /etc is an overlay
whose upper layer holds kueue/metrics/certs → our certificate directory. The real /etc is never written and the
mount dies with the process; `unshare` and `sh` exec, so the recorded pid is Kueue's own.

`up --kueue` returns once the webhooks answer: a server-side dry-run pod create in `default` comes back with
Kueue's admission gate, which proves apiserver → url → CA → Kueue.
"""

from __future__ import annotations

import base64
import json
import shutil
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import TypedDict, cast

import urllib3
from kubernetes import client

from ascend_hybrid.devcluster.controlplane import ports, toolchain
from ascend_hybrid.devcluster.helpers import Helper
from ascend_hybrid.devcluster.kube.client import with_retries
from ascend_hybrid.devcluster.kube.waiting import WaitTimeout, wait_until
from ascend_hybrid.devcluster.kueue import certs, manifests
from ascend_hybrid.devcluster.paths import ClusterPaths


class _ApplyOptions(TypedDict):
    field_manager: str
    force: bool
    _content_type: str


# typed, not a plain dict: unpacked into the client's calls, each value must match its own keyword
APPLY: _ApplyOptions = {"field_manager": manifests.FIELD_MANAGER, "force": True,
                        "_content_type": "application/apply-patch+yaml"}
PORT_NAMES = ("health", "metrics", "webhook")
READY_TIMEOUT_SECONDS = 90.0
STOP_GRACE_SECONDS = 15.0
OVERLAY_SCRIPT = ('mount -t overlay overlay -o "lowerdir=/etc,upperdir=$1,workdir=$2" /etc && shift 2 '
                  '&& exec "$@"')


def home(paths: ClusterPaths) -> Path:
    return paths.root / "kueue"


def helper(paths: ClusterPaths) -> Helper:
    return Helper("kueue", paths, stop_grace=STOP_GRACE_SECONDS)


def _ports_file(paths: ClusterPaths) -> Path:
    return home(paths) / "ports.json"


def recorded_ports(paths: ClusterPaths) -> dict[str, int] | None:
    try:
        recorded = json.loads(_ports_file(paths).read_text())
        return {name: int(recorded[name]) for name in PORT_NAMES}
    except (FileNotFoundError, ValueError, KeyError):
        return None


def configured(paths: ClusterPaths) -> bool:
    """Whether `up --kueue` set Kueue up in this cluster once (a later `up` keeps it running: its webhooks refuse
    pods in the managed namespaces while it is down)."""
    return recorded_ports(paths) is not None


def _choose_ports(paths: ClusterPaths) -> dict[str, int]:
    recorded = recorded_ports(paths)
    if recorded and all(ports.port_is_free(port, manifests.HOST) for port in recorded.values()):
        return recorded
    chosen = dict(zip(PORT_NAMES, ports.pick_free_ports(len(PORT_NAMES), ports.SERVER_RANGE, manifests.HOST)))
    home(paths).mkdir(parents=True, exist_ok=True)
    _ports_file(paths).write_text(json.dumps(chosen) + "\n")
    return chosen


def command(paths: ClusterPaths, binary: str, config_file: Path, cert_dir: Path) -> list[str]:
    """unshare → sh (mounts the /etc overlay) → kueue, each exec'ing the next."""
    unshare = shutil.which("unshare")
    if unshare is None:
        raise FileNotFoundError("util-linux `unshare` is needed to run Kueue (it gives Kueue a private /etc)")
    upper, work = home(paths) / "etc-upper", home(paths) / "etc-work"
    link = upper / "kueue" / "metrics" / "certs"
    link.parent.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(cert_dir)
    return [unshare, "--user", "--map-root-user", "--mount", "--propagation", "private", "sh", "-c", OVERLAY_SCRIPT,
            "kueue", str(upper), str(work), binary, f"--config={config_file}", f"--kubeconfig={paths.kubeconfig}",
            "--zap-log-level=2"]


def answers(chosen: dict[str, int], ca_file: Path) -> bool:
    """/readyz says ok and the webhook server completes a TLS handshake that verifies against our CA."""
    try:
        with urllib.request.urlopen(f"http://{manifests.HOST}:{chosen['health']}/readyz", timeout=2) as response:
            if response.status != 200:
                return False
        context = ssl.create_default_context(cafile=str(ca_file))
        try:
            urllib.request.urlopen(f"https://{manifests.HOST}:{chosen['webhook']}/healthz", context=context, timeout=2)
        except urllib.error.HTTPError:
            pass  # any HTTP answer proves TLS with our certificate
        return True
    except (OSError, urllib.error.URLError):
        return False


def _apply_crds(api: client.ApiClient, webhook_port: int, ca_bundle: str) -> list[str]:
    extensions = client.ApiextensionsV1Api(api)
    texts = [path.read_text() for path in sorted((toolchain.kueue_manifests_dir() / "crds").glob("*.yaml"))]
    documents = manifests.crds(texts, webhook_port, ca_bundle)
    for crd in documents:  # the workloads CRD is ~1.4 MB: server-side apply keeps no last-applied copy of it
        name = crd["metadata"]["name"]
        # The ignore: mypy cannot type a lambda whose defaults have no counterpart in Callable[[], T]. The cast:
        # with _preload_content=False the client returns the raw response, not the model it declares.
        with_retries(lambda crd=crd, name=name: cast(urllib3.HTTPResponse,  # type: ignore[misc]
                     extensions.patch_custom_resource_definition(name, crd, _preload_content=False, **APPLY)).data,
                     f"apply CRD {name}")  # read: the connection is reused

    def established(name: str) -> bool:
        # the apiserver always sends a CRD's status (and wait_until retries on an error)
        status = cast(client.V1CustomResourceDefinitionStatus, extensions.read_custom_resource_definition(name).status)
        conditions = status.conditions or []
        return any(c.type == "Established" and c.status == "True" for c in conditions)

    names = [crd["metadata"]["name"] for crd in documents]
    wait_until(lambda: all(established(name) for name in names), 60, "Kueue's CRDs to be established")
    return names


def _apply_webhooks(api: client.ApiClient, webhook_port: int, ca_bundle: str) -> None:
    admission = client.AdmissionregistrationV1Api(api)
    text = (toolchain.kueue_manifests_dir() / "webhooks.yaml").read_text()
    for document in manifests.webhook_configurations(text, webhook_port, ca_bundle):
        name = document["metadata"]["name"]
        patch = (admission.patch_mutating_webhook_configuration if document["kind"].startswith("Mutating")
                 else admission.patch_validating_webhook_configuration)
        # mypy cannot type a lambda whose defaults have no counterpart in Callable[[], T]
        with_retries(lambda patch=patch, name=name, document=document: patch(  # type: ignore[misc]
            name, document, _preload_content=False, **APPLY).data, f"apply {name}")


def _ensure_namespace(core: client.CoreV1Api, name: str) -> None:
    try:
        # validate_call builds the V1Namespace from the dict
        core.create_namespace(cast(client.V1Namespace, {"apiVersion": "v1", "kind": "Namespace",
                                                        "metadata": {"name": name}}), _preload_content=False)
    except client.ApiException as error:
        if error.status != 409:
            raise


def label_managed(core: client.CoreV1Api, namespace: str) -> None:
    """Puts a namespace under Kueue's pod integration (kueue.x-k8s.io/managed=true)."""
    with_retries(lambda: core.patch_namespace(namespace, {"metadata": {"labels": {
        manifests.MANAGED_NAMESPACE_LABEL: "true"}}}, _preload_content=False), f"label namespace {namespace}")


def _webhooks_answer(core: client.CoreV1Api) -> bool:
    # validate_call builds the V1Pod from the dict; the created pod always has a spec
    probe = core.create_namespaced_pod(manifests.QUEUE_NAMESPACE, cast(client.V1Pod, manifests.probe_pod()),
                                       dry_run="All", _request_timeout=15)
    return any(gate.name == manifests.ADMISSION_GATE
               for gate in cast(client.V1PodSpec, probe.spec).scheduling_gates or [])


def apply_queue_objects(api: client.ApiClient, documents: list[dict]) -> None:
    custom = client.CustomObjectsApi(api)
    for document in documents:
        name, namespace = document["metadata"]["name"], document["metadata"].get("namespace")
        where = (manifests.GROUP, manifests.VERSION, *((namespace,) if namespace else ()),
                 document["kind"].lower() + "s", name)
        patch = custom.patch_namespaced_custom_object if namespace else custom.patch_cluster_custom_object
        # mypy cannot type a lambda whose defaults have no counterpart in Callable[[], T]
        with_retries(lambda patch=patch, where=where, document=document: patch(  # type: ignore[misc]
            *where, document, **APPLY), f"apply {document['kind']} {name}")


def ensure_running(paths: ClusterPaths, api: client.ApiClient, nodes: list[dict], progress=print) -> int:
    """Starts Kueue unless it runs and answers, then (re)applies the default queue objects; returns its pid."""
    binary = str(toolchain.ensure(with_kueue=True, log=lambda line: progress(line.strip())) / "kueue")
    core = client.CoreV1Api(api)
    manager = helper(paths)
    files = certs.ensure(home(paths) / "certs")
    chosen = recorded_ports(paths)
    pid = manager.pid()
    if pid is None or chosen is None or not answers(chosen, files.ca):
        if pid is not None and not manager.stop():
            raise RuntimeError(f"could not stop the kueue manager (pid {pid}) to restart it")
        pid = _start(paths, api, core, binary, files, progress)
    else:
        progress(f"kueue already running (pid {pid})")
    apply_queue_objects(api, manifests.default_queue_objects(nodes))
    progress(f"kueue queues: ClusterQueue {manifests.CLUSTER_QUEUE}, LocalQueue "
             f"{manifests.QUEUE_NAMESPACE}/{manifests.LOCAL_QUEUE}")
    return pid


def _start(paths: ClusterPaths, api, core, binary: str, files: certs.CertFiles, progress) -> int:
    chosen = _choose_ports(paths)
    ca_bundle = base64.b64encode(files.ca.read_bytes()).decode()
    names = _apply_crds(api, chosen["webhook"], ca_bundle)
    progress(f"kueue: {len(names)} CRDs established")
    _ensure_namespace(core, manifests.KUEUE_NAMESPACE)
    config_file = home(paths) / "config.yaml"
    config_file.write_text(json.dumps(manifests.configuration(chosen, str(files.directory)), indent=1) + "\n")
    manager = helper(paths)
    pid = manager.start(command(paths, binary, config_file, files.directory))
    manager.wait_ready(pid, lambda: answers(chosen, files.ca), READY_TIMEOUT_SECONDS)
    _apply_webhooks(api, chosen["webhook"], ca_bundle)
    label_managed(core, manifests.QUEUE_NAMESPACE)
    try:
        wait_until(lambda: _webhooks_answer(core), 30, "Kueue's pod webhook to gate a dry-run pod")
    except WaitTimeout as error:
        raise RuntimeError(f"{error}; kueue's log ({manager.log_file}) ends:\n{manager.log_tail()}") from None
    progress(f"kueue running (pid {pid}): health {manifests.HOST}:{chosen['health']}, metrics "
             f"{manifests.HOST}:{chosen['metrics']}, webhook {manifests.HOST}:{chosen['webhook']}")
    return pid


def status_lines(paths: ClusterPaths, api: client.ApiClient) -> list[str]:
    """For `dev-cluster status`: where Kueue listens and what its queues hold."""
    chosen = recorded_ports(paths)
    if chosen is None:
        return []
    lines = [f"  kueue: health {manifests.HOST}:{chosen['health']}, metrics {manifests.HOST}:{chosen['metrics']}, "
             f"webhook {manifests.HOST}:{chosen['webhook']}"]
    custom = client.CustomObjectsApi(api)
    try:
        # custom objects come back as the JSON the apiserver sent: a dict with the list's items
        cluster_queues = cast(dict, custom.list_cluster_custom_object(manifests.GROUP, manifests.VERSION,
                                                                      "clusterqueues", _request_timeout=5))["items"]
        local_queues = cast(dict, custom.list_cluster_custom_object(manifests.GROUP, manifests.VERSION, "localqueues",
                                                                    _request_timeout=5))["items"]
    except client.ApiException as error:
        return [*lines, f"  kueue queues: unreadable ({error.status} {error.reason})"]
    return lines + manifests.queue_summary(cluster_queues, local_queues)
