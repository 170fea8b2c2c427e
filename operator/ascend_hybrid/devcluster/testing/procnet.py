"""Which TCP/UDP sockets processes hold, read from /proc.

The process runtime's promise is checked with it: every process a pod's container started is found by its
process group (containerID process://<pgid>; kube/processes.group_members), and every address those processes
listen on or connect to lies in 127.0.0.0/8. parse_proc_net() is pure; the rest reads /proc.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

TCP_STATES = {"01": "ESTABLISHED", "02": "SYN_SENT", "03": "SYN_RECV", "04": "FIN_WAIT1", "05": "FIN_WAIT2",
              "06": "TIME_WAIT", "07": "CLOSE", "08": "CLOSE_WAIT", "09": "LAST_ACK", "0A": "LISTEN",
              "0B": "CLOSING"}
PROC_NET_TABLES = (("tcp", 4), ("tcp6", 6), ("udp", 4), ("udp6", 6))


@dataclass(frozen=True)
class Socket:
    protocol: str   # tcp | tcp6 | udp | udp6
    state: str
    local: tuple[str, int]
    remote: tuple[str, int]
    inode: int

    @property
    def listening(self) -> bool:
        return self.state == "LISTEN" or (self.protocol.startswith("udp") and self.remote[1] == 0)

    def addresses(self) -> list[str]:
        """The addresses that matter: where it listens, or both ends of a connection."""
        return [self.local[0]] if self.listening else [self.local[0], self.remote[0]]


def _address(hex_address: str, version: int) -> tuple[str, int]:
    host, port = hex_address.split(":")
    raw = bytes.fromhex(host)
    ip: ipaddress.IPv4Address | ipaddress.IPv6Address
    if version == 4:
        ip = ipaddress.IPv4Address(raw[::-1])
    else:  # four little-endian 32-bit words
        ip = ipaddress.IPv6Address(b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4)))
        if ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
    return str(ip), int(port, 16)


def parse_proc_net(text: str, protocol: str, version: int) -> list[Socket]:
    sockets = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10:
            continue
        state = TCP_STATES.get(fields[3], fields[3]) if protocol.startswith("tcp") else fields[3]
        sockets.append(Socket(protocol, state, _address(fields[1], version), _address(fields[2], version),
                              int(fields[9])))
    return sockets


def is_loopback_v4(ip: str) -> bool:
    """127.0.0.0/8 only: ::1 or an unspecified address (0.0.0.0, ::) would not keep to the simulation's rule."""
    try:
        return ipaddress.ip_address(ip) in ipaddress.ip_network("127.0.0.0/8")
    except ValueError:
        return False


def socket_inodes(pid: int) -> set[int]:
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(int(target[8:-1]))
    except OSError:
        pass
    return inodes


def sockets_of(pids: list[int]) -> list[Socket]:
    """The TCP and UDP sockets the processes hold (a network namespace is shared, so one table serves all)."""
    inodes = set().union(*(socket_inodes(pid) for pid in pids)) if pids else set()
    if not inodes:
        return []
    found = []
    for protocol, version in PROC_NET_TABLES:
        try:
            text = Path(f"/proc/net/{protocol}").read_text()
        except OSError:
            continue
        found += [s for s in parse_proc_net(text, protocol, version) if s.inode in inodes]
    return found
