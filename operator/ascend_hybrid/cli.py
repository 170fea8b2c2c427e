"""`ascend-hybrid`: validate, layout, render, ranktable, and the commands of the operator (`run`), the dev tools
(`crd`, `chart`, `demo`) and the dev cluster, registered lazily so that `validate` never loads kopf.

Bad input is one clear line per problem on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

from . import api, ranktable, render, rules, summary
from . import layout as layouts
from .ascend import device_infos_by_node
from .chips import CHIPS
from .inventory import build_inventory
from .names import JOB_LABEL
from .placement import GangRequest, place
from .podview import attempt_of, labels_of

EXIT_BAD_INPUT = 2


class InputError(Exception):
    pass


def load_objects(path: str) -> list[dict]:
    """Objects of a YAML file or stream: a List (as `kubectl get -o yaml` prints) or separate documents."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
        documents = list(yaml.safe_load_all(text))
    except OSError as error:
        raise InputError(f"{path}: {error.strerror or error}") from None
    except UnicodeDecodeError as error:
        raise InputError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from None
    except yaml.YAMLError as error:
        raise InputError(f"{path}: not valid YAML ({str(error).splitlines()[0]})") from None
    objects: list[dict] = []
    for document in documents:
        if document is None:
            continue
        if not isinstance(document, dict):
            raise InputError(f"{path}: expected Kubernetes objects, found {type(document).__name__}")
        if str(document.get("kind") or "").endswith("List") and isinstance(document.get("items"), list):
            objects.extend(item for item in document["items"] if isinstance(item, dict))
        else:
            objects.append(document)
    return objects


def load_job(path: str) -> tuple[dict, rules.ResolvedJob]:
    jobs = [o for o in load_objects(path) if o.get("kind") == api.KIND]
    if not jobs:
        raise InputError(f"{path}: no {api.KIND} object found")
    body = jobs[0]
    if body.get("apiVersion") != f"{api.GROUP}/{api.VERSION}":
        raise InputError(f"{path}: apiVersion must be {api.GROUP}/{api.VERSION}, got {body.get('apiVersion')!r}")
    return body, rules.parse(body)


def _of_kind(objects: list[dict], kind: str) -> list[dict]:
    return [o for o in objects if o.get("kind") == kind]


def cmd_validate(args) -> int:
    body, effective = load_job(args.file)
    print(f"{body['metadata'].get('name')}: valid (world {effective.world_size} = DP {effective.data} × "
          f"TP {effective.tensor} × PP {effective.pipeline}, EP {effective.expert}, {effective.pod_count} pods × "
          f"{effective.per_pod} {effective.chip})")
    return 0


def cmd_layout(args) -> int:
    _, effective = load_job(args.file)
    layout = layouts.from_effective(effective)
    if args.output == "json":
        document = {"worldSize": layout.world_size, "groups": layout.groups(),
                    "pods": [{"index": p.index, "ranks": [p.first, p.last]} for p in layout.pods]}
        json.dump(document, sys.stdout, separators=(",", ":"))
        print()
        return 0
    print(f"world {layout.world_size}: DP {layout.data} × TP {layout.tensor} × PP {layout.pipeline} "
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


def cmd_render(args) -> int:
    body, effective = load_job(args.file)
    nodes = _of_kind(load_objects(args.nodes), "Node")
    if not nodes:
        raise InputError(f"{args.nodes}: no Node objects found")
    others = load_objects(args.pods) if args.pods else []
    inventory = build_inventory(nodes, _of_kind(others, "Pod"), _of_kind(others, "ConfigMap"))
    placement = place(GangRequest.for_job(effective), inventory)
    if not placement.ok:
        print(f"error: cannot place {effective.name}: {placement.reason}", file=sys.stderr)
        return EXIT_BAD_INPUT
    metadata = body.get("metadata") or {}
    namespace = metadata.get("namespace") or args.namespace
    uid = metadata.get("uid")
    sched_ip = args.sched_ip or f"{effective.name}-sched.{namespace}.svc"
    manifests = render.children(effective, namespace, uid or "", args.attempt, placement.nodes, sched_ip)
    if not uid:
        for manifest in manifests:
            manifest["metadata"].pop("ownerReferences", None)
    yaml.safe_dump_all(manifests, sys.stdout, sort_keys=False, width=120)
    print(summary.format_placement_report(summary.placement_report(effective, placement, inventory)), file=sys.stderr)
    if args.svg:
        from .plan_cli import write_placement_svg

        tiers = effective.spec.scheduling.topology_tiers
        write_placement_svg(args.svg, effective, placement.nodes,
                            summary.node_domains(inventory, tiers[0]) if tiers else {})
    if not uid:
        print("note: the job has no metadata.uid, so no owner references were rendered", file=sys.stderr)
    if not args.sched_ip:
        print("note: MindSpore needs an IP in MS_SCHED_HOST: pass --sched-ip with the ClusterIP of "
              f"{effective.name}-sched", file=sys.stderr)
    return 0


def cmd_ranktable(args) -> int:
    _, effective = load_job(args.file)
    objects = load_objects(args.pods)
    pods = [p for p in _of_kind(objects, "Pod") if labels_of(p).get(JOB_LABEL) == effective.name]
    if not pods:
        raise InputError(f"{args.pods}: no pods labelled {JOB_LABEL}={effective.name}")
    latest = max(attempt_of(p) for p in pods)
    pods = [p for p in pods if attempt_of(p) == latest]
    super_pods = None
    if CHIPS[effective.chip].super_pods:
        nodes = {node["metadata"]["name"]: node for node in _of_kind(objects, "Node")}
        infos = device_infos_by_node(_of_kind(objects, "ConfigMap"))
        super_pods = ranktable.node_super_pods([p["spec"].get("nodeName") for p in pods], nodes, infos)
    table = ranktable.build_rank_table(pods, effective.per_pod, super_pods, pod_count=effective.pod_count)
    print(ranktable.dumps(table))
    if table["status"] != "completed":
        for problem in ranktable.missing_for_completion(pods, effective.per_pod, effective.pod_count):
            print(f"waiting: {problem}", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ascend-hybrid", description="AscendHybridJob operator and planning tools")
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
    p.add_argument("--pods", help="`kubectl get pods -A -o yaml` output (and deviceinfo ConfigMaps)")
    p.add_argument("--sched-ip", help="ClusterIP of <job>-sched (MS_SCHED_HOST)")
    p.add_argument("--namespace", default="default")
    p.add_argument("--attempt", type=int, default=1)
    p.add_argument("--svg", help="also write a picture of the placement (racks, nodes, chips by stage)")
    p.set_defaults(func=cmd_render)

    p = sub.add_parser("ranktable", help="hccl.json of a job's running pods")
    p.add_argument("-f", "--file", required=True)
    p.add_argument("--pods", required=True,
                   help="`kubectl get pods -o yaml` output (plus Nodes and deviceinfo ConfigMaps for super-pods)")
    p.set_defaults(func=cmd_ranktable)

    from . import plan_cli
    from .controller import main as operator_main
    from .devcluster import cli as devcluster_cli
    from .devtools import demo, generate

    for registrar in (operator_main, generate, devcluster_cli, demo, plan_cli):
        registrar.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from .devtools.repo import NotACheckout

    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except NotACheckout as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except rules.SpecError as error:
        for problem in error.problems:
            print(f"error: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    raise SystemExit(main())
