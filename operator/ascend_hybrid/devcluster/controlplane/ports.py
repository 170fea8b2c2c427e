"""Listening ports for the dev cluster's own servers, chosen outside the kernel's ephemeral range.

A port from bind(port 0) comes out of the ephemeral range (32768-60999 on Linux), the same pool every outbound
connection draws its local port from. Between choosing such a port and a child process binding it, one of the
hundreds of client connections a test run opens can take it (CI saw an operator die with EADDRINUSE on its
health port that way). Random ports from fixed ranges below it only race with another chooser.
"""

from __future__ import annotations

import random
import socket

CONTROL_PLANE_RANGE = (20000, 32000)  # etcd, apiserver, controller-manager, scheduler, kwok
SERVER_RANGE = (10000, 20000)  # Prometheus, the operator's metrics and health endpoints in tests and benchmarks


def port_is_free(port: int, host: str = "") -> bool:
    """Whether `host:port` can be bound now ("" = every address, as the control plane's listeners bind)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # As Go's and Python's servers do: connections lingering in TIME_WAIT must not count as "taken".
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
            return True
        except OSError:
            return False


def pick_free_ports(count: int, port_range: tuple[int, int] = SERVER_RANGE, host: str = "",
                    rng: random.Random | None = None) -> list[int]:
    """`count` distinct ports of `port_range` that are free on `host` now."""
    rng = rng or random.Random()
    chosen: list[int] = []
    for _ in range(100 * count + 1000):
        if len(chosen) == count:
            return chosen
        port = rng.randrange(*port_range)
        if port not in chosen and port_is_free(port, host):
            chosen.append(port)
    raise RuntimeError(f"no {count} free ports in {port_range[0]}-{port_range[1] - 1}")


def free_server_port(host: str = "") -> int:
    return pick_free_ports(1, SERVER_RANGE, host)[0]
