"""The planner in the job's life (pure): choose an auto job's strategy, score a manual job's own, and compare the
prediction with what the running job measures.

Both write `status.plan` in the shape of one `ascend-hybrid plan -o json` candidate (docs/planner.md) plus what
was considered and rejected. A prediction is made once per `specHash` (what it read: model, training, npu,
parallelism and the hardware profile's figures), so restarts reuse it and a changed spec plans again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ascend_hybrid.planner import explain, observed, search
from ascend_hybrid.planner.explain import CUBE_WARNING
from ascend_hybrid.planner.hardware import GIB, Hardware, HardwareError, builtin
from ascend_hybrid.planner.workload import Workload
from ascend_hybrid.spec import rules
from ascend_hybrid.spec.api import (
    AscendHybridJobStatus,
    EffectiveParallelism,
    MeasuredStep,
    ObservedScale,
    PlanStatus,
    TrainingStatus,
    UtilizationStatus,
    WarmupMark,
)
from ascend_hybrid.spec.conditions import condition, set_condition
from ascend_hybrid.spec.resolved import ResolvedJob, SpecError, resolve, unchosen

# An idle share of a step above this is worth a warning: seed §3.3 (docs/design.md §11) advises m ≥ 4·p
# micro-batches, which keeps the share under (p - 1)/(5p - 1) < 20 %.
IDLE_LIMIT = 0.25
PLAN_KEYS = ("parallelism", "microBatchSize", "recompute", "sequenceParallel", "flashAttention", "optimizerShard",
             "fits", "memory", "time", "tokensPerSecondPerDevice", "mfu", "why", "warnings")


class StrategyError(ValueError):
    """A job the planner cannot plan for (one line, naming the field)."""


@dataclass(frozen=True)
class StrategyFit:
    """Whether a strategy is fit to run, and if not, the condition's reason and message."""

    fits: bool
    reason: str = "Fits"
    message: str = ""


def hardware_for(job: ResolvedJob, profiles: Mapping[str, Hardware]) -> Hardware:
    """The profile named by spec.npu.hardwareProfile, else the cluster's profile for the chip, else the built-in."""
    wanted = job.spec.npu.hardware_profile
    if wanted is not None:
        if wanted not in profiles:
            known = ", ".join(sorted(profiles)) or "none"
            raise StrategyError(f"spec.npu.hardwareProfile={wanted!r}: no such hardware profile (known: {known}; "
                                "the operator's --hardware-profiles file defines them)")
        return profiles[wanted]
    if job.chip in profiles:
        return profiles[job.chip]
    try:
        return builtin(job.chip)
    except HardwareError as error:
        raise StrategyError(f"spec.npu.chip={job.chip}: {error}") from None


def spec_hash(spec: Mapping[str, Any], hw: Hardware) -> str:
    read = {key: spec.get(key) for key in ("parallelism", "model", "training", "npu")}
    read["hardware"] = hw.summary()
    read["refuse"] = (spec.get("runPolicy") or {}).get("refuseUnfitStrategy")
    return hashlib.sha256(json.dumps(read, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _plan_status(candidate: dict, hw: Hardware, hash_: str, source: str, considered: int, rejected: int) -> dict:
    """The planner's candidate as status.plan's document: what it predicts, and what made it."""
    plan = {key: candidate[key] for key in PLAN_KEYS}
    plan.update(source=source, hardware=hw.name, specHash=hash_, considered=considered, rejected=rejected)
    return plan


def choose(job: ResolvedJob, hw: Hardware, hash_: str) -> dict:
    """An auto job's strategy: the planner's best for its world; StrategyError when none fits."""
    try:
        found = search.plan(job, hw, world=job.world_size)
    except search.PlanError as error:
        raise StrategyError(str(error)) from None
    if not found.candidates:
        closest = found.closest
        miss = (f"; the closest ({_degrees(closest.strategy.parallelism())}) needs "
                f"{closest.memory.total / GIB:.1f} of {closest.usable / GIB:.1f} GiB") if closest else ""
        raise StrategyError(f"no strategy for {job.world_size} × {hw.name} fits the model "
                            f"({found.considered} considered){miss}")
    best = explain.candidate_document(found.candidates[0], found.workload, hw)
    return _plan_status(best, hw, hash_, "planned", found.considered, found.rejected.count)


def evaluate(job: ResolvedJob, hw: Hardware, hash_: str) -> tuple[dict, StrategyFit]:
    """A manual job's own strategy scored; when it is unfit, the planner's best alternative and its gain."""
    try:
        evaluation = search.evaluate_job(job, hw)
    except search.PlanError as error:
        raise StrategyError(str(error)) from None
    workload = Workload.from_job(job)
    document = explain.candidate_document(evaluation, workload, hw)
    plan = _plan_status(document, hw, hash_, "evaluated", 1, 0)
    verdict = fit_of(document)
    if not verdict.fits:
        alternative = best_alternative(job, hw, evaluation)
        if alternative is not None:
            plan["alternative"] = alternative
            verdict = StrategyFit(False, verdict.reason, f"{verdict.message}; the planner's best for {job.world_size} × "
                                                     f"{hw.name}: {alternative['summary']}")
    return plan, verdict


def fit_of(candidate: Mapping[str, Any]) -> StrategyFit:
    memory, time = candidate["memory"], candidate["time"]
    if not candidate["fits"]:
        return StrategyFit(False, "PredictedOutOfMemory", f"predicted {memory['totalGiB']} GiB on stage "
                                                      f"{memory['stage']}, above the usable {memory['usableGiB']} GiB")
    if time["bubbleFraction"] > IDLE_LIMIT:
        return StrategyFit(False, "LargePipelineBubble", f"the pipeline idles {time['bubbleFraction']:.1%} of each step "
                                                     f"(> {IDLE_LIMIT:.0%})")
    tensor = (candidate.get("groups") or {}).get("tensor") or {}
    if tensor.get("tier") in ("interNode", "crossRing"):
        where = "nodes" if tensor["tier"] == "interNode" else "HCCS rings"
        return StrategyFit(False, "TensorParallelAcrossNodes", f"TP {candidate['parallelism']['tensor']} spans "
                                                           f"{where}: its all-reduces leave the fast links")
    cube = [text for text in candidate.get("warnings", ()) if text.startswith(CUBE_WARNING)]
    return StrategyFit(True, "Fits", f"predicted {memory['totalGiB']} of {memory['usableGiB']} GiB, "
                                 f"step {time['stepSeconds']} s, idle {time['bubbleFraction']:.1%}"
                                 + "".join(f"; {text}" for text in cube))


def best_alternative(job: ResolvedJob, hw: Hardware, own: search.Evaluation) -> dict | None:
    try:
        found = search.plan(job, hw, world=job.world_size)
    except search.PlanError:
        return None
    if not found.candidates:
        return None
    best = found.candidates[0]
    degrees = best.strategy.parallelism()
    gain = own.time.step / best.time.step if own.fits else None
    flags = [f"recompute {best.strategy.recompute}"] + [name for name, on in (
        ("sequence parallel", best.strategy.sequence_parallel), ("optimizer shard", best.strategy.optimizer_shard))
        if on]
    summary = (f"{_degrees(degrees)}, {', '.join(flags)}, predicted {best.memory.total / GIB:.1f} of "
               f"{best.usable / GIB:.1f} GiB, step {best.time.step:.3g} s")
    if gain is not None:
        summary += f" ({gain:.2f}× faster)"
    return {"parallelism": degrees, "recompute": best.strategy.recompute,
            "sequenceParallel": best.strategy.sequence_parallel, "optimizerShard": best.strategy.optimizer_shard,
            "stepSeconds": round(best.time.step, 4), "totalGiB": round(best.memory.total / GIB, 2),
            "speedup": round(gain, 3) if gain is not None else None, "summary": summary}


def _degrees(degrees: Mapping[str, Any]) -> str:
    text = f"DP {degrees['data']} × TP {degrees['tensor']} × PP {degrees['pipeline']}"
    if degrees.get("context", 1) > 1:
        text += f" × CP {degrees['context']}"
    if degrees.get("expert", 1) > 1:
        text += f", EP {degrees['expert']} {degrees['expertPlacement']}"
    return text + f", {degrees['microBatches']} micro-batches"


def planned(job: ResolvedJob, plan: PlanStatus) -> ResolvedJob:
    """An auto job resolved with its recorded choice; SpecError if the choice breaks a rule (a planner defect)."""
    resolved = resolve(job.name, job.spec, plan)
    broken = rules.broken_rules(resolved)
    if broken:
        raise SpecError([f"status.plan: the recorded strategy breaks a rule: {broken[0]}"])
    return resolved


def measured(plan: PlanStatus, training: TrainingStatus, utilization: UtilizationStatus,
             totals: tuple[float | None, float | None] = (None, None)) -> PlanStatus:
    """status.plan with what the job measures beside what was predicted (stepTimeRatio = measured/predicted); a new
    plan, `plan` left as it was.

    `totals` is the lead pod's cumulative (step seconds, step count) in its process. The first reading at or past
    observed.WARMUP_STEPS steps marks them (`measured.warmupMark`); later readings give `steadyStepSeconds` over the
    steps since, graph compilation and warm-up excluded, and once MIN_STEADY_STEPS of them are in the ratio is
    theirs. Counters that went back (a new process) start a new mark."""
    out = plan.model_copy(deep=True)
    now = MeasuredStep(**{name: value for name, value in (
        ("step_seconds", training.step_seconds), ("tokens_per_second", training.tokens_per_second),
        ("hbm_percent", utilization.hbm_percent)) if value is not None})
    mark, steps, steady = _steady(out.measured.warmup_mark if out.measured is not None else None, *totals)
    if mark is not None:
        now.warmup_mark = mark
    if steady is not None:
        now.steady_steps, now.steady_step_seconds = steps, steady
    out.measured = now
    predicted = predicted_step_seconds(plan)
    seconds = steady if steady is not None and steps >= observed.MIN_STEADY_STEPS else training.step_seconds
    if seconds and predicted:
        out.step_time_ratio = round(seconds / predicted, 3)
    return out


def _steady(mark: WarmupMark | None, total: float | None,
            count: float | None) -> tuple[WarmupMark | None, float, float | None]:
    """The warm-up mark, and the steps and seconds per step since it (None before a step past it)."""
    if total is None or count is None:
        return mark, 0.0, None
    if mark is None or count < mark.steps or total < mark.seconds:
        if count < observed.WARMUP_STEPS:
            return None, 0.0, None
        mark = WarmupMark(steps=count, seconds=total)
    steps = count - mark.steps
    if steps < 1:
        return mark, 0.0, None
    return mark, steps, round((total - mark.seconds) / steps, 4)


def predicted_step_seconds(plan: PlanStatus | None) -> float | None:
    """The predicted step seconds of the strategy the job runs now (observed.predicted: status.plan.running's
    while an elastic job runs shrunk, else the spec's); None without a positive one."""
    if plan is None:
        return None
    value = observed.predicted(plan.running.step_seconds if plan.running is not None else None,
                               (plan.time or {}).get("stepSeconds"))
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def _with_scale(plan: dict, seen: observed.Observed | None) -> PlanStatus:
    """The planner's document as status.plan, with the observed factor it was scaled by."""
    typed = PlanStatus.model_validate(plan)
    if seen is not None:
        typed.observed = ObservedScale(step_scale=round(seen.factor, 4), jobs=len(seen.jobs))
    return typed


def _scale_note(seen: observed.Observed | None) -> str:
    return "" if seen is None else (f"; step times scaled by the observed {seen.factor:.3g}× of {len(seen.jobs)} "
                                    f"job{'s' if len(seen.jobs) != 1 else ''} on {seen.profile}")


@dataclass
class Step:
    """What the strategy step of a reconcile pass decided: the job to run, events to post, or why it fails."""

    resolved: ResolvedJob
    events: list[tuple[str, str, str]]   # (type, reason, message)
    failure: tuple[str, str] | None = None


def with_observed(job: ResolvedJob, hw: Hardware, efficiency: Mapping[str, observed.Observed]
                  ) -> tuple[Hardware, observed.Observed | None]:
    """The profile a prediction uses: scaled by the cluster's observed factor when the job opts in
    (spec.npu.useObservedEfficiency) and the cluster has one for the profile."""
    seen = efficiency.get(hw.name) if job.spec.npu.use_observed_efficiency else None
    return observed.scaled(hw, seen), seen


def step(spec: Mapping[str, Any], job: ResolvedJob, status: AscendHybridJobStatus, profiles: Mapping[str, Hardware],
         now: datetime, generation: int | None, efficiency: Mapping[str, observed.Observed] | None = None) -> Step:
    """Plans an auto job once per spec (or scores a manual job's strategy once per spec), records status.plan,
    status.parallelism and the StrategyFits condition, and returns the job to run.

    The hash is of the unscaled profile: a new observed factor does not plan a running job again (an auto job's
    degrees would change under it); the factor is read when the spec is planned, and recorded."""
    try:
        hw = hardware_for(job, profiles)
    except StrategyError as error:
        return Step(job, [], ("InvalidSpec", str(error)))
    hash_ = spec_hash(spec, hw)
    hw, seen = with_observed(job, hw, efficiency or {})
    recorded = status.plan
    # an auto job whose recorded plan does not choose everything it runs with (written by hand, or by another
    # version of the operator) is planned again rather than failed
    fresh = recorded is None or recorded.spec_hash != hash_ or (job.auto and bool(unchosen(recorded)))
    events: list[tuple[str, str, str]] = []
    if job.auto:
        if fresh:
            try:
                status.plan = plan = _with_scale(choose(job, hw, hash_), seen)
            except StrategyError as error:
                return Step(job, [], ("NoStrategyFits", str(error)))
            degrees = plan.parallelism.model_dump(by_alias=True, exclude_none=True) if plan.parallelism else {}
            chosen = f"{_degrees(degrees)}, recompute {plan.recompute}{_scale_note(seen)}"
            set_condition(status, "StrategyFits", True, "Planned", f"{chosen}: {plan.why}", now, generation)
            events.append(("Normal", "StrategyChosen", f"{chosen} out of {plan.considered} strategies: {plan.why}"))
        if status.plan is None:
            raise ValueError("an auto job's plan is recorded with the spec's hash it was made for")
        try:
            job = planned(job, status.plan)
        except SpecError as error:
            return Step(job, events, ("InvalidPlan", error.problems[0]))
    elif fresh:
        events += scored(job, hw, hash_, seen, status, now, generation)
    status.parallelism = EffectiveParallelism.model_validate(
        {"virtualPipelineStages": job.virtual_pipeline_stages, **job.degrees})
    fits = condition(status, "StrategyFits")
    if (not job.auto and fits is not None and fits.status == "False" and fits.reason != "NotEvaluated"
            and job.spec.run_policy.refuse_unfit_strategy):
        return Step(job, events, (fits.reason, f"{fits.message} (spec.runPolicy.refuseUnfitStrategy is true)"))
    return Step(job, events)


def scored(job: ResolvedJob, hw: Hardware, hash_: str, seen: observed.Observed | None,
           status: AscendHybridJobStatus, now: datetime, generation: int | None) -> list[tuple[str, str, str]]:
    """A manual job's own strategy scored into status.plan and StrategyFits; the event of an unfit one."""
    try:
        plan, verdict = evaluate(job, hw, hash_)
    except StrategyError as error:
        status.plan = None
        set_condition(status, "StrategyFits", False, "NotEvaluated", str(error), now, generation)
        return []
    status.plan = _with_scale(plan, seen)
    set_condition(status, "StrategyFits", verdict.fits, verdict.reason, verdict.message + _scale_note(seen),
                  now, generation)
    return [] if verdict.fits else [("Warning", verdict.reason, verdict.message)]
