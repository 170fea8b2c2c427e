"""Ascend node inventory from plain Kubernetes objects (design §5). Pure: dicts in, frozen data out.

Nodes, pods and ConfigMaps are dicts exactly as the API returns them (camelCase keys). Nothing here talks
to the API server; the controller's indexes hold the objects and hand them over. What the Ascend objects say
(labels, annotations, health ConfigMaps) is read through `ascend.py`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from types import MappingProxyType
from typing import Any, cast

from ascend_hybrid.contracts.ascend import (
    DEVICE_ANNOTATION,
    DEVICE_NAME_ANNOTATIONS,
    KUBELET_MODE,
    RACK_LABEL,
    RESOURCE,
    SUPERPOD_LABEL,
    DeviceInfo,
    DevicePlugins,
    chip_type_of,
    device_infos_by_node,
    pod_chip_ids,
    rack_id,
    super_pod_id,
)
from ascend_hybrid.contracts.chips import CHIPS
from ascend_hybrid.contracts.names import HOSTNAME_LABEL
from ascend_hybrid.contracts.podview import TERMINAL_POD_PHASES, is_node_ready, npu_request, quantity

_EMPTY: Mapping[str, str] = MappingProxyType({})
_DEVICE_ANNOTATIONS = (DEVICE_ANNOTATION, *DEVICE_NAME_ANNOTATIONS)


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
    unhealthy: frozenset[int]  # unusable by deviceinfo (ascend.UNUSABLE_SUFFIXES, ManuallySeparateNPU)
    used: frozenset[int]  # chips named by the annotations of pods holding this node
    unknown_used: int  # chips held by pods that do not say which
    reserved: int  # chips promised to gangs whose pods are not visible yet
    lost_to_health: int  # how much `unhealthy` took off `free` beyond what kubelet already withheld
    free: int
    candidate_ids: frozenset[int]  # ids neither known used nor unhealthy: a superset of the free chips
    free_ids: frozenset[int] | None  # exact free ids, when no unknown holding blurs them
    # rack / super-pod domains that came from deviceinfo when the node has no such label; labels win
    tiers: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    # its device plugin's mode (contracts/ascend.DevicePlugins): kubelet (the kubelet picks the chips) or volcano
    plugin_mode: str = KUBELET_MODE

    def tier(self, key: str) -> str | None:
        return self.tiers.get(key, self.labels.get(key))

    @property
    def unknown_held(self) -> int:
        """Candidate ids that are in fact taken by someone we cannot name."""
        return len(self.candidate_ids) - self.free

    def ring_free(self, ring: int) -> int:
        """Chips of HCCS ring `ring` (910A) that are free for sure: unknown holders may sit in any ring."""
        rings = CHIPS[self.chip].rings(self.candidate_ids) if self.chip is not None and self.chip in CHIPS else {}
        ids = sum(1 for r in rings.values() if r == ring)
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
        return cast(NodeInventory, self._by_name[name])  # type: ignore[attr-defined]

    def get(self, name: str) -> NodeInventory | None:
        return cast("NodeInventory | None", self._by_name.get(name))  # type: ignore[attr-defined]


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
                values: Sequence[Any] = expr.get("values") or ()
                if expr.get("key") == key and expr.get("operator") == "In" and len(values) == 1:
                    value = values[0]
                    target = hostname_to_node.get(value, value) if key == HOSTNAME_LABEL else value
        if target is None:
            return None  # one term that does not pin lets the scheduler go elsewhere
        targets.add(target)
    return targets.pop() if len(targets) == 1 else None


def build_inventory(
    nodes: Iterable[Mapping],
    pods: Iterable[Mapping],
    device_infos: Iterable[Mapping] = (),
    *,
    reserved: Mapping[str, int] | None = None,
    ignore_pods: Callable[[Mapping], bool] | None = None,
    health: Mapping[str, DeviceInfo] | None = None,
    plugins: DevicePlugins = DevicePlugins(),
) -> Inventory:
    """Every node's inventory; `health` is each node's DeviceInfo when the caller holds it already parsed (then
    `device_infos` is not read); `plugins` tells each node's device-plugin mode (kubelet mode where it says none)."""
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
        if ignore_pods is not None and ignore_pods(pod):
            continue
        holding = _pod_holding(pod)
        if holding is None:
            continue
        where = holding.node or pinned_node(pod, hostname_to_node)
        if where is None or where not in known:
            continue
        requested[where] = requested.get(where, 0) + holding.requested
        used.setdefault(where, set()).update(holding.ids)
        unknown[where] = unknown.get(where, 0) + holding.unknown

    health = device_infos_by_node(device_infos) if health is None else health
    reserved = reserved or {}
    return Inventory(tuple(_node_inventory(n, requested, used, unknown, reserved, health, plugins) for n in nodes))


@dataclass(frozen=True)
class _Holding:
    """What one pod takes from its node: chips asked for, the ids it names, those it holds without naming."""

    node: str | None  # spec.nodeName; None: unbound (a pinning affinity may still place it)
    requested: int
    ids: frozenset[int]
    unknown: int


# Every placement reads every NPU pod (8 000 pods on 4 096 nodes: about half of the inventory's time went to parsing
# their requests and device annotations again). The watch's store replaces a pod's dict whenever the pod changes, so a
# parse is kept with the very dict it came from, and reused while the pod given is that same object and what of it
# can change (phase, node, the device annotations; a pod's requests cannot) reads the same. The entry holds the
# dict, so its identity cannot pass to another pod.
_HOLDINGS: dict[object, tuple[Mapping, tuple, _Holding | None]] = {}
_HOLDINGS_LIMIT = 16384


def _pod_holding(pod: Mapping) -> _Holding | None:
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    changing = ((pod.get("status") or {}).get("phase"), (pod.get("spec") or {}).get("nodeName"),
                *(annotations.get(key) for key in _DEVICE_ANNOTATIONS))
    key = meta.get("uid") or (meta.get("namespace"), meta.get("name"))
    known = _HOLDINGS.get(key)
    if known is not None and known[0] is pod and known[1] == changing:
        return known[2]
    holding = _parse_holding(pod)
    if len(_HOLDINGS) >= _HOLDINGS_LIMIT:  # pods long gone: start again rather than track their age
        _HOLDINGS.clear()
    _HOLDINGS[key] = (pod, changing, holding)
    return holding


def _parse_holding(pod: Mapping) -> _Holding | None:
    """None for a pod that holds no chip: finished, or asking for none and naming none."""
    if (pod.get("status") or {}).get("phase") in TERMINAL_POD_PHASES:
        return None
    count, ids = npu_request(pod), pod_chip_ids(pod)
    if not count and not ids:
        return None
    ids = ids or frozenset()
    return _Holding((pod.get("spec") or {}).get("nodeName") or None, max(count, len(ids)), ids,
                    max(0, count - len(ids)))


@dataclass(frozen=True)
class _NodeFacts:
    """What a node and its deviceinfo say of it, whatever runs there: the part of its inventory that a placement
    need not work out again while neither changed."""

    labels: Mapping[str, str]
    chip: str | None
    allocatable: int
    capacity: int
    ready: bool
    unschedulable: bool
    taints: tuple[Mapping, ...]
    unhealthy: frozenset[int]
    universe: frozenset[int]
    tiers: Mapping[str, str]
    plugin_mode: str


# Every placement builds the inventory of every node (a 1 000-node cluster placing 1 000 one-pod jobs: a million
# node reads): a node's facts are kept while its uid, resourceVersion and deviceinfo stay the same. An object the
# apiserver served has both ids; one without them (a file, a test's) is read each time.
_FACTS: dict[tuple[str, str, DeviceInfo, DevicePlugins], _NodeFacts] = {}
_FACTS_LIMIT = 65536


def _node_facts(node: Mapping, info: DeviceInfo, plugins: DevicePlugins) -> _NodeFacts:
    meta = node["metadata"]
    uid, version = meta.get("uid"), meta.get("resourceVersion")
    cached = uid is not None and version is not None
    key = (str(uid), str(version), info, plugins)
    if cached and (known := _FACTS.get(key)) is not None:
        return known
    spec, status = node.get("spec") or {}, node.get("status") or {}
    allocatable = quantity((status.get("allocatable") or {}).get(RESOURCE, 0))
    capacity = quantity((status.get("capacity") or {}).get(RESOURCE, allocatable))
    tiers = {label: domain for label, domain in ((RACK_LABEL, rack_id(node, info)),
                                                  (SUPERPOD_LABEL, super_pod_id(node, info))) if domain is not None}
    labels = MappingProxyType(dict(meta.get("labels") or {}))
    facts = _NodeFacts(
        labels=labels,
        chip=chip_type_of(node),
        allocatable=allocatable,
        capacity=capacity,
        ready=is_node_ready(node),
        unschedulable=bool(spec.get("unschedulable")),
        taints=tuple(MappingProxyType(dict(t)) for t in spec.get("taints") or ()),
        unhealthy=info.unusable,
        universe=frozenset(range(max(capacity, allocatable))) | info.listed,
        tiers=MappingProxyType(tiers),
        plugin_mode=plugins.mode_of(labels),
    )
    if cached:
        if len(_FACTS) >= _FACTS_LIMIT:  # old versions of every node: start again rather than track their age
            _FACTS.clear()
        _FACTS[key] = facts
    return facts


# A node's inventory is the same while its facts (the same kept object) and what its pods and promises take are:
# the last two of each node are kept, so a placement on a large cluster builds anew only the nodes that changed,
# and a placement that fails, then asks whether the job would fit an empty cluster, does not undo that.
_INVENTORIES: dict[str, tuple[tuple[_NodeFacts, tuple, NodeInventory], ...]] = {}
KEPT_PER_NODE = 2


def _node_inventory(node: Mapping, requested: Mapping[str, int], used: Mapping[str, Iterable[int]],
                    unknown: Mapping[str, int], reserved: Mapping[str, int],
                    health: Mapping[str, DeviceInfo], plugins: DevicePlugins) -> NodeInventory:
    name = node["metadata"]["name"]
    facts = _node_facts(node, health.get(name) or _without_deviceinfo(name), plugins)
    node_used = frozenset(used.get(name, ()))
    taken = (node_used, requested.get(name, 0), unknown.get(name, 0), reserved.get(name, 0))
    known = _INVENTORIES.get(name, ())
    for kept_facts, kept_taken, kept in known:
        if kept_facts is facts and kept_taken == taken:
            return kept
    inventory = _new_node_inventory(name, facts, node_used, requested, unknown, reserved)
    if len(_INVENTORIES) >= _FACTS_LIMIT:  # nodes long gone: start again rather than track them
        _INVENTORIES.clear()
    _INVENTORIES[name] = ((facts, taken, inventory), *known[:KEPT_PER_NODE - 1])
    return inventory


@lru_cache(maxsize=_FACTS_LIMIT)
def _without_deviceinfo(name: str) -> DeviceInfo:
    """The same object for a node each time, so the facts' key matches by identity."""
    return DeviceInfo(name)


def _new_node_inventory(name: str, facts: _NodeFacts, node_used: frozenset[int], requested: Mapping[str, int],
                        unknown: Mapping[str, int], reserved: Mapping[str, int]) -> NodeInventory:
    unhealthy = facts.unhealthy
    # kubelet already leaves unhealthy devices out of allocatable on a real cluster (capacity - allocatable);
    # only what it did not withhold comes off again, so a chip is never subtracted twice
    withheld = max(0, facts.capacity - facts.allocatable)
    lost_to_health = max(0, len(unhealthy - node_used) - withheld) if unhealthy else 0
    node_reserved = max(0, int(reserved.get(name, 0)))
    candidates = facts.universe - node_used - unhealthy if node_used or unhealthy else facts.universe
    free = facts.allocatable - requested.get(name, 0) - node_reserved - lost_to_health
    free = max(0, min(free, len(candidates)))
    return NodeInventory(
        name=name,
        labels=facts.labels,
        chip=facts.chip,
        allocatable=facts.allocatable,
        capacity=facts.capacity,
        ready=facts.ready,
        unschedulable=facts.unschedulable,
        taints=facts.taints,
        rack=facts.tiers.get(RACK_LABEL),
        super_pod=facts.tiers.get(SUPERPOD_LABEL),
        unhealthy=unhealthy,
        used=node_used,
        unknown_used=unknown.get(name, 0),
        reserved=node_reserved,
        lost_to_health=lost_to_health,
        free=free,
        candidate_ids=candidates,
        free_ids=candidates if len(candidates) == free else None,
        tiers=facts.tiers,
        plugin_mode=facts.plugin_mode,
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
