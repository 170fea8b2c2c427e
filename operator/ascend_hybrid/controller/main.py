"""`ascend-hybrid run`: the composition root of the operator — settings → Kube, Controller, loops, kopf.run."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import yaml

from ascend_hybrid.contracts.ascend import PLUGIN_MODES
from ascend_hybrid.contracts.volcano import SCHEDULER_NAME
from ascend_hybrid.controller import hardening, logs
from ascend_hybrid.controller.settings import OperatorSettings

EXIT_NOT_READY = 2


def register(subparsers) -> None:
    parser = subparsers.add_parser("run", help="run the operator")
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("--namespace", "-n", action="append", default=[], help="watch this namespace (repeatable)")
    scope.add_argument("--all-namespaces", "-A", action="store_true", help="watch every namespace (default)")
    defaults = OperatorSettings()
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, then $KUBECONFIG)")
    parser.add_argument("--metrics-port", type=int, default=defaults.metrics_port, help="Prometheus /metrics port (0: off)")
    parser.add_argument("--health-port", type=int, default=defaults.health_port, help="liveness /healthz port (0: off)")
    parser.add_argument("--bind-address", default=defaults.bind_address, help="address of the metrics and health endpoints")
    parser.add_argument("--workers", type=int, default=defaults.workers, help="reconcile worker threads")
    parser.add_argument("--node-grace-seconds", type=float, default=defaults.node_grace_seconds,
                        help="how long a node may stay NotReady before its jobs restart elsewhere")
    parser.add_argument("--prometheus-url", help="read progress and NPU utilization from this Prometheus "
                        "(npu-exporter and trainer series); default: scrape the trainer pods' :9400 endpoints")
    parser.add_argument("--telemetry-interval", type=float, default=defaults.telemetry_interval,
                        help="seconds between progress/utilization readings of each running job")
    parser.add_argument("--hardware-profiles", metavar="FILE",
                        help="planner hardware profiles (one hardware file, or a list of them; docs/planner.md): a "
                        "profile named like a chip (910A, 910B, A3) replaces the built-in one, others are chosen by "
                        "spec.npu.hardwareProfile")
    parser.add_argument("--log-level", default=defaults.log_level, choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    parser.add_argument("--log-format", default=defaults.log_format, choices=logs.FORMATS,
                        help="text, or one JSON object per line with the job's namespace and name as fields")
    parser.add_argument("--ranktable-expander-image", default=defaults.ranktable_expander_image, metavar="IMAGE",
                        help="image of the rank-table expander sidecar in the pods of jobs whose hccl.json may "
                             "outgrow its ConfigMap (the operator's own image; it runs python -m "
                             "ascend_hybrid.ranktable_sidecar)")
    parser.add_argument("--device-plugin-mode", default=defaults.device_plugin_mode,
                        choices=("auto", *PLUGIN_MODES),
                        help="how each node's Ascend device plugin hands out chips: auto (read from its DaemonSets' "
                             "-volcanoType flag), kubelet or volcano for every node (docs/install.md)")
    parser.add_argument("--device-plugin-namespace", default=defaults.device_plugin_namespace, metavar="NS",
                        help="where the device plugin's DaemonSets are (auto mode)")
    parser.add_argument("--scheduler", default="default", choices=("default", SCHEDULER_NAME),
                        help="how jobs that name no spec.scheduling.schedulerName (nor a Kueue queue) are scheduled: "
                             "default (the operator places and binds their pods) or volcano (a PodGroup per attempt, "
                             "Volcano binds the pods; docs/install.md, \"On a MindCluster cluster with Volcano\")")
    parser.add_argument("--mark-slow-nodes", action="store_true",
                        help="set the node condition AscendSlowNode on a node found slow (SlowNode) in two jobs, or "
                             "twice in one, for the administrator (needs patch on nodes/status)")
    hardening.add_arguments(parser)
    parser.set_defaults(func=run)


def settings_from(args) -> OperatorSettings:
    return OperatorSettings(
        namespaces=tuple(args.namespace), kubeconfig=args.kubeconfig, metrics_port=args.metrics_port,
        health_port=args.health_port, bind_address=args.bind_address, workers=args.workers,
        node_grace_seconds=args.node_grace_seconds, prometheus_url=args.prometheus_url,
        telemetry_interval=args.telemetry_interval, log_level=args.log_level, log_format=args.log_format,
        hardware_profiles=args.hardware_profiles, ranktable_expander_image=args.ranktable_expander_image,
        device_plugin_mode=args.device_plugin_mode, device_plugin_namespace=args.device_plugin_namespace,
        default_scheduler=None if args.scheduler == "default" else args.scheduler,
        mark_slow_nodes=args.mark_slow_nodes, **hardening.settings_of(args))


def load_hardware_profiles(path: str | None) -> dict:
    """Name → planner Hardware from a YAML file holding one hardware document or a list of them."""
    from ascend_hybrid.planner.hardware import HardwareError, from_mapping

    if not path:
        return {}
    try:
        documents = yaml.safe_load(Path(path).read_text())
    except OSError as error:
        raise ValueError(error.strerror or str(error)) from None
    except yaml.YAMLError as error:
        raise ValueError(f"not valid YAML ({str(error).splitlines()[0]})") from None
    documents = documents if isinstance(documents, list) else [documents]
    profiles = {}
    for position, document in enumerate(documents):
        try:
            hardware = from_mapping(document)
        except HardwareError as error:
            raise ValueError(f"profile {position}: {error}") from None
        profiles[hardware.name] = hardware
    return profiles


def run(args) -> int:
    """`ascend-hybrid run`: checks what it was given, reaches the API, starts the controller's threads and its
    watches, then hands the thread to kopf. An exit code of EXIT_NOT_READY names what stopped it, in one line."""
    import kopf

    from ascend_hybrid.controller import handlers  # noqa: F401 - registers the kopf handlers
    from ascend_hybrid.controller.leader import default_lease_namespace
    from ascend_hybrid.controller.loop import Controller
    from ascend_hybrid.controller.metrics import publishing_loop
    from ascend_hybrid.controller.observed import EfficiencyBook, folding_loop
    from ascend_hybrid.controller.telemetry import TelemetrySource, sampling_loop

    settings = settings_from(args)
    profiles = checked(settings)
    if profiles is None:
        return EXIT_NOT_READY
    logs.configure(settings.log_level, settings.log_format)
    if settings.log_level != "DEBUG":
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)  # one line per handled event drowns the rest
    if settings.kubeconfig:
        os.environ["KUBECONFIG"] = settings.kubeconfig  # kopf's own login reads it too
    reached = connected(settings)
    if reached is None:
        return EXIT_NOT_READY
    kube, elector = reached
    controller = Controller(kube, settings=settings, hardware_profiles=profiles, leadership=elector)
    source = TelemetrySource(settings.prometheus_url, timeout_seconds=settings.telemetry_http_timeout)
    hardening.serve_metrics(settings, kube.client)
    if elector is not None:
        elector.start()
    stores, watches = cluster_watches(kube, controller, settings)
    book = EfficiencyBook(kube, settings.lease_namespace or default_lease_namespace(settings.kubeconfig))
    controller.start(publishing_loop(controller), sampling_loop(controller, source, settings.telemetry_interval),
                     folding_loop(controller, book, settings.telemetry_interval),
                     *(watch.watch_forever for watch in watches))
    liveness = f"http://{settings.bind_address}:{settings.health_port}/healthz" if settings.health_port else None
    kopf.run(standalone=True, clusterwide=settings.watches_cluster, namespaces=list(settings.namespaces),
             liveness_endpoint=liveness, memo=kopf.Memo(controller=controller, **stores))
    return 0


def checked(settings: OperatorSettings) -> dict | None:
    """The hardware profiles, once the flags that name files and images are found sound; None after saying, on
    stderr, which flag is not."""
    from ascend_hybrid.spec.k8s_validation.image import (
        IMAGE_REFERENCE_MESSAGE,
        image_detail_errors,
        is_image_reference,
    )

    image = settings.ranktable_expander_image
    image_problems = image_detail_errors(image) if is_image_reference(image) else [IMAGE_REFERENCE_MESSAGE]
    if image_problems:
        print(f"error: --ranktable-expander-image={image!r}: {image_problems[0]}", file=sys.stderr)
        return None
    try:
        return load_hardware_profiles(settings.hardware_profiles)
    except ValueError as error:
        print(f"error: --hardware-profiles {settings.hardware_profiles}: {error}", file=sys.stderr)
        return None


def connected(settings: OperatorSettings):
    """The API client (Kube) and the leader elector (None without leader election), fenced by it, once the API
    answers and the CRD is installed; None after saying, on stderr, why not."""
    import urllib3
    from kubernetes.client.exceptions import ApiException

    from ascend_hybrid.controller.kube import Kube

    try:
        kube = Kube.from_environment(settings.kubeconfig, parallel_calls=settings.parallel_calls, workers=settings.workers,
                                     attempts=settings.api_attempts,
                                     first_backoff_seconds=settings.first_backoff_seconds)
        elector = hardening.leader_elector(settings, kube.client)
        missing = kube.missing_crd()
    except (ApiException, urllib3.exceptions.HTTPError, OSError) as error:
        print(f"error: cannot reach the Kubernetes API: {str(error).splitlines()[0]}", file=sys.stderr)
        return None
    except ValueError as error:  # leader election settings that cannot work
        print(f"error: {error}", file=sys.stderr)
        return None
    except Exception as error:  # noqa: BLE001 - a broken kubeconfig must be one line, not a traceback
        print(f"error: cannot load Kubernetes credentials: {error}", file=sys.stderr)
        return None
    if missing is not None:
        print(f"error: the CRD {missing} is not installed; install the CRDs with "
              "`kubectl apply --server-side -f crds/` or `helm install ascend-hybrid charts/ascend-hybrid-operator`",
              file=sys.stderr)
        return None
    if elector is not None:
        kube.fence = elector.fence  # checked before every mutating call
    return kube, elector


def cluster_watches(kube, controller, settings: OperatorSettings) -> tuple[dict, list]:
    """The stores the kopf handlers read (pods, nodes, device_infos, daemonsets) and the list-watches that fill
    them: pods in each watched namespace, nodes, the device plugin's DaemonSets when the plugin's mode is read
    from them, and its deviceinfo ConfigMaps when the operator watches the whole cluster."""
    from ascend_hybrid.contracts.ascend import DEVICEINFO_LABEL, DEVICEINFO_NAMESPACE
    from ascend_hybrid.controller.clusterwatch import NamedStore, device_reaction, node_reaction, plugin_reaction
    from ascend_hybrid.controller.listwatch import ListWatch
    from ascend_hybrid.controller.podwatch import PodStore, reaction

    scopes: list[str | None] = list(settings.namespaces) or [None]  # None: every namespace
    seconds = settings.watch_timeout_seconds
    pods = PodStore(reaction(controller), sources=len(scopes))
    nodes = NamedStore(node_reaction(controller))
    # watching only some namespaces, placement lists the device plugin's ConfigMaps when it places (placing.py)
    device_infos = NamedStore(device_reaction(controller), sources=1 if settings.watches_cluster else 0)
    auto_modes = settings.device_plugin_mode == "auto"
    daemonsets = NamedStore(plugin_reaction(controller), sources=1 if auto_modes else 0)
    watches = [ListWatch(kube, pods, scope, timeout_seconds=seconds) for scope in scopes]
    if auto_modes:
        watches.append(ListWatch(kube, daemonsets, settings.device_plugin_namespace, resource="daemonsets",
                                 timeout_seconds=seconds))
    watches.append(ListWatch(kube, nodes, resource="nodes", timeout_seconds=seconds))
    if settings.watches_cluster:
        watches.append(ListWatch(kube, device_infos, DEVICEINFO_NAMESPACE, resource="configmaps",
                                 label_selector=f"{DEVICEINFO_LABEL}=true", timeout_seconds=seconds))
    stores = {"pods": pods, "nodes": nodes, "device_infos": device_infos, "daemonsets": daemonsets}
    return stores, watches
