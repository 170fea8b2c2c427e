"""`ascend-hybrid`: validate, layout, render, ranktable, and the commands of the operator (`run`), the dev tools
(`crd`, `chart`, `demo`) and the dev cluster, registered lazily so that `validate` never loads kopf.

Bad input is one clear line per problem on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import sys
from typing import Any

import yaml

from ascend_hybrid.cli.inputs import (
    EXIT_BAD_INPUT,
    ArgumentParser,
    InputError,
    check_job,
    job_label,
    jobs_of,
    load_documents,
    load_job,
    load_objects,
    of_kind,
)
from ascend_hybrid.contracts import names, volcano
from ascend_hybrid.contracts.ascend import device_infos_by_node, device_plugins
from ascend_hybrid.contracts.chips import CHIPS
from ascend_hybrid.contracts.names import JOB_LABEL
from ascend_hybrid.contracts.podview import attempt_of, labels_of
from ascend_hybrid.gang import layout as layouts
from ascend_hybrid.gang import ranktable, render, summary
from ascend_hybrid.gang.inventory import build_inventory
from ascend_hybrid.gang.placement import GangRequest, place
from ascend_hybrid.spec import api
from ascend_hybrid.spec.k8s_validation import dns1123_label_errors
from ascend_hybrid.spec.resolved import ResolvedJob, SpecError

# What str.splitlines breaks a line at, and the other control characters: a user's value (a taint key with a
# carriage return) must not split one error into lines that no longer say "error: ".
_UNPRINTABLE = {code: f"\\x{code:02x}" for code in (*range(0x20), 0x7f, 0x85)} | {0x2028: "\\u2028",
                                                                                 0x2029: "\\u2029"}


def error_line(text: str) -> None:
    print(f"error: {text.translate(_UNPRINTABLE)}", file=sys.stderr)


def cmd_validate(args) -> int:
    """Every AscendHybridJob of the file, each reported by name: `name: valid (…)` on stdout, its problems as
    `error:` lines on stderr (prefixed with the job's name when the file holds several); exit 2 if any is bad."""
    documents = load_documents(args.file)
    jobs = jobs_of(args.file, documents)
    first: dict[tuple[Any, Any], str]  # (namespace, name) → where that job was
    several, bad, first = len(jobs) > 1, 0, {}
    for document in documents:
        if document.obj.get("kind") != api.KIND:
            print(f"note: {args.file}: {document.where}: {document.obj['kind']} {job_label(document)} is not an "
                  f"{api.KIND}: not checked", file=sys.stderr)
    for document in jobs:
        label = job_label(document)
        prefix = f"{label.strip(chr(39))}: " if several else ""
        metadata = document.obj.get("metadata")
        key = (metadata.get("namespace"), metadata.get("name")) if isinstance(metadata, dict) else None
        if key is not None and key[1] and key in first:
            print(f"error: {prefix}{args.file}: {document.where}: a second {api.KIND} named {label} (first: "
                  f"{first[key]}): kubectl apply would keep only the last", file=sys.stderr)
            bad += 1
            continue
        if key is not None:
            first.setdefault(key, document.where)
        try:
            resolved = check_job(args.file, document)
        except SpecError as error:
            for problem in error.problems:
                error_line(f"{prefix}{problem}")
            bad += 1
            continue
        except InputError as error:
            for line in error.lines:
                error_line(f"{prefix}{line}")
            bad += 1
            continue
        cp = f" × CP {resolved.context}" if resolved.context > 1 else ""
        print(f"{resolved.name}: valid (world {resolved.world_size} = DP {resolved.data} × "
              f"TP {resolved.tensor} × PP {resolved.pipeline}{cp}, EP {resolved.expert}, {resolved.pod_count} pods × "
              f"{resolved.per_pod} {resolved.chip})")
    return EXIT_BAD_INPUT if bad else 0


def cmd_layout(args) -> int:
    _, resolved = load_job(args.file)
    layout = layouts.from_resolved(resolved)
    if args.output == "json":
        document = {"worldSize": layout.world_size, "groups": layout.groups(),
                    "pods": [{"index": p.index, "ranks": [p.first, p.last]} for p in layout.pods]}
        json.dump(document, sys.stdout, separators=(",", ":"))
        print()
        return 0
    cp = f" × CP {layout.context}" if layout.context > 1 else ""
    print(f"world {layout.world_size}: DP {layout.data} × TP {layout.tensor} × PP {layout.pipeline}{cp} "
          f"(stage size {layout.stage_size}), EP {layout.expert} {layout.expert_placement}, "
          f"{layout.pod_count} pods × {layout.per_pod} ranks")
    for kind, info in summary.group_tiers(layout).items():
        tiers = ", ".join(f"{count} {tier}" for tier, count in sorted(info["tiers"].items()))
        example = layout.groups()[kind][0]
        shown = example if len(example) <= 16 else [*example[:8], "…", *example[-4:]]
        print(f"{kind:>9}: {info['count']} groups × {info['size']} ranks ({tiers}); first {shown}")
    shown_pods = layout.pods if len(layout.pods) <= 32 else layout.pods[:32]
    for pod in shown_pods:
        print(f"  pod {pod.index}: ranks {pod.first}-{pod.last}")
    if len(shown_pods) < len(layout.pods):
        print(f"  … {len(layout.pods) - len(shown_pods)} more pods")
    return 0


def _one_stdin(args, *names: str) -> None:
    given = [f"--{name}" if name != "file" else "-f" for name in names if getattr(args, name, None) == "-"]
    if len(given) > 1:
        raise InputError(f"{' and '.join(given)}: only one input can be standard input (-)")


def _render_arguments(args, resolved: ResolvedJob) -> None:
    if args.attempt < 1:
        raise InputError(f"--attempt={args.attempt}: must be ≥ 1 (attempts count from 1)")
    longest = names.pod_name(resolved.name, args.attempt, resolved.pod_count - 1)
    if len(longest) > 63:
        raise InputError(f"--attempt={args.attempt}: pod name {longest!r} would be {len(longest)} characters, more "
                         "than the 63 of a hostname")
    if errors := dns1123_label_errors(args.namespace):
        raise InputError(f"--namespace={args.namespace!r}: {'; '.join(errors)}")
    if args.sched_ip is not None:
        try:
            ipaddress.ip_address(args.sched_ip)
        except ValueError:
            raise InputError(f"--sched-ip={args.sched_ip!r}: must be an IP address (the ClusterIP of "
                             f"{names.sched_service(resolved.name)}; MindSpore needs an IP in MS_SCHED_HOST)") from None


def cmd_render(args) -> int:
    _one_stdin(args, "file", "nodes", "pods")
    body, resolved = load_job(args.file)
    _render_arguments(args, resolved)
    nodes = of_kind(load_objects(args.nodes), "Node")
    if not nodes:
        raise InputError(f"{args.nodes}: no Node objects found")
    others = load_objects(args.pods) if args.pods else []
    inventory = build_inventory(nodes, of_kind(others, "Pod"), of_kind(others, "ConfigMap"),
                                plugins=device_plugins(of_kind(others, "DaemonSet")))
    scheduling = resolved.spec.scheduling
    by_volcano = None
    if volcano.uses_volcano(scheduling.scheduler_name, scheduling.volcano is not None, scheduling.queue,
                            args.scheduler if args.scheduler != "default" else None):
        node_selector, requirements = volcano.chip_selection(resolved.chip, nodes, resolved.spec.template.node_selector)
        by_volcano = render.ByVolcano(node_selector, tuple(requirements))
    placement = place(GangRequest.for_job(resolved, volcano=by_volcano is not None), inventory)
    if not placement.ok and by_volcano is None:
        error_line(f"cannot place {resolved.name}: {placement.reason}")
        return EXIT_BAD_INPUT
    metadata = body.get("metadata") or {}
    namespace = metadata.get("namespace") or args.namespace
    if not isinstance(namespace, str) or dns1123_label_errors(namespace):
        raise InputError(f"{args.file}: metadata.namespace={namespace!r}: must be a namespace name (a lowercase "
                         "RFC 1123 label)")
    uid = metadata.get("uid")
    if uid is not None and not isinstance(uid, str):
        raise InputError(f"{args.file}: metadata.uid={uid!r}: must be a string")
    services = render.needs_services(resolved)
    sched_ip = (args.sched_ip or f"{resolved.name}-sched.{namespace}.svc") if services else None
    planned: tuple[str | None, ...] = placement.nodes if placement.ok else (None,) * resolved.pod_count
    manifests = render.children(resolved, namespace, uid or "", args.attempt, planned, sched_ip, volcano=by_volcano,
                                job_metadata=metadata)
    if not uid:
        for manifest in manifests:
            manifest["metadata"].pop("ownerReferences", None)
    yaml.safe_dump_all(manifests, sys.stdout, sort_keys=False, width=120)
    if not placement.ok:
        print(f"note: no plan for {resolved.name} ({placement.reason}): its pods go to Volcano without a preferred "
              "node", file=sys.stderr)
        return 0
    print(summary.format_placement_report(summary.placement_report(resolved, placement, inventory)), file=sys.stderr)
    if args.svg:
        from ascend_hybrid.cli.plan import write_placement_svg

        tiers = resolved.spec.scheduling.topology_tiers
        write_placement_svg(args.svg, resolved, placement.nodes,
                            summary.node_domains(inventory, tiers[0]) if tiers else {})
    if not uid:
        print("note: the job has no metadata.uid, so no owner references were rendered", file=sys.stderr)
    if not services:
        print("note: a job of one pod has no Services: its pod's own IP is MS_SCHED_HOST", file=sys.stderr)
    elif not args.sched_ip:
        print("note: MindSpore needs an IP in MS_SCHED_HOST: pass --sched-ip with the ClusterIP of "
              f"{resolved.name}-sched", file=sys.stderr)
    return 0


def cmd_ranktable(args) -> int:
    _one_stdin(args, "file", "pods")
    body, resolved = load_job(args.file)
    if args.revision < 0:
        raise InputError(f"--revision={args.revision}: must be ≥ 0 (the operator counts tables written from 0)")
    objects = load_objects(args.pods)
    pods = [p for p in of_kind(objects, "Pod") if labels_of(p).get(JOB_LABEL) == resolved.name]
    if not pods:
        raise InputError(f"{args.pods}: no pods labelled {JOB_LABEL}={resolved.name}")
    latest = max(attempt_of(p) for p in pods)
    pods = [p for p in pods if attempt_of(p) == latest]
    super_pods = None
    if CHIPS[resolved.chip].super_pods:
        nodes = {node["metadata"]["name"]: node for node in of_kind(objects, "Node")}
        infos = device_infos_by_node(of_kind(objects, "ConfigMap"))
        super_pods = ranktable.node_super_pods([p["spec"].get("nodeName") for p in pods], nodes, infos)
    table = ranktable.build_rank_table(pods, resolved.per_pod, super_pods, pod_count=resolved.pod_count)
    if args.output == "configmap":
        metadata = body.get("metadata") or {}
        namespace = metadata.get("namespace") or pods[0]["metadata"].get("namespace") or "default"
        config_map = render.rank_table_config_map(resolved.name, namespace, str(metadata.get("uid") or ""),
                                                  render.job_config_text(resolved), table, args.revision)
        if not metadata.get("uid"):
            config_map["metadata"].pop("ownerReferences", None)
        yaml.dump(config_map, sys.stdout, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False,
                  width=2**30)  # one line per value: a 1 MiB base64 string stays one line
    else:
        print(ranktable.dumps(table))
    if table["status"] != "completed":
        for problem in ranktable.missing_for_completion(pods, resolved.per_pod, resolved.pod_count, super_pods):
            print(f"waiting: {problem}", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="ascend-hybrid", description="AscendHybridJob operator and planning tools")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("validate", help="check a job against every rule")
    p.add_argument("-f", "--file", required=True)
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("layout", help="ranks, parallel groups and pods of a job")
    p.add_argument("-f", "--file", required=True)
    p.add_argument("-o", "--output", choices=("text", "json"), default="text")
    p.set_defaults(func=cmd_layout)

    p = sub.add_parser("render", help="place a job on nodes and print its child manifests")
    p.add_argument("-f", "--file", required=True)
    p.add_argument("--nodes", required=True, help="`kubectl get nodes -o yaml` output")
    p.add_argument("--pods", help="`kubectl get pods -A -o yaml` output (and deviceinfo ConfigMaps, the device plugin's "
                   "DaemonSets)")
    p.add_argument("--sched-ip", help="ClusterIP of <job>-sched (MS_SCHED_HOST)")
    p.add_argument("--namespace", default="default")
    p.add_argument("--attempt", type=int, default=1, help="attempt number of the pods (from 1; default 1)")
    p.add_argument("--scheduler", choices=("default", volcano.SCHEDULER_NAME), default="default",
                   help="the operator's --scheduler: volcano renders a job that names no scheduler as a Volcano "
                        "PodGroup and its pods")
    p.add_argument("--svg", help="also write a picture of the placement (racks, nodes, chips by stage)")
    p.set_defaults(func=cmd_render)

    p = sub.add_parser("ranktable", help="hccl.json of a job's running pods")
    p.add_argument("-f", "--file", required=True)
    p.add_argument("--pods", required=True,
                   help="`kubectl get pods -o yaml` output (plus Nodes and deviceinfo ConfigMaps for super-pods)")
    p.add_argument("-o", "--output", choices=("json", "configmap"), default="json",
                   help="json: hccl.json, indented (default); configmap: the rank-table ConfigMap as the operator "
                        "writes it (data and binaryData, YAML)")
    p.add_argument("--revision", type=int, default=0,
                   help="with -o configmap: the ConfigMap's `version` counter (the operator counts tables written)")
    p.set_defaults(func=cmd_ranktable)

    from ascend_hybrid.cli import plan as plan_cli
    from ascend_hybrid.controller import main as operator_main
    from ascend_hybrid.devcluster import cli as devcluster_cli
    from ascend_hybrid.devtools import chartgen, demo_command

    for registrar in (operator_main, chartgen, devcluster_cli, demo_command, plan_cli):
        registrar.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from ascend_hybrid.devtools.repo import NotACheckout

    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except NotACheckout as error:
        error_line(str(error))
        return EXIT_BAD_INPUT
    except SpecError as error:
        for problem in error.problems:
            error_line(str(problem))
        return EXIT_BAD_INPUT
    except InputError as error:
        for line in error.lines:
            error_line(str(line))
        return EXIT_BAD_INPUT

