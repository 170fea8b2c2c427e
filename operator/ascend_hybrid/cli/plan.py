"""`ascend-hybrid plan`: the strategy planner's thin shell — read the job and the hardware, print the plan.

    ascend-hybrid plan -f JOB.yaml [--world N | --nodes N] [--chip 910B | --hardware FILE] [--top K] [-o table|json]
    ascend-hybrid plan -f JOB.yaml --evaluate [--chip … | --hardware FILE] [-o table|json]
    … [--learn] [--explain] [--observed FILE | --kubeconfig FILE --operator-namespace NS]

Bad input is one `error:` line and exit code 2 (cli.main); so is a model no strategy fits, which also names the
closest candidate and how far it misses.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TypedDict

from ascend_hybrid.contracts.names import DEFAULT_OPERATOR_NAMESPACE
from ascend_hybrid.gang.layout import Layout
from ascend_hybrid.gang.placement import place
from ascend_hybrid.planner import explain, hardware, observed, search, svg
from ascend_hybrid.planner.memory import every_stage
from ascend_hybrid.planner.workload import Strategy, Workload
from ascend_hybrid.spec.api import Chip

EXIT_NOTHING_FITS = 2


def _non_finite(value, path: str = "") -> str | None:
    """The first key holding NaN or ±Infinity (YAML's .nan, .inf), which no hardware figure can be."""
    if isinstance(value, dict):
        items = ((f"{path}.{key}" if path else str(key), item) for key, item in value.items())
    elif isinstance(value, list):
        items = ((f"{path}[{index}]", item) for index, item in enumerate(value))
    else:
        return path if isinstance(value, float) and not math.isfinite(value) else None
    return next((found for key, item in items if (found := _non_finite(item, key)) is not None), None)


def _hardware(args, job_chip: str) -> hardware.Hardware:
    from ascend_hybrid.cli.inputs import InputError, load_yaml

    if args.hardware:
        document = load_yaml(args.hardware)
        if document is None:
            raise InputError(f"{args.hardware}: empty: no hardware description")
        if (where := _non_finite(document)) is not None:
            raise InputError(f"{args.hardware}: {where}: must be a finite number (not NaN or Infinity)")
        try:
            return hardware.from_mapping(document)
        except hardware.HardwareError as error:
            raise InputError(f"{args.hardware}: {error}") from None
    try:
        return hardware.builtin(args.chip or job_chip)
    except hardware.HardwareError as error:
        raise InputError(f"--chip {args.chip}: {error}") from None


def _positive(args, name: str) -> None:
    from ascend_hybrid.cli.inputs import InputError

    value = getattr(args, name)
    if value is not None and value < 1:
        raise InputError(f"--{name}={value}: must be ≥ 1")


def _print(document_or_text, as_json: bool) -> None:
    stream = sys.stdout
    if as_json:
        json.dump(document_or_text, stream, ensure_ascii=False, indent=1)
        stream.write("\n")
    else:
        print(document_or_text, file=stream)


def _layout(s: Strategy) -> Layout:
    return Layout(s.data, s.tensor, s.pipeline, s.per_pod, s.expert, s.expert_placement, s.context)


def _write_svg(path: str, text: str) -> None:
    from ascend_hybrid.cli.inputs import InputError

    try:
        Path(path).write_text(text)
    except OSError as error:
        raise InputError(f"--svg {path}: {error.strerror or error}") from None
    print(f"wrote {path}", file=sys.stderr)


def plan_picture(evaluation: search.Evaluation, workload: Workload, hw: hardware.Hardware, title: str) -> str:
    s = evaluation.strategy
    layout = _layout(s)
    figures = svg.PlanFigures(s.micro_batches, s.virtual_stages, evaluation.time.bubble_fraction,
                              tuple(every_stage(workload, s)), evaluation.usable)
    return svg.picture(layout, svg.Cluster.packed(layout, hw.chips_per_node), title, figures)


def write_placement_svg(path: str, resolved, pod_nodes, node_racks) -> None:
    """`render --svg`: the placed gang on its real nodes and racks."""
    layout = _layout(Strategy.from_job(resolved))
    cp = f" × CP {resolved.context}" if resolved.context > 1 else ""
    title = (f"{resolved.name}: DP {resolved.data} × TP {resolved.tensor} × PP {resolved.pipeline}{cp}, "
             f"EP {resolved.expert} {resolved.expert_placement}, placed on {len(set(pod_nodes))} nodes")
    _write_svg(path, svg.picture(layout, svg.Cluster(tuple(pod_nodes), dict(node_racks)), title))


def _title(resolved, evaluation: search.Evaluation, hw: hardware.Hardware, what: str) -> str:
    s = evaluation.strategy
    cp = f" × CP {s.context}" if s.context > 1 else ""
    return (f"{resolved.name} {what} on {s.world} × {hw.name}: DP {s.data} × TP {s.tensor} × PP {s.pipeline}{cp}"
            f", EP {s.expert}, {s.micro_batches} micro-batches, recompute {s.recompute}; step "
            f"{evaluation.time.step:.3g} s")


def cmd_plan(args) -> int:
    from ascend_hybrid.cli.inputs import InputError, load_job

    for name in ("world", "nodes", "top"):
        _positive(args, name)
    _, resolved = load_job(args.file)
    hw = _hardware(args, resolved.chip)
    if args.observed and not (args.learn or args.explain):
        raise InputError(f"--observed {args.observed}: read only with --learn or --explain")
    if args.learn or args.explain:
        hw = _learned(args, hw)
    as_json = args.output == "json"
    try:
        if args.evaluate:
            if resolved.auto:
                raise InputError(f"--evaluate: {resolved.name} is an auto job (spec.parallelism.auto): it has no "
                                 "strategy of its own to score; plan it without --evaluate")
            if args.cluster:
                raise InputError("--cluster: plans for the cluster's free NPUs; leave out --evaluate")
            if args.world or args.nodes:
                raise InputError("--world/--nodes: --evaluate scores the file's own strategy, whose degrees fix "
                                 "the world; leave them out")
            evaluation = search.evaluate_job(resolved, hw)
            workload = Workload.from_job(resolved)
            _print(explain.evaluation_document(evaluation, workload, hw) if as_json
                   else explain.evaluation_table(evaluation, hw), as_json)
            if args.svg:
                _write_svg(args.svg, plan_picture(evaluation, workload, hw, _title(resolved, evaluation, hw,
                                                                                   "as written")))
            return 0
        world = args.world or (args.nodes * hw.chips_per_node if args.nodes else None)
        chip = args.chip if args.chip in {c.value for c in Chip} else None
        capacity = None
        if args.cluster:
            # as the operator would: the job's own world (or --world/--nodes), checked against what can be placed now
            capacity = cluster_capacity(resolved, chip or resolved.chip, args.kubeconfig)
            wanted = world or resolved.world_size
            if wanted > capacity.world:
                raise InputError(f"--cluster: {capacity.describe()}: the job's {wanted} NPUs cannot be placed now "
                                 f"(the gang placer has room for {capacity.world})")
        result = search.plan(resolved, hw, world, chip)
    except search.PlanError as error:
        raise InputError(str(error)) from None
    if result.candidates:
        document = explain.plan_document(result, args.top) if as_json else explain.plan_table(result, args.top)
        if capacity is not None:
            document = capacity.annotate(document, result, as_json)
        _print(document, as_json)
        if args.svg:
            best = result.candidates[0]
            _write_svg(args.svg, plan_picture(best, result.workload, hw, _title(resolved, best, hw, "best plan")))
        return 0
    return _nothing_fits(resolved.name, result, as_json)


def _nothing_fits(name: str, result: search.Plan, as_json: bool) -> int:
    from ascend_hybrid.cli.inputs import InputError

    if result.closest is None:
        reason, count = result.rejected.by_reason.most_common(1)[0] if result.rejected.count else ("none", 0)
        raise InputError(f"no strategy for {name} on {result.world} NPUs passes the job rules "
                         f"({result.considered} tried; most often: {reason}, {count} times)")
    closest = result.closest
    over = (closest.memory.total - closest.usable) / hardware.GIB
    print(f"error: no strategy for {name} fits {result.world} × {result.hardware.name}: the closest needs "
          f"{closest.memory.total / hardware.GIB:.1f} GiB on stage {closest.memory.stage}, {over:.1f} GiB more than "
          f"the {closest.usable / hardware.GIB:.1f} GiB usable", file=sys.stderr)
    if as_json:
        document = explain.plan_document(result, 0)
        document["closest"] = explain.candidate_document(closest, result.workload, result.hardware)
        _print(document, True)
    else:
        print("closest:\n" + explain.HEADER, file=sys.stderr)
        for line in explain.candidate_lines("-", closest, result.hardware):
            print(line, file=sys.stderr)
    return EXIT_NOTHING_FITS


class _Constraints(TypedDict):
    """The GangRequest fields a plan's gang takes from the job's template and scheduling."""

    tolerations: tuple[Mapping, ...]
    node_selector: dict[str, str]
    tier_labels: tuple[str, ...]


class Capacity:
    """The cluster's free NPUs of one chip type, as the operator's placement sees them."""

    def __init__(self, inventory, chip: str, resolved):
        self.inventory, self.chip, self.per_pod = inventory, chip, resolved.per_pod
        template = resolved.spec.template
        self.constraints: _Constraints = {
            "tolerations": tuple(template.tolerations), "node_selector": dict(template.node_selector),
            "tier_labels": tuple(resolved.spec.scheduling.topology_tiers)}
        # how many pods of `per_pod` chips the gang placer can put on the cluster right now: doubling, then halving
        self.slots = 0
        for count in (2 ** k for k in range(0, 20)):
            if not self._fits(count):
                break
            self.slots = count
        low, high = self.slots, self.slots * 2
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (middle, high) if self._fits(middle) else (low, middle)
        self.slots = low

    def _fits(self, pods: int, groups=()) -> bool:
        from ascend_hybrid.gang.placement import GangRequest

        return place(GangRequest(pods, self.per_pod, self.chip, groups=groups, **self.constraints), self.inventory).ok

    @property
    def world(self) -> int:
        return self.slots * self.per_pod

    def describe(self) -> str:
        free = sum(node.free for node in self.inventory if node.chip == self.chip)
        nodes = sum(1 for node in self.inventory if node.chip == self.chip)
        return f"{free} free {self.chip} NPUs on {nodes} {self.chip} nodes, room for {self.slots} pods of {self.per_pod}"

    def placeable(self, evaluation: search.Evaluation) -> bool:
        s = evaluation.strategy
        return self._fits(s.world // s.per_pod, _layout(s).placement_groups())

    def annotate(self, document, result: search.Plan, as_json: bool):
        placeable = [rank for rank, evaluation in enumerate(result.candidates, 1) if self.placeable(evaluation)]
        if as_json:
            return {**document, "cluster": {"capacity": self.describe(), "world": self.world,
                                            "placeableNow": placeable}}
        where = f"placeable now: {', '.join(f'#{rank}' for rank in placeable[:10])}" if placeable else \
            "none of them can be placed now"
        return f"cluster: {self.describe()}; {where}\n{document}"


def observed_book(args) -> observed.Book:
    """The observed-efficiency book: from --observed FILE (the ConfigMap as `kubectl get -o yaml` writes it, or
    its data), else the operator's ConfigMap in --operator-namespace, read with the operator's own client."""
    from ascend_hybrid.cli.inputs import InputError, load_yaml
    from ascend_hybrid.contracts.names import OBSERVED_EFFICIENCY_CONFIG_MAP
    from ascend_hybrid.controller.kube import Kube

    if args.observed:
        document = load_yaml(args.observed)
        data = document.get("data", document) if isinstance(document, dict) else None
        where = args.observed
    else:
        where = f"configmap {args.operator_namespace}/{OBSERVED_EFFICIENCY_CONFIG_MAP}"
        try:
            kube = Kube.from_environment(args.kubeconfig, attempts=2)
            config_map = kube.read_config_map(args.operator_namespace, OBSERVED_EFFICIENCY_CONFIG_MAP)
        except Exception as error:  # noqa: BLE001 - no cluster to read is one line, not a traceback
            raise InputError(f"--learn/--explain: cannot read {where}: {str(error).splitlines()[0]}") from None
        data = (config_map or {}).get("data") or {}
    if not isinstance(data, dict):
        raise InputError(f"{where}: expected a ConfigMap or its data mapping")
    try:
        return observed.from_data(data)
    except observed.ObservedError as error:
        raise InputError(f"{where}: {error}") from None


def explain_observed(book: observed.Book, hw: hardware.Hardware, applied: bool) -> str:
    """`plan --explain`: what the cluster observed on the profile, job by job, and whether it scales the plan."""
    seen = observed.observe(book, hw.name)
    others = ", ".join(f"{name} {factor.factor:.3g}×" for name, factor in sorted(observed.observe_all(book).items())
                       if name != hw.name)
    if seen is None:
        lines = [f"observed: no job on {hw.name} has a steady reading yet (steps after the first "
                 f"{observed.WARMUP_STEPS}); predictions unscaled"]
    else:
        lines = [seen.describe() + ("; predictions below are scaled by it" if applied else
                                    "; predictions below are not scaled (add --learn)"),
                 f"  readings {seen.low:.3g}–{seen.high:.3g}×, latest {seen.updated}:"]
        lines += [f"    {job}: {ratio:.3g}× at {at}" for job, (ratio, at) in sorted((book.get(hw.name) or {}).items())]
    if others:
        lines.append(f"  other profiles: {others}")
    return "\n".join(lines)


def _learned(args, hw: hardware.Hardware) -> hardware.Hardware:
    """The profile scaled by the cluster's observed factor (--learn), the book explained (--explain): on stderr."""
    book = observed_book(args)
    seen = observed.observe(book, hw.name)
    if args.explain:
        print(explain_observed(book, hw, args.learn), file=sys.stderr)
    elif seen is None:
        print(f"observed: no job on {hw.name} has a steady reading yet; predictions unscaled", file=sys.stderr)
    else:
        print(seen.describe() + "; predictions below are scaled by it", file=sys.stderr)
    return observed.scaled(hw, seen) if args.learn else hw


def cluster_capacity(resolved, chip: str, kubeconfig: str | None) -> Capacity:
    """The live inventory (nodes, NPU pods, deviceinfo ConfigMaps, the device plugin's DaemonSets in kube-system) read
    with the operator's own client."""
    from ascend_hybrid.cli.inputs import InputError
    from ascend_hybrid.contracts.ascend import (
        DEVICE_PLUGIN_NAMESPACE,
        DEVICEINFO_LABEL,
        DEVICEINFO_NAMESPACE,
        device_plugins,
    )
    from ascend_hybrid.controller.kube import Kube
    from ascend_hybrid.gang.inventory import build_inventory

    try:
        kube = Kube.from_environment(kubeconfig)
        nodes, pods = kube.list_nodes(), kube.list_npu_pods()
        infos = kube.list_device_infos(DEVICEINFO_NAMESPACE, f"{DEVICEINFO_LABEL}=true")
        daemonsets = kube.list_page("daemonsets", DEVICE_PLUGIN_NAMESPACE, 500).get("items") or []
    except Exception as error:  # noqa: BLE001 - no cluster to read is one line, not a traceback
        raise InputError(f"--cluster: cannot read the cluster: {str(error).splitlines()[0]}") from None
    return Capacity(build_inventory(nodes, pods, infos, plugins=device_plugins(daemonsets)), chip, resolved)


def register(subparsers) -> None:
    p = subparsers.add_parser("plan", help="choose and explain DP/TP/PP/EP, micro-batches, recompute and sharding")
    p.add_argument("-f", "--file", required=True, help="the AscendHybridJob (its model and training)")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--world", type=int, help="NPUs to plan for (default: the file's world)")
    size.add_argument("--nodes", type=int, help="nodes to plan for: world = nodes × chips per node")
    machine = p.add_mutually_exclusive_group()
    machine.add_argument("--chip", help="built-in hardware profile: 910A, 910B or A3 (default: the job's chip)")
    machine.add_argument("--hardware", help="YAML hardware description (docs/planner.md)")
    p.add_argument("--top", type=int, default=5, help="candidates to show (default 5)")
    p.add_argument("-o", "--output", choices=("table", "json"), default="table")
    p.add_argument("--evaluate", action="store_true", help="score exactly the file's strategy, fitting or not")
    p.add_argument("--cluster", action="store_true",
                   help="plan against the cluster's free NPUs now (kubeconfig), as the operator would: the job's "
                        "world (or --world/--nodes) must fit what the gang placer can place, and the candidates "
                        "placeable now are named")
    p.add_argument("--learn", action="store_true",
                   help="scale predictions by the cluster's observed factor for the hardware profile: the operator's "
                        "ascend-hybrid-observed-efficiency ConfigMap (median steady measured/predicted step of its "
                        "jobs), or --observed FILE")
    p.add_argument("--explain", action="store_true",
                   help="say what the cluster observed on the hardware profile, job by job (the ConfigMap or "
                        "--observed FILE), and whether it scales the predictions (--learn)")
    p.add_argument("--observed", metavar="FILE",
                   help="with --learn/--explain: the observed-efficiency ConfigMap saved as YAML (kubectl get -o "
                        "yaml), instead of reading the cluster")
    p.add_argument("--operator-namespace", default=DEFAULT_OPERATOR_NAMESPACE,
                   help=f"with --learn/--explain: the operator's namespace (default {DEFAULT_OPERATOR_NAMESPACE})")
    p.add_argument("--kubeconfig", help="with --cluster, --learn or --explain: kubeconfig file (default: $KUBECONFIG, "
                                        "then in-cluster)")
    p.add_argument("--svg", help="also write a picture of the best (or evaluated) plan: nodes and chips by stage, "
                                 "TP and EP groups, the 1F1B timeline, memory per stage")
    p.set_defaults(func=cmd_plan)
