"""Rank table for 16 384 ranks (2 048 pods × 8 NPUs): build_rank_table against the irreducible part of the work,
parsing every pod's device annotation, side by side in one run; then the ConfigMap the operator writes (its size
against the apiserver's 1 MiB) and the rank-table expander's work in a pod (ranktable_sidecar.sync_once on the
ConfigMap projected as the kubelet projects it: read, gunzip, write and rename hccl.json and version), in
several rounds, median and range. Two gangs: each pod on a node of its own (server_id = host IP) and two 4-chip
pods per node (server_id = the pod's UID, the longest ids). Prints; never asserts (goal: build < 0.1 s).
Run: .venv/bin/python bench/bench_ranktable.py [--rounds N]
"""

from __future__ import annotations

import argparse
import base64
import json
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from ascend_hybrid.contracts import names
from ascend_hybrid.contracts.ascend import DEVICE_ANNOTATION
from ascend_hybrid.gang import render
from ascend_hybrid.gang.ranktable import build_rank_table, compact, config_map_data, dumps
from ascend_hybrid.ranktable_sidecar import sync_once
from support.projection import project

WORLD = 16384


def pods(per_pod: int, per_node: int) -> list[dict]:
    """The gang as the API shows it, with the current device plugin's annotation."""
    result = []
    for index in range(WORLD // per_pod):
        node = index // per_node
        host = f"127.15.{node // 250}.{node % 250 + 1}"
        uid = str(uuid.uuid5(uuid.NAMESPACE_URL, f"big/{index}"))
        first = (index % per_node) * per_pod
        devices = [{"device_id": str(first + chip), "device_ip": f"127.{64 + node // 250}.{node % 250}.{first + chip}"}
                   for chip in range(per_pod)]
        annotation = {"pod_name": f"big-a1-{index}", "server_id": uid, "host_ip": host, "super_pod_id": -1,
                      "devices": devices, "rack_id": -1, "server_index": "-1", "server_ip": host}
        result.append({
            "metadata": {"name": f"big-a1-{index}", "uid": uid, "labels": {names.POD_INDEX_LABEL: str(index)},
                         "annotations": {DEVICE_ANNOTATION: json.dumps(annotation, separators=(",", ":"))}},
            "spec": {"nodeName": f"node-{node:04d}"},
            "status": {"phase": "Running", "podIP": f"127.16.{index // 250}.{index % 250 + 1}", "hostIP": host},
        })
    return result


def best_of(repeats: int, function) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return min(times)


def median_range(values: list[float], unit: str = "ms", scale: float = 1000.0) -> str:
    ordered = sorted(value * scale for value in values)
    return (f"{statistics.median(ordered):7.1f} {unit} (range {ordered[0]:.1f}–{ordered[-1]:.1f}, "
            f"{len(ordered)} rounds)")


def build_figures(gang: list[dict], per_pod: int) -> dict:
    parse_only = best_of(5, lambda: [json.loads(p["metadata"]["annotations"][DEVICE_ANNOTATION]) for p in gang])
    build = best_of(5, lambda: build_rank_table(gang, per_pod))
    table = build_rank_table(gang, per_pod)
    assert table["status"] == "completed" and len(table["server_list"]) == len(gang)
    return {"parse": parse_only, "build": build, "table": table}


def configmap_and_expander(table: dict, rounds: int) -> None:
    writes = []
    for _ in range(rounds):
        started = time.perf_counter()
        data, binary = config_map_data(table, 1)
        writes.append(time.perf_counter() - started)
    manifest = render.rank_table_config_map("big", "default", "uid-big", "{}", table, 1)
    data_bytes = sum(len(value.encode()) for value in manifest["data"].values())
    binary_bytes = sum(len(base64.b64decode(value)) for value in manifest.get("binaryData", {}).values())
    complete = len(compact(table).encode())
    print(f"  complete hccl.json (compact)  : {complete / 1e6:7.3f} MB ({complete} bytes); indented "
          f"{len(dumps(table).encode()) / 1e6:.3f} MB")
    print(f"  ConfigMap (data + binaryData) : {data_bytes + binary_bytes} bytes = "
          f"{(data_bytes + binary_bytes) / 1048576 * 100:.1f} % of 1 MiB (data {data_bytes}, gzip {binary_bytes}); "
          f"its JSON on the wire {len(json.dumps(manifest)) / 1e6:.3f} MB")
    print(f"  config_map_data (gzip)        : {median_range(writes)}")
    expands = []
    with tempfile.TemporaryDirectory() as scratch:
        source = Path(scratch) / "source"
        project(source, manifest)
        for round_ in range(rounds):
            target = Path(scratch) / f"target-{round_}"
            started = time.perf_counter()
            _, written = sync_once(source, target, None)
            expands.append(time.perf_counter() - started)
            assert written is not None and json.loads((target / "hccl.json").read_text()) == table
            shutil.rmtree(target)
    print(f"  expander: ConfigMap → file    : {median_range(expands)}  (read, gunzip, write, rename)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    for label, per_pod, per_node in (("each pod on its own node", 8, 1), ("two 4-chip pods per node", 4, 2)):
        gang = pods(per_pod, per_node)
        figures = build_figures(gang, per_pod)
        print(f"rank table: {WORLD} ranks ({len(gang)} pods × {per_pod}, {label})")
        print(f"  parse device annotations only : {figures['parse'] * 1000:7.1f} ms")
        print(f"  build_rank_table              : {figures['build'] * 1000:7.1f} ms  (goal < 100 ms)  ratio "
              f"{figures['build'] / figures['parse']:5.2f}")
        configmap_and_expander(figures["table"], args.rounds)


if __name__ == "__main__":
    main()
