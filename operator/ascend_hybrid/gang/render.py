"""Child manifests of a job (design §6, §8): pure functions over the resolved spec and the plan.

Each kind has one jinja2 template rendered with StrictUndefined from flat values; anything structured is
computed here in Python and handed over as JSON (valid YAML), so the templates stay free of logic.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, cast

import yaml
from jinja2 import Environment, PackageLoader, StrictUndefined

from ascend_hybrid.contracts import kueue, names
from ascend_hybrid.contracts import volcano as volcanos
from ascend_hybrid.contracts.chips import CHIPS
from ascend_hybrid.contracts.names import GROUP, HOSTNAME_LABEL
from ascend_hybrid.gang.ranktable import (
    INITIALIZING,
    JOB_CONFIG_ROOM,
    config_map_data,
    format_of,
    initializing,
    may_exceed_config_map,
)
from ascend_hybrid.spec.api import CHANNEL_KIND, CHANNEL_PLURAL, KIND, VERSION, VolcanoScheduling
from ascend_hybrid.spec.resolved import ResolvedJob

SCHED_HOST_ENV = names.SCHED_HOST_ENV
RANK_VARIABLES = frozenset({"MS_ROLE", "MS_SCHED_HOST", "MS_SCHED_PORT", "MS_WORKER_NUM", "MS_LOCAL_WORKER",
                            "MS_NODE_RANK", "RANK_TABLE_FILE", "RANK_SIZE", "RANK_START"})


@lru_cache(maxsize=1)
def _environment() -> Environment:
    environment = Environment(loader=PackageLoader("ascend_hybrid.gang", "templates"), undefined=StrictUndefined,
                              keep_trailing_newline=True, autoescape=False)
    environment.policies["json.dumps_function"] = _json_for_yaml
    return environment


# A \\u escape is one only after an even run of backslashes (an odd run escapes a literal backslash).
_SURROGATE_PAIR = re.compile(r"(?<!\\)((?:\\\\)*)\\u(d[89ab][0-9a-f]{2})\\u(d[c-f][0-9a-f]{2})")


def _json_for_yaml(value: Any, **options: Any) -> str:
    """JSON that YAML reads back unchanged: ASCII escapes (YAML line breaks such as U+0085 stay escaped), except
    characters beyond U+FFFF, written literally, since libyaml refuses \\u surrogate pairs."""
    text = json.dumps(value, **options)
    return _SURROGATE_PAIR.sub(
        lambda m: m[1] + chr(0x10000 + ((int(m[2], 16) - 0xD800) << 10) + int(m[3], 16) - 0xDC00), text)


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: a 128-pod gang renders in a tenth of the time


def _render(template: str, **values: Any) -> dict:
    # every template is one manifest, a YAML mapping
    return cast(dict, yaml.load(_environment().get_template(template).render(**values), Loader=_LOADER))


def owner_references(job: str, uid: str) -> list[dict]:
    return [{"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "name": job, "uid": uid,
             "controller": True, "blockOwnerDeletion": True}]


def needs_services(resolved: ResolvedJob) -> bool:
    """A job of one pod has no Service (two writes fewer of its few): its MindSpore scheduler runs in that pod
    and is reached at the pod's own IP (MS_SCHED_HOST from status.podIP), and no other pod looks up its name. An
    elastic job keeps them at any size: it may run again with more pods than it has now."""
    return resolved.pod_count > 1 or resolved.spec.elastic is not None


def services(job: str, namespace: str, uid: str) -> list[dict]:
    """`<job>-sched` (ClusterIP to pod 0: MS_SCHED_HOST must be an IP) and the headless `<job>` for pod DNS. The
    headless one has no selector: its endpoints are the rank table's pods, written with the table (dns_slices),
    so Kubernetes' endpoint controllers do not rewrite them as each pod of a starting gang changes."""
    owners, labels = owner_references(job, uid), names.job_labels(job)
    pod_zero = {names.JOB_LABEL: job, names.POD_INDEX_LABEL: "0"}
    return [
        _render("service.yaml.j2", name=names.sched_service(job), namespace=namespace, labels=labels,
                owner_references=owners, headless=False, selector=pod_zero, port_name="ms-sched",
                port=names.SCHED_PORT),
        _render("service.yaml.j2", name=names.headless_service(job), namespace=namespace, labels=labels,
                owner_references=owners, headless=True, selector=None, port_name="metrics",
                port=names.METRICS_PORT),
    ]


MAX_ENDPOINTS_PER_SLICE = 1000  # the apiserver's limit on one EndpointSlice
SLICE_MANAGER = "ascend-hybrid-operator"  # endpointslice.kubernetes.io/managed-by: not Kubernetes' controller


@dataclass(frozen=True)
class PodEndpoint:
    """A rank-table pod as its DNS record: `<name>.<job>.<namespace>.svc` resolves to `ip`."""

    name: str
    ip: str
    node: str
    uid: str


def pod_endpoints(pods: Iterable[Mapping]) -> tuple[PodEndpoint, ...]:
    """The pods' records in name order. An address the apiserver refuses in an EndpointSlice (loopback,
    link-local: the simulated cluster's real-trainer pods run on 127.0.0.0/8) gives its pod no record."""
    found = []
    for pod in pods:
        ip = (pod.get("status") or {}).get("podIP") or ""
        try:
            address = ipaddress.ip_address(ip)
        except ValueError:
            continue
        if address.is_loopback or address.is_link_local:
            continue
        meta = pod["metadata"]
        found.append(PodEndpoint(meta["name"], ip, (pod.get("spec") or {}).get("nodeName") or "", meta.get("uid") or ""))
    return tuple(sorted(found, key=lambda endpoint: endpoint.name))


def dns_slice_count(pod_count: int) -> int:
    return max(1, -(-pod_count // MAX_ENDPOINTS_PER_SLICE))


def most_pods(resolved: ResolvedJob) -> int:
    """The most pods the job runs: an elastic job shrunk (resolved at its running data degree) grows back to its
    spec's, so the slices it fills then are written, emptied, while it is shrunk."""
    spec_data = resolved.spec.parallelism.data
    if resolved.spec.elastic is not None and spec_data and spec_data > resolved.data:
        return resolved.pod_count * spec_data // resolved.data
    return resolved.pod_count


def dns_slices(job: str, namespace: str, uid: str, endpoints: Sequence[PodEndpoint], pod_count: int) -> list[dict]:
    """The headless `<job>`'s EndpointSlices: `dns_slice_count(pod_count)` of them (empty ones too, so a table
    with fewer pods empties the slices it no longer fills), IPv6 when the pods' addresses are."""
    family = "IPv6" if any(":" in endpoint.ip for endpoint in endpoints) else "IPv4"
    labels = {**names.job_labels(job), "kubernetes.io/service-name": names.headless_service(job),
              "endpointslice.kubernetes.io/managed-by": SLICE_MANAGER}
    count = max(dns_slice_count(pod_count), dns_slice_count(len(endpoints)))
    slices = []
    for index in range(count):
        chunk = endpoints[index * MAX_ENDPOINTS_PER_SLICE:(index + 1) * MAX_ENDPOINTS_PER_SLICE]
        slices.append({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": names.dns_endpoint_slice(job, index), "namespace": namespace, "labels": labels,
                         "ownerReferences": owner_references(job, uid)},
            "addressType": family,
            "ports": [{"name": "metrics", "protocol": "TCP", "port": names.METRICS_PORT}],
            "endpoints": [_slice_endpoint(endpoint, namespace) for endpoint in chunk],
        })
    return slices


def _slice_endpoint(endpoint: PodEndpoint, namespace: str) -> dict:
    target = {"kind": "Pod", "namespace": namespace, "name": endpoint.name, **({"uid": endpoint.uid} if endpoint.uid else {})}
    return {"addresses": [endpoint.ip], "hostname": endpoint.name, "conditions": {"ready": True},
            **({"nodeName": endpoint.node} if endpoint.node else {}), "targetRef": target}


MAX_PORT = 65535


def network_policy(job: str, namespace: str, uid: str, metrics_peers: list[dict]) -> dict:
    """The job's NetworkPolicy (opt-in, `--network-policy`): its pods admit the job's own pods on every TCP port
    but the metrics port (the MindSpore scheduler, the workers' ports, HCCL's host ports), and `metrics_peers`
    (the operator, Prometheus: NetworkPolicyPeer objects) on the metrics port; nothing else reaches them."""
    metrics = names.METRICS_PORT
    peer_ports = [{"protocol": "TCP", "port": 1, "endPort": metrics - 1},
                  {"protocol": "TCP", "port": metrics + 1, "endPort": MAX_PORT}]
    return _render("networkpolicy.yaml.j2", name=names.network_policy(job), namespace=namespace,
                   labels=names.job_labels(job), owner_references=owner_references(job, uid),
                   selector={names.JOB_LABEL: job}, peer_ports=peer_ports, metrics_peers=list(metrics_peers),
                   metrics_port=metrics)


def job_config(resolved: ResolvedJob) -> dict:
    """What the trainer needs to build the model and the loop (job.json)."""
    training = resolved.spec.training.model_dump(by_alias=True, exclude_none=True)
    training["globalBatchSize"] = resolved.global_batch_size
    return {"name": resolved.name, "worldSize": resolved.world_size,
            "npu": {"chip": resolved.chip, "perPod": resolved.per_pod},
            "parallelism": resolved.degrees, "model": resolved.model, "training": training}


def job_config_text(resolved: ResolvedJob) -> str:
    """job.json as the pods read it: indented for a person, compact where that would not fit its room beside the
    rank table (a thousand uneven pipeline stages)."""
    text = json.dumps(job_config(resolved), indent=2, sort_keys=True)
    if len(text.encode()) <= JOB_CONFIG_ROOM:
        return text
    return json.dumps(job_config(resolved), separators=(",", ":"), sort_keys=True)


def rank_table_config_map(job: str, namespace: str, uid: str, job_json: str, table: dict | None = None,
                          revision: int = 0) -> dict:
    """The job's one ConfigMap, `rings-config-<job>`: the rank table (ranktable.config_map_data: compact, or
    gzipped beyond a ConfigMap; `version` is `revision`, the counter of tables written) and job.json. They share
    one object so that a job's start writes it once with the initializing table and once with the completed one;
    every apply carries both, since a server-side apply drops the keys its field manager leaves out. Its data is
    set after the template: a 16 384-rank table would be a megabyte of YAML to parse back."""
    if len(job_json.encode()) > JOB_CONFIG_ROOM:
        raise ValueError(f"job.json is {len(job_json.encode())} bytes: more than the {JOB_CONFIG_ROOM} its "
                         "ConfigMap keeps for it beside the rank table")
    data, binary = config_map_data(table or INITIALIZING, revision)
    manifest = _render("configmap.yaml.j2", name=names.rank_table_config_map(job), namespace=namespace,
                       labels=names.job_labels(job), owner_references=owner_references(job, uid), data={})
    manifest["data"] = {**data, names.JOB_CONFIG_KEY: job_json}
    if binary:
        manifest["binaryData"] = binary
    return manifest


def launcher_channel(job: str, namespace: str, uid: str, generation: int, world: str | None = None,
                     checkpoint: str | None = None) -> dict:
    """The launchers' channel (recovery.py), LauncherChannel `<job>-recovery`, as a restart or an auto checkpoint
    interval applies it: only the `generation` key (`world` while pods a shrink kept run, `checkpoint` for an auto
    interval), so the apply never removes a report (each launcher merge-patches the key of its own pod). The channel
    itself is made empty with the job's children (new_launcher_channel): the launchers may only patch it, never
    make one."""
    data = {names.RECOVERY_GENERATION_KEY: str(generation)}
    if world is not None:
        data[names.RECOVERY_WORLD_KEY] = world
    if checkpoint is not None:
        data[names.RECOVERY_CHECKPOINT_KEY] = checkpoint
    return {**new_launcher_channel(job, namespace, uid), "data": data}


def new_launcher_channel(job: str, namespace: str, uid: str) -> dict:
    """The empty channel the operator creates before the pods (a missing `generation` is generation 0), with the
    job's labels, so the operator's watch sees it, and the job as owner, so it goes with the job."""
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": CHANNEL_KIND,
            "metadata": {"name": names.launcher_channel(job), "namespace": namespace, "labels": names.job_labels(job),
                         "ownerReferences": owner_references(job, uid)},
            "data": {}}


# The launcher reads and watches its channel (a watch with the field selector metadata.name=<job>-recovery, which
# the apiserver authorizes against resourceNames) and merge-patches its pod's report into it: nothing more, and on
# that one object.
LAUNCHER_VERBS = ["get", "watch", "patch"]


def service_account(resolved: ResolvedJob) -> str:
    """The ServiceAccount the job's pods run as: the template's, else the job's own (names.job_service_account)."""
    return resolved.spec.template.service_account_name or names.job_service_account(resolved.name)


def launcher_grant(job: str, namespace: str, uid: str, account: str) -> list[dict]:
    """What lets the job's launchers, and only them, use its channel: the job's own ServiceAccount (when `account`
    is it), Role `<job>-launcher` on LauncherChannel `<job>-recovery` by name, and the RoleBinding of `account` to
    it. All owned by the job, so they go with it. Each is only ever created: its name fixes its content."""
    labels, owners = names.job_labels(job), owner_references(job, uid)

    def meta(name: str) -> dict:
        return {"name": name, "namespace": namespace, "labels": labels, "ownerReferences": owners}
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta(names.launcher_role(job)),
            "rules": [{"apiGroups": [GROUP], "resources": [CHANNEL_PLURAL],
                       "resourceNames": [names.launcher_channel(job)], "verbs": LAUNCHER_VERBS}]}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": meta(names.launcher_binding(job, account)),
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": names.launcher_role(job)},
               "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]}
    own = [{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(account)}] \
        if account == names.job_service_account(job) else []
    return [*own, role, binding]


def _field_env(name: str, path: str) -> dict:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def pod_env(resolved: ResolvedJob, index: int, sched_ip: str | None) -> list[dict]:
    """Design §8. User env wins over defaults, except the rank variables, which only the operator may set.
    `sched_ip` None: the job has no `<job>-sched` (needs_services), its one pod's own IP is the scheduler's."""
    spec, k = resolved.spec, resolved.per_pod
    hccl = spec.hccl
    defaults: list[dict] = [
        _field_env("POD_NAME", "metadata.name"),
        _field_env("POD_NAMESPACE", "metadata.namespace"),
        _field_env("POD_IP", "status.podIP"),
        _field_env("POD_UID", "metadata.uid"),  # the launcher's reports name it: a pod made again is another
    ]
    if sched_ip is None:
        defaults.append(_field_env(SCHED_HOST_ENV, "status.podIP"))
    values = {
        "MS_ROLE": "MS_WORKER", **({} if sched_ip is None else {SCHED_HOST_ENV: sched_ip}),
        "MS_SCHED_PORT": str(names.SCHED_PORT),
        "MS_WORKER_NUM": str(resolved.world_size), "MS_LOCAL_WORKER": str(k), "MS_NODE_RANK": str(index),
        "RANK_TABLE_FILE": names.RANK_TABLE_FILE, "RANK_SIZE": str(resolved.world_size), "RANK_START": str(index * k),
        "HCCL_CONNECT_TIMEOUT": str(hccl.connect_timeout_seconds), "HCCL_EXEC_TIMEOUT": str(hccl.exec_timeout_seconds),
        "HCCL_WHITELIST_DISABLE": "1" if hccl.whitelist_disable else "0",
    }
    if hccl.socket_ifname:
        values["HCCL_SOCKET_IFNAME"] = hccl.socket_ifname
    values.update({key: value for key, value in hccl.env.items() if key not in RANK_VARIABLES})
    values["AHJ_PARALLEL"] = json.dumps(resolved.degrees, sort_keys=True)
    values["AHJ_JOB_CONFIG"] = names.JOB_CONFIG_FILE
    values["AHJ_TERMINATION_LOG"] = names.TERMINATION_LOG  # where the trainer writes why it ended
    values["AHJ_LAUNCHER_CHANNEL"] = names.launcher_channel(resolved.name)
    values["AHJ_SERVICE_ACCOUNT_DIR"] = names.SERVICE_ACCOUNT_DIR  # the pod's token to reach it with
    if spec.training.checkpoint:
        values["AHJ_CHECKPOINT_DIR"] = names.CHECKPOINT_DIR
    env = defaults + [{"name": key, "value": value} for key, value in values.items()]
    position = {entry["name"]: i for i, entry in enumerate(env)}
    for entry in spec.template.env:
        name = entry.get("name")
        if name in RANK_VARIABLES:
            continue
        if name in position:
            env[position[name]] = entry
        else:
            position[name] = len(env)
            env.append(entry)
    return env


def _resources(resolved: ResolvedJob) -> dict:
    spec = resolved.spec
    chips = str(resolved.per_pod)
    return {"requests": {**spec.template.resources.requests, spec.npu.resource: chips},
            "limits": {**spec.template.resources.limits, spec.npu.resource: chips}}


def needs_expander(resolved: ResolvedJob) -> bool:
    """Whether the job's pods get the rank-table expander (ranktable_sidecar.py): its table may not fit a ConfigMap
    whole, so the complete one is written into a shared emptyDir at RANK_TABLE_FILE."""
    return may_exceed_config_map(resolved.world_size, resolved.per_pod)


def expander_container(image: str) -> dict:
    """The native sidecar (restartPolicy Always: it starts before the training container and runs beside it) that
    keeps the complete hccl.json and `version` in RANK_TABLE_DIR in step with the ConfigMap. Its startup probe
    holds the training container back until the file is there, so even a reader that does not wait finds one."""
    target = names.RANK_TABLE_DIR
    return {
        "name": names.EXPANDER_CONTAINER, "image": image, "restartPolicy": "Always",
        "command": ["python3", "-m", "ascend_hybrid.ranktable_sidecar", "--source", names.RANK_TABLE_SOURCE_DIR,
                    "--target", target],
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}},
        "startupProbe": {"exec": {"command": ["test", "-s", names.RANK_TABLE_FILE]}, "periodSeconds": 1,
                         "failureThreshold": 120},
        "volumeMounts": [{"name": names.RANK_TABLE_SOURCE_VOLUME, "mountPath": names.RANK_TABLE_SOURCE_DIR,
                          "readOnly": True},
                         {"name": names.RANK_TABLE_VOLUME, "mountPath": target}],
    }


def _rank_table_volumes(resolved: ResolvedJob) -> list[dict]:
    source = {"configMap": {"name": names.rank_table_config_map(resolved.name)}}
    if not needs_expander(resolved):
        return [{"name": names.RANK_TABLE_VOLUME, **source}]
    return [{"name": names.RANK_TABLE_SOURCE_VOLUME, **source}, {"name": names.RANK_TABLE_VOLUME, "emptyDir": {}}]


def _volumes(resolved: ResolvedJob) -> tuple[list[dict], list[dict]]:
    job, spec = resolved.name, resolved.spec
    volumes = [
        *_rank_table_volumes(resolved),
        {"name": names.JOB_CONFIG_VOLUME, "configMap": {"name": names.rank_table_config_map(job),
                                                          "items": [{"key": names.JOB_CONFIG_KEY,
                                                                     "path": names.JOB_CONFIG_KEY}]}},
    ]
    mounts = [
        {"name": names.RANK_TABLE_VOLUME, "mountPath": names.RANK_TABLE_DIR, "readOnly": True},
        {"name": names.JOB_CONFIG_VOLUME, "mountPath": names.JOB_CONFIG_DIR, "readOnly": True},
    ]
    if spec.training.checkpoint:
        volumes.append({"name": names.CHECKPOINT_VOLUME,
                        "persistentVolumeClaim": {"claimName": spec.training.checkpoint.claim_name}})
        mounts.append({"name": names.CHECKPOINT_VOLUME, "mountPath": names.CHECKPOINT_DIR})
    return volumes + list(spec.template.volumes), mounts + list(spec.template.volume_mounts)


@dataclass(frozen=True)
class ByVolcano:
    """Pods Volcano schedules (contracts/volcano.py): what keeps them on nodes of the job's chip type
    (volcano.chip_selection), beside the PodGroup and kubeflow metadata every such pod carries."""

    node_selector: Mapping[str, str] = field(default_factory=dict)
    requirements: tuple[dict, ...] = ()


def node_affinity(required: Sequence[dict], preferred: str | None) -> dict | None:
    """A pod's node affinity: the required node-selector requirements (one term), and Volcano's preference for the
    node the operator planned; None when there is neither."""
    affinity: dict[str, Any] = {}
    if required:
        affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {
            "nodeSelectorTerms": [{"matchExpressions": list(required)}]}
    if preferred:
        affinity["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": PREFERRED_WEIGHT,
             "preference": {"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "In", "values": [preferred]}]}}]
    return {"nodeAffinity": affinity} if affinity else None


PREFERRED_WEIGHT = 100  # the most a preference weighs (1-100): Volcano's nodeorder scores the planned node first


def pod(resolved: ResolvedJob, namespace: str, uid: str, attempt: int, index: int, node: str | None,
        sched_ip: str | None,
        node_requirements: list[dict] | tuple = (), expander_image: str = names.DEFAULT_EXPANDER_IMAGE,
        volcano: ByVolcano | None = None) -> dict:
    """One pod of the gang, owned by the job, pinned to its placed node by a required node affinity. On the direct
    path it is also bound there at creation (`spec.nodeName`): its chips are promised under the placement lock
    before it exists, so a gate would hold nothing and cost one patch per pod, and the scheduler would only repeat
    the placement's work (design §5); the kubelet's admission is the node's check, and a pod it refuses is placed
    anew (decision.refused_at_admission). A queued job's pods carry the gang gate, their Kueue pod-group labels and
    annotations, and (node None, before admission) only `node_requirements` (the chip type): Kueue admits the
    group, then they are placed, pinned and released in one patch each (queue_steps.py); a gated pod cannot carry
    a nodeName, so the scheduler binds those. Pods Volcano schedules (`volcano`) are neither bound nor pinned:
    they join the attempt's PodGroup, and `node` (the plan, when there is one) is only Volcano's preference."""
    job, spec = resolved.name, resolved.spec
    template = spec.template
    labels = {**template.metadata.labels, **names.job_labels(job), names.ATTEMPT_LABEL: str(attempt),
              names.POD_INDEX_LABEL: str(index)}
    annotations = {**template.metadata.annotations, names.RANK_INDEX_ANNOTATION: str(index)}
    if spec.scheduling.queue:
        group_labels, group_annotations = kueue.pod_metadata(job, attempt, resolved.pod_count, spec.scheduling.queue)
        labels.update(group_labels)
        annotations.update(group_annotations)
    node_selector, scheduler_name = dict(template.node_selector), spec.scheduling.scheduler_name
    if volcano is not None:
        group_labels, group_annotations = volcanos.pod_metadata(job, attempt, index, resolved.chip)
        labels.update(group_labels)
        annotations.update(group_annotations)
        node_selector.update(volcano.node_selector)
        affinity = node_affinity(volcano.requirements, node)
        scheduler_name = volcanos.SCHEDULER_NAME
    elif node:
        affinity = node_affinity([{"key": HOSTNAME_LABEL, "operator": "In", "values": [node]}], None)
    else:
        affinity = node_affinity(node_requirements, None)
    volumes, mounts = _volumes(resolved)
    manifest = _render(
        "pod.yaml.j2", name=names.pod_name(job, attempt, index), namespace=namespace, labels=labels,
        annotations=annotations, owner_references=owner_references(job, uid),
        subdomain=names.headless_service(job) if needs_services(resolved) else None,
        gate=names.GANG_GATE if spec.scheduling.queue else None, node_name=bound_node(resolved, node, volcano),
        affinity=affinity, scheduler_name=scheduler_name,
        service_account_name=service_account(resolved), priority_class_name=template.priority_class_name,
        image_pull_secrets=[{"name": name} for name in template.image_pull_secrets],
        node_selector=node_selector, tolerations=template.tolerations, image=template.image,
        image_pull_policy=template.image_pull_policy, command=template.command, args=template.args,
        env=pod_env(resolved, index, sched_ip), sched_port=names.SCHED_PORT, metrics_port=names.METRICS_PORT,
        resources=_resources(resolved), volume_mounts=mounts, volumes=volumes, termination_log=names.TERMINATION_LOG,
    )
    if needs_expander(resolved):
        manifest["spec"]["initContainers"] = [expander_container(expander_image)]
    return manifest


def bound_node(resolved: ResolvedJob, node: str | None, volcano: ByVolcano | None = None) -> str | None:
    """The node a pod is bound to at creation: its placed node on the direct path; None for a queued job's pods,
    which carry Kueue's gate (the apiserver refuses a nodeName beside a scheduling gate), and for pods Volcano
    binds (a pod bound by anyone else gets no chips from a device plugin in Volcano mode)."""
    return node if node and not resolved.spec.scheduling.queue and volcano is None else None


def pod_group(resolved: ResolvedJob, namespace: str, uid: str, attempt: int, placing: int,
              job_metadata: Mapping | None = None) -> dict:
    """The attempt's Volcano PodGroup `<job>-a<attempt>` (contracts/volcano.py), owned by the job: every pod of the
    gang bound together or none (minMember, minTaskMember), in the spec's Volcano Queue, with the template's
    PriorityClass and the labels and annotations Huawei's Ascend plugin reads. It also carries the job's own labels
    and annotations, as MindCluster's ascend-operator copies an AscendJob's (fault-scheduling and the like are
    set there). minResources asks for the `placing` pods Volcano must place now (every pod when it is 0)."""
    job, spec = resolved.name, resolved.spec
    options = spec.scheduling.volcano or VolcanoScheduling()
    block = volcanos.sp_block(resolved.chip, resolved.per_pod, resolved.world_size, options.sp_block)
    group_labels, group_annotations = volcanos.podgroup_metadata(resolved.chip, block, options.tor_affinity)
    own = job_metadata or {}
    annotations = {key: value for key, value in (own.get("annotations") or {}).items()
                   if not key.startswith(KUBECTL_ANNOTATIONS)}
    group_spec: dict[str, Any] = {
        "minMember": resolved.pod_count, "minTaskMember": {volcanos.TASK: resolved.pod_count},
        "queue": options.queue,
        "minResources": volcanos.min_resources(spec.npu.resource, resolved.per_pod, spec.template.resources.requests,
                                               placing or resolved.pod_count)}
    if spec.template.priority_class_name:
        group_spec["priorityClassName"] = spec.template.priority_class_name
    return {"apiVersion": f"{volcanos.GROUP}/{volcanos.VERSION}", "kind": volcanos.KIND,
            "metadata": {"name": names.pod_group(job, attempt), "namespace": namespace,
                         "labels": {**(own.get("labels") or {}), **names.job_labels(job), **group_labels},
                         "annotations": {**annotations, **group_annotations},
                         "ownerReferences": owner_references(job, uid)},
            "spec": group_spec}


KUBECTL_ANNOTATIONS = "kubectl.kubernetes.io/"  # kubectl's own (last-applied-configuration): not the PodGroup's


def gang_pods(resolved: ResolvedJob, namespace: str, uid: str, attempt: int, placed: list[tuple[int, str | None]],
              sched_ip: str | None, node_requirements: list[dict] | tuple = (),
              expander_image: str = names.DEFAULT_EXPANDER_IMAGE, volcano: ByVolcano | None = None) -> list[dict]:
    """`pod` for each (index, node) of one attempt. The template is rendered and parsed once: the pods differ only
    in their name, hostname, index label and annotation, rank env and pinned (or, under Volcano, preferred) node,
    set on a copy of the first (tests/unit/core/test_render.py checks each against `pod`). A 128-pod gang was a
    template and a YAML parse per pod, the most of the operator's CPU while it started."""
    if not placed:
        return []
    first_index, first_node = placed[0]
    first = pod(resolved, namespace, uid, attempt, first_index, first_node, sched_ip, node_requirements,
                expander_image, volcano)
    skeleton = json.dumps(first)
    made = [first]
    for index, node in placed[1:]:
        manifest = json.loads(skeleton)
        name = names.pod_name(resolved.name, attempt, index)
        manifest["metadata"]["name"] = manifest["spec"]["hostname"] = name
        manifest["metadata"]["labels"][names.POD_INDEX_LABEL] = str(index)
        manifest["metadata"]["annotations"][names.RANK_INDEX_ANNOTATION] = str(index)
        manifest["spec"]["containers"][0]["env"] = pod_env(resolved, index, sched_ip)
        if volcano is not None:
            manifest["metadata"]["labels"][volcanos.REPLICA_INDEX_LABEL] = str(index)
            _set_affinity(manifest, node_affinity(volcano.requirements, node))
        elif node:
            _set_affinity(manifest, node_affinity([{"key": HOSTNAME_LABEL, "operator": "In", "values": [node]}], None))
            if (bound := bound_node(resolved, node)) is not None:
                manifest["spec"]["nodeName"] = bound
        elif first_node:
            raise ValueError("gang_pods: every pod of one call is pinned, or none is")
        made.append(manifest)
    return made


def _set_affinity(manifest: dict, affinity: dict | None) -> None:
    if affinity is None:
        manifest["spec"].pop("affinity", None)
    else:
        manifest["spec"]["affinity"] = affinity


def pods(resolved: ResolvedJob, namespace: str, uid: str, attempt: int, nodes: Sequence[str | None],
         sched_ip: str | None, expander_image: str = names.DEFAULT_EXPANDER_IMAGE,
         volcano: ByVolcano | None = None) -> list[dict]:
    return gang_pods(resolved, namespace, uid, attempt, list(enumerate(nodes)), sched_ip,
                     expander_image=expander_image, volcano=volcano)


def children(resolved: ResolvedJob, namespace: str, uid: str, attempt: int, nodes: Sequence[str | None],
             sched_ip: str | None, table: dict | None = None,
             expander_image: str = names.DEFAULT_EXPANDER_IMAGE, volcano: ByVolcano | None = None,
             job_metadata: Mapping | None = None) -> list[dict]:
    """Every child in creation order: Services (needs_services), the ConfigMap, then (under Volcano, after the
    attempt's PodGroup) the Pods."""
    first_table = initializing(format_of(CHIPS[resolved.chip].super_pods))
    group = [pod_group(resolved, namespace, uid, attempt, 0, job_metadata)] if volcano is not None else []
    return [*(services(resolved.name, namespace, uid) if needs_services(resolved) else ()),
            rank_table_config_map(resolved.name, namespace, uid, job_config_text(resolved), table or first_table),
            *group, *pods(resolved, namespace, uid, attempt, nodes, sched_ip, expander_image, volcano)]
