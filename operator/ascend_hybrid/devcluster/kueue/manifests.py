"""What the dev cluster hands Kueue and the apiserver (pure): the manager's configuration, Kueue's CRDs and
webhook configurations rewritten for a manager that runs out of cluster on 127.0.0.1, and the default queue
objects (a ResourceFlavor per chip type of the simulated nodes, a ClusterQueue and its LocalQueue).

Kueue's own files (CRDs, webhook manifest) come from the module the manager was built from
(toolchain.kueue_manifests_dir()); nothing of them is copied into this repository.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping

import yaml

from ascend_hybrid.devcluster.nodes.manifests import (
    ACCELERATOR_TYPE_LABEL,
    RESOURCE,
    SIMULATED_LABEL,
    profile_of_node,
)

GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"
CONFIG_API = "config.kueue.x-k8s.io/v1beta2"
MANAGED_NAMESPACE_LABEL = f"{GROUP}/managed"
ADMISSION_GATE = f"{GROUP}/admission"
QUEUE_LABEL = f"{GROUP}/queue-name"
KUEUE_NAMESPACE = "kueue-system"  # Kueue's own namespace (events); never a managed one
FIELD_MANAGER = "ascend-hybrid-dev-cluster"
CLUSTER_QUEUE = "ascend"
LOCAL_QUEUE = "ascend"
QUEUE_NAMESPACE = "default"
HOST = "127.0.0.1"
# Copied from every pod of a group onto its Workload, so `kubectl get workloads -l hybrid.ascend.dev/job=J` works.
LABEL_KEYS_TO_COPY = ("hybrid.ascend.dev/job", "hybrid.ascend.dev/attempt")

MUTATING = "kueue-mutating-webhook-configuration"
VALIDATING = "kueue-validating-webhook-configuration"
# The pod integration and Kueue's own kinds. The webhooks of integrations that stay off (batch/job, jobset,
# deployment, …) are left out: they would only add apiserver → Kueue calls for nothing.
KEPT_WEBHOOKS = frozenset({"mpod.kb.io", "vpod.kb.io", "mworkload.kb.io", "vworkload.kb.io", "mclusterqueue.kb.io",
                           "vclusterqueue.kb.io", "vcohort.kb.io", "mresourceflavor.kb.io", "vresourceflavor.kb.io"})
POD_WEBHOOKS = frozenset({"mpod.kb.io", "vpod.kb.io"})
# The CRDs upstream switches to webhook conversion (config/components/crd/kustomization.yaml, patches/).
CONVERSION_CRDS = frozenset({"localqueues", "clusterqueues", "cohorts", "workloads", "multikueueclusters"})
WEBHOOK_TIMEOUT_SECONDS = 10


def managed_selector() -> dict:
    """Namespaces whose pods Kueue manages: `default` (labelled by `up --kueue`) and any labelled alike."""
    return {"matchLabels": {MANAGED_NAMESPACE_LABEL: "true"}}


def configuration(ports: Mapping[str, int], cert_dir: str) -> dict:
    """Kueue's Configuration: every server on 127.0.0.1 at the ports chosen for it, our certificate, only the pod
    integration. Off: leader election, internal cert management (its certificates name a Service, not an IP),
    the visibility server (it would bind :8082 on every address and want certificates under /visibility)."""
    return {
        "apiVersion": CONFIG_API, "kind": "Configuration", "namespace": KUEUE_NAMESPACE,
        "health": {"healthProbeBindAddress": f"{HOST}:{ports['health']}"},
        "metrics": {"bindAddress": f"{HOST}:{ports['metrics']}"},
        "webhook": {"host": HOST, "port": ports["webhook"], "certDir": cert_dir},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "manageJobsWithoutQueueName": False,
        "managedJobsNamespaceSelector": managed_selector(),
        "integrations": {"frameworks": ["pod"], "labelKeysToCopy": list(LABEL_KEYS_TO_COPY)},
        "featureGates": {"VisibilityOnDemand": False},
        "clientConnection": {"qps": 50, "burst": 100},
    }


def _url(port: int, path: str) -> str:
    return f"https://{HOST}:{port}{path}"


def crds(texts: Iterable[str], webhook_port: int, ca_bundle: str) -> list[dict]:
    """Kueue's CRDs; those upstream converts by webhook get the conversion webhook at our url and CA."""
    documents = []
    for text in texts:
        crd = yaml.safe_load(text)
        if crd["spec"]["names"]["plural"] in CONVERSION_CRDS:
            crd["spec"]["conversion"] = {"strategy": "Webhook", "webhook": {
                "conversionReviewVersions": ["v1"],
                "clientConfig": {"url": _url(webhook_port, "/convert"), "caBundle": ca_bundle}}}
        documents.append(crd)
    return documents


def webhook_configurations(manifest: str, webhook_port: int, ca_bundle: str) -> list[dict]:
    """Kueue's webhook manifest with a url client config per webhook (the Service it names does not exist) and
    the pod webhooks limited to the managed namespaces: any other namespace never waits on Kueue."""
    documents = []
    for document in yaml.safe_load_all(manifest):
        if not document:
            continue
        configuration_ = copy.deepcopy(document)
        mutating = configuration_["kind"] == "MutatingWebhookConfiguration"
        configuration_["metadata"] = {"name": MUTATING if mutating else VALIDATING}
        webhooks = []
        for webhook in configuration_.get("webhooks") or []:
            if webhook["name"] not in KEPT_WEBHOOKS:
                continue
            path = webhook["clientConfig"]["service"]["path"]
            webhook["clientConfig"] = {"url": _url(webhook_port, path), "caBundle": ca_bundle}
            webhook["timeoutSeconds"] = WEBHOOK_TIMEOUT_SECONDS
            if webhook["name"] in POD_WEBHOOKS:
                webhook["namespaceSelector"] = managed_selector()
            webhooks.append(webhook)
        configuration_["webhooks"] = webhooks
        documents.append(configuration_)
    kinds = sorted(document["kind"] for document in documents)
    if kinds != ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"]:
        raise ValueError(f"Kueue's webhook manifest holds {kinds}, not one mutating and one validating configuration")
    kept = {webhook["name"] for document in documents for webhook in document["webhooks"]}
    if kept != KEPT_WEBHOOKS:
        raise ValueError(f"Kueue's webhook manifest lacks {sorted(KEPT_WEBHOOKS - kept)}")
    return documents


# -- default queue objects -----------------------------------------------------------------------------------
def flavor_name(chip: str) -> str:
    return f"ascend-{chip.lower()}"


def _quantity(text: str) -> int:
    """A node's allocatable cpu (cores) or memory (bytes) as an integer; binary and decimal suffixes."""
    suffixes = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
    text = str(text).strip()
    for suffix in sorted(suffixes, key=len, reverse=True):
        if text.endswith(suffix):
            return int(text[: -len(suffix)]) * suffixes[suffix]
    return int(text)


def _memory(total: int) -> str:
    return f"{total // 2**30}Gi" if total % 2**30 == 0 else str(total)


def flavor_quotas(nodes: Iterable[dict]) -> dict[str, dict[str, str]]:
    """Per chip type of the simulated nodes: its flavor's name → the nodes' total NPUs, cpu and memory."""
    totals: dict[str, dict[str, int]] = {}
    for node in nodes:
        chip_profile = profile_of_node(node)
        if chip_profile is None or not (node["metadata"].get("labels") or {}).get(SIMULATED_LABEL):
            continue
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        total = totals.setdefault(chip_profile.chip, {RESOURCE: 0, "cpu": 0, "memory": 0})
        total[RESOURCE] += _quantity(allocatable.get(RESOURCE, chip_profile.chips_per_node))
        total["cpu"] += _quantity(allocatable.get("cpu", "0"))
        total["memory"] += _quantity(allocatable.get("memory", "0"))
    return {chip: {RESOURCE: str(t[RESOURCE]), "cpu": str(t["cpu"]), "memory": _memory(t["memory"])}
            for chip, t in sorted(totals.items())}


def resource_flavor(chip: str, accelerator_type: str) -> dict:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceFlavor", "metadata": {"name": flavor_name(chip)},
            "spec": {"nodeLabels": {ACCELERATOR_TYPE_LABEL: accelerator_type}}}


def cluster_queue(name: str, quotas: Mapping[str, Mapping[str, str]]) -> dict:
    """One resource group over NPUs, cpu and memory (a pod requesting a resource the queue does not cover is
    never admitted), a flavor per chip type; lower-priority workloads are preempted within the queue."""
    flavors = [{"name": flavor_name(chip), "resources": [{"name": resource, "nominalQuota": amount}
                                                         for resource, amount in quota.items()]}
               for chip, quota in quotas.items()]
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterQueue", "metadata": {"name": name},
            "spec": {"namespaceSelector": {}, "queueingStrategy": "BestEffortFIFO",
                     "preemption": {"withinClusterQueue": "LowerPriority"},
                     "resourceGroups": [{"coveredResources": [RESOURCE, "cpu", "memory"], "flavors": flavors}]}}


def local_queue(name: str, namespace: str, cluster_queue_name: str) -> dict:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": namespace}, "spec": {"clusterQueue": cluster_queue_name}}


def default_queue_objects(nodes: list[dict]) -> list[dict]:
    """A ResourceFlavor per chip type present (nodeLabels: the nodes' accelerator-type), the ClusterQueue
    `ascend` with the nodes' totals as quota, and the LocalQueue `default/ascend` pointing at it."""
    types: dict[str, str] = {}
    for node in nodes:
        chip_profile = profile_of_node(node)
        if chip_profile is not None:
            types[chip_profile.chip] = chip_profile.accelerator_type
    quotas = flavor_quotas(nodes)
    return [*(resource_flavor(chip, types[chip]) for chip in quotas),
            cluster_queue(CLUSTER_QUEUE, quotas), local_queue(LOCAL_QUEUE, QUEUE_NAMESPACE, CLUSTER_QUEUE)]


def probe_pod() -> dict:
    """A pod for a server-side dry run: Kueue's webhook answering puts its admission gate on it."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": "kueue-probe-", "labels": {QUEUE_LABEL: LOCAL_QUEUE}},
            "spec": {"containers": [{"name": "probe", "image": "busybox"}]}}


def queue_summary(cluster_queues: list[dict], local_queues: list[dict]) -> list[str]:
    """`dev-cluster status` lines: each queue's admitted and pending workloads and its flavors' usage."""
    lines = []
    for queue in cluster_queues:
        status, spec = queue.get("status") or {}, queue.get("spec") or {}
        nominal = {(flavor["name"], resource["name"]): resource.get("nominalQuota")
                   for group in spec.get("resourceGroups") or [] for flavor in group.get("flavors") or []
                   for resource in flavor.get("resources") or []}
        usage = [f"{flavor['name']} {resource['name']} {resource.get('total', '0')}/"
                 f"{nominal.get((flavor['name'], resource['name']), '?')}"
                 for flavor in status.get("flavorsUsage") or [] for resource in flavor.get("resources") or []
                 if resource["name"] == RESOURCE]
        lines.append(f"  ClusterQueue {queue['metadata']['name']}: {status.get('admittedWorkloads', 0)} admitted, "
                     f"{status.get('pendingWorkloads', 0)} pending; {', '.join(usage) or 'no usage'}")
    for queue in local_queues:
        status = queue.get("status") or {}
        lines.append(f"  LocalQueue {queue['metadata']['namespace']}/{queue['metadata']['name']} → "
                     f"{(queue.get('spec') or {}).get('clusterQueue')}: {status.get('admittedWorkloads', 0)} admitted, "
                     f"{status.get('pendingWorkloads', 0)} pending")
    return lines
