"""Published runs as the planner sees them: each one written as an AscendHybridJob, its predicted tokens/s per NPU
next to the published figure, and the error. The calibration of the built-in profiles (hardware.py) and the table
of docs/planner.md come from here; the cases live in tests/support/fixtures/planner/published-runs.yaml.

Pure: the caller reads the YAML and hands over its parsed document.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ascend_hybrid.planner.hardware import Hardware, builtin
from ascend_hybrid.planner.search import evaluate_job
from ascend_hybrid.spec import rules
from ascend_hybrid.spec.resolved import SpecError


@dataclass(frozen=True)
class PublishedRun:
    name: str
    source: str
    published: float  # tokens/s per NPU
    chip: str
    held_out: bool
    job: dict[str, Any]  # the AscendHybridJob body
    needs: str | None = None  # what the run used that the planner does not model: listed, not scored

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> PublishedRun:
        model = {"preset": "custom", **raw["model"]}
        spec = {"parallelism": dict(raw["parallelism"]), "npu": {"chip": raw["chip"]}, "model": model,
                "training": dict(raw["training"])}
        return cls(raw["name"], raw["source"], float(raw["published"]), raw["chip"], bool(raw.get("heldOut")),
                   {"metadata": {"name": raw["name"].replace(".", "-")}, "spec": spec}, raw.get("needs"))


@dataclass(frozen=True)
class Scored:
    run: PublishedRun
    predicted: float | None  # tokens/s per NPU; None when the job cannot be expressed
    fits: bool
    problem: str | None = None  # why it is not scored

    @property
    def error(self) -> float | None:
        """Signed relative error of the prediction: (predicted - published) / published."""
        if self.predicted is None:
            return None
        return (self.predicted - self.run.published) / self.run.published


def runs(document: Mapping[str, Any]) -> list[PublishedRun]:
    return [PublishedRun.of(raw) for raw in document["runs"]]


def score(run: PublishedRun, hardware_of: Callable[[str], Hardware] = builtin) -> Scored:
    if run.needs:
        return Scored(run, None, False, f"not modelled: {run.needs}")
    try:
        resolved = rules.parse(run.job)
    except SpecError as error:
        return Scored(run, None, False, f"not expressible: {error.problems[0]}")
    evaluation = evaluate_job(resolved, hardware_of(run.chip))
    return Scored(run, evaluation.tokens_per_second_per_device, evaluation.fits)


def score_all(document: Mapping[str, Any], hardware_of: Callable[[str], Hardware] = builtin) -> list[Scored]:
    return [score(run, hardware_of) for run in runs(document)]


@dataclass(frozen=True)
class Summary:
    count: int
    median_abs_error: float
    max_abs_error: float
    within_20: int
    fitting: int


def summary(scored: Sequence[Scored]) -> Summary:
    errors = [abs(item.error) for item in scored if item.error is not None]
    if not errors:
        return Summary(0, 0.0, 0.0, 0, 0)
    return Summary(len(errors), statistics.median(errors), max(errors), sum(e <= 0.2 for e in errors),
                   sum(item.fits for item in scored if item.error is not None))


def _degrees(job: Mapping[str, Any]) -> str:
    par = job["spec"]["parallelism"]
    names = {"data": "DP", "tensor": "TP", "pipeline": "PP", "context": "CP"}
    parts = [f"{names[key]}{par[key]}" for key in names if par.get(key, 1) > 1]
    if par.get("pipelineLayers"):
        parts.append("layers " + "/".join(map(str, par["pipelineLayers"])))
    return " ".join(parts) or "1 NPU"


def markdown_table(scored: Sequence[Scored]) -> str:
    """The calibration table of docs/planner.md: case, NPUs and chip, strategy, published, predicted, error."""
    lines = ["| case | set | chip | NPUs | strategy | published tok/s/NPU | predicted | error | fits |",
             "|---|---|---|---|---|---|---|---|---|"]
    for item in scored:
        run = item.run
        par = run.job["spec"]["parallelism"]
        world = par.get("data", 1) * par.get("tensor", 1) * par.get("pipeline", 1) * par.get("context", 1)
        subset = "held out" if run.held_out else "fit"
        relative = item.error
        if item.predicted is None or relative is None:
            predicted, error, fits = "—", item.problem or "", "—"
        else:
            predicted, error = f"{item.predicted:.0f}", f"{100 * relative:+.1f} %"
            fits = "yes" if item.fits else "no"
        lines.append(f"| {run.name} | {subset} | {run.chip} | {world} | {_degrees(run.job)} | {run.published:.0f} | "
                     f"{predicted} | {error} | {fits} |")
    return "\n".join(lines)


def summary_line(name: str, result: Summary) -> str:
    return (f"{name}: {result.count} runs, median |error| {100 * result.median_abs_error:.1f} %, "
            f"largest {100 * result.max_abs_error:.1f} %, {result.within_20} within 20 %, "
            f"{result.fitting} judged to fit")


def document(scored: Sequence[Scored]) -> str:
    """The table and the summary lines docs/planner.md shows: every run, then the fitted, held-out and all runs,
    the 910B and 910A ones apart."""
    subsets = [("fitted", [s for s in scored if not s.run.held_out]), ("held out", [s for s in scored if s.run.held_out]),
               ("all", list(scored)), ("all 910B", [s for s in scored if s.run.chip == "910B"]),
               ("all 910A", [s for s in scored if s.run.chip == "910A"])]
    lines = [markdown_table(scored), ""]
    lines += [f"- {summary_line(name, summary(items))}" for name, items in subsets]
    return "\n".join(lines)
