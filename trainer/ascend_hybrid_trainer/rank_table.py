"""Reading hccl.json (design §7) as the operator writes it, and writing one for local "pods"."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import Any

from .config import ConfigError

COMPLETED = "completed"


class RankTableTimeout(RuntimeError):
    pass


def read_rank_table(path: str) -> dict[str, Any] | None:
    """The parsed table, or None while it is absent or half-written (the ConfigMap volume updates atomically,
    but a hand-made file may be caught mid-write)."""
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def wait_for_completed(path: str, timeout_seconds: float, poll_seconds: float = 1.0,
                       on_wait: Callable[[str], None] | None = None,
                       clock: Callable[[], float] = time.monotonic,
                       sleep: Callable[[float], None] = time.sleep) -> dict[str, Any]:
    deadline = clock() + timeout_seconds
    while True:
        table = read_rank_table(path)
        last_status = "absent or unreadable" if table is None else str(table.get("status"))
        if last_status == COMPLETED:
            return table
        if clock() >= deadline:
            raise RankTableTimeout(
                f"rank table {path} not completed after {timeout_seconds:g} s (status: {last_status}); the "
                f"operator completes it once every pod of the job is Running with its NPUs; raise "
                f"AHJ_RANKTABLE_TIMEOUT_SECONDS to wait longer")
        if on_wait:
            on_wait(last_status)
        sleep(poll_seconds)


def devices_by_rank(table: dict[str, Any]) -> dict[int, str]:
    """rank_id → chip id (device_id) over every server of the table."""
    mapping: dict[int, str] = {}
    for server in table.get("server_list", []):
        for device in server.get("device", []):
            mapping[int(device["rank_id"])] = str(device["device_id"])
    return mapping


def local_device_ids(table: dict[str, Any], ranks: range, path: str) -> list[str]:
    mapping = devices_by_rank(table)
    missing = [rank for rank in ranks if rank not in mapping]
    if missing:
        raise ConfigError(f"rank table {path}: no device for rank(s) {missing}; it lists ranks "
                          f"{sorted(mapping) or 'none'} (RANK_START / MS_LOCAL_WORKER disagree with the table)")
    return [mapping[rank] for rank in ranks]


def local_pods_rank_table(pods: int, per_pod: int, host_ip: str = "127.0.0.1") -> dict[str, Any]:
    """A completed v1.0 table for `pods` local pods on one host: pod p holds ranks [p·k, (p+1)·k) on chips
    [p·k, (p+1)·k) of that host (what the operator would write for pods sharing one node). The device IPs are
    loopback placeholders: the CPU backend never reads them."""
    servers = []
    for pod in range(pods):
        devices = [{"device_id": str(rank), "device_ip": f"127.100.0.{1 + rank % 250}", "rank_id": str(rank)}
                   for rank in range(pod * per_pod, (pod + 1) * per_pod)]
        servers.append({"server_id": host_ip, "container_ip": host_ip, "device": devices})
    return {"status": COMPLETED, "version": "1.0", "server_count": str(pods), "server_list": servers}


def write_json_atomically(path: str, document: dict[str, Any]) -> None:
    temporary = f"{path}.tmp"
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(document, handle, indent=1)
    os.replace(temporary, path)
