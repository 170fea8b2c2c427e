"""A strict, independent check of hccl.json as CANN HCCL's rank-table parser applies it (cann-hccl,
topoinfo_ranktableParser.cc and topoinfo_ranktableConcise.cc), written from those rules and not from the
operator's code, so that it can disagree with it:

- status "completed"; every value a string (GetJsonProperty refuses other types);
- server_count equal to the length of a non-empty server_list;
- server_id non-empty and unique over the table (CheckUniqueAndInsertPool SERVER_ID: EI0004);
- host_ip, when present, an IP address (ConvertIpAddress);
- each server a non-empty device list, the same device count on every server, 1, 2, 4, 8 or 16 (CheckAverageDev);
- device_id a number, at most 7 on 910A (HCCL_AISERVER_DEVICE_NUM), at most 15 on 910B and A3, unique per server;
- device_ip a valid IP (CheckUniquePara DEVICE_IP: "ip[-1] is not a valid ip address") and unique over the table,
  where the format needs it (v1.0; v1.2 across super-pods);
- rank_id the numbers 0 .. W-1, each once (the sorted rank list must have rank i at position i).
"""

from __future__ import annotations

import ipaddress

MAX_DEVICE_ID = {"910A": 7, "910B": 15, "A3": 15}


def _ip(text) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _strings(value, where: str) -> list[str]:
    if isinstance(value, dict):
        return [problem for key, item in value.items() for problem in _strings(item, f"{where}.{key}")]
    if isinstance(value, list):
        return [problem for index, item in enumerate(value) for problem in _strings(item, f"{where}[{index}]")]
    return [] if isinstance(value, str) else [f"{where} is {type(value).__name__}, not a string"]


def hccl_problems(table: dict, chip: str) -> list[str]:
    """What HCCL would refuse in `table` (empty: accepted)."""
    problems = _strings(table, "hccl.json")
    if table.get("status") != "completed":
        return problems + [f"status {table.get('status')!r} is not completed"]
    servers = table.get("server_list") or []
    if not servers:
        return problems + ["server_list is empty"]
    if str(table.get("server_count")) != str(len(servers)):
        problems.append(f"server_count {table.get('server_count')!r} but {len(servers)} servers")
    needs_device_ips = table.get("version") != "1.2" or len(table.get("super_pod_list") or []) > 1
    server_ids: set[str] = set()
    device_ips: set[str] = set()
    ranks: list[int] = []
    counts: set[int] = set()
    for position, server in enumerate(servers):
        problems += _server_problems(position, server, server_ids)
        devices = server.get("device") or []
        counts.add(len(devices))
        problems += _device_problems(position, devices, chip, device_ips if needs_device_ips else None, ranks)
    if len(counts) != 1 or next(iter(counts)) not in (1, 2, 4, 8, 16):
        problems.append(f"device counts per server {sorted(counts)}: must be one of 1, 2, 4, 8, 16, the same for all")
    if sorted(ranks) != list(range(len(ranks))):
        problems.append("rank_id is not 0 .. W-1, each once")
    return problems


def _server_problems(position: int, server: dict, server_ids: set[str]) -> list[str]:
    """A server's id (unique: EI0004) and host IP."""
    problems = []
    server_id = server.get("server_id")
    if not server_id:
        problems.append(f"server {position}: empty server_id")
    elif server_id in server_ids:
        problems.append(f"server {position}: server_id {server_id} repeated (EI0004)")
    server_ids.add(server_id)
    if "host_ip" in server and not _ip(server["host_ip"]):
        problems.append(f"server {position}: host_ip {server['host_ip']!r} is not an IP")
    return problems


def _device_problems(position: int, devices: list[dict], chip: str, device_ips: set[str] | None,
                     ranks: list[int]) -> list[str]:
    """Each device's id (valid for the chip, once per server), IP (valid and unique where HCCL needs it: `device_ips`
    not None) and rank (collected into `ranks`)."""
    problems = []
    seen_ids: set[str] = set()
    for device in devices:
        device_id = str(device.get("device_id"))
        if not device_id.isdigit() or int(device_id) > MAX_DEVICE_ID[chip]:
            problems.append(f"server {position}: device_id {device_id!r} invalid on {chip}")
        elif device_id in seen_ids:
            problems.append(f"server {position}: device_id {device_id} repeated")
        seen_ids.add(device_id)
        ip = device.get("device_ip")
        if device_ips is not None:
            if not _ip(ip):
                problems.append(f"server {position}: ip[{ip}] is not a valid ip address")
            elif ip in device_ips:
                problems.append(f"server {position}: device_ip {ip} repeated")
            device_ips.add(ip)
        rank = str(device.get("rank_id"))
        ranks.append(int(rank) if rank.isdigit() else -1)
    return problems
