"""`ascend-hybrid run`: starts the operator (kopf watches + reconcile workers + metrics)."""

from __future__ import annotations

import logging
import os
import sys

EXIT_NOT_READY = 2


def register(subparsers) -> None:
    parser = subparsers.add_parser("run", help="run the operator")
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("--namespace", "-n", action="append", default=[], help="watch this namespace (repeatable)")
    scope.add_argument("--all-namespaces", "-A", action="store_true", help="watch every namespace (default)")
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, then $KUBECONFIG)")
    parser.add_argument("--metrics-port", type=int, default=8080, help="Prometheus /metrics port (0: off)")
    parser.add_argument("--health-port", type=int, default=8081, help="liveness /healthz port (0: off)")
    parser.add_argument("--bind-address", default="0.0.0.0", help="address of the metrics and health endpoints")
    parser.add_argument("--workers", type=int, default=4, help="reconcile worker threads")
    parser.add_argument("--node-grace-seconds", type=float, default=30.0,
                        help="how long a node may stay NotReady before its jobs restart elsewhere")
    parser.add_argument("--prometheus-url", help="read progress and NPU utilization from this Prometheus "
                        "(npu-exporter and trainer series); default: scrape the trainer pods' :9400 endpoints")
    parser.add_argument("--telemetry-interval", type=float, default=30.0,
                        help="seconds between progress/utilization readings of each running job")
    parser.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    parser.set_defaults(func=run)


def run(args) -> int:
    import kopf
    import urllib3
    from kubernetes.client.exceptions import ApiException
    from prometheus_client import start_http_server

    from . import handlers
    from .controller import Controller
    from .kube import Kube

    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.log_level != "DEBUG":
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)  # one line per handled event drowns the rest
    if args.kubeconfig:
        os.environ["KUBECONFIG"] = args.kubeconfig  # kopf's own login reads it too
    try:
        kube = Kube.from_environment(args.kubeconfig)
        installed = kube.crd_installed()
    except (ApiException, urllib3.exceptions.HTTPError, OSError) as error:
        print(f"error: cannot reach the Kubernetes API: {str(error).splitlines()[0]}", file=sys.stderr)
        return EXIT_NOT_READY
    except Exception as error:  # noqa: BLE001 - a broken kubeconfig must be one line, not a traceback
        print(f"error: cannot load Kubernetes credentials: {error}", file=sys.stderr)
        return EXIT_NOT_READY
    if not installed:
        print("error: the AscendHybridJob CRD is not installed; install it with "
              "`kubectl apply --server-side -f crds/` or `helm install ascend-hybrid charts/ascend-hybrid-operator`",
              file=sys.stderr)
        return EXIT_NOT_READY
    from .telemetry import TelemetrySource

    controller = Controller(kube, handlers.snapshot(), node_grace_seconds=args.node_grace_seconds, workers=args.workers,
                            indexes_see_cluster=not args.namespace, telemetry=TelemetrySource(args.prometheus_url),
                            telemetry_interval=args.telemetry_interval)
    handlers.CONTROLLER = controller
    if args.metrics_port:
        start_http_server(args.metrics_port, addr=args.bind_address)
    controller.start()
    liveness = f"http://{args.bind_address}:{args.health_port}/healthz" if args.health_port else None
    namespaces = args.namespace
    kopf.run(standalone=True, clusterwide=not namespaces, namespaces=namespaces, liveness_endpoint=liveness)
    return 0
