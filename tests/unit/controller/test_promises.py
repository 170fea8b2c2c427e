"""The shell's promised chips (Controller.reserved): kept until the inventory can see a pod on its node."""

from __future__ import annotations

from ascend_hybrid.controller.loop import Controller, Indexes, JobRecord
from ascend_hybrid.gang import backlog
from support.builders import PodBuilder


def indexes(jobs: list[backlog.Entry] | None = None) -> Indexes:
    return Indexes(nodes=list, npu_pods=list, job_pods=lambda key: [], device_infos=list, jobs=lambda: list(jobs or []))


CHIP = {"key": "accelerator-type", "operator": "In", "values": ["module-910b-8"]}


def npu_pod(name: str) -> PodBuilder:
    """A pod of 8 NPUs as created: unbound, not pinned."""
    return PodBuilder.named(name, namespace="ns").chips(8, requests=False)


def test_a_queued_gangs_promise_holds_until_its_pods_show_pinned_or_bound():
    controller = Controller(kube=None)
    controller.indexes = indexes()
    controller.jobs[("ns", "queued")] = JobRecord(promised={"queued-a1-0": ("node-001", 8), "queued-a1-1": ("node-002", 8)})
    # seen by the watch, but as created: unpinned (Kueue admitted them, the pin is on its way)
    unpinned = [npu_pod("queued-a1-0").build(), npu_pod("queued-a1-1").build()]
    assert controller.reserved(unpinned, exclude=("ns", "other")) == {"node-001": 8, "node-002": 8}
    shown = [npu_pod("queued-a1-0").pinned("node-001", also=[CHIP]).build(),
             npu_pod("queued-a1-1").node("node-002").build()]
    assert controller.reserved(shown, exclude=("ns", "other")) == {}
    assert controller.jobs[("ns", "queued")].promised == {}
    controller.queue.close()


def test_pods_created_without_a_node_promise_nothing():
    from ascend_hybrid.reconcile.actions import PodToCreate

    controller = Controller(kube=None)
    controller.promise(("ns", "queued"), [PodToCreate({"metadata": {"name": "queued-a1-0"}}, None, 8),
                                          PodToCreate({"metadata": {"name": "pinned-a1-0"}}, "node-003", 8)])
    assert controller.jobs[("ns", "queued")].promised == {"pinned-a1-0": ("node-003", 8)}
    controller.queue.close()


def test_after_a_failover_a_queued_gangs_persisted_placement_holds_until_its_pods_are_pinned():
    """A new leader knows a queued gang's placement only from its status: its pods exist (created unpinned for
    Kueue) but hold no node yet, so their chips stay promised until the pin shows."""
    placed = backlog.Entry(namespace="ns", name="queued", created="2026-12-01T00:00:00Z", chip="910B", per_pod=8,
                           phase="Starting", attempt=1, placed_attempt=1, nodes=("node-001", "node-002"), queued=True)
    controller = Controller(kube=None)
    controller.indexes = indexes([placed])
    unpinned = [npu_pod("queued-a1-0").build(), npu_pod("queued-a1-1").build()]
    assert controller.reserved(unpinned, exclude=("ns", "other")) == {"node-001": 8, "node-002": 8}
    shown = [npu_pod("queued-a1-0").pinned("node-001", also=[CHIP]).build(), npu_pod("queued-a1-1").build()]
    assert controller.reserved(shown, exclude=("ns", "other")) == {"node-002": 8}
    controller.queue.close()
