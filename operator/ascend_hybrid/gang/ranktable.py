"""HCCL rank table (hccl.json), MindCluster-compatible: v1.0, and v1.2 for A3 super-pods. All values are strings."""

from __future__ import annotations

import base64
import gzip
import json
import zlib
from collections.abc import Mapping
from typing import Any

from ascend_hybrid.contracts.ascend import DeviceInfo, pod_devices, super_pod_id
from ascend_hybrid.contracts.podview import pod_index

INITIALIZING = {"status": "initializing"}
TABLE_KEY = "hccl.json"              # the ConfigMap key mounted at names.RANK_TABLE_FILE
COMPRESSED_KEY = "hccl.json.gz"      # binaryData key of a table too large for TABLE_KEY
COMPRESSED_FIELD = "compressed"      # in the small hccl.json that then points to it
# The apiserver refuses a ConfigMap whose data + binaryData exceed 1 MiB; the rest (keys, version) stays under this.
CONFIG_MAP_BUDGET = 1024 * 1024 - 16 * 1024


def _readiness(pods: list[dict], per_pod: int, pod_count: int | None) -> tuple[list[str], dict[int, tuple[dict, list]]]:
    """(problems, index → (pod, its devices)): one pass, each annotation parsed once."""
    expected = len(pods) if pod_count is None else pod_count
    by_index: dict[int, dict] = {}
    problems = []
    for pod in pods:
        index = pod_index(pod)
        if index is None or index in by_index or not 0 <= index < expected:
            problems.append(f"pod {pod['metadata'].get('name')}: bad or duplicate pod index {index}")
            continue
        by_index[index] = pod
    ready: dict[int, tuple[dict, list]] = {}
    for index in range(expected):
        pod = by_index.get(index)
        if pod is None:
            problems.append(f"pod index {index}: missing")
            continue
        name, status = pod["metadata"].get("name"), pod.get("status") or {}
        if status.get("phase") != "Running":
            problems.append(f"{name}: phase {status.get('phase') or 'Pending'}")
        elif not status.get("podIP") or not status.get("hostIP"):
            problems.append(f"{name}: no pod IP yet")
        else:
            devices = pod_devices(pod)
            if devices is None:
                problems.append(f"{name}: no device annotation yet")
            elif len(devices) != per_pod:
                problems.append(f"{name}: {len(devices)} devices annotated, needs {per_pod}")
            else:
                ready[index] = (pod, devices)
    return problems, ready


def missing_for_completion(pods: list[dict], per_pod: int, pod_count: int | None = None) -> list[str]:
    """Why the table cannot be completed yet, one entry per pod that is not ready for it (empty: ready)."""
    return _readiness(pods, per_pod, pod_count)[0]


def build_rank_table(pods: list[dict], per_pod: int, node_super_pods: Mapping[str, str] | None = None,
                     pod_count: int | None = None) -> dict[str, Any]:
    """hccl.json from the attempt's pods; `{"status": "initializing"}` until every pod is ready for it.

    With `node_super_pods` (node name → super-pod id, for chips with super-pods: A3) the table is v1.2 with
    super_device_id and super_pod_list; otherwise v1.0. A node missing from the map counts as super-pod "0".
    """
    problems, ready = _readiness(pods, per_pod, pod_count)
    if problems:
        return dict(INITIALIZING)
    super_pods = node_super_pods is not None
    servers = []
    super_pod_members: dict[str, list[str]] = {}
    for index in sorted(ready):
        pod, annotated = ready[index]
        status = pod["status"]
        devices = []
        for local, device in enumerate(annotated):
            entry = {"device_id": str(device["device_id"]), "device_ip": str(device.get("device_ip", ""))}
            if super_pods:
                entry["super_device_id"] = str(device.get("super_device_id", ""))
            entry["rank_id"] = str(index * per_pod + local)
            devices.append(entry)
        servers.append({"server_id": status["hostIP"], "container_ip": status["podIP"], "device": devices})
        if super_pods:
            super_pod = str(node_super_pods.get(pod["spec"].get("nodeName"), "0"))
            members = super_pod_members.setdefault(super_pod, [])
            if status["hostIP"] not in members:
                members.append(status["hostIP"])
    table: dict[str, Any] = {"status": "completed", "version": "1.2" if super_pods else "1.0",
                             "server_count": str(len(servers)), "server_list": servers}
    if super_pods:
        table["super_pod_list"] = [
            {"super_pod_id": super_pod, "server_list": [{"server_id": server} for server in members]}
            for super_pod, members in sorted(super_pod_members.items(), key=lambda item: item[0])
        ]
    return table


def node_super_pods(node_names, nodes: Mapping[str, Mapping], device_infos: Mapping[str, DeviceInfo]) -> dict[str, str]:
    """Node name → super-pod id for the v1.2 table: the node's label, else its deviceinfo's SuperPodID, else "0"
    (the same id the inventory places by, so the table and the placement agree)."""
    return {node: super_pod_id(nodes.get(node), device_infos.get(node)) or "0" for node in set(node_names)}


def dumps(table: dict[str, Any]) -> str:
    return json.dumps(table, indent=2, sort_keys=False)


def compact(table: dict[str, Any]) -> str:
    return json.dumps(table, separators=(",", ":"), sort_keys=False)


def config_map_data(table: dict[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """(data, binaryData) of the rank-table ConfigMap.

    hccl.json as MindCluster writes it (indented) whenever it fits the ConfigMap, compact when only that fits
    (about 8 000 ranks). Larger (a 16 384-rank table is about 1.2 MB compact) it goes gzipped into binaryData
    `hccl.json.gz`, and hccl.json holds only status, version, server_count and `"compressed": "hccl.json.gz"`:
    the bundled trainer's launcher decompresses the sibling file (design §7)."""
    version = str(table.get("version", "1.0"))
    for text in (dumps(table), compact(table)):
        if len(text.encode()) <= CONFIG_MAP_BUDGET:
            return {TABLE_KEY: text, "version": version}, {}
    packed = gzip.compress(compact(table).encode(), mtime=0)  # mtime 0: the same table, the same bytes
    if len(packed) > CONFIG_MAP_BUDGET:
        raise ValueError(f"the rank table is {len(packed)} bytes even gzipped: more than a ConfigMap holds")
    pointer = {"status": table.get("status"), "version": version, "server_count": table.get("server_count"),
               COMPRESSED_FIELD: COMPRESSED_KEY}
    return {TABLE_KEY: json.dumps(pointer), "version": version}, {COMPRESSED_KEY: base64.b64encode(packed).decode()}


def from_config_map(config_map: Mapping | None) -> dict[str, Any] | None:
    """The table a rank-table ConfigMap holds (decompressed when it points to binaryData); None without a
    ConfigMap, {} when it is unreadable (the next pass writes it again)."""
    if config_map is None:
        return None
    data, binary = config_map.get("data") or {}, config_map.get("binaryData") or {}
    try:
        table = json.loads(data.get(TABLE_KEY) or "{}")
        if isinstance(table, dict) and table.get(COMPRESSED_FIELD):
            table = json.loads(gzip.decompress(base64.b64decode(binary.get(table[COMPRESSED_FIELD]) or "")))
    except (ValueError, OSError, EOFError, zlib.error):
        return {}
    return table if isinstance(table, dict) else {}
