"""Glue of the pure core: a resolved job → gang request for the placer, and a placement → summary for people."""

from __future__ import annotations

from typing import Iterable

from . import layout as layouts
from .placement import GangRequest, Placement
from .rules import Effective


def gang_request(effective: Effective, excluded_nodes: Iterable[str] = ()) -> GangRequest:
    layout = layouts.from_effective(effective)
    template = effective.spec.template
    return GangRequest(
        pod_count=layout.pod_count,
        chips_per_pod=effective.per_pod,
        chip=effective.chip,
        groups=layout.placement_groups(),
        tolerations=tuple(template.tolerations),
        node_selector=dict(template.node_selector),
        excluded_nodes=frozenset(excluded_nodes),
        tier_labels=tuple(effective.spec.scheduling.topology_tiers),
    )


def node_domains(inventory, tier_label: str) -> dict[str, str | None]:
    return {node.name: node.tier(tier_label) for node in inventory}


def placement_summary(effective: Effective, placement: Placement, inventory) -> dict:
    """Node → ranks, rack and TP locality of a placed gang (what `render` and the demo print)."""
    layout = layouts.from_effective(effective)
    tier = effective.spec.scheduling.topology_tiers[0] if effective.spec.scheduling.topology_tiers else None
    domains = node_domains(inventory, tier) if tier else {}
    nodes: dict[str, dict] = {}
    for pod in layout.pods:
        node = placement.nodes[pod.index]
        entry = nodes.setdefault(node, {"node": node, "rack": domains.get(node), "pods": [], "ranks": []})
        entry["pods"].append(pod.index)
        entry["ranks"].append([pod.first, pod.last])
    stage_racks = []
    for stage in range(layout.pipeline):
        pods = layout.pods_of(range(stage * layout.stage_size, (stage + 1) * layout.stage_size))
        stage_racks.append(sorted({str(domains.get(placement.nodes[p])) for p in pods}))
    return {
        "pods": layout.pod_count,
        "nodes": len(nodes),
        "racks": len({entry["rack"] for entry in nodes.values()}),
        "tensorGroupsNodeLocal": layouts.tensor_groups_node_local(layout, placement.nodes),
        "stageRacks": stage_racks,
        "placement": list(nodes.values()),
        "tiers": layouts.summary(layout, placement.nodes, domains),
    }


def format_summary(summary: dict) -> str:
    lines = [f"placed {summary['pods']} pods on {summary['nodes']} nodes in {summary['racks']} racks; "
             f"TP groups node-local {summary['tensorGroupsNodeLocal']}"]
    for stage, racks in enumerate(summary["stageRacks"]):
        lines.append(f"  stage {stage}: racks {', '.join(racks)}")
    for entry in summary["placement"]:
        ranks = ", ".join(f"{first}-{last}" for first, last in entry["ranks"])
        lines.append(f"  {entry['node']} (rack {entry['rack']}): pods {entry['pods']} ranks {ranks}")
    for kind, info in summary["tiers"].items():
        tiers = ", ".join(f"{count} {tier}" for tier, count in sorted(info["tiers"].items()))
        lines.append(f"  {kind} groups: {info['count']} × {info['size']} ranks ({tiers})")
    return "\n".join(lines)
