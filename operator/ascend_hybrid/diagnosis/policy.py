"""What a failure leads to (pure): spec.runPolicy.failurePolicy.rules, in order, the first match wins; the default
table of causes.py when none matches. JobSet-style, on causes as well as exit codes and pod conditions.

The verdict also says whether the restart counts against backoffLimit (not for node or chip faults, the
disruptions, nor for Ignore), which node to avoid (the first failed rank's, for RestartJobAvoidingNode, never for
a failure of the job itself), and the rung of the recovery ladder the recovery starts at (recovery.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import cast

from ascend_hybrid.diagnosis.failures import Failure
from ascend_hybrid.diagnosis.recovery import rung_of
from ascend_hybrid.spec.api import FailurePolicyRule
from ascend_hybrid.spec.causes import (
    FAIL_JOB,
    FAULT_CAUSES,
    IGNORE,
    REPLACE_POD,
    RESTART_AVOIDING_NODE,
    SOFTWARE_CAUSES,
    default_action,
)


@dataclass(frozen=True)
class FailureVerdict:
    action: str
    why: str                      # "rule 2 (exitCodes 42)" or "the default for HCCLExecTimeout"
    counts: bool = True           # against backoffLimit
    disruption: bool = False      # a node or chip fault: counted in status.disruptions instead
    avoid: tuple[str, ...] = ()   # nodes the next attempts do not use
    rung: str | None = None       # where the recovery ladder starts (recovery.RUNGS); None for FailJob

    @property
    def fails(self) -> bool:
        return self.action == FAIL_JOB


def matches(rule: FailurePolicyRule, failure: Failure) -> str | None:
    """What of the rule matched the failure (for the message), or None."""
    # Cause and FailureAction are Enum(..., type=str): their members are str, which mypy's functional Enum misses.
    if rule.causes is not None and failure.cause in cast("list[str]", rule.causes):
        return f"causes {failure.cause}"
    if rule.exit_codes is not None and failure.exit_code is not None and failure.exit_code in rule.exit_codes:
        return f"exitCodes {failure.exit_code}"
    if rule.pod_conditions is not None:
        matched = sorted(set(rule.pod_conditions) & failure.conditions)
        if matched:
            return f"podConditions {matched[0]}"
    return None


def judge(rules: Iterable[FailurePolicyRule], failure: Failure) -> FailureVerdict:
    """The verdict of the failure policy `rules` (api.FailurePolicyRule, in order) on `failure`."""
    for number, rule in enumerate(rules):
        matched = matches(rule, failure)
        if matched is not None:  # the action's member is a str (see matches)
            return _verdict(cast(str, rule.action), f"spec.runPolicy.failurePolicy.rules[{number}] ({matched})",
                            failure, by_rule=True)
    return _verdict(default_action(failure.cause), f"the default for {failure.cause}", failure, by_rule=False)


def _verdict(action: str, why: str, failure: Failure, by_rule: bool) -> FailureVerdict:
    disruption = failure.cause in FAULT_CAUSES and action != FAIL_JOB
    avoid: tuple[str, ...] = ()
    # ReplacePod moves the pod off a node the cause suspects (the default table's RestartJobAvoidingNode causes).
    suspects_node = action == RESTART_AVOIDING_NODE or (
        action == REPLACE_POD and default_action(failure.cause) == RESTART_AVOIDING_NODE)
    if suspects_node and failure.node and failure.cause not in SOFTWARE_CAUSES:
        avoid = (failure.node,)
    counts = action != FAIL_JOB and not disruption and action != IGNORE
    return FailureVerdict(action, why, counts=counts, disruption=disruption, avoid=avoid,
                   rung=rung_of(action, failure.cause, by_rule))


COUNTERS = ("restarts", "disruptions", "ignoredFailures")


def counters_after(before: Mapping[str, int | None], verdict: FailureVerdict) -> tuple[dict[str, int], int]:
    """status.restarts / disruptions / ignoredFailures (`before`: the counters by their JSON names) after this
    verdict's restart, and the restarts that count against backoffLimit (all restarts but the disruptions and the
    ignored failures)."""
    counters = {key: int(before.get(key) or 0) for key in COUNTERS}
    counters["restarts"] += 1
    if verdict.disruption:
        counters["disruptions"] += 1
    elif not verdict.counts:
        counters["ignoredFailures"] += 1
    return counters, counters["restarts"] - counters["disruptions"] - counters["ignoredFailures"]


def counted_text(verdict: FailureVerdict, counted: int, limit: int) -> str:
    return ("a disruption, not counted against backoffLimit" if verdict.disruption
            else "ignored, not counted against backoffLimit" if not verdict.counts else f"{counted}/{limit}")


def restart_text(what: str, verdict: FailureVerdict, attempt: int, counted: int, limit: int) -> str:
    kind = counted_text(verdict, counted, limit)
    avoiding = f", without node {', '.join(verdict.avoid)}" if verdict.avoid else ""
    return f"{what}; {verdict.action} by {verdict.why}: restarting the whole gang as attempt {attempt}{avoiding} ({kind})"
