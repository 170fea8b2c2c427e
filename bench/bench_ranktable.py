"""Rank table for 16 384 ranks (2 048 pods × 8 NPUs): build_rank_table against the irreducible part of the work,
parsing every pod's device annotation, side by side in one run. Prints; never asserts (goal: build < 0.1 s).
Run: .venv/bin/python bench/bench_ranktable.py
"""

from __future__ import annotations

import json
import time

from ascend_hybrid.contracts import names
from ascend_hybrid.gang.ranktable import DEVICE_ANNOTATION, build_rank_table, dumps

PODS, PER_POD = 2048, 8


def pods() -> list[dict]:
    result = []
    for index in range(PODS):
        devices = [{"device_id": str(chip), "device_ip": f"127.64.{index // 32}.{(index % 32) * 8 + chip}"}
                   for chip in range(PER_POD)]
        result.append({
            "metadata": {"name": f"big-a1-{index}", "labels": {names.POD_INDEX_LABEL: str(index)},
                         "annotations": {DEVICE_ANNOTATION: json.dumps({"pod_name": f"big-a1-{index}",
                                                                        "server_id": f"127.15.{index // 250}.{index % 250}",
                                                                        "devices": devices})}},
            "spec": {"nodeName": f"node-{index:04d}"},
            "status": {"phase": "Running", "podIP": f"127.16.{index // 250}.{index % 250 + 1}",
                       "hostIP": f"127.15.{index // 250}.{index % 250 + 1}"},
        })
    return result


def best_of(repeats: int, function) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    gang = pods()
    parse_only = best_of(5, lambda: [json.loads(p["metadata"]["annotations"][DEVICE_ANNOTATION]) for p in gang])
    build = best_of(5, lambda: build_rank_table(gang, PER_POD))
    table = build_rank_table(gang, PER_POD)
    serialise = best_of(5, lambda: dumps(table))
    assert table["status"] == "completed" and len(table["server_list"]) == PODS
    print(f"rank table: {PODS * PER_POD} ranks ({PODS} pods × {PER_POD})")
    print(f"  parse device annotations only : {parse_only * 1000:7.1f} ms")
    print(f"  build_rank_table              : {build * 1000:7.1f} ms  (goal < 100 ms)  ratio {build / parse_only:5.2f}")
    print(f"  hccl.json serialisation       : {serialise * 1000:7.1f} ms  ({len(dumps(table)) / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
