"""How many trainer workers the process runtime lets run at once (pure).

A simulated cluster advertises hundreds of NPUs, but each real worker is a MindSpore process (~0.5-1 GB, a
busy core). Starting more of them than the machine holds only thrashes it, and a gang that cannot all train
then times out. So a pod starts only while the workers of every running pod plus its own stay within the
capacity (default 2 per core); otherwise it waits, Pending, and its status and events say why.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

DEFAULT_WORKERS_PER_CORE = 2
WORKERS_VARIABLE = "MS_LOCAL_WORKER"  # design §8: the trainer workers the launcher starts in the pod
WAITING_REASON = "ProcessRuntimeFull"


def default_capacity(cores: int | None = None, per_core: int = DEFAULT_WORKERS_PER_CORE) -> int:
    return max(1, (cores or os.cpu_count() or 1) * per_core)


def requested_workers(container: dict) -> int:
    """The workers a pod's container will start: MS_LOCAL_WORKER when it is a literal number, else 1 (any
    other command is one process)."""
    for entry in container.get("env") or []:
        if entry.get("name") == WORKERS_VARIABLE and "value" in entry:
            try:
                return max(1, int(entry["value"]))
            except (TypeError, ValueError):
                return 1
    return 1


@dataclass(frozen=True)
class Admission:
    admitted: bool
    message: str = ""


def admit(needed: int, in_use: int, capacity: int) -> Admission:
    if in_use + needed <= capacity:
        return Admission(True)
    if needed > capacity:
        return Admission(False, f"needs {needed} trainer workers, more than the process runtime runs at once on "
                                f"this machine ({capacity}); it cannot start here")
    return Admission(False, f"needs {needed} trainer workers; {in_use} of the {capacity} this machine runs at once "
                            f"are busy; it starts when others end")
