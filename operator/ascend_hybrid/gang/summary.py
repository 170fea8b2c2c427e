"""Placements and layouts described for people: what `render`, `layout` and the demo print (pure).

The status's own short form (`status.placement.summary`, e.g. "16 nodes in 2 racks") is written by
`reconcile.record_placement`; everything here is longer and only printed.
"""

from __future__ import annotations

from ascend_hybrid.gang import layout as layouts
from ascend_hybrid.gang.inventory import Inventory
from ascend_hybrid.gang.layout import Layout
from ascend_hybrid.gang.placement import Placement
from ascend_hybrid.spec.resolved import ResolvedJob


def node_domains(inventory: Inventory, tier_label: str) -> dict[str, str | None]:
    return {node.name: node.tier(tier_label) for node in inventory}


def group_tiers(layout: Layout, pod_nodes: tuple[str, ...] | None = None,
                node_domains_: dict[str, str | None] | None = None) -> dict:
    """Groups with their sizes and tiers (pod / node / rack / cluster), as `ascend-hybrid layout` prints them."""
    result = {}
    for kind, groups in layout.groups().items():
        tiers: dict[str, int] = {}
        for group in groups:
            tier = layout.tier_of(group, pod_nodes, node_domains_)
            tiers[tier] = tiers.get(tier, 0) + 1
        result[kind] = {"count": len(groups), "size": len(groups[0]) if groups else 0, "tiers": tiers}
    return result


def placement_report(job: ResolvedJob, placement: Placement, inventory: Inventory) -> dict:
    """Node → ranks, rack and TP locality of a placed gang."""
    layout = layouts.from_resolved(job)
    tier = job.spec.scheduling.topology_tiers[0] if job.spec.scheduling.topology_tiers else None
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
        "tiers": group_tiers(layout, placement.nodes, domains),
    }


def format_placement_report(report: dict) -> str:
    lines = [f"placed {report['pods']} pods on {report['nodes']} nodes in {report['racks']} racks; "
             f"TP groups node-local {report['tensorGroupsNodeLocal']}"]
    for stage, racks in enumerate(report["stageRacks"]):
        lines.append(f"  stage {stage}: racks {', '.join(racks)}")
    for entry in report["placement"]:
        ranks = ", ".join(f"{first}-{last}" for first, last in entry["ranks"])
        lines.append(f"  {entry['node']} (rack {entry['rack']}): pods {entry['pods']} ranks {ranks}")
    for kind, info in report["tiers"].items():
        tiers = ", ".join(f"{count} {tier}" for tier, count in sorted(info["tiers"].items()))
        lines.append(f"  {kind} groups: {info['count']} × {info['size']} ranks ({tiers})")
    return "\n".join(lines)
