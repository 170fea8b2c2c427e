"""Ascend node inventory from plain Kubernetes objects (design §5). Pure: dicts in, frozen data out.

Nodes, pods and ConfigMaps are dicts exactly as the API returns them (camelCase keys). Nothing here talks
to the API server; `kube.py` lists the objects and hands them over.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

RESOURCE = "huawei.com/Ascend910"
RACK_LABEL = "huawei.com/topotree.rackid"
SUPERPOD_LABEL = "huawei.com/topotree.superpodid"
HOSTNAME_LABEL = "kubernetes.io/hostname"
ACCELERATOR_TYPE_LABEL = "accelerator-type"
CHIP_NAME_LABEL = "node.kubernetes.io/npu.chip.name"
DEVICE_CONFIG_ANNOTATION = "ascend.kubectl.kubernetes.io/ascend-910-configuration"
DEVICE_NAME_ANNOTATIONS = ("huawei.com/AscendReal", RESOURCE)
DEVICEINFO_PREFIX = "mindx-dl-deviceinfo-"
DEVICEINFO_NAMESPACE = "kube-system"
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
RING_SIZE = 4  # 910A: HCCS connects chips 0-3 and 4-7 in two rings; traffic between rings is slow

_EMPTY: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True)
class NodeInventory:
    name: str
    labels: Mapping[str, str]
    chip: str | None  # "910A" | "910B" | "A3" | None (no Ascend chip type recognised)
    allocatable: int
    capacity: int
    ready: bool
    unschedulable: bool
    taints: tuple[Mapping, ...]
    rack: str | None
    super_pod: str | None
    unhealthy: frozenset[int]  # Unhealthy ∪ NetworkUnhealthy ∪ ManuallySeparateNPU
    used: frozenset[int]  # chips named by the annotations of pods holding this node
    unknown_used: int  # chips held by pods that do not say which
    reserved: int  # chips promised to gangs whose pods are not visible yet
    lost_to_health: int  # how much `unhealthy` took off `free` beyond what kubelet already withheld
    free: int
    candidate_ids: frozenset[int]  # ids neither known used nor unhealthy: a superset of the free chips
    free_ids: frozenset[int] | None  # exact free ids, when no unknown holding blurs them
    # rack / super-pod domains that came from deviceinfo when the node has no such label; labels win
    tiers: Mapping[str, str] = field(default_factory=lambda: _EMPTY)

    def tier(self, key: str) -> str | None:
        return self.tiers.get(key, self.labels.get(key))

    @property
    def unknown_held(self) -> int:
        """Candidate ids that are in fact taken by someone we cannot name."""
        return len(self.candidate_ids) - self.free

    def ring_free(self, ring: int) -> int:
        """Chips of 910A ring `ring` that are free for sure: unknown holders may sit in any ring."""
        ids = sum(1 for c in self.candidate_ids if c // RING_SIZE == ring)
        return max(0, ids - self.unknown_held)


@dataclass(frozen=True)
class Inventory:
    nodes: tuple[NodeInventory, ...]  # sorted by name, so results never depend on list order

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {n.name: n for n in self.nodes})

    def __iter__(self) -> Iterator[NodeInventory]:
        return iter(self.nodes)

    def __len__(self) -> int:
        return len(self.nodes)

    def __getitem__(self, name: str) -> NodeInventory:
        return self._by_name[name]  # type: ignore[attr-defined]

    def get(self, name: str) -> NodeInventory | None:
        return self._by_name.get(name)  # type: ignore[attr-defined]


def chip_type_of(node: Mapping) -> str | None:
    labels = (node.get("metadata") or {}).get("labels") or {}
    accelerator = str(labels.get(ACCELERATOR_TYPE_LABEL, "")).lower()
    if accelerator in ("module", "half"):
        return "910A"
    if accelerator.startswith(("module-910b-", "card-910b-")):
        return "910B"
    if accelerator.startswith("module-a3-"):
        return "A3"
    chip_name = str(labels.get(CHIP_NAME_LABEL, ""))
    if chip_name in ("910A", "910ProA", "910ProB", "910PremiumA"):
        return "910A"
    if chip_name.startswith(("910_93", "Ascend910_93")):  # before 910B*: A3 names are not 910B names
        return "A3"
    if chip_name.startswith("910B"):
        return "910B"
    return None


def quantity(value) -> int:
    """Extended resources are whole numbers; anything unreadable counts as none rather than crashing."""
    try:
        return int(str(value).strip())
    except ValueError:
        try:
            return int(float(str(value).strip()))
        except ValueError:
            return 0


def npu_request(pod: Mapping) -> int:
    """Chips a pod asks for: requests (or limits, which requests default to), init containers included."""

    def of(container: Mapping) -> int:
        resources = container.get("resources") or {}
        for kind in ("requests", "limits"):
            value = (resources.get(kind) or {}).get(RESOURCE)
            if value is not None:
                return quantity(value)
        return 0

    spec = pod.get("spec") or {}
    app = sum(of(c) for c in spec.get("containers") or ())
    init = max((of(c) for c in spec.get("initContainers") or ()), default=0)
    return max(app, init)


def chip_ids(names: str) -> frozenset[int]:
    """'Ascend910-3,Ascend910-4' -> {3, 4}; bare numbers are accepted too, junk is skipped."""
    ids = set()
    for item in str(names).split(","):
        tail = item.strip().rsplit("-", 1)[-1]
        if tail.isdigit():
            ids.add(int(tail))
    return frozenset(ids)


def pod_chip_ids(pod: Mapping) -> frozenset[int] | None:
    """The chips the device plugin gave the pod, or None when no annotation says."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    config = annotations.get(DEVICE_CONFIG_ANNOTATION)
    if config:
        try:
            devices = json.loads(config).get("devices") or ()
            ids = frozenset(int(d["device_id"]) for d in devices)
            if ids:
                return ids
        except (ValueError, TypeError, KeyError, AttributeError):
            pass  # a broken annotation is as good as none: fall through to the name annotations
    for key in DEVICE_NAME_ANNOTATIONS:
        ids = chip_ids(annotations.get(key) or "")
        if ids:
            return ids
    return None


def pinned_node(pod: Mapping, hostname_to_node: Mapping[str, str]) -> str | None:
    """The node an unbound pod can only go to, by a required hostname / metadata.name node affinity."""
    terms = (
        (((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {})
        .get("requiredDuringSchedulingIgnoredDuringExecution", {})
        .get("nodeSelectorTerms")
    ) or ()
    targets = set()
    for term in terms:
        target = None
        for selector_kind, key in (("matchExpressions", HOSTNAME_LABEL), ("matchFields", "metadata.name")):
            for expr in term.get(selector_kind) or ():
                values = expr.get("values") or ()
                if expr.get("key") == key and expr.get("operator") == "In" and len(values) == 1:
                    value = values[0]
                    target = hostname_to_node.get(value, value) if key == HOSTNAME_LABEL else value
        if target is None:
            return None  # one term that does not pin lets the scheduler go elsewhere
        targets.add(target)
    return targets.pop() if len(targets) == 1 else None


def _is_ready(node: Mapping) -> bool:
    for condition in (node.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False


def _parse_deviceinfo(configmap: Mapping) -> tuple[str, dict] | None:
    """(node name, {'unhealthy': ids, 'listed': ids, 'super_pod': str|None, 'rack': str|None})."""
    meta = configmap.get("metadata") or {}
    name = str(meta.get("name") or "")
    if not name.startswith(DEVICEINFO_PREFIX) or meta.get("namespace", DEVICEINFO_NAMESPACE) != DEVICEINFO_NAMESPACE:
        return None
    data = configmap.get("data") or {}
    try:
        cfg = json.loads(data.get("DeviceInfoCfg") or "{}")
        device_list = (cfg.get("DeviceInfo") or {}).get("DeviceList") or {}
    except (ValueError, TypeError, AttributeError):
        cfg, device_list = {}, {}  # unparsable: "no extra information", never a crash
    if not isinstance(cfg, dict) or not isinstance(device_list, dict):
        cfg, device_list = {}, {}
    unhealthy = set(chip_ids(data.get("ManuallySeparateNPU") or ""))
    unhealthy |= chip_ids(cfg.get("ManuallySeparateNPU") or "")
    for suffix in ("-Unhealthy", "-NetworkUnhealthy"):
        unhealthy |= chip_ids(device_list.get(RESOURCE + suffix) or "")

    def domain(key: str) -> str | None:
        value = cfg.get(key)
        # MindCluster writes negative ids for "not part of one"
        return str(value) if isinstance(value, int) and value >= 0 else None

    return name[len(DEVICEINFO_PREFIX):], {
        "unhealthy": frozenset(unhealthy),
        "listed": chip_ids(device_list.get(RESOURCE) or ""),
        "super_pod": domain("SuperPodID"),
        "rack": domain("RackID"),
    }


def build_inventory(
    nodes: Iterable[Mapping],
    pods: Iterable[Mapping],
    device_infos: Iterable[Mapping] = (),
    *,
    reserved: Mapping[str, int] | None = None,
    ignore_pods: Callable[[Mapping], bool] | None = None,
) -> Inventory:
    nodes = sorted(nodes, key=lambda n: n["metadata"]["name"])
    hostname_to_node = {}
    for node in nodes:
        name = node["metadata"]["name"]
        hostname_to_node[((node["metadata"].get("labels") or {}).get(HOSTNAME_LABEL)) or name] = name
    known = {n["metadata"]["name"] for n in nodes}

    requested: dict[str, int] = {}
    used: dict[str, set[int]] = {}
    unknown: dict[str, int] = {}
    for pod in pods:
        if (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
            continue
        if ignore_pods is not None and ignore_pods(pod):
            continue
        where = (pod.get("spec") or {}).get("nodeName") or pinned_node(pod, hostname_to_node)
        if where not in known:
            continue
        count, ids = npu_request(pod), pod_chip_ids(pod)
        if not count and not ids:
            continue
        ids = ids or frozenset()
        requested[where] = requested.get(where, 0) + max(count, len(ids))
        used.setdefault(where, set()).update(ids)
        unknown[where] = unknown.get(where, 0) + max(0, count - len(ids))

    health = dict(filter(None, map(_parse_deviceinfo, device_infos)))
    reserved = reserved or {}
    return Inventory(tuple(_node_inventory(n, requested, used, unknown, reserved, health) for n in nodes))


def _node_inventory(node, requested, used, unknown, reserved, health) -> NodeInventory:
    meta, spec, status = node["metadata"], node.get("spec") or {}, node.get("status") or {}
    name = meta["name"]
    labels = MappingProxyType(dict(meta.get("labels") or {}))
    info = health.get(name, {})
    allocatable = quantity((status.get("allocatable") or {}).get(RESOURCE, 0))
    capacity = quantity((status.get("capacity") or {}).get(RESOURCE, allocatable))
    node_used = frozenset(used.get(name, ()))
    unhealthy = info.get("unhealthy", frozenset())
    universe = set(range(max(capacity, allocatable))) | info.get("listed", frozenset())
    # kubelet already leaves unhealthy devices out of allocatable on a real cluster (capacity - allocatable);
    # only what it did not withhold comes off again, so a chip is never subtracted twice
    withheld = max(0, capacity - allocatable)
    lost_to_health = max(0, len(unhealthy - node_used) - withheld)
    node_reserved = max(0, int(reserved.get(name, 0)))
    candidates = frozenset(universe - node_used - unhealthy)
    free = allocatable - requested.get(name, 0) - node_reserved - lost_to_health
    free = max(0, min(free, len(candidates)))
    tiers = {}
    if info.get("rack") is not None:
        tiers[RACK_LABEL] = info["rack"]
    if info.get("super_pod") is not None:
        tiers[SUPERPOD_LABEL] = info["super_pod"]
    tiers.update({k: v for k, v in labels.items() if k in (RACK_LABEL, SUPERPOD_LABEL)})
    return NodeInventory(
        name=name,
        labels=labels,
        chip=chip_type_of(node),
        allocatable=allocatable,
        capacity=capacity,
        ready=_is_ready(node),
        unschedulable=bool(spec.get("unschedulable")),
        taints=tuple(MappingProxyType(dict(t)) for t in spec.get("taints") or ()),
        rack=tiers.get(RACK_LABEL),
        super_pod=tiers.get(SUPERPOD_LABEL),
        unhealthy=unhealthy,
        used=node_used,
        unknown_used=unknown.get(name, 0),
        reserved=node_reserved,
        lost_to_health=lost_to_health,
        free=free,
        candidate_ids=candidates,
        free_ids=candidates if len(candidates) == free else None,
        tiers=MappingProxyType(tiers),
    )


def blocking_taints(taints: Iterable[Mapping], tolerations: Iterable[Mapping]) -> tuple[Mapping, ...]:
    """NoSchedule/NoExecute taints that no toleration tolerates (standard Kubernetes matching)."""
    if not taints:
        return ()
    tolerations = tuple(tolerations)
    return tuple(
        t
        for t in taints
        if t.get("effect") in ("NoSchedule", "NoExecute") and not any(tolerates(tol, t) for tol in tolerations)
    )


def tolerates(toleration: Mapping, taint: Mapping) -> bool:
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key, operator = toleration.get("key") or "", toleration.get("operator") or "Equal"
    if operator == "Exists":
        return not key or key == taint.get("key")
    if operator != "Equal":
        return False
    return key == taint.get("key") and (toleration.get("value") or "") == (taint.get("value") or "")


def taint_text(taint: Mapping) -> str:
    value = f"={taint['value']}" if taint.get("value") else ""
    return f"{taint.get('key', '')}{value}:{taint.get('effect', '')}"
