"""`ascend-hybrid`: validate, layout, render, ranktable, and the commands of the operator (`run`), the dev tools
(`crd`, `chart`, `demo`) and the dev cluster, registered lazily so that `validate` never loads kopf.

Bad input is one clear line per problem on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from . import api, names, ranktable, render, rules, summary
from . import layout as layouts
from .ascend import device_infos_by_node
from .chips import CHIPS
from .inventory import build_inventory
from .k8s_validation import dns1123_label_errors, object_problems
from .names import JOB_LABEL
from .placement import GangRequest, place
from .podview import attempt_of, labels_of

EXIT_BAD_INPUT = 2
MAX_PROBLEMS_SHOWN = 20


class InputError(Exception):
    """Bad input: one line (or a few, one per problem) on stderr, exit code 2."""

    def __init__(self, *lines: str):
        super().__init__("\n".join(lines))
        self.lines = lines


class ArgumentParser(argparse.ArgumentParser):
    """argparse, but a usage error is one `error:` line and exit code 2, like every other bad input."""

    def error(self, message: str):
        self.exit(EXIT_BAD_INPUT, f"error: {self.prog}: {message} (see {self.prog} --help)\n")


# --- YAML as kubectl reads it, and stricter where PyYAML is silent ----------------------------------------------

_BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: `kubectl get pods -A` is large


class DuplicateKeyError(yaml.YAMLError):
    def __init__(self, key, first, mark):
        super().__init__(f"duplicate key {key!r}")
        self.key, self.first, self.mark = key, first, mark


class StrictLoader(_BaseLoader):
    """SafeLoader that refuses a key given twice in one mapping (PyYAML keeps the last silently) and reads
    exponent floats without a dot or a signed exponent (1e-3, 2E5) as numbers, as kubectl's YAML 1.2 does."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            first: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # merged keys may be overridden, as YAML's merge key says
                key = self.construct_object(key_node, deep=True)
                try:
                    seen = first.get(key)
                except TypeError:
                    continue  # an unhashable key: SafeConstructor reports it
                if seen is not None:
                    raise DuplicateKeyError(key, seen, key_node.start_mark)
                first[key] = key_node.start_mark
        return super().construct_mapping(node, deep)


StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."))


def _where(mark) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}"


def _yaml_problem(path: str, error: yaml.YAMLError, text: str) -> str:
    if isinstance(error, DuplicateKeyError):
        return (f"{path}: duplicate key {error.key!r} at {_where(error.mark)} (first at {_where(error.first)}): "
                "YAML would keep only the last value, silently")
    if isinstance(error, yaml.MarkedYAMLError):
        where = f" at {_where(error.problem_mark)}" if error.problem_mark else ""
        context = ""
        if error.context and error.problem:
            started = error.context_mark and error.context_mark != error.problem_mark
            context = f" ({error.context}" + (f" started at {_where(error.context_mark)}" if started else "") + ")"
        return f"{path}: not valid YAML{where}: {error.problem or error.context}{context}"
    if isinstance(error, yaml.reader.ReaderError):
        before = text[: error.position]
        line, column = before.count("\n") + 1, len(before) - (before.rfind("\n") + 1) + 1
        return (f"{path}: not valid YAML at line {line}, column {column}: unacceptable character "
                f"#x{error.character:04x}: special characters are not allowed (a binary file?)")
    return f"{path}: not valid YAML ({str(error).splitlines()[0]})"


@dataclass(frozen=True)
class Document:
    obj: dict
    where: str  # "document 2 (line 14)", "document 1 (line 1), item 3"


def _read(path: str) -> str:
    if path == "-":
        try:
            return sys.stdin.read()
        except UnicodeDecodeError as error:
            raise InputError(f"-: standard input is not UTF-8 text ({error.reason} at byte {error.start})") from None
    try:
        return Path(path).read_text()
    except OSError as error:
        raise InputError(f"{path}: {error.strerror or error}") from None
    except UnicodeDecodeError as error:
        raise InputError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from None


def load_documents(path: str) -> list[Document]:
    """Every Kubernetes object of a YAML file or stream (`-`): separate documents, and the items of a List
    (as `kubectl get -o yaml` prints), each with where it was. Refuses anything that is not an object."""
    text = _read(path)
    documents: list[Document] = []
    count = 0
    loader = StrictLoader(text)
    try:
        while loader.check_node():
            node = loader.get_node()
            count += 1
            where = f"document {count} (line {node.start_mark.line + 1})"
            data = loader.construct_document(node)
            if data is None:
                continue
            if not isinstance(data, dict):
                raise InputError(f"{path}: {where} is {_kind_of(data)}, not a Kubernetes object")
            kind = data.get("kind")
            if isinstance(kind, str) and kind.endswith("List") and isinstance(data.get("items"), list):
                for index, item in enumerate(data["items"]):
                    if not isinstance(item, dict):
                        raise InputError(f"{path}: {where}, item {index + 1} is {_kind_of(item)}, "
                                         "not a Kubernetes object")
                    documents.append(Document(item, f"{where}, item {index + 1}"))
            else:
                documents.append(Document(data, where))
    except yaml.YAMLError as error:
        raise InputError(_yaml_problem(path, error, text)) from None
    except RecursionError:
        raise InputError(f"{path}: nested too deeply to be a Kubernetes object") from None
    finally:
        loader.dispose()
    if not count and not text.strip(" \t\r\n"):
        raise InputError(f"{path}: empty: no YAML document")
    for document in documents:
        api_version, kind = document.obj.get("apiVersion"), document.obj.get("kind")
        missing = [field for field, value in (("apiVersion", api_version), ("kind", kind))
                   if not isinstance(value, str) or not value]
        if missing:
            raise InputError(f"{path}: {document.where}: not a Kubernetes object: {' and '.join(missing)} "
                             f"{'is' if len(missing) == 1 else 'are'} required")
    return documents


def load_yaml(path: str):
    """The one YAML document of a file (a hardware description), read as strictly as the objects above."""
    text = _read(path)
    loader = StrictLoader(text)
    try:
        return loader.get_single_data()
    except yaml.YAMLError as error:
        raise InputError(_yaml_problem(path, error, text)) from None
    except RecursionError:
        raise InputError(f"{path}: nested too deeply") from None
    finally:
        loader.dispose()


def _kind_of(value) -> str:
    return {str: "a string", int: "a number", float: "a number", bool: "a boolean", list: "a list"}.get(
        type(value), type(value).__name__)


def load_objects(path: str, kinds: tuple[str, ...] = ("Node", "Pod", "ConfigMap")) -> list[dict]:
    """The objects of a file; those of `kinds` must have the shape the API gives them (k8s_validation)."""
    documents = load_documents(path)
    problems = []
    seen: dict[tuple, str] = {}
    for document in documents:
        obj = document.obj
        if obj.get("kind") not in kinds:
            continue
        label = f"{path}: {document.where}: {obj['kind']}"
        problems += [f"{label}: {problem}" for problem in object_problems(obj)]
        metadata = obj.get("metadata")
        if isinstance(metadata, dict) and isinstance(metadata.get("name"), str):
            key = (obj["kind"], metadata.get("namespace") if isinstance(metadata.get("namespace"), str) else None,
                   metadata["name"])
            if key in seen:
                problems.append(f"{label} {metadata['name']!r}: given twice ({seen[key]} too)")
            seen.setdefault(key, document.where)
    if problems:
        shown = problems[:MAX_PROBLEMS_SHOWN]
        more = len(problems) - len(shown)
        raise InputError(*shown, *([f"{path}: … and {more} more problems"] if more else []))
    return [document.obj for document in documents]


def job_documents(path: str) -> list[Document]:
    jobs = [document for document in load_documents(path) if document.obj.get("kind") == api.KIND]
    if not jobs:
        raise InputError(f"{path}: no {api.KIND} object found")
    return jobs


def check_job(path: str, document: Document) -> rules.ResolvedJob:
    body = document.obj
    if body.get("apiVersion") != f"{api.GROUP}/{api.VERSION}":
        raise InputError(f"{path}: apiVersion must be {api.GROUP}/{api.VERSION}, got {body.get('apiVersion')!r}")
    return rules.parse(body)


def load_job(path: str) -> tuple[dict, rules.ResolvedJob]:
    """The one AscendHybridJob of a file (layout, render, ranktable and plan take one job)."""
    jobs = job_documents(path)
    if len(jobs) > 1:
        raise InputError(f"{path}: {len(jobs)} {api.KIND} objects ({', '.join(_job_label(d) for d in jobs)}); "
                         "this command takes one: give it a file with only that job")
    return jobs[0].obj, check_job(path, jobs[0])


def _job_label(document: Document) -> str:
    metadata = document.obj.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    return repr(name) if isinstance(name, str) and name else document.where


def _of_kind(objects: list[dict], kind: str) -> list[dict]:
    return [o for o in objects if o.get("kind") == kind]


def cmd_validate(args) -> int:
    """Every AscendHybridJob of the file, each reported by name: `name: valid (…)` on stdout, its problems as
    `error:` lines on stderr (prefixed with the job's name when the file holds several); exit 2 if any is bad."""
    documents = load_documents(args.file)
    jobs = [document for document in documents if document.obj.get("kind") == api.KIND]
    if not jobs:
        raise InputError(f"{args.file}: no {api.KIND} object found")
    several, bad, first = len(jobs) > 1, 0, {}
    for document in documents:
        if document.obj.get("kind") != api.KIND:
            print(f"note: {args.file}: {document.where}: {document.obj['kind']} {_job_label(document)} is not an "
                  f"{api.KIND}: not checked", file=sys.stderr)
    for document in jobs:
        label = _job_label(document)
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
            effective = check_job(args.file, document)
        except rules.SpecError as error:
            for problem in error.problems:
                print(f"error: {prefix}{problem}", file=sys.stderr)
            bad += 1
            continue
        except InputError as error:
            for line in error.lines:
                print(f"error: {prefix}{line}", file=sys.stderr)
            bad += 1
            continue
        print(f"{effective.name}: valid (world {effective.world_size} = DP {effective.data} × "
              f"TP {effective.tensor} × PP {effective.pipeline}, EP {effective.expert}, {effective.pod_count} pods × "
              f"{effective.per_pod} {effective.chip})")
    return EXIT_BAD_INPUT if bad else 0


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


def _one_stdin(args, *names: str) -> None:
    given = [f"--{name}" if name != "file" else "-f" for name in names if getattr(args, name, None) == "-"]
    if len(given) > 1:
        raise InputError(f"{' and '.join(given)}: only one input can be standard input (-)")


def _render_arguments(args, effective: rules.ResolvedJob) -> None:
    if args.attempt < 1:
        raise InputError(f"--attempt={args.attempt}: must be ≥ 1 (attempts count from 1)")
    longest = names.pod_name(effective.name, args.attempt, effective.pod_count - 1)
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
                             f"{names.sched_service(effective.name)}; MindSpore needs an IP in MS_SCHED_HOST)") from None


def cmd_render(args) -> int:
    _one_stdin(args, "file", "nodes", "pods")
    body, effective = load_job(args.file)
    _render_arguments(args, effective)
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
    if not isinstance(namespace, str) or dns1123_label_errors(namespace):
        raise InputError(f"{args.file}: metadata.namespace={namespace!r}: must be a namespace name (a lowercase "
                         "RFC 1123 label)")
    uid = metadata.get("uid")
    if uid is not None and not isinstance(uid, str):
        raise InputError(f"{args.file}: metadata.uid={uid!r}: must be a string")
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
    _one_stdin(args, "file", "pods")
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
    p.add_argument("--pods", help="`kubectl get pods -A -o yaml` output (and deviceinfo ConfigMaps)")
    p.add_argument("--sched-ip", help="ClusterIP of <job>-sched (MS_SCHED_HOST)")
    p.add_argument("--namespace", default="default")
    p.add_argument("--attempt", type=int, default=1, help="attempt number of the pods (from 1; default 1)")
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
        for line in error.lines:
            print(f"error: {line}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    # `python -m ascend_hybrid.cli`: run the package's module, the one plan_cli imports, so that there is one
    # InputError class (this __main__ copy has its own, which main() would not catch when plan_cli raises it)
    from ascend_hybrid import cli as _cli

    raise SystemExit(_cli.main())
