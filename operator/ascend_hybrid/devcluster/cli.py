"""`ascend-hybrid dev-cluster …`: the simulated Ascend cluster from the command line.

    dev-cluster build                    build the pinned binaries that are missing (etcd, kube-*, kwok, helm)
    dev-cluster build --with-prometheus  … and prometheus (for `up --prometheus`)
    dev-cluster build --with-kueue       … and Kueue with its CRDs (for `up --kueue`)
    dev-cluster build --with-volcano     … and Volcano's scheduler and controller manager with its CRDs (`up --volcano`)
    dev-cluster up [--nodes 4] [--chip 910B|910A|A3] [--racks 2] [--telemetry] [--prometheus] [--kueue] [--volcano]
                   [--process-runtime | --no-process-runtime]   real local processes for pods by default, or not
                   [--container-runtime | --no-container-runtime]   podman containers of their images, or not
                   [--device-plugin kubelet|volcano] [--list-watch-period 5]   MindCluster's plugin mode, its period
    dev-cluster down | status | kubeconfig | prometheus-url
    dev-cluster add-nodes N [--chip …]
    dev-cluster fault NODE --not-ready | --ready | --chip-unhealthy ID | --chip-healthy ID
                           | --chip-ip-unreadable ID | --chip-ip-readable ID | --[no-]straddle-rings
                           | --slow F | --slow-link PEER F | --clear   a slow node or link (telemetry/coupled.py)
Each takes --name (default ahj), so several clusters can run side by side.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

from ascend_hybrid.devcluster import cluster
from ascend_hybrid.devcluster.controlplane import toolchain
from ascend_hybrid.devcluster.deviceplugin.allocation import MODES, list_watch_period
from ascend_hybrid.devcluster.kube.waiting import WaitTimeout
from ascend_hybrid.devcluster.nodes import fleet
from ascend_hybrid.devcluster.nodes.manifests import PROFILES
from ascend_hybrid.devcluster.telemetry import prometheus

EXPECTED_ERRORS = (RuntimeError, ValueError, FileNotFoundError, WaitTimeout, subprocess.TimeoutExpired)


def _fail(error: BaseException) -> int:
    print(f"error: {error}", file=sys.stderr)
    return 1


def handle_build(args) -> int:
    try:
        print(toolchain.ensure(with_prometheus=args.with_prometheus, with_kueue=args.with_kueue,
                               with_volcano=args.with_volcano))
        return 0
    except EXPECTED_ERRORS as error:
        return _fail(error)


def handle_up(args) -> int:
    try:
        cluster.up(args.name, nodes=args.nodes, chip=args.chip, racks=args.racks, telemetry=args.telemetry,
                   with_prometheus=args.prometheus, process_runtime=args.process_runtime,
                   container_runtime=args.container_runtime, kueue=args.kueue, volcano=args.volcano,
                   plugin_mode=args.device_plugin, list_watch_period=args.list_watch_period)
        return 0
    except EXPECTED_ERRORS as error:
        return _fail(error)


def handle_down(args) -> int:
    try:
        return 0 if cluster.down(args.name) else 1
    except EXPECTED_ERRORS as error:
        return _fail(error)


def handle_status(args) -> int:
    try:
        healthy, lines = cluster.status(args.name)
    except EXPECTED_ERRORS as error:
        return _fail(error)
    print("\n".join(lines))
    return 0 if healthy else 1


def handle_kubeconfig(args) -> int:
    try:
        paths = cluster.cluster_paths(args.name)
    except ValueError as error:
        return _fail(error)
    if not paths.kubeconfig.exists():
        return _fail(RuntimeError(f"cluster {args.name} does not exist (run `ascend-hybrid dev-cluster up`)"))
    print(paths.kubeconfig)
    return 0


def handle_prometheus_url(args) -> int:
    try:
        url = prometheus.url(cluster.cluster_paths(args.name))
    except ValueError as error:
        return _fail(error)
    if url is None:
        return _fail(RuntimeError(f"cluster {args.name} runs no Prometheus "
                                  f"(run `ascend-hybrid dev-cluster up --name {args.name} --prometheus`)"))
    print(url)
    return 0


def handle_add_nodes(args) -> int:
    try:
        cluster.add_nodes(args.name, args.count, chip=args.chip)
        return 0
    except EXPECTED_ERRORS as error:
        return _fail(error)


def handle_fault(args) -> int:
    try:
        core = cluster.core_api(cluster.require_running(args.name))
        if args.slow is not None or args.slow_link is not None or args.clear:
            link = None
            if args.slow_link is not None:
                peer, factor = args.slow_link
                link = (peer, _factor(factor))
            faults = fleet.set_slowness(core, args.node, compute=_factor(args.slow) if args.slow is not None else None,
                                        link=link, clear=args.clear)
            print(f"{args.node}: " + (", ".join(f"{key.split('/')[-1]} {value}" for key, value in faults.items())
                                      or "no slowness"))
        elif args.not_ready or args.ready:
            fleet.set_node_ready(core, args.node, ready=args.ready)
            print(f"{args.node}: Ready={'True' if args.ready else 'False'}")
        elif args.straddle_rings is not None:
            fleet.set_straddle_rings(core, args.node, args.straddle_rings)
            print(f"{args.node}: the kubelet {'straddles' if args.straddle_rings else 'may choose any'} HCCS rings")
        elif args.chip_ip_unreadable is not None or args.chip_ip_readable is not None:
            readable = args.chip_ip_unreadable is None
            chip_id = args.chip_ip_readable if readable else args.chip_ip_unreadable
            unreadable = fleet.set_device_ip_readable(core, args.node, chip_id, readable=readable)
            print(f"{args.node}: chips annotated device_ip -1 from now on: "
                  f"{','.join(map(str, sorted(unreadable))) or 'none'}")
        else:
            chip_id = args.chip_unhealthy if args.chip_unhealthy is not None else args.chip_healthy
            unhealthy = fleet.set_chip_health(core, args.node, chip_id, healthy=args.chip_unhealthy is None)
            listed = ",".join(map(str, sorted(unhealthy))) or "none"
            print(f"{args.node}: unhealthy chips {listed}")
        return 0
    except EXPECTED_ERRORS as error:
        return _fail(error)


def _factor(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number: a slowness factor is ≥ 1 (2 = twice as slow)") from None
    if not value >= 1 or value > 1000:
        raise ValueError(f"slowness factor {text}: must be between 1 and 1000 (2 = twice as slow)")
    return value


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not ≥ 1")
    return value


def register(subparsers) -> None:
    """Adds `dev-cluster` and its subcommands to the `ascend-hybrid` parser; each sets func=handler(args) → exit."""
    parser = subparsers.add_parser("dev-cluster", help="simulated Ascend cluster (real control plane, kwok nodes)",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="dev_cluster_command", metavar="COMMAND", required=True)
    chips = sorted(PROFILES)

    def command(name: str, handler, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        sub.set_defaults(func=handler)
        if name != "build":
            sub.add_argument("--name", default=cluster.DEFAULT_NAME, help="cluster name (default %(default)s)")
        return sub

    build = command("build", handle_build, "build the missing pinned binaries into the cache "
                    f"(or check ${toolchain.BINARIES_ENV})")
    build_arguments(build)

    up = command("up", handle_up, "create or resume the cluster; returns once it accepts pods")
    up_arguments(up, chips)

    command("down", handle_down, "stop everything `up` started and remove the cluster's files")
    command("status", handle_status, "processes, nodes and kubeconfig of the cluster (exit 1 unless healthy)")
    command("kubeconfig", handle_kubeconfig, "print the kubeconfig path (last line)")
    command("prometheus-url", handle_prometheus_url, "print the URL of the cluster's Prometheus (exit 1 if none)")

    add = command("add-nodes", handle_add_nodes, "add N nodes to the running cluster")
    add.add_argument("count", type=_positive, metavar="N")
    add.add_argument("--chip", choices=chips, help="chip of the new nodes (default: the cluster's)")

    fault = command("fault", handle_fault, "simulate a node or chip fault, or clear it")
    fault_arguments(fault)


def build_arguments(build: argparse.ArgumentParser) -> None:
    """`dev-cluster build`'s flags: what to build beside the control plane."""
    build.add_argument("--with-prometheus", action="store_true", help="also build prometheus")
    build.add_argument("--with-kueue", action="store_true", help="also build Kueue (and copy its CRDs)")
    build.add_argument("--with-volcano", action="store_true",
                       help="also build Volcano's scheduler and controller manager (and copy its CRDs)")


def up_arguments(up: argparse.ArgumentParser, chips: list[str]) -> None:
    """`dev-cluster up`'s flags: the nodes, what runs beside the control plane, and the device plugin's mode."""
    up.add_argument("--nodes", type=_positive, default=4, help="nodes 1..N must exist (default %(default)s)")
    up.add_argument("--chip", choices=chips, help="chip of the nodes (default: the cluster's, else 910B)")
    up.add_argument("--racks", type=_positive, default=2, help="racks the nodes are spread over (default %(default)s)")
    up.add_argument("--telemetry", action="store_true",
                    help="serve simulated trainer metrics on <podIP>:9400 and a simulated npu-exporter")
    up.add_argument("--prometheus", action="store_true",
                    help="also run a Prometheus scraping them (implies --telemetry; builds it if missing)")
    up.add_argument("--process-runtime", action=argparse.BooleanOptionalAction, default=None,
                    help="run every new pod's container as a real local process (a pod opts in by itself with "
                         "the annotation sim.hybrid.ascend.dev/runtime: process); --no-process-runtime undoes it "
                         "(default: leave the cluster's choice as it is)")
    up.add_argument("--kueue", action="store_true",
                    help="also run Kueue (builds it if missing): its pod integration for `default` and namespaces "
                         "labelled kueue.x-k8s.io/managed=true, a ResourceFlavor per chip type, the ClusterQueue "
                         "`ascend` (the nodes' NPUs as quota) and the LocalQueue default/ascend; kept on later `up`s")
    up.add_argument("--device-plugin", choices=MODES,
                    help="the Ascend device plugin's mode, fixed when the cluster is created: kubelet (MindCluster's "
                         "-volcanoType=false: the kubelet picks the chips) or volcano (-volcanoType=true: the chips "
                         "the scheduler annotated) (default: the cluster's, else kubelet)")
    up.add_argument("--list-watch-period", type=list_watch_period,
                    help="seconds between the device plugin's annotation passes, its -listWatchPeriod in [3, 1800] "
                         "(default: the cluster's, else 5)")
    up.add_argument("--volcano", action="store_true",
                    help="also run Volcano (builds it if missing): its CRDs, controller manager and scheduler with "
                         "MindCluster's configuration less Huawei's plugin, the `default` Queue, and the stand-in "
                         "for Huawei's Ascend plugin that writes the chips Volcano's pods get (devcluster/volcano/); "
                         "kept on later `up`s")
    up.add_argument("--container-runtime", action=argparse.BooleanOptionalAction, default=None,
                    help="run every new pod's image as a podman container on the host network (the images `make "
                         "images` built; a pod opts in by itself with sim.hybrid.ascend.dev/runtime: container); "
                         "--no-container-runtime undoes it (default: leave the cluster's choice as it is)")


def fault_arguments(fault: argparse.ArgumentParser) -> None:
    """`dev-cluster fault`'s flags: one fault (or its undoing) on NODE."""
    fault.add_argument("node", metavar="NODE")
    kinds = fault.add_mutually_exclusive_group(required=True)
    kinds.add_argument("--not-ready", action="store_true", help="hold the node NotReady")
    kinds.add_argument("--ready", action="store_true", help="let the node turn Ready again")
    kinds.add_argument("--chip-unhealthy", type=int, metavar="ID", help="list chip ID as Unhealthy in deviceinfo")
    kinds.add_argument("--chip-healthy", type=int, metavar="ID", help="take chip ID off the Unhealthy list")
    kinds.add_argument("--chip-ip-unreadable", type=int, metavar="ID",
                       help="the device plugin annotates chip ID with device_ip -1 in the pods it allocates next")
    kinds.add_argument("--chip-ip-readable", type=int, metavar="ID", help="undo --chip-ip-unreadable")
    kinds.add_argument("--slow", metavar="F", help="its chips compute F times slower (F ≥ 1): every rank of a job "
                       "on it waits for its ranks; process pods on it are throttled (SIGSTOP/SIGCONT)")
    kinds.add_argument("--slow-link", nargs=2, metavar=("PEER", "F"), help="the link to node PEER carries 1/F of "
                       "its bandwidth: the collectives of a job on both nodes slow down")
    kinds.add_argument("--clear", action="store_true", help="undo --slow and --slow-link on this node")
    kinds.add_argument("--straddle-rings", action=argparse.BooleanOptionalAction, default=None,
                       help="the kubelet takes a 910A pod's chips from both HCCS rings whenever it can "
                            "(--no-straddle-rings: any free chips again)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ascend-hybrid")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)
