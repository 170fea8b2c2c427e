"""A direct placement's status is written with the start's next real change (Running, a failure) or after
`status_coalesce_seconds`, not before the pods: the pods, created bound to their nodes, record it meanwhile, and the
process decides from the status it keeps (onepod.OnePodStart). A one-pod job's start is one status write."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from ascend_hybrid.controller import loop
from ascend_hybrid.controller.loop import Controller, Indexes
from ascend_hybrid.controller.settings import OperatorSettings
from ascend_hybrid.reconcile.actions import CreatePods, Place, PodToCreate
from ascend_hybrid.reconcile.state import Decision
from support.builders import job_body

KEY = ("ns", "job")


class StatusKube:
    """Records the status patches and the pods created; `running` says whether the pod runs."""

    def __init__(self, job: dict):
        self.job, self.patches, self.created, self.running = job, [], [], False

    def get_job(self, namespace, name):
        return self.job

    def patch_job_status(self, namespace, name, old, new):
        if old == new:
            return None
        self.patches.append(new)
        version = str(int(self.job["metadata"]["resourceVersion"]) + 1)
        self.job = {**self.job, "metadata": {**self.job["metadata"], "resourceVersion": version}, "status": new}
        return self.job

    def create_pod(self, manifest):
        self.created.append(manifest["metadata"]["name"])
        return manifest

    def read_config_map(self, namespace, name):
        return None

    def get_podgroup(self, namespace, name):
        return None


def scripted(kube: StatusKube, queue: str | None, pods: int, scheduler: str | None = None):
    """decide() as the core answers a one-pod job: place it, create its pod, wait for it, then Running."""
    def decide(observed):
        status = dict(observed.job.get("status") or {})
        status.setdefault("attempt", 1)
        if (status.get("placement") or {}).get("attempt") != 1:
            scheduling = SimpleNamespace(queue=queue, scheduler_name=scheduler, volcano=None)
            job = SimpleNamespace(spec=SimpleNamespace(scheduling=scheduling), pod_count=pods)
            return Decision(actions=[Place(None, job)], status=status)  # type: ignore[arg-type]
        if not kube.created:
            pod = PodToCreate({"metadata": {"name": "job-a1-0"}}, "node-a", 8)
            return Decision(actions=[CreatePods((pod,))], status={**status, "phase": "Starting"}, requeue_after=1.0)
        if not kube.running:
            return Decision(status={**status, "phase": "Starting", "pods": {"pending": 1}}, requeue_after=1.0)
        return Decision(status={**status, "phase": "Running", "pods": {"running": 1}}, requeue_after=30.0)
    return decide


def placed(controller, key, job, observed, decision, action) -> bool:
    decision.status = {**decision.status, "phase": "Placing", "placement": {"attempt": 1, "nodes": ["node-a"]}}
    return True


@pytest.fixture
def one_pod_job(monkeypatch):
    def make(queue: str | None = None, settings: OperatorSettings | None = None, pods: int = 1,
             scheduler: str | None = None):
        job = job_body({"parallelism": {"data": 1, "tensor": 8}, "npu": {"perPod": 8}})
        job["metadata"].update(namespace="ns", name="job", uid="u", resourceVersion="1")
        kube = StatusKube(job)
        monkeypatch.setattr(loop, "decide", scripted(kube, queue, pods, scheduler))
        controller = Controller(kube=kube, settings=settings or OperatorSettings(),
                                bound_indexes=Indexes(nodes=list, npu_pods=list, job_pods=lambda key: [],
                                                      device_infos=list))
        monkeypatch.setattr(controller, "place", lambda *args: placed(controller, *args))
        made.append(controller)
        return controller, kube
    made: list[Controller] = []
    yield make
    for controller in made:
        controller.queue.close()


def test_a_one_pod_jobs_start_writes_its_status_once_with_placement_and_running(one_pod_job):
    controller, kube = one_pod_job()
    wait = controller._reconcile(KEY, [])
    assert kube.created == ["job-a1-0"] and kube.patches == [], "the pod records the placement meanwhile"
    assert wait is not None and 0 < wait <= 1.0
    assert controller.record_of(KEY).phase == "Starting"  # the queue behind it moved all the same
    controller._reconcile(KEY, [])  # the pod not running yet: decided from the kept status, nothing written
    assert kube.created == ["job-a1-0"] and kube.patches == []
    kube.running = True
    controller._reconcile(KEY, [])
    assert len(kube.patches) == 1
    written = kube.patches[0]
    assert written["phase"] == "Running" and written["placement"] == {"attempt": 1, "nodes": ["node-a"]}
    assert controller.record_of(KEY).one_pod.status is None


def test_a_start_longer_than_the_coalescing_window_writes_its_placement(one_pod_job):
    controller, kube = one_pod_job()
    controller._reconcile(KEY, [])
    controller.record_of(KEY).one_pod.since = time.monotonic() - controller.settings.status_coalesce_seconds
    controller._reconcile(KEY, [])
    assert [(s["phase"], s["placement"]["nodes"]) for s in kube.patches] == [("Starting", ["node-a"])]


def test_a_queued_jobs_placement_is_written_before_its_pods(one_pod_job):
    """Kueue's pods are placed by the scheduler after admission: the status is the placement's only record."""
    controller, kube = one_pod_job(queue="team-a")
    controller._reconcile(KEY, [])
    assert kube.patches[0]["phase"] == "Placing" and controller.record_of(KEY).one_pod.status is None


@pytest.mark.parametrize("scheduler, default", [("volcano", None), (None, "volcano")])
def test_the_placement_of_a_job_volcano_binds_is_written_before_its_pod(one_pod_job, scheduler, default):
    """Its pod is created unbound: until Volcano binds it, the status is the plan's only record."""
    controller, kube = one_pod_job(scheduler=scheduler, settings=OperatorSettings(default_scheduler=default))
    controller._reconcile(KEY, [])
    assert kube.patches[0]["phase"] == "Placing" and controller.record_of(KEY).one_pod.status is None


def test_a_gangs_placement_is_written_before_its_pods(one_pod_job):
    """A process stopped halfway through creating a gang's pods would leave no record of where the others go."""
    controller, kube = one_pod_job(pods=2)
    controller._reconcile(KEY, [])
    assert [s["phase"] for s in kube.patches] == ["Placing"]  # then its start's steps coalesce (defer_progress)
    assert controller.record_of(KEY).one_pod.status is None


def test_without_a_coalescing_window_every_step_is_written(one_pod_job):
    controller, kube = one_pod_job(settings=OperatorSettings(status_coalesce_seconds=0))
    controller._reconcile(KEY, [])
    assert [s["phase"] for s in kube.patches] == ["Placing", "Starting"]


def test_a_job_made_again_under_the_same_name_is_not_given_the_kept_status(one_pod_job):
    """Deleted and created again before a pass saw it go: the new job (another uid) starts from its own status."""
    controller, kube = one_pod_job()
    controller._reconcile(KEY, [])
    assert controller.record_of(KEY).one_pod.status is not None
    kube.job = {**kube.job, "metadata": {**kube.job["metadata"], "uid": "another"}, "status": {}}
    controller.record_of(KEY).read_again()  # its events: the job is read again
    decisions = []
    real = loop.decide
    loop.decide = lambda observed: decisions.append(observed.job.get("status")) or real(observed)  # type: ignore
    try:
        controller._reconcile(KEY, [])
    finally:
        loop.decide = real  # type: ignore
    assert decisions[0] == {}
    assert controller.record_of(KEY).one_pod.uid == "another", "its own placement is kept for it"


class ForbiddenPodGroups(StatusKube):
    """An operator the chart did not grant PodGroups (volcano.enabled false)."""

    def get_podgroup(self, namespace, name):
        from kubernetes.client.exceptions import ApiException

        from ascend_hybrid.controller.refused import Refused

        error = ApiException(status=403, reason="Forbidden")
        error.body = ('{"kind":"Status","status":"Failure","reason":"Forbidden","message":"podgroups.scheduling.volcano'
                      '.sh \\"job-a1\\" is forbidden: cannot get resource \\"podgroups\\""}')
        raise Refused(error, "get", "podgroups", (namespace, name))


def test_a_podgroup_read_the_apiserver_refuses_is_the_jobs_refusal_not_a_failed_pass():
    """A Volcano job under an operator that may not read PodGroups: the 403 becomes the job's refusal (the next
    decide() names it, Authorized=False), never an exception that fails every pass with a traceback."""
    from ascend_hybrid.spec.rules import parse

    job = job_body({"parallelism": {"data": 1, "tensor": 8}, "npu": {"perPod": 8},
                    "scheduling": {"schedulerName": "volcano"}})
    job["metadata"].update(namespace="ns", name="job", uid="u", resourceVersion="1")
    job["status"] = {"attempt": 1, "phase": "Starting", "placement": {"attempt": 1, "nodes": []}}
    controller = Controller(kube=ForbiddenPodGroups(job), settings=OperatorSettings(),
                            bound_indexes=Indexes(nodes=list, npu_pods=list, job_pods=lambda key: [], device_infos=list))
    try:
        assert controller.podgroup(KEY, job, parse(job)) == (False, None)
        refusal = controller.record_of(KEY).refusal
        assert refusal is not None and (refusal.status, refusal.verb, refusal.resource) == (403, "get", "podgroups")
    finally:
        controller.queue.close()
