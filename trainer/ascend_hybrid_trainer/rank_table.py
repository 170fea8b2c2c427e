"""Reading hccl.json (design §7) as the operator writes it, and writing one for local "pods".

A table too large for its ConfigMap (about 8 000 ranks and more) comes gzipped: the mounted hccl.json then holds
only status, version, server_count and `"compressed": "hccl.json.gz"`, the name of the sibling file with the
table. The launcher reads through it and gives its workers (MindSpore's rank-table launch reads RANK_TABLE_FILE
itself) a plain copy."""

from __future__ import annotations

import gzip
import json
import os
import time
import uuid
import zlib
from collections.abc import Callable
from typing import Any, cast

from .config import ConfigError

COMPLETED = "completed"
COMPRESSED_FIELD = "compressed"


class RankTableTimeout(RuntimeError):
    pass


def read_rank_table(path: str) -> dict[str, Any] | None:
    """The parsed table (read through a compressed one's pointer), or None while it is absent or half-written
    (the ConfigMap volume updates atomically, but a hand-made file may be caught mid-write, and the volume may
    change between the pointer and its sibling)."""
    try:
        with open(path, encoding="utf-8") as handle:
            table = json.load(handle)
        if isinstance(table, dict) and table.get(COMPRESSED_FIELD):
            with gzip.open(os.path.join(os.path.dirname(path), str(table[COMPRESSED_FIELD])), "rt",
                           encoding="utf-8") as handle:
                table = json.load(handle)
    except (OSError, EOFError, zlib.error, json.JSONDecodeError):
        return None
    return table if isinstance(table, dict) else None


def is_compressed(path: str) -> bool:
    """Whether the file at `path` is only the pointer to a gzipped table."""
    try:
        with open(path, encoding="utf-8") as handle:
            table = json.load(handle)
    except (OSError, json.JSONDecodeError):
        return False
    return isinstance(table, dict) and bool(table.get(COMPRESSED_FIELD))


def plain_rank_table_file(path: str, table: dict[str, Any], directory: str) -> str:
    """The RANK_TABLE_FILE for the workers: `path` when it holds the table itself, else the table written plain
    into `directory`."""
    if not is_compressed(path):
        return path
    plain = os.path.join(directory, "hccl.json")
    write_json_atomically(plain, table)
    return plain


def wait_for_completed(path: str, timeout_seconds: float, poll_seconds: float = 1.0,
                       on_wait: Callable[[str], None] | None = None,
                       clock: Callable[[], float] = time.monotonic,
                       sleep: Callable[[float], None] = time.sleep) -> dict[str, Any]:
    deadline = clock() + timeout_seconds
    while True:
        table = read_rank_table(path)
        last_status = "absent or unreadable" if table is None else str(table.get("status"))
        if last_status == COMPLETED:  # a None table reads "absent or unreadable", so here it is a dict
            return cast(dict[str, Any], table)
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
    [p·k, (p+1)·k) of that host, in the shape the operator writes for pods sharing one node: each server's
    server_id is its own (the operator uses the pod's UID; here one made from the pod's number, since HCCL refuses
    a repeated server_id), host_ip is the host. One pod alone keeps the host's IP as server_id. The device IPs are
    loopback placeholders: the CPU backend never reads them."""
    servers = []
    for pod in range(pods):
        devices = [{"device_id": str(rank), "device_ip": f"127.100.0.{1 + rank % 250}", "rank_id": str(rank)}
                   for rank in range(pod * per_pod, (pod + 1) * per_pod)]
        server_id = host_ip if pods == 1 else str(uuid.uuid5(uuid.NAMESPACE_URL, f"ascend-hybrid-local/{pod}"))
        servers.append({"device": devices, "server_id": server_id, "host_ip": host_ip, "container_ip": host_ip})
    return {"status": COMPLETED, "server_list": servers, "server_count": str(pods), "version": "1.0"}


def write_json_atomically(path: str, document: dict[str, Any]) -> None:
    temporary = f"{path}.tmp"
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(document, handle, indent=1)
    os.replace(temporary, path)
