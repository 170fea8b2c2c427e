"""What the cluster's own jobs measured, folded into the planner's predictions (`plan --learn`).

Each Running job's status carries the planner's prediction and the measured step time (status.plan.stepTimeRatio =
measured / predicted step seconds, docs/planner.md). The ratios of the jobs planned with one hardware profile,
warm-up and graph-compilation steps excluded, give that profile's observed factor: the median, so one odd job does
not move it. Predictions scaled by it are the planner's, corrected by what this cluster runs at. Pure: the caller
lists the jobs.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from ascend_hybrid.planner.hardware import Hardware

# A job's first steps include graph compilation and warm-up (the real trainer's first step compiles the graph):
# its ratio counts once it has trained this many steps.
WARMUP_STEPS = 20
# Ratios outside this band are read as a broken measurement (a stalled or restarted job), not as the hardware.
PLAUSIBLE = (0.05, 20.0)


@dataclass(frozen=True)
class Observed:
    profile: str
    factor: float  # median measured / predicted step seconds
    jobs: tuple[str, ...]  # namespace/name of the jobs it comes from

    def describe(self) -> str:
        return (f"observed: {len(self.jobs)} running job{'s' if len(self.jobs) != 1 else ''} on {self.profile} "
                f"measure {self.factor:.3g}× the predicted step (median, steps ≥ {WARMUP_STEPS}); predictions "
                "below are scaled by it")


def job_ratio(job: Mapping) -> tuple[str, str, float] | None:
    """(profile, namespace/name, ratio) of a Running job past its warm-up, else None."""
    status = job.get("status") or {}
    plan, training = status.get("plan") or {}, status.get("training") or {}
    ratio, profile = plan.get("stepTimeRatio"), plan.get("hardware")
    if status.get("phase") != "Running" or not profile or not isinstance(ratio, (int, float)):
        return None
    if (training.get("step") or 0) < WARMUP_STEPS or not PLAUSIBLE[0] <= ratio <= PLAUSIBLE[1]:
        return None
    metadata = job.get("metadata") or {}
    return profile, f"{metadata.get('namespace', '')}/{metadata.get('name', '')}", float(ratio)


def observe(jobs: Iterable[Mapping], profile: str) -> Observed | None:
    found = [(name, ratio) for item in map(job_ratio, jobs) if item and item[0] == profile
             for name, ratio in [item[1:]]]
    if not found:
        return None
    return Observed(profile, statistics.median(ratio for _, ratio in found), tuple(sorted(name for name, _ in found)))


def scaled(hw: Hardware, observed: Observed | None) -> Hardware:
    """The profile with every predicted step time multiplied by the observed factor."""
    return hw if observed is None else replace(hw, step_scale=hw.step_scale * observed.factor)
