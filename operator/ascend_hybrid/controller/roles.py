"""What each part of the shell needs of the controller, as one narrow Protocol per part: placing.py, children.py
and the two watches take these, the controller (loop.py) satisfies them all, and none of the parts imports
loop.py — so the parts form no import cycle with the loop that calls them, not even for the type checker."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Protocol

from ascend_hybrid.controller.kube import Kube
from ascend_hybrid.controller.records import Indexes, JobKey, JobRecord
from ascend_hybrid.controller.settings import OperatorSettings
from ascend_hybrid.controller.workqueue import WorkQueue


class Jobs(Protocol):
    """The job records and the stores the watches fill."""

    jobs: dict[JobKey, JobRecord]

    @property
    def indexes(self) -> Indexes: ...

    def record_of(self, key: JobKey) -> JobRecord: ...


class Placer(Jobs, Protocol):
    """placing.py: a gang or a replacement placed under the one placement lock, the waiting jobs woken."""

    kube: Kube
    settings: OperatorSettings
    queue: WorkQueue
    placement_lock: threading.Lock

    def post_event(self, job: dict, event_type: str, reason: str, message: str) -> None: ...

    def wake_pending(self) -> None: ...


class ChildrenWriter(Jobs, Protocol):
    """children.py: the gang's children written and released, many calls at once."""

    kube: Kube
    settings: OperatorSettings
    started_at: datetime
    legacy_grants_gone: set[str]

    def each(self, call: Callable, items: Iterable) -> None: ...

    def enqueue(self, key: JobKey, delay: float = ...) -> None: ...

    def read_job_again(self, key: JobKey) -> None: ...


class ClusterListener(Protocol):
    """clusterwatch.py: a change of the cluster's capacity or of a node's readiness."""

    def wake_pending(self) -> None: ...

    def wake_all(self) -> None: ...


class PodListener(Protocol):
    """podwatch.py: a change of a job's pod, or of a pod or child whose job may be gone."""

    def pod_changed(self, key: JobKey, old: dict | None = None, new: dict | None = None) -> None: ...

    def wake_pending(self) -> None: ...

    def read_job_again(self, key: JobKey) -> None: ...
