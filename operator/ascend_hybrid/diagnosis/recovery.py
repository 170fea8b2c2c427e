"""The recovery ladder and its ledger (pure): which rung a failure starts at, when a rung gives way to the next,
and the record of every incident in status.recoveries.

Rungs, finest first (docs/reliability.md, "The recovery ladder"):
  RestartRanks  pods, IPs, chips and rank table kept; every pod's launcher stops its MindSpore processes (pod 0's
                scheduler included) and starts them again from the newest committed checkpoint;
  ReplacePod    only the lost pod is created again, at the same index, on a node that keeps the placement rules
                (its failed node avoided); every other pod restarts its ranks in place;
  RestartGang   every pod deleted and the gang placed again as a new attempt.
A rung gives way to the next when it fails (a second failure while it runs) or passes its timeout; the
cap on in-place recoveries per hour sends a failure straight to RestartGang.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from ascend_hybrid.contracts import untrusted
from ascend_hybrid.contracts.conditions import parse_time, timestamp
from ascend_hybrid.contracts.names import RECOVERY_GENERATION_KEY as GENERATION_KEY
from ascend_hybrid.contracts.names import RECOVERY_WORLD_KEY as WORLD_KEY
from ascend_hybrid.spec.api import MAX_WORLD_SIZE, RecoveryRecord
from ascend_hybrid.spec.api import Recovery as RecoverySpec
from ascend_hybrid.spec.causes import (
    CAUSES,
    FAIL_JOB,
    IGNORE,
    RESTART_AVOIDING_NODE,
    RESTART_JOB,
)
from ascend_hybrid.spec.causes import (
    REPLACE_POD as REPLACE_POD,
)
from ascend_hybrid.spec.causes import (
    RESTART_RANKS as RESTART_RANKS,
)

RESTART_GANG = "RestartGang"
RUNGS = (RESTART_RANKS, REPLACE_POD, RESTART_GANG)  # finest first: escalation moves right
IN_PLACE_RUNGS = frozenset({RESTART_RANKS, REPLACE_POD})  # the gang (its other pods) is kept
# spec.elastic's rungs beside the ladder (reconcile/elastic_steps.py): the gang restarts at a smaller data degree
# (Shrink) or back at the spec's (Grow); like RestartGang, every pod is made again as a new attempt.
SHRINK, GROW = "Shrink", "Grow"
WHOLE_GANG_RUNGS = frozenset({RESTART_GANG, SHRINK, GROW})
LEDGER_SIZE = 32  # status.recoveries keeps this many incidents, the newest last
HOUR = timedelta(hours=1)

# Outcomes of an incident in the ledger.
RECOVERING, RECOVERED, GAVE_UP = "Recovering", "Recovered", "JobFailed"

# The rung a failure starts at when no rule names one: a node, chip or pod lost takes its pod along (ReplacePod);
# a table that never completed or a scheduler Service that moved needs new pods everywhere (RestartGang); a
# software or peer failure (a worker crash, an HCCL timeout, a lost scheduler, an echo) restarts the ranks.
DEFAULT_RUNGS = {
    "NodeNotReady": REPLACE_POD, "ChipUnhealthy": REPLACE_POD, "PodDeleted": REPLACE_POD,
    "RankTableTimeout": RESTART_GANG, "SchedServiceChanged": RESTART_GANG,
    "RankTableRejected": RESTART_GANG,  # HCCL refused the table: only new pods make a new one (it fails by default)
}
# A rule's action names its rung; RestartJob and RestartJobAvoidingNode ask for the whole gang, as they always did.
ACTION_RUNGS = {RESTART_RANKS: RESTART_RANKS, REPLACE_POD: REPLACE_POD, RESTART_JOB: RESTART_GANG,
                RESTART_AVOIDING_NODE: RESTART_GANG}


def default_rung(cause: str) -> str:
    return DEFAULT_RUNGS.get(cause, RESTART_RANKS)


def rung_of(action: str, cause: str, by_rule: bool) -> str | None:
    """The rung a verdict starts at: a rule's action names it (Ignore keeps the cause's default); without a rule,
    the cause's default. None for FailJob."""
    if action == FAIL_JOB:
        return None
    if by_rule and action != IGNORE:
        return ACTION_RUNGS[action]
    return default_rung(cause)


def coarser(first: str, second: str) -> str:
    return RUNGS[max(RUNGS.index(first), RUNGS.index(second))]


def escalate(rung: str) -> str:
    """The next rung; RestartGang is the last and gives way to nothing."""
    return RUNGS[min(RUNGS.index(rung) + 1, len(RUNGS) - 1)]


@dataclass(frozen=True)
class Bounds:
    """spec.runPolicy.recovery, as plain data."""

    finest_rung: str = RESTART_RANKS
    restart_ranks_timeout: float = 300.0
    replace_pod_timeout: float = 600.0
    max_in_place_per_hour: int = 6

    @classmethod
    def of(cls, recovery: RecoverySpec) -> Bounds:
        return cls(recovery.finest_rung, float(recovery.restart_ranks_timeout_seconds),
                   float(recovery.replace_pod_timeout_seconds), recovery.max_in_place_per_hour)

    def timeout(self, rung: str) -> float | None:
        return {RESTART_RANKS: self.restart_ranks_timeout, REPLACE_POD: self.replace_pod_timeout}.get(rung)


@dataclass(frozen=True)
class Start:
    rung: str
    why: str


def in_place_within_hour(ledger: Iterable[RecoveryRecord], now: datetime) -> int:
    """Incidents of the last hour whose recovery started at a rung that kept the gang."""
    count = 0
    for record in ledger:
        detected = parse_time(record.detected)
        if detected is not None and now - detected < HOUR and record.rungs and record.rungs[0] in IN_PLACE_RUNGS:
            count += 1
    return count


def starting_rung(wanted: str, why: str, bounds: Bounds, ledger: Sequence[RecoveryRecord], now: datetime,
                  in_place_ready: bool, in_place_reason: str = "") -> Start:
    """The rung this failure's recovery starts at: the one the policy wants, no finer than spec's finestRung,
    RestartGang once the in-place cap of the hour is used up or where the pods cannot restart in place."""
    rung = coarser(wanted, bounds.finest_rung)
    if rung != wanted:
        why = f"{why}; no finer than spec.runPolicy.recovery.finestRung={bounds.finest_rung}"
    if rung in IN_PLACE_RUNGS:
        used = in_place_within_hour(ledger, now)
        if used >= bounds.max_in_place_per_hour:
            return Start(RESTART_GANG, f"{why}; {used} in-place recoveries in the last hour reach "
                                       f"spec.runPolicy.recovery.maxInPlacePerHour={bounds.max_in_place_per_hour}")
        if not in_place_ready:
            return Start(RESTART_GANG, f"{why}; {in_place_reason or 'the pods cannot restart their ranks in place'}")
    return Start(rung, why)


def timed_out(rung: str, decided: datetime | None, bounds: Bounds, now: datetime) -> float | None:
    """Seconds past the rung's timeout (≥ 0) once it has run out, else None; RestartGang has none."""
    limit = bounds.timeout(rung)
    if limit is None or decided is None:
        return None
    over = (now - decided).total_seconds() - limit
    return over if over >= 0 else None


def seconds_left(rung: str, decided: datetime | None, bounds: Bounds, now: datetime) -> float | None:
    limit = bounds.timeout(rung)
    if limit is None or decided is None:
        return None
    return max(0.0, limit - (now - decided).total_seconds())


# -- the ledger -------------------------------------------------------------------------------------------------
def open_incident(ledger: list[RecoveryRecord], *, cause: str, rung: str, why: str, detected: datetime,
                  decided: datetime, attempt: int, counted: bool, pod: str | None = None, node: str | None = None,
                  rank: int | None = None, step: int | None = None) -> RecoveryRecord:
    """Append a new incident (outcome Recovering) and keep the last LEDGER_SIZE; the record, to be updated."""
    given = {"cause": cause, "pod": pod, "node": node, "rank": rank, "step": step, "attempt": attempt,
             "rungs": [rung], "why": why, "outcome": RECOVERING, "counted": counted,
             "detected": timestamp(min(detected, decided)), "decided": timestamp(decided)}
    ledger.append(RecoveryRecord(**{key: value for key, value in given.items() if value is not None}))
    del ledger[:-LEDGER_SIZE]
    return ledger[-1]


def current_incident(ledger: Sequence[RecoveryRecord]) -> RecoveryRecord | None:
    """The incident still being recovered, if any (only the newest can be)."""
    return ledger[-1] if ledger and ledger[-1].outcome == RECOVERING else None


def climb(record: RecoveryRecord, rung: str, why: str, now: datetime) -> None:
    """The incident moves to a coarser rung: its timestamps after `decided` belong to the rung that gave way."""
    record.rungs = [*record.rungs, rung]
    record.why = why
    record.decided = timestamp(now)
    record.pods_ready = record.ranks_relaunched = record.first_step_after = None
    record.resumed_from_step = record.steps_redone = None
    record.seconds = None


MILESTONES = frozenset({"pods_ready", "ranks_relaunched"})


def mark(record: RecoveryRecord, milestone: str, moment: datetime) -> None:
    """Set a milestone once (pods_ready, ranks_relaunched): the first observation is the one kept."""
    if milestone not in MILESTONES:
        raise ValueError(f"{milestone!r} is not a milestone of an incident: {sorted(MILESTONES)}")
    if getattr(record, milestone) is None:
        setattr(record, milestone, timestamp(moment))


def resumed(record: RecoveryRecord, first_step: int, moment: datetime, resumed_from: int | None = None) -> None:
    """Training stepped again after the recovery: the incident is Recovered by its last rung; the steps redone are
    those between the checkpoint it resumed from and the step the fault hit."""
    record.first_step_after = timestamp(moment)
    record.outcome = RECOVERED
    record.recovered_by = record.rungs[-1]
    start = resumed_from if resumed_from is not None else first_step - 1
    record.resumed_from_step = start
    if record.step is not None:
        record.steps_redone = max(0, record.step - start)
    detected = parse_time(record.detected)
    if detected is not None:
        record.seconds = round(max(0.0, (moment - detected).total_seconds()), 3)


def gave_up(record: RecoveryRecord, why: str) -> None:
    record.outcome = GAVE_UP
    record.why = why


# -- the launchers' reports -------------------------------------------------------------------------------------
# Each pod's launcher (trainer/ascend_hybrid_trainer/control.py) writes one key of LauncherChannel <job>-recovery,
# its pod's name, with a JSON report; the operator writes the key GENERATION_KEY.
STARTED, STEPPING, FAILED = "Started", "Stepping", "Failed"
REPORT_STATES = (STARTED, STEPPING, FAILED)


@dataclass(frozen=True)
class LauncherReport:
    """What one pod's launcher last said: its ranks of `generation` started, stepped, or failed."""

    uid: str
    generation: int
    state: str
    time: datetime | None = None
    resumed_from: int | None = None     # the checkpoint step its ranks resumed from (Started, Stepping)
    step: int | None = None             # the first step after (Stepping) or the step that failed (Failed)
    cause: str | None = None            # Failed: the pod's cause, as its termination record would say
    rank: int | None = None
    detail: str = ""


# Bounds of a report (contracts/untrusted.py): what a launcher can mean, no more. A report is small (its detail is
# cut at 1 KiB by the trainer); steps are within what JSON numbers hold exactly.
REPORT_LIMIT = 8 * 1024
MAX_GENERATION = 2 ** 31 - 1
MAX_STEP = 2 ** 53
MAX_DETAIL = 1024


def _report_cause(value: object) -> str | None:
    """A known cause (spec/causes.py) as is; any other text becomes Unknown: a launcher's word becomes a metric
    label and a failure-policy match, so only the closed set gets through."""
    if value is None:
        return None
    return value if isinstance(value, str) and value in CAUSES else "Unknown"


def parse_report(text: str | None) -> LauncherReport:
    """A launcher's report; raises untrusted.Rejected (a ValueError naming why) for anything that is not one: over
    REPORT_LIMIT bytes, not a flat JSON object, an unknown state, a generation, step, checkpoint or rank out of
    range, a time without its zone. A cause outside the known ones is read as Unknown."""
    raw = untrusted.json_value(text or "", REPORT_LIMIT, "report")
    if not isinstance(raw, dict):
        raise untrusted.Rejected(untrusted.MALFORMED, "report is not a JSON object")
    if raw.get("state") not in REPORT_STATES:
        raise untrusted.Rejected(untrusted.MALFORMED, f"report state {str(raw.get('state'))[:32]!r} is not one of "
                                                      f"{', '.join(REPORT_STATES)}")
    uid = raw.get("uid")
    if not isinstance(uid, str) or not 0 < len(uid) <= 128:
        raise untrusted.Rejected(untrusted.MALFORMED, "report uid is not a pod UID")
    moment = untrusted.aware_time(raw["time"], "report time") if raw.get("time") is not None else None
    detail = raw.get("detail")
    return LauncherReport(
        uid, untrusted.integer(raw.get("generation"), 0, MAX_GENERATION, "report generation"), raw["state"],
        moment, untrusted.optional_integer(raw.get("resumedFrom"), 0, MAX_STEP, "report resumedFrom"),
        untrusted.optional_integer(raw.get("step"), 0, MAX_STEP, "report step"), _report_cause(raw.get("cause")),
        untrusted.optional_integer(raw.get("rank"), 0, MAX_WORLD_SIZE - 1, "report rank"),
        detail[:MAX_DETAIL] if isinstance(detail, str) else "")


def report_or_none(text: str | None) -> LauncherReport | None:
    """parse_report, with None for what it rejects (the shell counts those when the channel changes)."""
    try:
        return parse_report(text)
    except untrusted.Rejected:
        return None


def read_channel(data: Mapping[str, str] | None) -> tuple[int | None, dict[str, LauncherReport]]:
    """The generation the channel holds (None when it or the key is missing) and the reports by pod name."""
    if data is None:
        return None, {}
    raw = data.get(GENERATION_KEY)
    generation = int(raw) if isinstance(raw, str) and raw.isdecimal() and len(raw) <= 10 else None
    if generation is not None and generation > MAX_GENERATION:
        generation = None
    reports = {key: report for key, value in data.items() if key not in (GENERATION_KEY, WORLD_KEY)
               and (report := report_or_none(value)) is not None}
    return generation, reports


STALE = "not-current-attempt"  # a well-formed report of a pod that is not one of the attempt's members


@dataclass(frozen=True)
class IgnoredReport:
    """A report the operator will not read: malformed (`reason` an untrusted reason) or STALE."""

    pod: str
    reason: str
    message: str


def screen_reports(before: Mapping[str, str] | None, after: Mapping[str, str],
                   members: Mapping[str, str]) -> list[IgnoredReport]:
    """The reports that changed from `before` to `after` and are ignored: malformed ones, and well-formed ones of a
    pod that is not a member of the job's current attempt (`members`: pod name → UID) — a pod of an earlier
    attempt, or a writer that names a pod it is not. Each change is screened once, when it arrives."""
    ignored = []
    for key, value in after.items():
        if key in (GENERATION_KEY, WORLD_KEY) or (before or {}).get(key) == value:
            continue
        try:
            report = parse_report(value)
        except untrusted.Rejected as rejected:
            ignored.append(IgnoredReport(key[:253], rejected.reason, f"the report of {key[:253]}: {rejected}"))
            continue
        if members.get(key) != report.uid:
            ignored.append(IgnoredReport(key[:253], STALE, f"report of {key[:253]} (uid {report.uid[:64]}) is not of "
                                                           "a pod of the current attempt"))
    return ignored
