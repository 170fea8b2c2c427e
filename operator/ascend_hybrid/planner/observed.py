"""What the cluster's own jobs measured, folded into an observed step scale per hardware profile (pure).

A **reading** is one Running job's steady measured step over its unscaled prediction: status.plan.measured's
`steadyStepSeconds` (the steps after the attempt's first WARMUP_STEPS, so graph compilation and warm-up are out),
divided by status.plan.time.stepSeconds ÷ status.plan.observed.stepScale (a plan made with the observed factor is
measured against the prediction it would have had without it; otherwise a job planned with the factor would pull
the factor back to 1).

The **book** holds, per hardware profile, each job's latest reading (at most MAX_JOBS, the most recent). The
operator folds every Running job's reading into it and keeps it in a ConfigMap (controller/observed.py);
`ascend-hybrid plan --learn/--explain` read that ConfigMap. A profile's factor is the median of its book: bounded
by the plausible band, the same whatever order the readings came in, and one outlier among three or more jobs
cannot move it outside the others' range. Predictions scaled by it (`scaled`) are the planner's, corrected by what
this cluster runs at.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from ascend_hybrid.planner.hardware import Hardware

# A job's first steps include graph compilation and warm-up (the real trainer's first step compiles the graph):
# its steady step time counts the steps after these.
WARMUP_STEPS = 20
# Steps past the warm-up before a job's steady figure is read at all: one step is one sample of noise.
MIN_STEADY_STEPS = 5
# Readings outside this band are a broken measurement (a stalled or restarted job), not the hardware.
PLAUSIBLE = (0.05, 20.0)
# Readings kept per profile: the most recent jobs speak for the cluster as it is now.
MAX_JOBS = 50
# The ConfigMap's one data key (a JSON document): profile names need not be valid ConfigMap keys.
DATA_KEY = "observed.json"


class ObservedError(ValueError):
    """A book that cannot be read (one line, naming the key)."""


@dataclass(frozen=True, order=True)
class Reading:
    at: str          # status.utilization.sampledAt (RFC 3339, UTC): later readings of a job replace earlier ones
    job: str         # namespace/name
    profile: str
    ratio: float     # steady measured / unscaled predicted step seconds


# profile → job → (ratio, at)
Book = Mapping[str, Mapping[str, tuple[float, str]]]


@dataclass(frozen=True)
class Observed:
    profile: str
    factor: float                 # median measured / predicted step seconds
    jobs: tuple[str, ...]         # namespace/name of the jobs it comes from
    low: float = 0.0              # the smallest and largest reading
    high: float = 0.0
    updated: str = ""             # the latest reading's time

    @property
    def efficiency(self) -> float:
        """The share of the predicted speed the cluster reaches (1 / factor)."""
        return 1.0 / self.factor

    def describe(self) -> str:
        return (f"observed: {len(self.jobs)} job{'s' if len(self.jobs) != 1 else ''} on {self.profile} "
                f"measure {self.factor:.3g}× the predicted step (median, steps after the first {WARMUP_STEPS}; "
                f"efficiency {self.efficiency:.3g} of predicted)")

    def document(self) -> dict[str, Any]:
        return {"profile": self.profile, "stepScale": round(self.factor, 4), "efficiency": round(self.efficiency, 4),
                "jobs": len(self.jobs), "low": round(self.low, 4), "high": round(self.high, 4),
                "updated": self.updated}


def predicted_step_seconds(plan: Mapping[str, Any]) -> Any:
    """The predicted step seconds of the strategy the job runs now, from status.plan as written (`predicted`)."""
    return predicted((plan.get("running") or {}).get("stepSeconds"), (plan.get("time") or {}).get("stepSeconds"))


def predicted(running: Any, spec: Any) -> Any:
    """Which prediction a job's steps compare with: status.plan.running's while an elastic job runs shrunk (its
    prediction at the smaller data degree), else the spec's (status.plan.time)."""
    return running or spec


def reading_of(namespace: str, name: str, status: Mapping[str, Any]) -> Reading | None:
    """The job's reading, or None while it is not Running, not past its warm-up, or its figure is implausible."""
    plan = status.get("plan") or {}
    measured = plan.get("measured") or {}
    steady, predicted = measured.get("steadyStepSeconds"), predicted_step_seconds(plan)
    profile, at = plan.get("hardware"), (status.get("utilization") or {}).get("sampledAt")
    if status.get("phase") != "Running" or not profile or not isinstance(at, str):
        return None
    if (measured.get("steadySteps") or 0) < MIN_STEADY_STEPS or not _positive(steady) or not _positive(predicted):
        return None
    scale = (plan.get("observed") or {}).get("stepScale", 1.0)
    if not _positive(scale):
        return None
    ratio = steady * scale / predicted
    if not PLAUSIBLE[0] <= ratio <= PLAUSIBLE[1]:
        return None
    return Reading(at, f"{namespace}/{name}", str(profile), round(ratio, 6))


def _positive(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def _plausible(ratio: float) -> bool:
    return _positive(ratio) and PLAUSIBLE[0] <= ratio <= PLAUSIBLE[1]


def fold(book: Book, readings: Iterable[Reading]) -> dict[str, dict[str, tuple[float, str]]]:
    """The book with each reading in: a job's later reading replaces its earlier one (equal times: the larger
    ratio, so any order gives the same book), and each profile keeps its MAX_JOBS most recent jobs."""
    out = {profile: dict(jobs) for profile, jobs in book.items()}
    for reading in readings:
        if not PLAUSIBLE[0] <= reading.ratio <= PLAUSIBLE[1]:
            continue
        jobs = out.setdefault(reading.profile, {})
        old = jobs.get(reading.job)
        if old is None or (reading.at, reading.ratio) > (old[1], old[0]):
            jobs[reading.job] = (reading.ratio, reading.at)
    for profile, jobs in out.items():
        if len(jobs) > MAX_JOBS:
            kept = sorted(jobs.items(), key=lambda item: (item[1][1], item[0]), reverse=True)[:MAX_JOBS]
            out[profile] = dict(kept)
    return out


def observe(book: Book, profile: str) -> Observed | None:
    """The profile's observed factor: the median of its readings; None without any."""
    jobs = book.get(profile) or {}
    if not jobs:
        return None
    ratios = [ratio for ratio, _ in jobs.values()]
    return Observed(profile, statistics.median(ratios), tuple(sorted(jobs)), min(ratios), max(ratios),
                    max(at for _, at in jobs.values()))


def observe_all(book: Book) -> dict[str, Observed]:
    return {profile: seen for profile in book if (seen := observe(book, profile)) is not None}


def scaled(hw: Hardware, observed: Observed | None) -> Hardware:
    """The profile with every predicted step time multiplied by the observed factor."""
    return hw if observed is None else replace(hw, step_scale=hw.step_scale * observed.factor)


def to_data(book: Book) -> dict[str, str]:
    """The ConfigMap's data: each profile's factor (for people and `plan --explain`) and the readings it comes
    from (what the next fold starts from)."""
    document = {}
    for profile in sorted(book):
        seen = observe(book, profile)
        if seen is None:
            continue
        document[profile] = {**seen.document(), "readings": {
            job: {"ratio": ratio, "at": at} for job, (ratio, at) in sorted(book[profile].items())}}
    return {DATA_KEY: json.dumps(document, indent=1, sort_keys=True)}


def from_data(data: Mapping[str, Any] | None) -> dict[str, dict[str, tuple[float, str]]]:
    """The book a ConfigMap's data holds (an absent key: an empty book); ObservedError names what is malformed."""
    text = (data or {}).get(DATA_KEY)
    if text is None:
        return {}
    try:
        document = json.loads(text)
    except (TypeError, ValueError) as error:
        raise ObservedError(f"data.{DATA_KEY}: not JSON ({error})") from None
    if not isinstance(document, dict):
        raise ObservedError(f"data.{DATA_KEY}: expected a mapping of profile → readings")
    book: dict[str, dict[str, tuple[float, str]]] = {}
    for profile, entry in document.items():
        readings = entry.get("readings") if isinstance(entry, dict) else None
        if not isinstance(readings, dict):
            raise ObservedError(f"data.{DATA_KEY}: {profile}.readings: expected a mapping of job → reading")
        for job, reading in readings.items():
            ratio, at = (reading.get("ratio"), reading.get("at")) if isinstance(reading, dict) else (None, None)
            if not isinstance(ratio, int | float) or not _plausible(ratio) or not isinstance(at, str):
                raise ObservedError(f"data.{DATA_KEY}: {profile}.readings.{job}: needs a ratio within "
                                    f"{PLAUSIBLE[0]}–{PLAUSIBLE[1]} and an RFC 3339 time `at`")
            book.setdefault(profile, {})[job] = (float(ratio), at)
    return book
