"""Gang placement: the pods of one job attempt onto nodes of an `Inventory`, all or nothing (design §5).

Pure and deterministic. In priority order the pods of each group take (1) the fewest nodes, then (2) the
fewest racks (domains of the first tier label), (3) partly used nodes before empty ones (best fit: whole empty
nodes stay free for big jobs), (4) ties broken by name. Groups are placed greedily one after the other, so an
earlier group (a pipeline stage) gets first pick; pods in no group come last, one by one, best fit.

Speed: nodes are bucketed per rack by their state (pod slots left, free chips, free per HCCS ring), so one
group costs O(racks × states), not O(nodes); a rack's answer for a group size is cached until it changes.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import cast

from ascend_hybrid.contracts.ascend import KUBELET_MODE, RACK_LABEL, RESOURCE, VOLCANO_MODE
from ascend_hybrid.contracts.chips import CHIP_NAMES, CHIPS, ChipSpec
from ascend_hybrid.gang import layout as layouts
from ascend_hybrid.gang.inventory import KEPT_PER_NODE, Inventory, NodeInventory, blocking_taints, taint_text
from ascend_hybrid.spec.resolved import ResolvedJob

# order in which a reason lists why nodes could not take a pod; each node is counted under its first cause
VOLCANO_PLUGIN = "device plugin in Volcano mode"
KUBELET_SPLITS = "kubelet may split a ring"
CAUSES = (
    "no Ascend chips", "chip type", VOLCANO_PLUGIN, "excluded by job", "node selector", "NotReady", "cordoned",
    "tainted", "unhealthy chips", "no free ring", KUBELET_SPLITS, "too few free chips",
)
# Placed=False's reason when a cause of these kept the gang out (the first that did), else UNSCHEDULABLE
UNSCHEDULABLE = "Unschedulable"
CAUSE_REASONS = ((VOLCANO_PLUGIN, "DevicePluginVolcanoMode"), (KUBELET_SPLITS, "KubeletMaySplitRings"))


@dataclass(frozen=True)
class GangRequest:
    pod_count: int
    chips_per_pod: int
    chip: str  # "910A" | "910B" | "A3"
    groups: tuple[tuple[int, ...], ...] = ()  # pod indices that should sit close, in priority order
    tolerations: tuple[Mapping, ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    excluded_nodes: frozenset[str] = frozenset()
    tier_labels: tuple[str, ...] = (RACK_LABEL,)
    # nodes whose first-tier domains (racks) the pods join when they can: ReplacePod's pod goes near its peers
    near_nodes: frozenset[str] = frozenset()
    # Volcano binds the pods and its Ascend plugin picks their chips (contracts/volcano.py): the placement is a
    # preference, so nodes whose device plugin runs in Volcano mode are candidates and no kubelet ring rule applies
    volcano: bool = False

    def __post_init__(self) -> None:
        # frozen means frozen all the way: callers may pass plain dicts and lists
        object.__setattr__(self, "node_selector", MappingProxyType(dict(self.node_selector)))
        object.__setattr__(self, "groups", tuple(tuple(g) for g in self.groups))
        object.__setattr__(self, "tolerations", tuple(self.tolerations))
        object.__setattr__(self, "excluded_nodes", frozenset(self.excluded_nodes))
        object.__setattr__(self, "tier_labels", tuple(self.tier_labels))
        object.__setattr__(self, "near_nodes", frozenset(self.near_nodes))
        for group in self.groups:
            for index in group:
                if not 0 <= index < self.pod_count:
                    raise ValueError(f"group {group} names pod {index}, outside 0..{self.pod_count - 1}")

    @classmethod
    def for_job(cls, job: ResolvedJob, excluded_nodes: Iterable[str] = (), volcano: bool = False) -> GangRequest:
        """The gang of one attempt of a resolved job: its pods, their chips, the groups to keep close."""
        layout = layouts.from_resolved(job)
        template = job.spec.template
        return cls(pod_count=layout.pod_count, chips_per_pod=job.per_pod, chip=job.chip,
                   groups=layout.placement_groups(), tolerations=tuple(template.tolerations),
                   node_selector=dict(template.node_selector), excluded_nodes=frozenset(excluded_nodes),
                   tier_labels=tuple(job.spec.scheduling.topology_tiers), volcano=volcano)

    def describe(self) -> str:
        pods = "pod" if self.pod_count == 1 else "pods"
        return f"{self.pod_count} {pods} × {self.chips_per_pod} {RESOURCE} ({self.chip})"


@dataclass(frozen=True)
class Placement:
    ok: bool
    nodes: tuple[str, ...] = ()  # node per pod index; empty when not ok
    reason: str = ""  # empty when ok
    cause: str = UNSCHEDULABLE  # when not ok: the condition reason naming what kept the gang out (CAUSE_REASONS)
    chips: tuple[tuple[int, ...] | None, ...] = ()  # chip ids per pod when they are determined, else None
    rings: tuple[int | None, ...] = ()  # HCCS ring (910A) per pod that must sit inside one
    racks: tuple[str | None, ...] = ()  # first-tier domain per pod (None: node without the label)
    groups: tuple[tuple[int, ...], ...] = ()  # the request's groups, for the summaries

    def nodes_per_group(self) -> tuple[int, ...]:
        return tuple(len({self.nodes[p] for p in g}) for g in self.groups) if self.ok else ()

    def racks_per_group(self) -> tuple[int, ...]:
        return tuple(len({self.racks[p] for p in g}) for g in self.groups) if self.ok else ()


def place(request: GangRequest, inventory: Inventory) -> Placement:
    k = request.chips_per_pod
    if request.chip not in CHIPS:
        return Placement(False, reason=f"unknown chip type {request.chip!r}: expected {', '.join(CHIP_NAMES)}")
    if k not in CHIPS[request.chip].allowed_per_pod:
        allowed = ", ".join(map(str, CHIPS[request.chip].allowed_per_pod))
        return Placement(False, reason=f"{k} chips per pod is not allowed on {request.chip} (allowed: {allowed})")
    if request.pod_count <= 0:
        return Placement(True, groups=request.groups)
    gang = _Gang(request, inventory)
    if gang.total_slots < request.pod_count:
        return Placement(False, reason=gang.shortfall_reason(), cause=gang.shortfall_cause())
    return gang.run()


def _slot_count(chip: ChipSpec, k: int, free: int, rings: tuple[int, ...]) -> int:
    """How many more k-chip pods fit; with HCCS rings (910A) a pod no bigger than a ring must sit inside one."""
    if chip.ring_bound(k):
        return min(free // k, sum(r // k for r in rings))
    return free // k


class _Node:
    __slots__ = ("name", "inv", "rack", "free", "rings", "slots")

    def __init__(self, inv: NodeInventory, rack: _Rack, rings: tuple[int, ...], slots: int) -> None:
        self.name, self.inv, self.rack, self.free = inv.name, inv, rack, inv.free
        self.rings, self.slots = rings, slots

    @property
    def state(self) -> tuple:
        return (self.slots, self.free, self.rings)


class _Rack:
    """One tier domain: its nodes bucketed by state, names sorted inside a bucket."""

    __slots__ = ("domain", "sort_key", "buckets", "hist", "cache")

    def __init__(self, domain: str | None, max_slots: int) -> None:
        self.domain = domain
        self.sort_key = (domain is None, domain or "")  # unlabeled nodes last: nothing says they are close
        self.buckets: dict[tuple, list[str]] = {}
        self.hist = [0] * (max_slots + 1)  # nodes per slot count
        self.cache: dict[int, tuple[int, int]] = {}

    def add(self, node: _Node) -> None:
        bisect.insort(self.buckets.setdefault(node.state, []), node.name)
        self.hist[node.slots] += 1
        self.cache.clear()

    def remove(self, node: _Node) -> None:
        names = self.buckets[node.state]
        del names[bisect.bisect_left(names, node.name)]
        if not names:
            del self.buckets[node.state]
        self.hist[node.slots] -= 1
        self.cache.clear()

    def plan(self, g: int) -> tuple[int, int]:
        """(nodes, free chips of those nodes) that the greedy would use for g pods inside this rack alone."""
        if g not in self.cache:
            counts = {state: len(names) for state, names in self.buckets.items() if state[0] > 0}
            self.cache[g] = _simulate(counts, g)
        return self.cache[g]


def _greedy_key(slots: int, free: int, remaining: int) -> tuple[int, int]:
    # cover as much of what is left as one node can, then the fullest node (best fit)
    return (-min(slots, remaining), free)


def _simulate(counts: dict[tuple, int], g: int) -> tuple[int, int]:
    nodes = tight = 0
    remaining = g
    while remaining > 0 and counts:
        state = min(counts, key=lambda s: _greedy_key(s[0], s[1], remaining))
        slots, free = state[0], state[1]
        # nodes that each cover `slots` < remaining are taken as a batch; the capped last one alone
        take = min(counts[state], max(1, (remaining - 1) // slots))
        nodes, tight, remaining = nodes + take, tight + take * free, remaining - take * slots
        counts[state] -= take
        if not counts[state]:
            del counts[state]
    return (nodes, tight) if remaining <= 0 else (_INF, 0)


_INF = 1 << 60


def _min_nodes(hist: list[int], g: int) -> int:
    remaining, nodes = g, 0
    for slots in range(len(hist) - 1, 0, -1):
        count = hist[slots]
        if not count:
            continue
        need = -(-remaining // slots)
        if need <= count:
            return nodes + need
        nodes, remaining = nodes + count, remaining - count * slots
    return _INF


def _top_sum(hist: list[int], budget: int) -> int:
    """Pod slots of the `budget` roomiest nodes."""
    total = 0
    for slots in range(len(hist) - 1, 0, -1):
        take = min(hist[slots], budget)
        total, budget = total + take * slots, budget - take
        if not budget:
            break
    return total


@dataclass(frozen=True, slots=True)
class _Offer:
    """What one node offers one shape of request: why it cannot host a pod, or its rack, free per ring and slots."""

    cause: tuple[str, str] | None
    domain: str | None = None
    rings: tuple[int, ...] = ()
    slots: int = 0


def _shape(request: GangRequest, tier: str | None) -> tuple:
    """What of a request decides a node's offer, hashable: chip, chips per pod, tier, selector, tolerations and
    whether Volcano binds the pods."""
    tolerations = tuple(tuple(sorted((key, str(value)) for key, value in t.items())) for t in request.tolerations)
    return (request.chip, request.chips_per_pod, tier, tuple(sorted(request.node_selector.items())), tolerations,
            request.volcano)


# A placement reads every node, yet most are the very NodeInventory of the last placement (inventory.py keeps an
# unchanged node's) and a burst of jobs asks the same shape: the last offers of each node are kept.
_OFFERS: dict[str, tuple[tuple[NodeInventory, tuple, _Offer], ...]] = {}
_OFFERS_LIMIT = 65536


class _Gang:
    def __init__(self, request: GangRequest, inventory: Inventory) -> None:
        self.request, self.k, self.chip = request, request.chips_per_pod, CHIPS[request.chip]
        self.tier = request.tier_labels[0] if request.tier_labels else None
        max_slots = max((n.free // self.k for n in inventory), default=0)
        self.hist = [0] * (max_slots + 1)
        self.racks: dict[str | None, _Rack] = {}
        self.nodes: dict[str, _Node] = {}
        self.causes: Counter[tuple[str, str]] = Counter()
        self.near_racks = {inv.tier(self.tier) for inv in inventory
                           if self.tier and inv.name in request.near_nodes} - {None}
        shape = _shape(request, self.tier)
        for inv in inventory:
            offer = self._offer(inv, shape)
            if offer.cause is not None:
                self.causes[offer.cause] += 1
                continue
            rack = self.racks.get(offer.domain) or self.racks.setdefault(offer.domain, _Rack(offer.domain, max_slots))
            node = _Node(inv, rack, offer.rings, offer.slots)
            self.nodes[node.name] = node
            rack.add(node)
            self.hist[node.slots] += 1
        self.rack_order = sorted(self.racks.values(), key=lambda r: r.sort_key)
        self.total_slots = sum(s * c for s, c in enumerate(self.hist))
        self.inventory_size = len(inventory)
        self.assigned: list[_Node | None] = [None] * request.pod_count
        self.ring_of: list[int | None] = [None] * request.pod_count

    def _offer(self, inv: NodeInventory, shape: tuple) -> _Offer:
        """What `inv` offers a request of this shape, kept while the node's inventory is the same object
        (inventory.py keeps an unchanged node's) and the request has the same shape."""
        key = (shape, inv.name in self.request.excluded_nodes)
        known = _OFFERS.get(inv.name, ())
        for kept_inv, kept_key, kept in known:
            if kept_inv is inv and kept_key == key:
                return kept
        offer = self._new_offer(inv)
        if len(_OFFERS) >= _OFFERS_LIMIT:  # nodes long gone: start again rather than track them
            _OFFERS.clear()
        _OFFERS[inv.name] = ((inv, key, offer), *known[:KEPT_PER_NODE - 1])
        return offer

    def _new_offer(self, inv: NodeInventory) -> _Offer:
        cause = self._exclusion(inv)
        if cause is not None:
            return _Offer(cause)
        if self._kubelet_may_split(inv):
            return _Offer((KUBELET_SPLITS, ""))
        rings = tuple(inv.ring_free(r) for r in range(self.chip.ring_count))
        slots = _slot_count(self.chip, self.k, inv.free, rings)
        if slots == 0:
            return _Offer(self._capacity_cause(inv))
        return _Offer(None, inv.tier(self.tier) if self.tier else None, rings, slots)

    def _kubelet_may_split(self, inv: NodeInventory) -> bool:
        """A pod of 2 to ring-size chips on a node whose device plugin lets the kubelet pick its chips (kubelet mode:
        any free chips) can get chips from both 910A HCCS rings, unless every chip still free sits in one ring.
        Chips held by pods that do not say which, or promised to pods not seen yet, blur that: no slot then."""
        if self.request.volcano or inv.plugin_mode != KUBELET_MODE or not self.chip.ring_bound(self.k):
            return False
        if inv.free_ids is None:
            return True
        return len(set(self.chip.rings(inv.free_ids).values())) > 1

    def _exclusion(self, inv: NodeInventory) -> tuple[str, str] | None:
        request = self.request
        if inv.chip is None and inv.allocatable <= 0:
            return ("no Ascend chips", "")
        if inv.chip != request.chip:
            return ("chip type", inv.chip or "unknown")
        if inv.plugin_mode == VOLCANO_MODE and not request.volcano:
            return (VOLCANO_PLUGIN, inv.name)
        if inv.name in request.excluded_nodes:
            return ("excluded by job", "")
        if any(inv.labels.get(key) != value for key, value in request.node_selector.items()):
            return ("node selector", "")
        if not inv.ready:
            return ("NotReady", "")
        if inv.unschedulable:
            return ("cordoned", "")
        blocking = blocking_taints(inv.taints, request.tolerations)
        if blocking:
            return ("tainted", taint_text(blocking[0]))
        return None

    def _capacity_cause(self, inv: NodeInventory) -> tuple[str, str]:
        if inv.lost_to_health and (inv.free + inv.lost_to_health) // self.k > 0:
            return ("unhealthy chips", "")
        if self.chip.ring_bound(self.k) and inv.free >= self.k:
            return ("no free ring", "")
        return ("too few free chips", "")

    def shortfall_reason(self) -> str:
        parts: list[str] = []
        for cause in CAUSES:
            details = sorted((d, n) for (c, d), n in self.causes.items() if c == cause)
            total = sum(n for _, n in details)
            if not total:
                continue
            if cause == "chip type":
                parts.extend(f"{n} chip type {d}" for d, n in details)
            elif cause == "tainted":
                listed = ", ".join(d + (f" ×{n}" if n > 1 else "") for d, n in details)
                parts.append(f"{total} tainted ({listed})")
            elif cause == "no free ring":
                parts.append(f"{total} no free ring of {self.k} chips")
            elif cause == VOLCANO_PLUGIN:
                named = ", ".join(d for d, _ in details[:3]) + (", …" if total > 3 else "")
                parts.append(f"{total} run the device plugin in Volcano mode ({named}: a pod bound by the operator "
                             "gets no chips there, only one whose chips Volcano's Ascend plugin annotated: run the "
                             "job through Volcano, spec.scheduling.schedulerName: volcano)")
            elif cause == KUBELET_SPLITS:
                parts.append(f"{total} let the kubelet pick a pod's {self.k} chips from both HCCS rings (device "
                             f"plugin in kubelet mode; only a node whose free chips sit in one ring, or "
                             f"{self.chip.chips_per_node} chips per pod, is safe)")
            else:
                parts.append(f"{total} {cause}")
        hosts = len(self.nodes)
        why = f": {', '.join(parts)}" if parts else ""
        return (
            f"needs {self.request.describe()}; {hosts} of {self.inventory_size} nodes could host a pod{why}; "
            f"gang needs {self.request.pod_count} pod slots, found {self.total_slots}"
        )

    def shortfall_cause(self) -> str:
        """The condition reason: the first of CAUSE_REASONS that kept nodes out, else UNSCHEDULABLE."""
        kept_out = {cause for cause, _ in self.causes}
        return next((reason for cause, reason in CAUSE_REASONS if cause in kept_out), UNSCHEDULABLE)

    # --- placing ---------------------------------------------------------------------------------------

    def run(self) -> Placement:
        seen: set[int] = set()
        for group in self.request.groups:
            self._place_group(group, [p for p in dict.fromkeys(group) if self.assigned[p] is None])
            seen.update(group)
        for pod in range(self.request.pod_count):
            if pod not in seen:
                self._place_group((pod,), [pod])
        return self._result()

    def _place_group(self, group: tuple[int, ...], pods: list[int]) -> None:
        if not pods:
            return
        # members already placed by an earlier, overlapping group
        own_nodes = sorted({n.name for p in group if (n := self.assigned[p]) is not None})
        for name in own_nodes:  # overlapping groups: a node the group already holds costs no extra node
            pods = self._fill(self.nodes[name], pods)
        if not pods:
            return
        own_racks = {self.nodes[name].rack.domain for name in own_nodes} | self.near_racks
        pool = self._choose_racks(len(pods), own_racks)
        while pods:
            pods = self._fill(self._best_node(pool, len(pods)), pods)

    def _best_node(self, pool: list[_Rack], remaining: int) -> _Node:
        best = None
        for rack in pool:
            for (slots, free, _rings), names in rack.buckets.items():
                if slots:
                    key = (*_greedy_key(slots, free, remaining), names[0])
                    if best is None or key < best:
                        best = key
        # never None: place() runs the gang only with a slot for every pod, and _choose_racks picks racks with
        # slots for the pods left
        return self.nodes[cast("tuple[int, int, str]", best)[2]]

    def _choose_racks(self, g: int, own_racks: set) -> list[_Rack]:
        fewest = _min_nodes(self.hist, g)
        best = None
        for rack in self.rack_order:
            nodes, tight = rack.plan(g)
            if nodes == fewest:
                key = (rack.domain not in own_racks, tight, rack.sort_key)
                if best is None or key < best[0]:
                    best = (key, rack)
        if best is not None:
            return [best[1]]
        # no single rack hosts the group on the fewest nodes: add racks, roomiest first, until they do
        chosen, hist, left = [], [0] * len(self.hist), list(self.rack_order)
        while _top_sum(hist, fewest) < g:
            def gain(rack: _Rack, hist: list[int] = hist) -> tuple:
                merged = [a + b for a, b in zip(hist, rack.hist)]
                return (-_top_sum(merged, fewest), rack.domain not in own_racks, rack.sort_key)

            rack = min(left, key=gain)
            left.remove(rack)
            chosen.append(rack)
            hist = [a + b for a, b in zip(hist, rack.hist)]
        return chosen

    def _fill(self, node: _Node, pods: list[int]) -> list[int]:
        """Put as many of `pods` on `node` as fit; returns the rest."""
        take = min(node.slots, len(pods))
        if not take:
            return pods
        node.rack.remove(node)
        self.hist[node.slots] -= 1
        for pod in pods[:take]:
            self.assigned[pod] = node
            if node.rings and self.chip.ring_bound(self.k):
                # best fit inside the node too: the fullest ring that still fits keeps the other ring whole
                ring = min((r for r in range(len(node.rings)) if node.rings[r] >= self.k),
                           key=lambda r: (node.rings[r], r))
                node.rings = tuple(v - self.k if r == ring else v for r, v in enumerate(node.rings))
                self.ring_of[pod] = ring
            node.free -= self.k
        node.slots = _slot_count(self.chip, self.k, node.free, node.rings)
        node.rack.add(node)
        self.hist[node.slots] += 1
        self.total_slots -= take
        return pods[take:]

    def _result(self) -> Placement:
        assigned = cast("list[_Node]", self.assigned)  # run() has placed every pod
        nodes = tuple(n.name for n in assigned)
        # a pod's chips are determined when it alone takes every free chip of its node (or 910A ring)
        regions: dict[tuple, list[int]] = {}
        for pod, node in enumerate(assigned):
            regions.setdefault((node.name, self.ring_of[pod]), []).append(pod)
        chips: list[tuple[int, ...] | None] = [None] * len(nodes)
        for (name, ring), members in regions.items():
            free_ids = self.nodes[name].inv.free_ids
            if free_ids is None or len(members) != 1:
                continue
            ids = sorted(c for c in free_ids if ring is None or self.chip.rings((c,))[c] == ring)
            if len(ids) == self.k:
                chips[members[0]] = tuple(ids)
        return Placement(
            ok=True,
            nodes=nodes,
            chips=tuple(chips),
            rings=tuple(self.ring_of),
            racks=tuple(n.rack.domain for n in assigned),
            groups=self.request.groups,
        )
