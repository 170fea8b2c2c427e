"""Goodput as a time account (pure): the wall time since the job first started, split into buckets that add up to
it, and status.goodput = the productive bucket over that wall time.

Buckets (status.goodputAccount.seconds):
  productive           new steps (never trained before) at the job's healthy pace
  slowSteps            what new steps took beyond the healthy pace (a straggler, a slow link, a throttled chip)
  redoneSteps          steps trained again after a recovery resumed from an older checkpoint
  checkpointSaves      the trainer's checkpoint saves (it times them: ascend_trainer_checkpoint_seconds)
  startsAndRestarts    pods starting, MindSpore's start and compilation, a stalled or failed attempt until the
                       next first step
  waitingForPlacement  a new attempt waiting for nodes (after a whole-gang restart, a shrink that waits)

The account is folded pass by pass (`fold`): the interval since `accountedAt` goes to the bucket the job's state
says — waiting for placement, starting, or running — and a running interval is split by the lead pod's trainer
process between two telemetry readings: its steps (new, or redone up to the highest step ever trained), at the
pace measured over the interval, less the seconds its saves took. Every second goes to exactly one bucket, so the
buckets add up to `accountedAt − since` by construction; the part after `accountedAt` (less than one telemetry
interval) is attributed by the next reading.

The healthy pace is a robust estimate from the job's own steps, as Google's goodput library makes its ideal step
time: the step-weighted mean of the per-step times at most median + 3·MAD, over a histogram of the job's stepping
at its current world size in windows of 32 steps (or a minute and 8 steps) (1 % bins of the logarithm, so a week of
steps is a few dozen numbers; the MAD at least one step's share of a window, as readings count whole steps). Until
MIN_PACE_INTERVALS windows are in, running intervals wait in `pending` and are split once the pace is known.

The account is the status model (GoodputAccount): `fold` takes the pass's and returns a new one, the argument left as
it was. A field the account has not reached yet stays unset, so it stays out of the published status.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from ascend_hybrid.contracts.conditions import parse_time, timestamp
from ascend_hybrid.spec.api import GoodputAccount, GoodputPending, GoodputProcess, GoodputSeconds, GoodputWindow

PRODUCTIVE, SLOW, REDONE, SAVES, STARTS, PLACEMENT = (
    "productive", "slowSteps", "redoneSteps", "checkpointSaves", "startsAndRestarts", "waitingForPlacement")
BUCKETS = (PRODUCTIVE, SLOW, REDONE, SAVES, STARTS, PLACEMENT)
BADPUT = BUCKETS[1:]
# Each bucket's field of GoodputSeconds (the buckets are named by their JSON names, as the metric's labels are).
BUCKET_FIELD = {info.alias or name: name for name, info in GoodputSeconds.model_fields.items()}

# What the job was doing during an interval (its state at the end of the pass that accounts it).
WAITING, STARTING, RUNNING = "waiting", "starting", "running"
MODES = (WAITING, STARTING, RUNNING)

BINS_PER_UNIT = 100        # histogram bins per unit of ln(seconds): each bin is 1 % wide
MAX_BINS = 200             # a pace histogram keeps at most this many bins (the least-filled go first)
MIN_PACE_INTERVALS = 3     # pace windows before the healthy pace is trusted
# A pace observation spans PACE_WINDOW_STEPS steps, or PACE_WINDOW_SECONDS of stepping and at least MIN_WINDOW_STEPS:
# a reading sees whole steps, so an interval of 7.5 steps' time reads 7 or 8 (±7 %); a window of 32 reads ±3 %.
PACE_WINDOW_STEPS = 32
PACE_WINDOW_SECONDS = 60.0
MIN_WINDOW_STEPS = 8
MAX_PENDING = 16           # running intervals held while the pace is unknown; beyond, each is its own pace
MAD_FLOOR = 0.01           # the MAD is at least 1 % of the median: a perfectly steady job keeps its median
OUTLIER_MADS = 3.0
DIGITS = 3


@dataclass(frozen=True)
class Reading:
    """One telemetry reading of the lead pod's trainer process (ascend_trainer_* series of pod 0)."""

    at: datetime
    step: int                  # the last completed step
    steps_done: int            # steps this process completed (the step-time histogram's count)
    save_seconds: float = 0.0  # seconds this process spent saving checkpoints (cumulative)
    saves: int = 0


def precise(moment: datetime) -> str:
    """RFC 3339 to the millisecond: the account's edges must not lose the seconds' fractions a pass ends on."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def all_buckets(seconds: Mapping[str, float]) -> GoodputSeconds:
    """Every bucket, set (so each is published, 0 included), from seconds by bucket (a missing one is 0)."""
    return GoodputSeconds(**{BUCKET_FIELD[bucket]: float(seconds.get(bucket, 0.0)) for bucket in BUCKETS})


def buckets(account: GoodputAccount | None) -> dict[str, float]:
    """The account's seconds by bucket (each bucket named, 0 where it has none)."""
    seconds = account.seconds if account is not None else None
    return {bucket: float(getattr(seconds, BUCKET_FIELD[bucket])) if seconds is not None else 0.0
            for bucket in BUCKETS}


def new_account(since: datetime) -> GoodputAccount:
    return GoodputAccount(since=timestamp(since), accounted_at=precise(since), seconds=all_buckets({}),
                          steps_kept=0, steps_redone=0)


def _clear(account: GoodputAccount, *names: str) -> None:
    """The fields back to their defaults and unset: gone from the published account, as if never written."""
    for name in names:
        setattr(account, name, GoodputAccount.model_fields[name].get_default(call_default_factory=True))
        account.model_fields_set.discard(name)


# -- the healthy pace ---------------------------------------------------------------------------------------------
def _bin(seconds: float) -> int:
    return round(math.log(seconds) * BINS_PER_UNIT)


def _center(key: int) -> float:
    return math.exp(key / BINS_PER_UNIT)


def _weighted_median(pairs: list[tuple[float, int]]) -> float:
    ordered = sorted(pairs)
    half = sum(weight for _, weight in ordered) / 2
    running = 0
    for value, weight in ordered:
        running += weight
        if running >= half:
            return value
    return ordered[-1][0]


def healthy_pace(pace: Mapping[str, int], quantum: float = MAD_FLOOR) -> float | None:
    """The step-weighted mean of the per-step times at most median + 3·MAD; None for an empty histogram. The MAD is
    at least `quantum` of the median: the relative error of one whole step in a window (readings count whole steps,
    so a steady job's windows read one step more or less)."""
    pairs = [(_center(int(key)), int(weight)) for key, weight in pace.items() if int(weight) > 0]
    if not pairs:
        return None
    median = _weighted_median(pairs)
    mad = max(_weighted_median([(abs(value - median), weight) for value, weight in pairs]),
              max(MAD_FLOOR, quantum) * median)
    kept = [(value, weight) for value, weight in pairs if value <= median + OUTLIER_MADS * mad]
    return sum(value * weight for value, weight in kept) / sum(weight for _, weight in kept)


def _observe_pace(account: GoodputAccount, seconds: float, steps: int) -> None:
    """A same-process interval's stepping time joins the open window; a full window becomes one observation of the
    pace (weighted by its steps)."""
    if seconds <= 0 or steps <= 0:
        return
    if account.window is None:
        account.window = GoodputWindow(seconds=0.0, steps=0)
    window = account.window
    window.seconds = round(window.seconds + seconds, DIGITS)
    window.steps = window.steps + steps
    if window.steps < PACE_WINDOW_STEPS and (window.seconds < PACE_WINDOW_SECONDS or window.steps < MIN_WINDOW_STEPS):
        return
    per_step, steps = window.seconds / window.steps, window.steps
    _clear(account, "window")
    account.pace_steps = (account.pace_steps or 0) + steps
    pace = dict(account.pace)
    key = str(_bin(per_step))
    pace[key] = pace.get(key, 0) + steps
    if len(pace) > MAX_BINS:
        for drop in sorted(pace, key=lambda k: (pace[k], k))[:len(pace) - MAX_BINS]:
            del pace[drop]
    account.pace = pace
    account.pace_intervals = (account.pace_intervals or 0) + 1


def _healthy(account: GoodputAccount) -> float | None:
    """The healthy pace once enough same-process intervals are in, else None (intervals then wait)."""
    windows = account.pace_intervals or 0
    if windows < MIN_PACE_INTERVALS:
        return None
    return healthy_pace(account.pace, windows / max(account.pace_steps or 0, 1))


# -- attributing seconds ---------------------------------------------------------------------------------------------
def _add(account: GoodputAccount, bucket: str, seconds: float) -> None:
    if account.seconds is None:
        account.seconds = all_buckets({})
    name = BUCKET_FIELD[bucket]
    setattr(account.seconds, name, getattr(account.seconds, name) + max(0.0, seconds))


def _steps(account: GoodputAccount, first: int, last: int, seconds: float, redone: int) -> None:
    """Steps first+1..last took `seconds`, the first `redone` of them trained before: the new ones' seconds are
    kept together and split into productive and slow by the healthy pace when the account is published, so the
    split follows the best estimate of the pace, not the one of the moment."""
    count = last - first
    if count <= 0:
        _add(account, STARTS, seconds)
        return
    per_step = seconds / count
    new = count - redone
    _add(account, REDONE, redone * per_step)
    account.stepping_seconds = (account.stepping_seconds or 0.0) + new * per_step
    account.steps_kept = (account.steps_kept or 0) + new
    account.steps_redone = (account.steps_redone or 0) + redone


def _interval(account: GoodputAccount, first: int, last: int, seconds: float, first_of_process: bool, redone: int,
              healthy: float) -> None:
    """A running interval whose pace is known: the first one of a process holds its start (MindSpore's start,
    compilation, the first step's warm-up), so its steps are charged at most the healthy pace and the rest is
    start-up."""
    if first_of_process:
        stepping = min(seconds, max(last - first, 0) * healthy)
        _add(account, STARTS, seconds - stepping)
        seconds = stepping
    _steps(account, first, last, seconds, redone)


def _settle_pending(account: GoodputAccount) -> None:
    """Intervals held while the pace was unknown, split now that it is known (or each at its own pace when too
    many wait)."""
    pending = account.pending
    healthy = _healthy(account)
    if not pending or (healthy is None and len(pending) <= MAX_PENDING):
        return
    for item in pending:
        own = item.seconds / (item.to - item.from_) if item.to > item.from_ else 0.0
        _interval(account, item.from_, item.to, item.seconds, item.start, item.redone,
                  healthy if healthy is not None else own)
    _clear(account, "pending")


def _running(account: GoodputAccount, first: int, last: int, seconds: float, first_of_process: bool) -> None:
    """A running interval: its redone steps are those up to the highest step ever trained, as of now."""
    high = account.high_water if account.high_water is not None else first
    redone = min(max(high - first, 0), max(last - first, 0))
    account.high_water = max(high, last)
    healthy = _healthy(account)
    if healthy is None or account.pending:
        account.pending = [*account.pending, GoodputPending(from_=first, to=last, seconds=round(seconds, DIGITS),
                                                            start=first_of_process, redone=redone)]
        _settle_pending(account)
        return
    _interval(account, first, last, seconds, first_of_process, redone, healthy)


# -- the fold --------------------------------------------------------------------------------------------------------
def _same_process(process: GoodputProcess | None, epoch: str, reading: Reading) -> bool:
    return (process is not None and process.epoch == epoch and process.base == reading.step - reading.steps_done
            and reading.steps_done >= process.done)


def _fold_reading(account: GoodputAccount, reading: Reading, epoch: str, accounted: datetime) -> bool:
    """A running interval up to a reading; False when it says nothing new (the interval stays unaccounted)."""
    seconds = (reading.at - accounted).total_seconds()
    if seconds <= 0:
        return False
    process = account.process
    base = reading.step - reading.steps_done
    if process is not None and _same_process(process, epoch, reading):
        done = reading.steps_done - process.done
        saving = min(max(reading.save_seconds - process.save_seconds, 0.0), seconds)
        if done == 0:
            if process.done > 0:
                return False  # a stall: the steps that end it carry it
            _add(account, STARTS, seconds)  # still compiling its first step
        else:
            _add(account, SAVES, saving)
            stepping = seconds - saving
            _observe_pace(account, stepping, done)
            _running(account, base + process.done, reading.step, stepping, False)
    else:
        saving = min(max(reading.save_seconds, 0.0), seconds)
        _new_process(account, base)
        if reading.steps_done == 0:
            _add(account, STARTS, seconds)
        else:
            _add(account, SAVES, saving)
            _running(account, base, reading.step, seconds - saving, True)
    _snapshot(account, reading, epoch)
    return True


def _new_process(account: GoodputAccount, base: int) -> None:
    if account.high_water is None:
        account.high_water = base  # a job started on an existing checkpoint: its steps are new
    _unseen_steps(account, base)


def _unseen_steps(account: GoodputAccount, base: int) -> None:
    """A step known trained (a process resumed from its checkpoint, or a failure hit it) beyond the highest step
    read: the steps between were trained after the last reading, and their time went with the run's end
    (startsAndRestarts); it is moved to them at the healthy pace."""
    high = account.high_water
    if high is None or base <= high:
        return
    healthy = _healthy(account)
    started = buckets(account)[STARTS]
    moved = min((base - high) * healthy, started) if healthy else 0.0
    if account.seconds is None:
        account.seconds = all_buckets({})
    account.seconds.starts_and_restarts = max(0.0, started - moved)
    account.stepping_seconds = (account.stepping_seconds or 0.0) + moved
    account.steps_kept = (account.steps_kept or 0) + base - high
    account.high_water = base


def _snapshot(account: GoodputAccount, reading: Reading, epoch: str) -> None:
    """The trainer process as last read: the next reading of it counts from here."""
    base = reading.step - reading.steps_done
    account.high_water = max(account.high_water if account.high_water is not None else base, reading.step)
    account.process = GoodputProcess(epoch=epoch, base=base, done=reading.steps_done,
                                     save_seconds=round(reading.save_seconds, DIGITS), saves=reading.saves)


def fold(account: GoodputAccount | None, *, since: datetime, now: datetime, mode: str, epoch: str,
         reading: Reading | None, world: int, predicted_step_seconds: float | None = None,
         trained_to: int | None = None) -> GoodputAccount:
    """The account after one pass (a new one; `account` is left as it was). `mode` is the job's state now (WAITING,
    STARTING or RUNNING); the time since `accountedAt` belongs to the state the account last saw, and is attributed
    when that state ends (or, while running, up to each new reading of the lead trainer), so a pass that changes
    nothing else writes nothing. `epoch` names the rank generation (attempt/generation): a new one is a new trainer
    process. A change of world size starts the healthy pace afresh. `trained_to` is a step known trained (the step
    a failure hit, from the ledger): the steps up to it, trained after the last reading, count as redone when they
    are trained again."""
    if mode not in MODES:
        raise ValueError(f"mode {mode!r}: one of {', '.join(MODES)}")
    state = account.model_copy(deep=True) if account is not None and account.model_fields_set else new_account(since)
    if (state.world or world) != world:
        _clear(state, "pace", "pace_intervals", "pace_steps", "window")
    state.world = world
    if trained_to is not None and state.high_water is not None:
        _unseen_steps(state, trained_to)
    accounted = parse_time(state.accounted_at) or since
    previous = state.mode or STARTING
    if previous == RUNNING:
        if reading is not None and _fold_reading(state, reading, epoch, accounted):
            accounted = reading.at
        if mode != RUNNING and now > accounted:  # the run ended since the last reading: lost to the restart
            _add(state, STARTS, (now - accounted).total_seconds())
            accounted = now
    elif mode != previous and now > accounted:
        _add(state, PLACEMENT if previous == WAITING else STARTS, (now - accounted).total_seconds())
        accounted = now
        if mode == RUNNING and reading is not None:  # the steps it made until now went with the start
            if not _same_process(state.process, epoch, reading):
                _new_process(state, reading.step - reading.steps_done)
            _snapshot(state, reading, epoch)
    state.mode = mode
    state.accounted_at = precise(accounted)
    return _published(state, since, accounted, predicted_step_seconds)


def _published(state: GoodputAccount, since: datetime, accounted: datetime,
               predicted: float | None) -> GoodputAccount:
    wall = max((accounted - since).total_seconds(), 0.0)
    state.wall_seconds = round(wall, DIGITS)
    healthy = _healthy(state)
    stepping = state.stepping_seconds or 0.0
    productive = min(stepping, (state.steps_kept or 0) * healthy) if healthy is not None else stepping
    held = sum(item.seconds for item in state.pending)  # provisional until the pace is known
    seconds = {**buckets(state), PRODUCTIVE: productive + held, SLOW: stepping - productive}
    state.stepping_seconds = round(stepping, DIGITS)
    state.seconds = all_buckets({bucket: round(value, DIGITS) for bucket, value in seconds.items()})
    if healthy is not None:
        state.healthy_step_seconds = round(healthy, 6)
    else:
        _clear(state, "healthy_step_seconds")
    if predicted:
        state.predicted_step_seconds = round(predicted, 6)
    return state


def goodput(account: GoodputAccount | None) -> float | None:
    """status.goodput: the productive seconds over the wall time accounted; None until the healthy pace is known."""
    if account is None or account.pending or account.healthy_step_seconds is None:
        return None
    wall = account.wall_seconds or 0.0
    if wall <= 0:
        return None
    return round(min(1.0, buckets(account)[PRODUCTIVE] / wall), 4)


def unaccounted(account: GoodputAccount) -> float:
    """wallSeconds less the sum of the buckets (0 up to rounding: what the 1 % contract bounds)."""
    return (account.wall_seconds or 0.0) - sum(buckets(account).values())
