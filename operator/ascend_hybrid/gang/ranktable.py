"""HCCL rank table (hccl.json), MindCluster-compatible: v1.0, and v1.2 for A3 super-pods. All values are strings.

Each rule names the consumer it comes from (docs/architecture.md, "The rank table"):
- server ids are unique (HCCL's rank-table parser refuses a repeated one, EI0004): the node's IP when every pod of
  the job has a node of its own, the device plugin's `server_id` (the pod's UID) when pods share a node — what
  MindCluster's ascend-operator writes (its `onePodOneNode` rule) — with `host_ip` beside it;
- a device IP the device plugin could not read (`"-1"`) keeps the table initializing, naming the device (HCCL
  refuses it; MindCluster's validateDeviceIP): always for v1.0, for v1.2 only when the job spans super-pods;
- a 910A pod of ≤ 4 chips whose chips straddle the two HCCS rings never gets a table (`ring_splits`): the kubelet
  may choose such chips when the device plugin runs in kubelet mode, and HCCL fails the job with them;
- keys in MindCluster's order, written compact as MindCluster's json.Marshal writes them.
"""

from __future__ import annotations

import base64
import gzip
import ipaddress
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ascend_hybrid.contracts import untrusted
from ascend_hybrid.contracts.ascend import DeviceInfo, pod_chip_ids, pod_device_config, pod_devices, super_pod_id
from ascend_hybrid.contracts.chips import ChipSpec
from ascend_hybrid.contracts.podview import pod_index

FORMAT_V1, FORMAT_V1_2 = "1.0", "1.2"
INITIALIZING = {"status": "initializing", "version": FORMAT_V1}   # what MindCluster writes before the pods are ready
TABLE_KEY = "hccl.json"              # the ConfigMap key mounted at names.RANK_TABLE_FILE
VERSION_KEY = "version"              # the ConfigMap key: a counter that grows with every table written
COMPRESSED_KEY = "hccl.json.gz"      # binaryData key of a table too large for TABLE_KEY
COMPRESSED_FIELD = "compressed"      # in the small hccl.json that then points to it
# The device plugin writes this for a chip whose IP it could not read (ascend-common api.DeviceIPErrorCodeStr).
UNREADABLE_DEVICE_IP = "-1"
# The apiserver refuses a ConfigMap whose data + binaryData exceed 1 MiB; the rest (keys, version and job.json, at
# most JOB_CONFIG_ROOM) stays under this.
CONFIG_MAP_BUDGET = 1024 * 1024 - 16 * 1024
JOB_CONFIG_ROOM = 15 * 1024  # job.json of 1 024 uneven pipeline stages: 10-14 KiB indented (render.job_config_text)


def format_of(super_pods: bool) -> str:
    """v1.2 for chips with super-pods (A3), else v1.0."""
    return FORMAT_V1_2 if super_pods else FORMAT_V1


def initializing(format_version: str = FORMAT_V1) -> dict[str, str]:
    """The table before every pod is ready: status and format version only, as MindCluster writes it."""
    return {"status": "initializing", "version": format_version}


_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV4 = re.compile(rf"{_OCTET}(?:\.{_OCTET}){{3}}")


def is_valid_ip(text: str) -> bool:
    """An IPv4 or IPv6 address. IPv4 by a pattern: ipaddress alone made a 16 384-rank table 2.5 times slower."""
    if _IPV4.fullmatch(text):
        return True
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _device_ip_problems(name: str, devices: Sequence[Mapping[str, Any]]) -> list[str]:
    """One problem per chip whose IP HCCL would refuse, naming the chip."""
    problems = []
    for device in devices:
        ip = str(device.get("device_ip", ""))
        if not is_valid_ip(ip):
            why = "the device plugin could not read it" if ip == UNREADABLE_DEVICE_IP else "not an IP address"
            problems.append(f"{name}: device {device.get('device_id')} has device_ip {ip!r} ({why}; check "
                            f"`hccn_tool -i {device.get('device_id')} -ip -g` on its node)")
    return problems


def _readiness(pods: list[dict], per_pod: int, pod_count: int | None,
               check_device_ips: bool = True) -> tuple[list[str], dict[int, tuple[dict, Sequence[Mapping[str, Any]]]]]:
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
    ready: dict[int, tuple[dict, Sequence[Mapping[str, Any]]]] = {}
    for index in range(expected):
        found = by_index.get(index)
        if found is None:
            problems.append(f"pod index {index}: missing")
            continue
        pod = found
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
                bad_ips = _device_ip_problems(name, devices) if check_device_ips else []
                if bad_ips:
                    problems.extend(bad_ips)
                else:
                    ready[index] = (pod, devices)
    return problems, ready


def ring_splits(pods: Iterable[Mapping], chip: ChipSpec) -> list[tuple[Mapping, tuple[int, ...]]]:
    """Pods whose chips sit in more than one HCCS ring although they are few enough for one (910A): HCCL fails
    such a job at its start, so it must never get a completed table. Each with its chips, lowest first."""
    split = []
    for pod in pods:
        ids = pod_chip_ids(pod)
        if ids and chip.ring_bound(len(ids)) and len(set(chip.rings(ids).values())) > 1:
            split.append((pod, tuple(sorted(ids))))
    return split


def _needs_device_ips(pods: list[dict], node_super_pods: Mapping[str, str] | None) -> bool:
    """v1.0 always; v1.2 only across super-pods (inside one, HCCL links chips by super_device_id)."""
    if node_super_pods is None:
        return True
    return len({str(node_super_pods.get((pod.get("spec") or {}).get("nodeName") or "", "0")) for pod in pods}) > 1


def missing_for_completion(pods: list[dict], per_pod: int, pod_count: int | None = None,
                           node_super_pods: Mapping[str, str] | None = None) -> list[str]:
    """Why the table cannot be completed yet, one entry per pod (or chip) that is not ready for it (empty: ready)."""
    return _readiness(pods, per_pod, pod_count, _needs_device_ips(pods, node_super_pods))[0]


def one_pod_per_node(pods: Iterable[Mapping]) -> bool:
    """Whether no two of the pods share a node (MindCluster's onePodOneNode)."""
    nodes = [(pod.get("spec") or {}).get("nodeName") for pod in pods]
    return len(set(nodes)) == len(nodes)


def server_identity(pod: dict, own_node: bool) -> tuple[str, str]:
    """(server_id, host_ip) of a pod's server entry, as MindCluster's ascend-operator writes them: host_ip is the
    device plugin's, else the pod's hostIP; server_id is host_ip when every pod has its own node, else the device
    plugin's server_id (the pod's UID). An older plugin wrote the node's IP there: the pod's UID is used then, the
    value the current plugin writes, so that pods sharing a node never share a server id."""
    config = pod_device_config(pod) or {}
    host_ip = str(config.get("host_ip") or pod["status"]["hostIP"])
    if own_node:
        return host_ip, host_ip
    annotated = str(config.get("server_id") or "")
    uid = str(pod["metadata"].get("uid") or "")
    if not annotated or annotated in (host_ip, pod["status"]["hostIP"]):
        annotated = uid or f"{pod['metadata'].get('namespace', '')}/{pod['metadata'].get('name')}"
    return annotated, host_ip


def build_rank_table(pods: list[dict], per_pod: int, node_super_pods: Mapping[str, str] | None = None,
                     pod_count: int | None = None) -> dict[str, Any]:
    """hccl.json from the attempt's pods; initializing (status and format version) until every pod is ready for it.

    With `node_super_pods` (node name → super-pod id, for chips with super-pods: A3) the table is v1.2 with
    super_device_id and super_pod_list; otherwise v1.0. A node missing from the map counts as super-pod "0".
    """
    return assess(pods, per_pod, node_super_pods, pod_count)[0]


def assess(pods: list[dict], per_pod: int, node_super_pods: Mapping[str, str] | None = None,
           pod_count: int | None = None) -> tuple[dict[str, Any], list[str]]:
    """(build_rank_table's table, missing_for_completion's list) from one reading of the pods: a starting gang's
    every pass asks both, and at 2 048 pods reading them twice was a quarter of the operator's CPU."""
    super_pods = node_super_pods is not None
    format_version = FORMAT_V1_2 if super_pods else FORMAT_V1
    problems, ready = _readiness(pods, per_pod, pod_count, _needs_device_ips(pods, node_super_pods))
    if problems:
        return initializing(format_version), problems
    return _completed(ready, per_pod, node_super_pods, format_version), []


def _completed(ready: dict[int, tuple[dict, Sequence[Mapping[str, Any]]]], per_pod: int,
               node_super_pods: Mapping[str, str] | None, format_version: str) -> dict[str, Any]:
    super_pods = node_super_pods is not None
    own_node = one_pod_per_node(pod for pod, _ in ready.values())
    servers = []
    super_pod_members: dict[str, list[str]] = {}
    for index in sorted(ready):
        pod, annotated = ready[index]
        devices = []
        for local, device in enumerate(annotated):
            entry = {"device_id": str(device["device_id"]), "device_ip": str(device.get("device_ip", ""))}
            if super_pods:
                entry["super_device_id"] = str(device.get("super_device_id", ""))
            entry["rank_id"] = str(index * per_pod + local)
            devices.append(entry)
        server_id, host_ip = server_identity(pod, own_node)
        servers.append({"device": devices, "server_id": server_id, "host_ip": host_ip,
                        "container_ip": pod["status"]["podIP"]})
        if super_pods and node_super_pods is not None:
            super_pod = str(node_super_pods.get(pod["spec"].get("nodeName"), "0"))
            members = super_pod_members.setdefault(super_pod, [])
            if server_id not in members:
                members.append(server_id)
    table: dict[str, Any] = {"status": "completed", "server_list": servers, "server_count": str(len(servers)),
                             "version": format_version}
    if super_pods:
        table["super_pod_list"] = [
            {"super_pod_id": super_pod, "server_list": [{"server_id": server} for server in members]}
            for super_pod, members in sorted(super_pod_members.items(), key=lambda item: item[0])
        ]
    return table


def node_super_pods(node_names: Iterable[str], nodes: Mapping[str, Mapping], device_infos: Mapping[str, DeviceInfo]) -> dict[str, str]:
    """Node name → super-pod id for the v1.2 table: the node's label, else its deviceinfo's SuperPodID, else "0"
    (the same id the inventory places by, so the table and the placement agree)."""
    return {node: super_pod_id(nodes.get(node), device_infos.get(node)) or "0" for node in set(node_names)}


def dumps(table: dict[str, Any]) -> str:
    """Indented, for people (`ascend-hybrid ranktable`)."""
    return json.dumps(table, indent=2, sort_keys=False)


def compact(table: dict[str, Any]) -> str:
    """As MindCluster writes it (Go's json.Marshal: no spaces); what the ConfigMap holds."""
    return json.dumps(table, separators=(",", ":"), sort_keys=False)


def config_map_data(table: dict[str, Any], revision: int = 0) -> tuple[dict[str, str], dict[str, str]]:
    """(data, binaryData) of the rank-table ConfigMap. `version` is `revision`, the counter of tables written
    (MindCluster's TaskD waits for it to grow after a reschedule; the format version is inside hccl.json).

    hccl.json compact whenever it fits the ConfigMap (about 8 000 ranks). Larger (a 16 384-rank table is about
    1.2 MB compact) it goes gzipped into binaryData `hccl.json.gz`, and hccl.json holds only status, version,
    server_count and `"compressed": "hccl.json.gz"`: the pods of such a job get the rank-table expander
    (ranktable_sidecar.py), which writes the complete table at RANK_TABLE_FILE (docs/architecture.md)."""
    text = compact(table)
    if len(text.encode()) > EXPANDED_LIMIT:
        raise ValueError(f"the rank table is {len(text.encode())} bytes: more than the {EXPANDED_LIMIT} its readers "
                         "expand")
    counter = {VERSION_KEY: str(revision)}
    if len(text.encode()) <= CONFIG_MAP_BUDGET:
        return {TABLE_KEY: text, **counter}, {}
    packed = gzip.compress(text.encode(), mtime=0)  # mtime 0: the same table, the same bytes
    if len(packed) > CONFIG_MAP_BUDGET:
        raise ValueError(f"the rank table is {len(packed)} bytes even gzipped: more than a ConfigMap holds")
    pointer = {"status": table.get("status"), "version": table.get("version", FORMAT_V1),
               "server_count": table.get("server_count"), COMPRESSED_FIELD: COMPRESSED_KEY}
    return {TABLE_KEY: compact(pointer), **counter}, {COMPRESSED_KEY: base64.b64encode(packed).decode()}


# Upper bounds of one entry of the compact table, for `may_exceed_config_map`: addresses at the longest text an
# IPv6 address takes (45, with a dotted IPv4 tail), a 36-character UID as server id, 5-digit ranks, 10-digit super
# device ids.
_ADDRESS = 45
_DEVICE_BOUND = len('{"device_id":"15","device_ip":"","super_device_id":"4294967295","rank_id":"65535"},') + _ADDRESS
_SERVER_BOUND = len('{"device":[],"server_id":"","host_ip":"","container_ip":""},') + 36 + 2 * _ADDRESS
_SUPER_POD_MEMBER_BOUND = len('{"server_id":""},') + _ADDRESS


def may_exceed_config_map(world_size: int, per_pod: int) -> bool:
    """Whether a completed table of this size could be too large for hccl.json in the ConfigMap (decided when the
    pods are made, before any address is known): such a job's pods get the rank-table expander."""
    return table_size_bound(world_size, per_pod) > CONFIG_MAP_BUDGET


def config_map_revision(config_map: Mapping | None) -> int:
    """The ConfigMap's `version` counter; 0 when absent or not a number (a table written before the counter)."""
    raw = str(((config_map or {}).get("data") or {}).get(VERSION_KEY) or "")
    return int(raw) if raw.isdigit() else 0


def table_size_bound(world_size: int, per_pod: int) -> int:
    """An upper bound of the compact table's bytes for a world of this size, whatever its addresses and ids."""
    servers = -(-world_size // max(per_pod, 1))
    return 256 + world_size * _DEVICE_BOUND + servers * (_SERVER_BOUND + _SUPER_POD_MEMBER_BOUND)


# What a rank table may expand to, checked while it is decompressed (an apiserver-sized 1 MiB of gzip can expand to
# a gigabyte) and before it is parsed. The largest table a job can have is that of MAX_WORLD_SIZE one-chip pods with
# the longest addresses: table_size_bound(65 536, 1) = 23.5 MiB; a real 16 384-rank table is 1.2 MB compact (8 chips
# a pod; 2.6 MB with one), 5.9 MiB at most with the longest addresses: 32 MiB leaves 1.36 times the worst case of
# the largest job and at least 5 times that of a 16 384-rank one.
EXPANDED_LIMIT = 32 * 1024 * 1024
# binaryData as the apiserver holds it: base64 of at most a ConfigMap's 1 MiB (4/3 of it), with room.
ENCODED_LIMIT = 2 * 1024 * 1024


class MissingCopy(untrusted.Rejected):
    """hccl.json points to a binaryData key that is not there (a reader of files may see the pointer first)."""


def expand(hccl_json: str, binary: Mapping[str, bytes]) -> str:
    """The complete hccl.json from a ConfigMap's hccl.json text and its binaryData (decoded bytes by key): the text
    itself unless it points to a gzipped copy. Raises untrusted.Rejected (a ValueError) when the pointer's target
    is missing, broken or expands past EXPANDED_LIMIT, or the text is not JSON."""
    pointer = untrusted.json_value(hccl_json, EXPANDED_LIMIT, TABLE_KEY)
    if not (isinstance(pointer, dict) and pointer.get(COMPRESSED_FIELD)):
        return hccl_json
    key = str(pointer[COMPRESSED_FIELD])
    if key not in binary:
        raise MissingCopy(untrusted.MALFORMED, f"hccl.json points to {key[:64]}, which the ConfigMap does not hold")
    expanded = untrusted.gunzip(binary[key], EXPANDED_LIMIT, key)
    try:
        return expanded.decode()
    except UnicodeDecodeError as error:
        raise untrusted.Rejected(untrusted.MALFORMED, f"{key} is not UTF-8 text: {error}") from None


def read_config_map(config_map: Mapping | None) -> tuple[dict[str, Any] | None, untrusted.Rejected | None]:
    """(the table a rank-table ConfigMap holds, decompressed when it points to binaryData; why it was refused).
    No ConfigMap: (None, None). A table that is too large, expands too far, is not JSON or not an object: ({},
    the rejection) — the next pass writes the right one again."""
    if config_map is None:
        return None, None
    data, binary = config_map.get("data") or {}, config_map.get("binaryData") or {}
    try:
        if any(len(value) > ENCODED_LIMIT for value in binary.values()):
            raise untrusted.Rejected(untrusted.TOO_LARGE, f"binaryData is more than the {ENCODED_LIMIT} bytes read")
        decoded = {key: base64.b64decode(value) for key, value in binary.items()}
        table = untrusted.json_value(expand(data.get(TABLE_KEY) or "{}", decoded), EXPANDED_LIMIT, TABLE_KEY)
    except untrusted.Rejected as rejected:
        return {}, rejected
    except (ValueError, TypeError) as error:  # binaryData that is not base64
        return {}, untrusted.Rejected(untrusted.MALFORMED, f"binaryData is not base64: {str(error)[:120]}")
    if not isinstance(table, dict):
        return {}, untrusted.Rejected(untrusted.MALFORMED, "hccl.json is not a JSON object")
    return table, None


def from_config_map(config_map: Mapping | None) -> dict[str, Any] | None:
    """The table a rank-table ConfigMap holds; None without a ConfigMap, {} when it is unreadable (read_config_map
    says why)."""
    return read_config_map(config_map)[0]
