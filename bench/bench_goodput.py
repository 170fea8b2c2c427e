"""Goodput under a slow node, a slow link and hard failures, with the operator's mitigation against report-only
against no fault at all: a 128-pod job (DP 32 × PP 4 × TP 8, 8 ranks a pod, 1 024 ranks) on 132 nodes (4 spare).

The operator's reconcile core runs every pass as its shell runs it (`decide()` on what is observed, its actions
carried out), on a simulated cluster and a simulated clock: scaled time, so two hours of training take a minute or
two of CPU. Its launchers are simulated: they report on the launchers' channel as the bundled launcher does
(Started, Stepping, Failed), restart their ranks at a new rank generation and save at the interval (or the step)
the channel says. Its trainers are simulated too (devcluster/telemetry/coupled.py, what the simulated cluster
serves): a synchronous job steps at the pace of its slowest node and link, each rank's compute and wait exported
with ±3 % jitter, read every 15 s as the operator's telemetry would.

The schedule (simulated minutes): node-017 computes 1.5× slower from 10 to 40; the link node-040 ↔ node-041
carries a quarter of its bandwidth from 55 to 70; a rank crashes (RestartRanks) about once an hour (Poisson,
seeded by the round). The no-fault run has the jitter only: it is also the healthy noisy run, where nothing may be
named or done. What the simulation assumes of the hardware, in the constants below: a 2 s step (80 % compute),
a 10 s blocking save, 20 s for a pod to start and 45 s for the ranks to start, load the checkpoint and compile.

    .venv/bin/python bench/bench_goodput.py [--rounds 3] [--minutes 120] [--svg docs/goodput-bench.svg]

Never asserts; prints each run's figures, the goals met or not, and `goodput ratio median: R (rounds: …)`
(mitigation over no fault).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from ascend_hybrid.contracts.conditions import timestamp
from ascend_hybrid.devcluster.telemetry import coupled
from ascend_hybrid.diagnosis.recovery import LauncherReport
from ascend_hybrid.gang.placement import Placement
from ascend_hybrid.monitoring.progress import RankReading, Sample
from ascend_hybrid.reconcile.actions import (
    CreatePods,
    DeletePods,
    PlaceReplacement,
    PostEvent,
    SignalLaunchers,
    WriteRankTable,
)
from ascend_hybrid.reconcile.decision import decide
from ascend_hybrid.reconcile.placement_record import record_placement, record_replacement
from ascend_hybrid.reconcile.state import Observed, applied
from ascend_hybrid.spec.rules import parse
from ascend_hybrid_trainer.checkpoint import Interval
from ascend_hybrid_trainer.config import DEFAULT_CHECKPOINT_EVERY
from benchkit import ratio_line, say
from support.builders import JobBuilder, NodeBuilder, PodBuilder

T0 = datetime(2026, 12, 8, tzinfo=UTC)
JOB, NAMESPACE = "bench", "bench"
PODS, SPARES, PER_POD = 128, 4, 8
BASE_STEP = 2.0            # seconds a healthy step takes
SAVE_SECONDS = 10.0        # a blocking checkpoint save
POD_START = 20.0           # a new pod: scheduled, started, its launcher running
RANKS_START = 45.0         # a rank generation: MindSpore's start, the checkpoint loaded, the graph compiled
TELEMETRY_SECONDS = 15.0
PASS_SECONDS = 5.0         # a pass at least this often (sooner when the operator asks to be requeued)
SLOW_NODE, SLOW_FROM, SLOW_TO, SLOW_FACTOR = "node-017", 10 * 60, 40 * 60, 1.5
LINK, LINK_FROM, LINK_TO, LINK_FACTOR = ("node-040", "node-041"), 55 * 60, 70 * 60, 4.0
FAILURES_PER_HOUR = 1.0
TOKENS_PER_STEP = 1024 * 4096  # global batch × sequence length


def node_name(index: int) -> str:
    return f"node-{index:03d}"


@dataclass
class Run:
    """One simulated run and what it measured."""

    label: str
    faults: bool
    action: str
    seed: int
    minutes: int
    slow_node: bool = True                # False: the faults without the slow node (the best a mitigation reaches)
    clock: float = 0.0
    job: dict = field(default_factory=dict)
    pods: dict[int, dict] = field(default_factory=dict)
    pending_pods: dict[int, float] = field(default_factory=dict)  # index → when it runs
    rank_table: dict | None = None
    generation: int = 0                   # the launchers' (the channel's)
    world: str | None = None
    checkpoint: str | None = None         # the channel's checkpoint key
    interval: Interval = field(default_factory=lambda: Interval(DEFAULT_CHECKPOINT_EVERY))  # the trainer process's
    reports: dict[str, LauncherReport] = field(default_factory=dict)
    progress: float = 0.0                 # steps done, fractional
    base: int = 0                         # the step the trainer process started from
    committed: int = 0
    high: int = 0
    down_until: float | None = 0.0        # ranks start until then; None: waiting for pods
    saving_until: float = 0.0
    saving: bool = False                  # a save in progress: counted when it ends, as the trainer times it
    saves: int = 0
    save_seconds: float = 0.0
    failed: bool = False
    sample: Sample | None = None
    next_sample: float = TELEMETRY_SECONDS
    next_pass: float = 0.0
    failures: list[float] = field(default_factory=list)
    events: list[tuple[float, str, str]] = field(default_factory=list)
    timeline: list[tuple[float, int, float | None]] = field(default_factory=list)  # (minute, new steps, goodput)
    fine: list[tuple[int, int]] = field(default_factory=list)  # (second, highest step trained), every 10 s
    uid_counter: int = 0

    def __post_init__(self) -> None:
        rng = random.Random(self.seed)
        moment = 0.0
        while self.faults:
            moment += rng.expovariate(FAILURES_PER_HOUR / 3600)
            if moment >= self.minutes * 60:
                break
            self.failures.append(moment)
        self.rng = rng

    # -- the cluster -------------------------------------------------------------------------------------------
    def now(self) -> datetime:
        return T0 + timedelta(seconds=self.clock)

    def faults_at(self) -> dict[str, dict[str, str]]:
        """The nodes' fault annotations, as `dev-cluster fault` writes them, for the schedule."""
        if not self.faults:
            return {}
        epoch = T0.timestamp()
        links = coupled.links_text({LINK[1]: ((epoch + LINK_FROM, LINK_FACTOR), (epoch + LINK_TO, 1.0))})
        faults = {LINK[0]: {coupled.SLOW_LINKS_ANNOTATION: links}}
        if self.slow_node:
            compute = coupled.history_text(((epoch + SLOW_FROM, SLOW_FACTOR), (epoch + SLOW_TO, 1.0)))
            faults[SLOW_NODE] = {coupled.SLOW_COMPUTE_ANNOTATION: compute}
        return faults

    def coupling(self) -> coupled.Job:
        compute, links = coupled.node_histories(self.faults_at())
        return coupled.Job({pod["spec"]["nodeName"] for pod in self.pods.values()}, compute, links)

    def pod(self, index: int, node: str) -> dict:
        self.uid_counter += 1
        made = PodBuilder(JOB, index, namespace=NAMESPACE).created(self.now()).running(node=node) \
            .devices(range(PER_POD)).uid(f"uid-{self.uid_counter}")
        return made.build()

    def nodes(self) -> dict[str, dict]:
        return {node_name(i): NodeBuilder(node_name(i)).chip("910B").rack(f"rack-{i // 32}").build()
                for i in range(PODS + SPARES)}

    # -- the operator's passes ---------------------------------------------------------------------------------
    def observe(self) -> Observed:
        return Observed(job=self.job, resolved=parse(self.job), spec_problems=(), pods=tuple(self.pods.values()),
                        rank_table=self.rank_table or {"status": "initializing"}, children_ready=True,
                        sched_ip="127.32.0.10", nodes=self.node_objects, now=self.now(), telemetry=self.sample,
                        launcher_generation=self.generation, launcher_world=self.world, launchers=dict(self.reports),
                        launcher_checkpoint=self.checkpoint,
                        in_flight=frozenset(f"{JOB}-a1-{index}" for index in self.pending_pods))

    def operate(self) -> None:
        decision = decide(self.observe())
        self.job["status"] = decision.status
        again = False
        for action in decision.actions:
            match action:
                case PostEvent():
                    self.events.append((self.clock, action.reason, action.message))
                case SignalLaunchers():
                    self.world, self.checkpoint = action.world, action.checkpoint
                    if action.generation > self.generation:
                        self.generation = action.generation
                        self.restart_ranks()
                    self.tell_interval()
                case WriteRankTable():
                    self.rank_table = action.table
                case DeletePods():
                    for name in action.names:
                        index = next(i for i, pod in self.pods.items() if pod["metadata"]["name"] == name)
                        del self.pods[index]
                case PlaceReplacement():
                    used = {pod["spec"]["nodeName"] for pod in self.pods.values()}
                    free = [name for name in self.node_objects if name not in used
                            and name not in action.request.excluded_nodes]
                    placed = Placement(ok=True, nodes=(free[0],)) if free else Placement(ok=False, reason="none free")
                    self.job["status"] = applied(record_replacement, self.job["status"], action.index, placed,
                                                 self.now()).status
                    again = True
                case CreatePods():
                    for item in action.pods:
                        index = int(item.manifest["metadata"]["labels"]["hybrid.ascend.dev/pod-index"])
                        self.pending_pods.setdefault(index, self.clock + POD_START)
                        self.pending_nodes[index] = item.node or ""
        self.next_pass = self.clock + (min(PASS_SECONDS, decision.requeue_after or PASS_SECONDS) if not again else 0.0)

    # -- the launchers and the trainer ---------------------------------------------------------------------------
    def restart_ranks(self) -> None:
        """A new rank generation: every launcher stops its ranks and starts them again from the checkpoint."""
        self.progress = self.base = self.committed
        self.saves, self.save_seconds, self.saving = 0, 0.0, False  # the new processes' own counters
        self.interval = Interval(DEFAULT_CHECKPOINT_EVERY)  # a new process: the launcher's file is read afresh
        self.down_until = None if len(self.pods) < PODS or self.pending_pods else self.clock + RANKS_START
        self.failed = False
        self.report_all("Started")

    def report_all(self, state: str, **fields) -> None:
        for pod in self.pods.values():
            self.reports[pod["metadata"]["name"]] = LauncherReport(
                pod["metadata"]["uid"], self.generation, state, self.now(), resumed_from=self.committed, **fields)

    def tell_interval(self) -> None:
        """The launcher's interval file, as the trainer reads it (checkpoint.Interval): the channel's interval from
        its fromStep on, and the saveAt step."""
        if self.checkpoint:
            self.interval.told(json.loads(self.checkpoint))

    def due_save(self, step: int) -> bool:
        return self.interval.due(step)

    def tick(self, seconds: float) -> None:
        for index, ready in list(self.pending_pods.items()):
            if self.clock >= ready:
                del self.pending_pods[index]
                self.pods[index] = self.pod(index, self.pending_nodes.pop(index))
                if not self.pending_pods and len(self.pods) == PODS and self.down_until is None:
                    self.down_until = self.clock + RANKS_START
                    self.report_all("Started")
        stepping = not self.failed and self.down_until is not None and self.clock >= self.down_until
        if self.failures and self.clock >= self.failures[0] and not stepping:
            self.failures[0] = self.clock + 60  # a crash hits running ranks: a minute later
        elif self.failures and self.clock >= self.failures[0]:
            self.failures.pop(0)
            victim = self.pods[self.rng.choice(sorted(self.pods))]
            self.failed = True
            self.reports[victim["metadata"]["name"]] = LauncherReport(
                victim["metadata"]["uid"], self.generation, "Failed", self.now(), step=int(self.progress) + 1,
                cause="Unknown", rank=0, detail="a rank crashed")
        if self.saving and self.clock >= self.saving_until:
            self.saving, self.saves, self.save_seconds = False, self.saves + 1, self.save_seconds + SAVE_SECONDS
        if self.failed or self.down_until is None or self.clock < self.down_until or self.clock < self.saving_until:
            return
        if self.down_until and self.clock - seconds < self.down_until <= self.clock:
            self.report_all("Stepping", step=self.committed + 1)
        compute, link = self.coupling().factors(T0.timestamp() + self.clock)
        jitter = 1 + coupled.JITTER * (2 * self.rng.random() - 1)
        before = int(self.progress)
        self.progress += seconds / (BASE_STEP * coupled.step_factor(compute, link) * jitter)
        for step in range(before + 1, int(self.progress) + 1):
            self.high = max(self.high, step)
            if self.due_save(step):
                self.committed = step
                self.saving, self.saving_until = True, self.clock + SAVE_SECONDS
                self.progress = float(step)
                break

    def read(self) -> Sample:
        if self.failed or self.down_until is None or self.clock < self.down_until:
            return Sample("trainer", self.now(), error="the trainers do not answer (their ranks restart)")
        job = self.coupling()
        moment = T0.timestamp() + self.clock
        ranks = []
        for index, pod in self.pods.items():
            node = pod["spec"]["nodeName"]
            for local in range(PER_POD):
                rank = index * PER_POD + local
                step, compute, wait = job.rank(f"{JOB}/{self.generation}", rank, node, BASE_STEP, moment)
                ranks.append(RankReading(pod["metadata"]["name"], rank, step, compute, wait))
        step = int(self.progress)
        return Sample("trainer", self.now(), step=step, step_count=step - self.base, step_seconds=BASE_STEP,
                      checkpoint_seconds_sum=self.save_seconds, checkpoint_count=self.saves,
                      ranks=tuple(sorted(ranks, key=lambda r: r.rank)))

    # -- the run -----------------------------------------------------------------------------------------------
    def start(self) -> None:
        spec = (JobBuilder(JOB, namespace=NAMESPACE).uid("job-uid").created(timestamp(T0))
                .parallelism(data=32, tensor=8, pipeline=4).per_pod(PER_POD)
                .section("training", steps=10**6, globalBatchSize=1024, checkpoint={"claimName": "ckpt",
                                                                                    "everySteps": "auto"})
                .section("runPolicy", slowness={"action": self.action}))
        self.job = spec.status({}).build()
        self.node_objects = self.nodes()
        self.pending_nodes: dict[int, str] = {}
        status = decide(Observed(job=self.job, resolved=parse(self.job), spec_problems=(), pods=(), rank_table=None,
                                 children_ready=True, sched_ip="127.32.0.10", nodes=self.node_objects,
                                 now=self.now())).status
        nodes = tuple(node_name(i) for i in range(PODS))
        self.job["status"] = applied(record_placement, status, parse(self.job), Placement(ok=True, nodes=nodes),
                                     self.now(), 1, {n: "rack-0" for n in nodes}).status
        self.pods = {index: self.pod(index, nodes[index]) for index in range(PODS)}
        self.down_until = RANKS_START
        self.report_all("Started")

    def run(self) -> Run:
        self.start()
        minute_steps, last_minute = self.high, 0
        while self.clock < self.minutes * 60:
            if self.clock >= self.next_pass:
                self.operate()
            if self.clock >= self.next_sample:
                self.sample = self.read()
                self.next_sample = self.clock + TELEMETRY_SECONDS
            self.tick(1.0)
            self.clock += 1.0
            if int(self.clock) % 10 == 0:
                self.fine.append((int(self.clock), self.high))
            if int(self.clock // 60) > last_minute:
                last_minute = int(self.clock // 60)
                self.timeline.append((last_minute, self.high - minute_steps, self.job["status"].get("goodput")))
                minute_steps = self.high
        return self


# -- what each run measured ------------------------------------------------------------------------------------
def named(run: Run) -> list[tuple[float, str]]:
    """(time, node) of each SlowNode event."""
    found = []
    for moment, reason, message in run.events:
        if reason == "SlowNode" and message.startswith("node "):
            found.append((moment, message.split()[1]))
    return found


THROUGHPUT_WINDOW = 30  # seconds: throughput is the new steps of the last 30 s (read every 10 s)


def window_steps(run: Run) -> list[tuple[int, int]]:
    """(end, new steps in the THROUGHPUT_WINDOW seconds before it), every 10 s."""
    marks = dict(run.fine)
    return [(moment, high - marks[moment - THROUGHPUT_WINDOW]) for moment, high in run.fine
            if moment - THROUGHPUT_WINDOW in marks]


def healthy_throughput(run: Run) -> float:
    """The healthy run's usual throughput: the median of its windows after its first 5 minutes (a window with a
    save is the odd one out)."""
    return statistics.median(steps for moment, steps in window_steps(run) if moment > 300)


def recovered_at(run: Run, after: float, healthy: float) -> float | None:
    """The end of the first window wholly after `after` in which the job trained at least 95 % of the healthy
    run's usual throughput."""
    for moment, steps in window_steps(run):
        if moment - THROUGHPUT_WINDOW >= after and steps >= 0.95 * healthy:
            return float(moment)
    return None


def summary(run: Run, healthy: float) -> dict:
    status = run.job["status"]
    account = status.get("goodputAccount") or {}
    found = named(run)
    figures = {"goodput": status.get("goodput"), "tokens": run.high * TOKENS_PER_STEP, "steps": run.high,
               "buckets": account.get("seconds"), "incidents": [(r["cause"], r.get("recoveredBy"))
                                                                for r in status.get("recoveries") or ()],
               "named": found, "interval": (status.get("checkpointInterval") or {}).get("everySteps"),
               "straggling": sum(reason == "Straggling" for _, reason, _ in run.events)}
    if run.faults and found:
        first = next((moment for moment, node in found if moment >= SLOW_FROM), None)
        figures["detection_seconds"] = None if first is None else first - SLOW_FROM
        figures["wrong_nodes"] = sorted({node for _, node in found if node != SLOW_NODE or not run.slow_node})
        if first is not None and run.action != "Report":
            back = recovered_at(run, first, healthy)
            figures["back_seconds"] = None if back is None else back - first
    return figures


GOODPUT_FLOOR = 0.5  # the goodput panel shows 0.5 … 1


def svg(runs: dict[str, Run], path: Path) -> None:
    """Goodput and tokens over time, one line per run."""
    width, height, left, top = 720, 420, 60, 30
    plot_w, plot_h = width - left - 20, (height - top - 60) / 2
    colors = {"no fault": "#2a9d8f", "report only": "#e76f51", "mitigation": "#264653", "no slow node": "#8d99ae"}
    minutes = max(len(run.timeline) for run in runs.values())
    tokens = max(sum(steps for _, steps, _ in run.timeline) for run in runs.values()) or 1
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
             f'font-size="11"><rect width="100%" height="100%" fill="white"/>']
    for row, (title, top_y) in enumerate((("goodput (status.goodput)", top), ("tokens trained (×10⁹)",
                                                                              top + plot_h + 40))):
        parts.append(f'<text x="{left}" y="{top_y - 8}" font-weight="bold">{title}</text>')
        parts.append(f'<rect x="{left}" y="{top_y}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#999"/>')
        for shade_from, shade_to, what in ((SLOW_FROM, SLOW_TO, "node 1.5×"), (LINK_FROM, LINK_TO, "link ¼")):
            x0, x1 = left + plot_w * shade_from / 60 / minutes, left + plot_w * shade_to / 60 / minutes
            parts.append(f'<rect x="{x0:.1f}" y="{top_y}" width="{x1 - x0:.1f}" height="{plot_h}" fill="#f4a26133"/>')
            if row == 0:
                parts.append(f'<text x="{x0 + 3:.1f}" y="{top_y + 12}" fill="#b5651d">{what}</text>')
        for label, run in runs.items():
            points, total = [], 0
            for minute, steps, goodput in run.timeline:
                total += steps
                value = min(max(((goodput or 0.0) - GOODPUT_FLOOR) / (1 - GOODPUT_FLOOR), 0.0), 1.0) if row == 0 \
                    else total / tokens
                points.append(f"{left + plot_w * minute / minutes:.1f},{top_y + plot_h * (1 - value):.1f}")
            parts.append(f'<polyline fill="none" stroke="{colors.get(label, "#000")}" stroke-width="1.5" '
                         f'points="{" ".join(points)}"/>')
        scale = "1.0" if row == 0 else f"{tokens * TOKENS_PER_STEP / 1e9:.0f}"
        parts.append(f'<text x="{left - 6}" y="{top_y + 4}" text-anchor="end">{scale}</text>')
        floor = f"{GOODPUT_FLOOR:g}" if row == 0 else "0"
        parts.append(f'<text x="{left - 6}" y="{top_y + plot_h}" text-anchor="end">{floor}</text>')
    base = height - 12
    parts.append(f'<text x="{left}" y="{base - 14}">minutes: 0 … {minutes}</text>')
    for offset, label in enumerate(runs):
        parts.append(f'<text x="{left + 150 + offset * 130}" y="{base}" fill="{colors.get(label, "#000")}">— {label}'
                     f'</text>')
    parts.append("</svg>")
    path.write_text("\n".join(parts) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--minutes", type=int, default=120)
    parser.add_argument("--svg", type=Path, help="write the first round's goodput and tokens over time there")
    args = parser.parse_args()
    ratios, reachable, rows = [], [], []
    for round_index in range(args.rounds):
        seed = 20261208 + round_index
        runs = {}
        for label, faults, action, slow_node in (("no fault", False, "Report", False),
                                                 ("report only", True, "Report", True),
                                                 ("mitigation", True, "Replace", True),
                                                 ("no slow node", True, "Report", False)):
            started = time.process_time()
            runs[label] = Run(label, faults, action, seed, args.minutes, slow_node).run()
            say(f"round {round_index + 1}, {label}: {time.process_time() - started:.0f} s of CPU")
        healthy = healthy_throughput(runs["no fault"])
        figures = {label: summary(run, healthy) for label, run in runs.items()}
        rows.append(figures)
        ratio = (figures["mitigation"]["goodput"] or 0) / (figures["no fault"]["goodput"] or 1)
        ratios.append(ratio)
        reachable.append((figures["no slow node"]["goodput"] or 0) / (figures["no fault"]["goodput"] or 1))
        for label, found in figures.items():
            print(f"round {round_index + 1} {label}: goodput {found['goodput']}, {found['steps']} steps, "
                  f"interval {found['interval']}, buckets {found['buckets']}, incidents {found['incidents']}, "
                  f"SlowNode {[(round(t), n) for t, n in found['named']][:4]}"
                  + (f", detected {found.get('detection_seconds')} s after the onset, wrong nodes "
                     f"{found.get('wrong_nodes')}" if label in ("report only", "mitigation") else "")
                  + (f", throughput back to ≥ 95 % {found.get('back_seconds')} s after detection"
                     if label == "mitigation" else ""))
        if round_index == 0 and args.svg:
            svg(runs, args.svg)
            say(f"wrote {args.svg}")
    mitigation = [row["mitigation"] for row in rows]
    checked = mitigation + [row[label] for row in rows for label in ("report only", "no slow node")]
    quiet = all(not row["no fault"]["named"] and all(cause != "SlowNode" for cause, _ in row["no fault"]["incidents"])
                for row in rows)
    detections = [m.get("detection_seconds") for m in mitigation]
    backs = [m.get("back_seconds") for m in mitigation]
    print("goals: slow node named ≤ 60 s after onset: "
          f"{'met' if all(d is not None and d <= 60 for d in detections) else 'NOT met'} ({detections}); "
          f"no wrong node: {'met' if all(not m.get('wrong_nodes') for m in checked) else 'NOT met'}; "
          f"throughput ≥ 95 % within 3 min of detection: "
          f"{'met' if all(b is not None and b <= 180 for b in backs) else 'NOT met'} ({backs}); "
          f"goodput with mitigation ≥ 0.9 of no fault: {'met' if statistics.median(ratios) >= 0.9 else 'NOT met'} "
          f"(median {statistics.median(ratios):.3f}); "
          f"no action in the healthy noisy run: {'met' if quiet else 'NOT met'}; Straggling warnings in it: "
          f"{[row['no fault']['straggling'] for row in rows]}")
    report_only = [row["report only"]["goodput"] / row["no fault"]["goodput"] for row in rows]
    print(ratio_line("report-only goodput ratio", report_only))
    print(ratio_line("goodput ratio", ratios))
    print(ratio_line("reachable goodput ratio (the same faults without the slow node, over no fault)", reachable))
    print(ratio_line("mitigation over reachable", [r / best for r, best in zip(ratios, reachable, strict=True)]))


if __name__ == "__main__":
    main()
