"""Every launcher of a job played through its LauncherChannel `<job>-recovery` (the simulated pods run no trainer):
the recovery ladder's tests in tests/faults and tests/integration/test_volcano.py drive the rungs with it."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from support.faults import converge
from support.operator_harness import channel_data, patch_channel, wait_for


class Launchers:
    """Every launcher of a job, played through its LauncherChannel <job>-recovery."""

    def __init__(self, jobs, job: str):
        self.jobs, self.job = jobs, job

    def data(self) -> dict:
        return channel_data(self.jobs.custom, self.jobs.namespace, self.job) or {}

    def generation(self) -> int:
        """The generation the operator wrote; 0 while it wrote none (it writes one for a restart only)."""
        return int(self.data().get("generation") or 0)

    def pods(self) -> dict[str, str]:
        attempt = self.jobs.status(self.job)["attempt"]
        return {p["metadata"]["name"]: p["metadata"]["uid"] for p in self.jobs.pods(self.job, attempt=attempt)
                if not p["metadata"].get("deletionTimestamp")}

    def say(self, reports: dict[str, dict]) -> None:
        moment = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        patch_channel(self.jobs.custom, self.jobs.namespace, self.job, {
            pod: json.dumps({"time": moment, **report}) for pod, report in reports.items()})

    def all(self, generation: int, state: str, **fields) -> None:
        self.say({pod: {"uid": uid, "generation": generation, "state": state, **fields}
                  for pod, uid in self.pods().items()})

    def fail(self, pod: str, generation: int, cause: str = "Unknown") -> None:
        self.say({pod: {"uid": self.pods()[pod], "generation": generation, "state": "Failed", "cause": cause,
                        "rank": 0, "step": 7, "detail": "played by the fault test"}})

    def wait_generation(self, wanted: int, timeout: float = 60) -> None:
        wait_for(lambda: self.generation() >= wanted, timeout, f"rank generation {wanted} of {self.job}",
                 lambda: self.jobs.describe(self.job))


def started(jobs, name: str, pods: int) -> Launchers:
    converge(jobs, name, timeout=120)
    launchers = Launchers(jobs, name)
    launchers.all(0, "Started", resumedFrom=0)  # into the channel the operator made (generation 0)
    wait_for(lambda: len(launchers.pods()) == pods, 30, "the pods")
    return launchers


def ledger(jobs, name: str) -> list[dict]:
    return jobs.status(name).get("recoveries") or []


def recovered(jobs, name: str, count: int = 1) -> bool:
    entries = ledger(jobs, name)
    return len(entries) == count and entries[-1].get("outcome") == "Recovered"
