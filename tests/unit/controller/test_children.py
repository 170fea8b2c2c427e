"""children.py: the job's children applied, and repaired when someone else deletes or rewrites them — against a
recording fake of Kube (what each call would send), no cluster."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ascend_hybrid.contracts import names
from ascend_hybrid.controller import children
from ascend_hybrid.controller.loop import Controller
from ascend_hybrid.controller.refused import Refused
from ascend_hybrid.reconcile.actions import SignalLaunchers
from ascend_hybrid.spec.rules import parse
from support.builders import JobBuilder, job_body

KEY = ("default", "job")


class FakeKube:
    def __init__(self, allocated_for: int = 0):
        self.applied, self.created, self.slices_deleted = [], [], []
        self.made: list[dict] = []            # the launchers' grant and channel (Kube.create)
        self.legacy_deleted: list[str] = []   # namespaces whose namespace-wide launcher Role was deleted
        self.allocated_for = allocated_for  # creates refused as "already allocated" before the IP is free

    def create(self, manifest):
        self.made.append(manifest)

    def delete_legacy_launcher_role(self, namespace):
        self.legacy_deleted.append(namespace)

    def apply(self, manifest):
        self.applied.append(manifest)
        ip = "127.32.0.7" if manifest["metadata"]["name"] == names.sched_service("job") else "None"
        return {**manifest, "spec": {**manifest.get("spec", {}), "clusterIP": ip}}

    def delete_controller_slices(self, namespace, service):
        self.slices_deleted.append((namespace, service))

    def create_service(self, manifest):
        self.created.append(manifest["spec"]["clusterIP"])
        if len(self.created) <= self.allocated_for:
            error = ApiException(status=422, reason="Unprocessable Entity")
            error.body = json.dumps({"message": "provided IP is already allocated"})
            raise Refused(error, "create", "services")


def resolved(body):
    return parse(body)


def controller(kube) -> Controller:
    return Controller(kube=kube)


def two_pod_body(generation: int) -> dict:
    """A job of two pods: the Services are applied (a job of one pod has none)."""
    body = JobBuilder("job").parallelism(data=4, tensor=4).per_pod(8).build()
    return {**body, "metadata": {"name": "job", "namespace": "default", "uid": "u", "generation": generation}}


def test_children_are_applied_and_the_sched_ip_recorded():
    body = two_pod_body(3)
    kube = FakeKube()
    ctl = controller(kube)
    children.ensure_children(ctl, KEY, body, resolved(body))
    record = ctl.record_of(KEY)
    assert sorted(m["metadata"]["name"] for m in kube.applied) == sorted(
        ["job", "job-sched", "rings-config-job"])
    assert (record.sched_ip, record.children_generation, record.rank_table, record.rank_table_revision) == (
        "127.32.0.7", 3, {"status": "initializing", "version": "1.0"}, 0)
    assert kube.created == []  # nothing was deleted: no create with a kept IP


def test_the_controllers_old_slices_go_once_for_a_job_started_before_this_process():
    """An older operator's headless `<job>` had a selector, and Kubernetes' controller leaves the slices it wrote
    when the apply removes it. A job made before this process started may have them: one collection delete, once
    per process; a job made since was never served so and costs no call."""
    kube = FakeKube()
    ctl = controller(kube)
    made = ctl.started_at + timedelta(seconds=1)
    body = {**two_pod_body(1), "metadata": {**two_pod_body(1)["metadata"], "creationTimestamp": made.isoformat()}}
    children.ensure_children(ctl, KEY, body, resolved(body))
    assert kube.slices_deleted == []
    other = Controller(kube=kube, started_at=made + timedelta(minutes=5))  # a new operator process
    children.ensure_children(other, KEY, body, resolved(body))
    children.ensure_children(other, KEY, {**body, "metadata": {**body["metadata"], "generation": 2}}, resolved(body))
    assert kube.slices_deleted == [("default", "job")]


def test_a_job_of_one_pod_gets_its_config_map_only():
    body = {**job_body(name="job"), "metadata": {"name": "job", "namespace": "default", "uid": "u", "generation": 3}}
    kube = FakeKube()
    ctl = controller(kube)
    children.ensure_children(ctl, KEY, body, resolved(body))
    record = ctl.record_of(KEY)
    [config_map] = kube.applied
    assert config_map["metadata"]["name"] == "rings-config-job"
    assert json.loads(config_map["data"]["job.json"])["name"] == "job"
    assert json.loads(config_map["data"]["hccl.json"])["status"] == "initializing"
    assert record.sched_ip is None and record.children_generation == 3
    assert record.job_config == config_map["data"]["job.json"]


def test_children_applied_again_keep_the_table_written_since():
    """job.json and the table share rings-config-<job> and a server-side apply drops what it leaves out: a spec
    change after the table completed applies job.json with that table and its count, not the initializing one."""
    body = {**job_body(name="job"), "metadata": {"name": "job", "namespace": "default", "uid": "u", "generation": 1}}
    kube = FakeKube()
    ctl = controller(kube)
    children.ensure_children(ctl, KEY, body, resolved(body))
    record = ctl.record_of(KEY)
    completed = {"status": "completed", "version": "1.0", "server_count": "1", "server_list": []}
    record.rank_table, record.rank_table_revision = completed, 2
    kube.applied.clear()
    children.ensure_children(ctl, KEY, {**body, "metadata": {**body["metadata"], "generation": 2}}, resolved(body))
    [config_map] = kube.applied
    assert json.loads(config_map["data"]["hccl.json"]) == completed and config_map["data"]["version"] == "2"
    assert "job.json" in config_map["data"] and record.children_generation == 2


def test_a_deleted_rank_table_comes_back_counting_on():
    """TaskD compares the ConfigMap's `version` with the last it saw: a ConfigMap deleted under a running job is
    made again with the next count, not 0."""
    body = {**job_body(name="job"), "metadata": {"name": "job", "namespace": "default", "uid": "u", "generation": 1}}
    kube = FakeKube()
    ctl = controller(kube)
    children.ensure_children(ctl, KEY, body, resolved(body))
    record = ctl.record_of(KEY)
    record.rank_table, record.rank_table_revision = {"status": "completed"}, 3  # a completed table was written
    ctl.child_changed(KEY, "ConfigMap", "rings-config-job", "DELETED", {"metadata": {"name": "rings-config-job"}})
    assert record.rank_table is None
    kube.applied.clear()
    children.ensure_children(ctl, KEY, body, resolved(body))
    [table_map] = [m for m in kube.applied if m["metadata"]["name"] == "rings-config-job"]
    assert table_map["data"]["version"] == "4" and record.rank_table_revision == 4


def test_a_deleted_sched_service_comes_back_on_its_ip_once_the_apiserver_frees_it(monkeypatch):
    monkeypatch.setattr(children.time, "sleep", lambda _: None)
    body = two_pod_body(1)
    kube = FakeKube(allocated_for=2)
    ctl = controller(kube)
    children.ensure_children(ctl, KEY, body, resolved(body))
    deleted = {"metadata": {"name": "job-sched"}, "spec": {"clusterIP": "127.32.0.7"}}
    ctl.child_changed(KEY, "Service", "job-sched", "DELETED", deleted)
    record = ctl.record_of(KEY)
    assert record.children_generation is None and record.lost_sched_ip == "127.32.0.7"
    children.ensure_children(ctl, KEY, body, resolved(body))
    assert kube.created == ["127.32.0.7"] * 3 and record.lost_sched_ip is None and record.children_generation == 1


def test_a_rewritten_rank_table_becomes_the_observed_one_and_a_deleted_one_is_applied_again():
    ctl = controller(FakeKube())
    record = ctl.record_of(KEY)
    record.rank_table, record.children_generation = {"status": "completed", "version": "1.0"}, 1
    rival = {"metadata": {"name": "rings-config-job"}, "data": {"hccl.json": json.dumps({"status": "initializing"})}}
    ctl.child_changed(KEY, "ConfigMap", "rings-config-job", "MODIFIED", rival)
    assert record.rank_table == {"status": "initializing"} and record.children_generation == 1
    assert ctl.queue.get(timeout=1) == KEY
    ctl.queue.done(KEY)
    ctl.child_changed(KEY, "ConfigMap", "rings-config-job", "DELETED", rival)
    assert record.rank_table is None and record.children_generation is None and record.children_epoch == 1


def test_a_deleted_child_makes_the_next_pass_read_its_job_again_not_repair_a_deleted_job():
    """Deleting a job makes the garbage collector delete its children; their events can come before the job's."""
    ctl = controller(FakeKube())
    record = ctl.record_of(KEY)
    ctl.remember_job(KEY, {"metadata": {"name": "job", "namespace": "default"}})
    ctl.child_changed(KEY, "ConfigMap", "other-config", "MODIFIED", {"metadata": {"name": "other-config"}})
    assert record.job is not None, "a change of a child says nothing of the job"
    ctl.child_changed(KEY, "Service", "job", "DELETED", {"metadata": {"name": "job"}})
    assert record.job is None


def test_changes_of_jobs_this_process_has_not_seen_are_left_to_their_first_pass():
    ctl = controller(FakeKube())
    ctl.child_changed(("default", "other"), "Service", "other", "DELETED", {})
    assert ctl.jobs == {} and ctl.queue.get(timeout=0.1) is None


def test_refused_is_still_a_client_exception():
    assert issubclass(Refused, client.ApiException)


class RefusingSlicesKube(FakeKube):
    """An operator whose RBAC predates the EndpointSlices: the apiserver refuses each slice call."""

    def apply(self, manifest):
        if manifest["kind"] == "EndpointSlice":
            raise forbidden("patch", "endpointslices")
        return super().apply(manifest)

    def delete_controller_slices(self, namespace, service):
        raise forbidden("deletecollection", "endpointslices")


def forbidden(verb, resource):
    error = ApiException(status=403, reason="Forbidden")
    error.body = json.dumps({"message": f"cannot {verb} resource {resource}"})
    return Refused(error, verb, resource)


def test_refused_dns_records_cost_only_the_names_not_the_table_or_the_children():
    kube = RefusingSlicesKube()
    ctl = controller(kube)
    ctl.pool = ThreadPoolExecutor(2)
    made = ctl.started_at - timedelta(minutes=5)  # made before this process: its old slices are asked for
    body = {**two_pod_body(1), "metadata": {**two_pod_body(1)["metadata"], "creationTimestamp": made.isoformat()}}
    children.ensure_children(ctl, KEY, body, resolved(body))
    assert ctl.record_of(KEY).old_slices_gone and ctl.record_of(KEY).children_generation == 1
    children.write_dns_records(ctl, KEY, ({"kind": "EndpointSlice", "metadata": {"name": "job-dns-0"}},))


def a_signal(generation: int, account: str = "job-launcher") -> SignalLaunchers:
    return SignalLaunchers(generation=generation, service_account=account)


def kinds_and_names(manifests) -> list[tuple[str, str]]:
    return [(m["kind"], m["metadata"]["name"]) for m in manifests]


def test_each_job_gets_a_grant_of_its_own_channel_only(monkeypatch):
    """The children come with the job's channel, its own ServiceAccount (the pods name none), a Role on that one
    channel by name and the binding of the account to it, all owned by the job and only ever created; the
    namespace-wide Role of older operators goes, once per namespace. A restart's signal checks the grant again
    once GRANT_RECHECK_SECONDS passed."""
    clock = [100.0]
    monkeypatch.setattr(children.time, "monotonic", lambda: clock[0])
    kube = FakeKube()
    ctl = controller(kube)
    body = two_pod_body(1)
    children.ensure_children(ctl, KEY, body, resolved(body))
    assert kinds_and_names(kube.made) == [("LauncherChannel", "job-recovery"), ("ServiceAccount", "job-launcher"),
                                          ("Role", "job-launcher"), ("RoleBinding", "job-launcher")]
    channel, _, role, binding = kube.made
    assert channel["data"] == {}  # generation 0: no key
    assert role["rules"] == [{"apiGroups": [names.GROUP], "resources": ["launcherchannels"],
                              "resourceNames": ["job-recovery"], "verbs": ["get", "watch", "patch"]}]
    assert (binding["roleRef"]["name"], binding["subjects"]) == (
        "job-launcher", [{"kind": "ServiceAccount", "name": "job-launcher", "namespace": "default"}])
    assert all(m["metadata"]["ownerReferences"][0]["uid"] == "u" for m in kube.made)
    assert kube.legacy_deleted == ["default"]
    children.signal_launchers(ctl, KEY, body, a_signal(1))
    assert len(kube.made) == 4 and kinds_and_names(kube.applied[-1:]) == [("LauncherChannel", "job-recovery")]
    assert kube.applied[-1]["data"] == {"generation": "1"}
    clock[0] += children.GRANT_RECHECK_SECONDS
    children.signal_launchers(ctl, KEY, body, a_signal(2))
    assert len(kube.made) == 8  # a deleted one returns
    other = {**body, "metadata": {**body["metadata"], "name": "other", "uid": "u2"}}
    children.grant_launchers(ctl, ("default", "other"), other, "trainer")
    assert kinds_and_names(kube.made[8:]) == [("LauncherChannel", "other-recovery"), ("Role", "other-launcher"),
                                              ("RoleBinding", "other-launcher-trainer")]  # the user's account
    assert kube.legacy_deleted == ["default"]


def test_a_job_made_again_under_its_name_gets_its_grant_at_once(monkeypatch):
    """The grant of a deleted job went with it (owner references): one made again under the same name within
    GRANT_RECHECK_SECONDS is a new job (another uid), and its pods need their ServiceAccount before they exist."""
    monkeypatch.setattr(children.time, "monotonic", lambda: 100.0)
    kube = FakeKube()
    ctl = controller(kube)
    body = two_pod_body(1)
    children.ensure_children(ctl, KEY, body, resolved(body))
    again = {**body, "metadata": {**body["metadata"], "uid": "u-again"}}
    children.ensure_children(ctl, KEY, again, resolved(again))
    assert len(kube.made) == 8 and kube.made[4]["metadata"]["ownerReferences"][0]["uid"] == "u-again"


def test_a_refused_grant_costs_the_in_place_rungs_only(monkeypatch):
    kube = FakeKube()

    def refuse_roles(manifest):
        if manifest["kind"] == "Role":
            raise Refused(ApiException(status=403, reason="Forbidden"), "create", "roles")
        kube.made.append(manifest)

    kube.create = refuse_roles
    ctl = controller(kube)
    children.signal_launchers(ctl, KEY, two_pod_body(1), a_signal(2))
    assert [m["kind"] for m in kube.applied] == ["LauncherChannel"]
    assert ctl.record_of(KEY).recovery_data == {"generation": "2"}
    made = len(kube.made)
    children.signal_launchers(ctl, KEY, two_pod_body(1), a_signal(2))
    assert [m["kind"] for m in kube.applied] == ["LauncherChannel"] * 2 and len(kube.made) == made  # not every pass


def test_a_refused_service_account_is_the_jobs_refusal_and_a_refused_role_is_not():
    """Without its ServiceAccount no pod of the job can be made: that refusal is the job's (Authorized=False). A
    Role or RoleBinding refused costs only the in-place rungs: the children are applied all the same."""
    import pytest

    def refusing(kind: str) -> FakeKube:
        kube = FakeKube()

        def create(manifest):
            if manifest["kind"] == kind:
                raise Refused(ApiException(status=403, reason="Forbidden"), "create", kind.lower() + "s")
            kube.made.append(manifest)
        kube.create = create
        return kube
    body = two_pod_body(1)
    kube = refusing("ServiceAccount")
    with pytest.raises(Refused):
        children.ensure_children(controller(kube), KEY, body, resolved(body))
    kube = refusing("Role")
    ctl = controller(kube)
    children.ensure_children(ctl, KEY, body, resolved(body))
    assert ctl.record_of(KEY).children_generation == 1
    assert [m["kind"] for m in kube.made] == ["LauncherChannel", "ServiceAccount", "RoleBinding"]


class UnreachableKube(FakeKube):
    """The apiserver cannot be reached while `<job>-sched` is made again with its kept IP."""

    def create_service(self, manifest):
        raise ConnectionError("apiserver unreachable")


def test_a_lost_sched_ip_is_kept_for_the_next_pass_when_making_the_service_again_fails():
    body = two_pod_body(3)
    ctl = controller(UnreachableKube())
    record = ctl.record_of(KEY)
    record.lost_sched_ip = "127.32.0.7"
    try:
        children.ensure_children(ctl, KEY, body, resolved(body))
    except ConnectionError:
        pass
    else:
        raise AssertionError("the failed create was swallowed")
    assert record.lost_sched_ip == "127.32.0.7"  # else the next apply takes a new IP and the gang must restart


class DeletedMeanwhileKube(FakeKube):
    """The rank-table ConfigMap is deleted (its event handled) while the pass applies the children."""

    def __init__(self):
        super().__init__()
        self.controller: Controller | None = None

    def apply(self, manifest):
        if manifest["metadata"]["name"] == names.rank_table_config_map("job") and self.controller is not None:
            self.controller.child_changed(KEY, "ConfigMap", manifest["metadata"]["name"], "DELETED", manifest)
        return super().apply(manifest)


def test_a_rank_table_deleted_while_the_children_are_applied_is_not_written_back_over():
    body = two_pod_body(3)
    kube = DeletedMeanwhileKube()
    ctl = controller(kube)
    kube.controller = ctl
    record = ctl.record_of(KEY)
    record.rank_table, record.rank_table_revision = {"status": "completed", "version": "1.0"}, 4
    children.ensure_children(ctl, KEY, body, resolved(body))
    assert record.rank_table is None and record.children_generation is None  # the next pass makes it again
