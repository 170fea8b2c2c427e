"""The names of failure causes and failure-policy actions, and what the operator does by default (pure data).

The trainer reports the first ten in its termination message (docs/troubleshooting.md, "Causes and exit codes");
the last four only the operator can see. The CRD's `spec.runPolicy.failurePolicy.rules[].causes` takes these.
"""

from __future__ import annotations

TRAINER_CAUSES = ("HCCLConnectTimeout", "HCCLExecTimeout", "DeviceOutOfMemory", "NumericalDivergence",
                  "RankTableTimeout", "RankTableRejected", "ConfigError", "DataError", "PeerFailed", "Unknown")
OPERATOR_CAUSES = ("NodeNotReady", "ChipUnhealthy", "PodDeleted", "SchedServiceChanged")
CAUSES = TRAINER_CAUSES + OPERATOR_CAUSES

# Restarts for these are disruptions (JobSet's and Kueue's word): the node or chip broke, not the job, so they
# are counted in status.disruptions and never against backoffLimit.
FAULT_CAUSES = frozenset({"NodeNotReady", "ChipUnhealthy"})
# The job's own failures: a node is never avoided for them, whatever a rule says (a restart elsewhere fails alike).
SOFTWARE_CAUSES = frozenset({"ConfigError", "DataError"})
ECHO_CAUSE = "PeerFailed"  # a rank that ended because another rank died first

FAIL_JOB, RESTART_JOB, RESTART_AVOIDING_NODE, IGNORE = "FailJob", "RestartJob", "RestartJobAvoidingNode", "Ignore"
# The recovery ladder's finer rungs as failure-policy actions (recovery.py): start the recovery at that rung.
RESTART_RANKS, REPLACE_POD = "RestartRanks", "ReplacePod"
ACTIONS = (FAIL_JOB, RESTART_JOB, RESTART_AVOIDING_NODE, IGNORE, RESTART_RANKS, REPLACE_POD)

# When no rule matches. FailJob at once where a restart cannot help (the same spec fails the same way);
# RestartJobAvoidingNode where the node of the first failed rank is the likely culprit; RestartJob otherwise.
DEFAULT_ACTIONS = {
    "ConfigError": FAIL_JOB, "DataError": FAIL_JOB, "DeviceOutOfMemory": FAIL_JOB, "NumericalDivergence": FAIL_JOB,
    # the next attempt's table is built the same way from the same device plugin: it would be refused again
    "RankTableRejected": FAIL_JOB,
    "HCCLConnectTimeout": RESTART_AVOIDING_NODE, "HCCLExecTimeout": RESTART_AVOIDING_NODE,
    "NodeNotReady": RESTART_AVOIDING_NODE, "ChipUnhealthy": RESTART_AVOIDING_NODE,
}


def default_action(cause: str) -> str:
    return DEFAULT_ACTIONS.get(cause, RESTART_JOB)
