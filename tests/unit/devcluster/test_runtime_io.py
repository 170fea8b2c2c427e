"""The process runtime's IO pieces on this machine, loopback only: the Service forwarder (routes and real
connections), a pod's process group with its CRI log (podprocess), and /proc inspection (procnet)."""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading

from ascend_hybrid.devcluster.kube import processes
from ascend_hybrid.devcluster.kube.waiting import wait_until
from ascend_hybrid.devcluster.runtime.forwarder import Address, Forwarder, service_routes
from ascend_hybrid.devcluster.runtime.process import PodProcess, exit_code_of
from ascend_hybrid.devcluster.testing import procnet
from support.builders import PodBuilder


def service(name: str, cluster_ip: str, selector: dict | None, ports: list[dict], namespace: str = "ns") -> dict:
    return {"metadata": {"name": name, "namespace": namespace},
            "spec": {"clusterIP": cluster_ip, "selector": selector, "ports": ports}}


def ready_pod(name: str, ip: str, labels: dict, namespace: str = "ns", ready: bool = True, ports=None) -> dict:
    """A running pod with its IP, Ready or not, exposing `ports`."""
    return (PodBuilder.named(name, namespace=namespace).labels(labels).container(ports=ports or [])
            .phase("Running").status(podIP=ip).condition("Ready", "True" if ready else "False").build())


def test_routes_come_from_the_selector_and_the_ready_pods_not_from_endpoint_slices():
    services = [
        service("job-sched", "127.32.0.10", {"job": "j", "index": "0"}, [{"port": 2222, "targetPort": 2222}]),
        service("named", "127.32.0.11", {"job": "j"}, [{"port": 80, "targetPort": "metrics"}]),
        service("headless", "None", {"job": "j"}, [{"port": 9400}]),
        service("no-selector", "127.32.0.12", None, [{"port": 443}]),
        service("udp", "127.32.0.13", {"job": "j"}, [{"port": 53, "protocol": "UDP"}]),
    ]
    metrics = [{"name": "metrics", "containerPort": 9400}]
    pods = [ready_pod("j-0", "127.16.0.1", {"job": "j", "index": "0"}, ports=metrics),
            ready_pod("j-1", "127.16.0.2", {"job": "j", "index": "1"}, ports=metrics),
            ready_pod("other-ns", "127.16.0.3", {"job": "j", "index": "0"}, namespace="elsewhere"),
            ready_pod("not-ready", "127.16.0.4", {"job": "j", "index": "0"}, ready=False)]
    deleting = ready_pod("deleting", "127.16.0.5", {"job": "j", "index": "0"})
    deleting["metadata"]["deletionTimestamp"] = "2026-11-29T17:00:00Z"
    routes = service_routes(services, pods + [deleting])
    assert routes == {
        Address("127.32.0.10", 2222): (Address("127.16.0.1", 2222),),
        Address("127.32.0.11", 80): (Address("127.16.0.1", 9400), Address("127.16.0.2", 9400)),
    }
    # a restart moves pod 0: the route follows
    moved = service_routes(services[:1], [ready_pod("j-0-new", "127.16.0.9", {"job": "j", "index": "0"})])
    assert moved == {Address("127.32.0.10", 2222): (Address("127.16.0.9", 2222),)}
    assert service_routes(services[:1], []) == {Address("127.32.0.10", 2222): ()}


def echo_server(ip: str, reply_prefix: bytes) -> tuple[socket.socket, int]:
    server = socket.socket()
    server.bind((ip, 0))
    server.listen()

    def serve():
        while True:
            try:
                connection, _ = server.accept()
            except OSError:
                return
            with connection:
                data = connection.recv(1024)
                connection.sendall(reply_prefix + data)
    threading.Thread(target=serve, daemon=True).start()
    return server, server.getsockname()[1]


def ask(address: Address, payload: bytes) -> bytes:
    with socket.create_connection((address.ip, address.port), timeout=5) as connection:
        connection.sendall(payload)
        connection.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := connection.recv(1024):
            chunks.append(chunk)
    return b"".join(chunks)


def refused(address: Address) -> bool:
    try:
        return ask(address, b"x") == b""
    except ConnectionResetError:
        return True


def free_port(ip: str) -> int:
    with socket.socket() as probe:
        probe.bind((ip, 0))
        return probe.getsockname()[1]


def test_the_forwarder_carries_connections_to_the_current_backend_and_follows_changes():
    first, first_port = echo_server("127.16.250.1", b"first:")
    second, second_port = echo_server("127.16.250.2", b"second:")
    listen = Address("127.32.250.1", free_port("127.32.250.1"))
    forwarder = Forwarder(log=lambda line: None)
    forwarder.start()
    try:
        forwarder.update({listen: (Address("127.16.250.1", first_port),)})
        assert wait_until(lambda: ask(listen, b"hello"), 10, "the forwarder to answer") == b"first:hello"
        forwarder.update({listen: (Address("127.16.250.2", second_port),)})
        assert wait_until(lambda: ask(listen, b"again") == b"second:again", 10, "the route to follow")
        forwarder.update({listen: ()})  # no ready backend: the connection is closed, nothing is answered
        assert wait_until(lambda: refused(listen), 10, "an empty route to close connections")
        forwarder.update({})
        wait_until(lambda: free_port_taken(listen) is False, 10, "the listener to close")
    finally:
        forwarder.stop()
        first.close()
        second.close()


def free_port_taken(address: Address) -> bool:
    with socket.socket() as probe:
        try:
            probe.connect((address.ip, address.port))
            return True
        except OSError:
            return False


def test_a_pod_process_logs_in_cri_format_and_its_group_ends_with_its_leader(tmp_path):
    script = ("import subprocess, sys, time\n"
              "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
              "print(child.pid, flush=True)\n"
              "print('to stderr', file=sys.stderr, flush=True)\n"
              "sys.exit(3)\n")
    log_file = tmp_path / "pod" / "container.log"
    process = PodProcess((sys.executable, "-c", script), dict(os.environ), tmp_path, log_file)
    leader = process.start()
    assert wait_until(lambda: process.poll() is not None, 30, "the leader to exit") and process.exit_code == 3
    lines = log_file.read_text().splitlines()
    streams = {line.split()[1]: line.split(" ", 3)[3] for line in lines}
    assert set(streams) == {"stdout", "stderr"} and streams["stderr"] == "to stderr"
    assert all(line.split()[2] == "F" and line.split()[0].endswith("Z") for line in lines)
    grandchild = int(streams["stdout"])
    wait_until(lambda: not processes.group_members(leader), 10, "the rest of the group to be killed")
    assert not os.path.exists(f"/proc/{grandchild}") or "Z" in open(f"/proc/{grandchild}/stat").read().split()[2]


def test_a_signal_ends_the_whole_group_and_exit_codes_follow_the_container_convention(tmp_path):
    process = PodProcess((sys.executable, "-c", "import time; time.sleep(60)"), dict(os.environ), tmp_path,
                         tmp_path / "container.log")
    process.start()
    process.signal_group(signal.SIGKILL)
    assert wait_until(lambda: process.poll(), 10, "the group to die") == 137
    assert exit_code_of(-15) == 143 and exit_code_of(0) == 0 and exit_code_of(2) == 2


PROC_NET_TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0110107F:24C0 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1 0 100 0 0 10 0
   1: 0100007F:1F90 0A00107F:08AE 01 00000000:00000000 00:00000000 00000000     0        0 222 1 0 20 4 30 10 -1
   2: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 333 1 0 100 0 0 10 0
"""
PROC_NET_TCP6 = """\
  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when
   0: 0000000000000000FFFF00000110107F:2328 00000000000000000000000000000000:0000 0A 00000000:00000000 \
00:00000000 00000000     0        0 444 1
"""


def test_proc_net_tables_parse_into_addresses():
    tcp = procnet.parse_proc_net(PROC_NET_TCP, "tcp", 4)
    assert (tcp[0].local, tcp[0].state, tcp[0].inode) == (("127.16.16.1", 9408), "LISTEN", 111)
    assert tcp[0].listening and tcp[0].addresses() == ["127.16.16.1"]
    assert tcp[1].addresses() == ["127.0.0.1", "127.16.0.10"] and not tcp[1].listening
    assert not procnet.is_loopback_v4(tcp[2].local[0])  # 0.0.0.0: every address, not loopback only
    tcp6 = procnet.parse_proc_net(PROC_NET_TCP6, "tcp6", 6)
    assert tcp6[0].local == ("127.16.16.1", 9000)  # an IPv4-mapped address reads as IPv4
    assert not procnet.is_loopback_v4("::1") and procnet.is_loopback_v4("127.255.0.1")


def test_sockets_of_a_process_are_found_by_inode():
    with socket.socket() as listener:
        listener.bind(("127.16.251.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        found = procnet.sockets_of([os.getpid()])
        assert any(s.local == ("127.16.251.1", port) and s.listening for s in found)
    assert os.getpid() in processes.group_members(os.getpgid(0))
