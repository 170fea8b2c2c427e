"""Placement and inventory speed at cluster scale, side by side with a naive first-fit baseline.

    .venv/bin/python bench/bench_placement.py [--repeat N]

Goal (printed, never asserted): 16 384 ranks (2 048 pods × 8 chips, groups of 2 pods) on 4 096 nodes in
16 racks in < 0.2 s. The baseline ignores racks and groups and scans the node list from the top for every pod,
which is what a straightforward implementation does; the ratio shows what bucketing buys.
"""

from __future__ import annotations

import argparse
import time

from ascend_hybrid.gang.inventory import build_inventory
from ascend_hybrid.gang.placement import GangRequest, place
from support.builders import PodBuilder, cluster

NODES, RACKS, PODS, CHIPS, GROUP = 4096, 16, 2048, 8, 2
BUSY_NODES, SMALL_PODS = 2000, 8000  # 8 000 one-chip pods leave 2 000 nodes half used


def naive_first_fit(request: GangRequest, inventory) -> tuple[str, ...] | None:
    free = {n.name: n.free for n in inventory if n.chip == request.chip and n.ready and not n.unschedulable}
    names = sorted(free)
    chosen = []
    for _ in range(request.pod_count):
        for name in names:  # O(pods × nodes): the scan starts over for every pod
            if free[name] >= request.chips_per_pod:
                free[name] -= request.chips_per_pod
                chosen.append(name)
                break
        else:
            return None
    return tuple(chosen)


def best_of(repeat: int, fn):
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement; the best is printed")
    args = parser.parse_args()

    nodes = cluster(NODES, per_rack=NODES // RACKS)
    small = [PodBuilder.named(f"small-{i}").chips(1).phase("Running").node(f"node-{i % BUSY_NODES:04d}")
             .devices([i // BUSY_NODES]).build() for i in range(SMALL_PODS)]
    t_inventory, busy = best_of(args.repeat, lambda: build_inventory(nodes, small))
    empty = build_inventory(nodes, [])
    groups = tuple(tuple(range(g, g + GROUP)) for g in range(0, PODS, GROUP))
    request = GangRequest(PODS, CHIPS, "910B", groups=groups)

    print(f"build_inventory: {NODES} nodes + {SMALL_PODS} pods: {t_inventory * 1000:.1f} ms")
    print(f"place: {PODS * CHIPS} ranks = {PODS} pods × {CHIPS} chips, groups of {GROUP}, "
          f"{NODES} nodes in {RACKS} racks (goal < 200 ms)")
    ratios = {}
    for label, inventory in (("empty cluster", empty), (f"{BUSY_NODES} nodes half used", busy)):
        t_place, placement = best_of(args.repeat, lambda inventory=inventory: place(request, inventory))
        t_naive, naive = best_of(args.repeat, lambda inventory=inventory: naive_first_fit(request, inventory))
        assert placement.ok and naive is not None, placement.reason
        racks = max(placement.racks_per_group())
        print(f"  {label:<24} place {t_place * 1000:7.1f} ms   naive first-fit {t_naive * 1000:7.1f} ms   "
              f"ratio place/naive {t_place / t_naive:5.2f}   nodes {len(set(placement.nodes))}, "
              f"max racks per group {racks}")
        ratios[label] = (t_place, t_place / t_naive)
    print(f"placement at {PODS * CHIPS} ranks / {NODES} nodes, ms and ratio place/naive: "
          + "; ".join(f"{label} {ms * 1000:.1f} ms, {ratio:.2f}" for label, (ms, ratio) in ratios.items()))


if __name__ == "__main__":
    main()
