"""Leader election against an in-memory Lease API with a fake clock: who leads, when the fence closes, when a
standby takes over, and what a release does. The real apiserver is in tests/faults/test_failover.py."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ascend_hybrid.controller import leader as leaders
from ascend_hybrid.controller.kube import Kube
from ascend_hybrid.controller.leader import LeaderElector, LeaseSettings, NotLeader


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class LeaseApi:
    """read / create / replace of one Lease, with resourceVersion conflicts as the apiserver answers them."""

    def __init__(self):
        self.lease: client.V1Lease | None = None
        self.version = 0
        self.down = False
        self.writes: list[str | None] = []

    def _check(self):
        if self.down:
            raise ApiException(status=503, reason="Service Unavailable")

    def read_namespaced_lease(self, name, namespace, **_):
        self._check()
        if self.lease is None:
            raise ApiException(status=404, reason="Not Found")
        return copy.deepcopy(self.lease)

    def create_namespaced_lease(self, namespace, body, **_):
        self._check()
        if self.lease is not None:
            raise ApiException(status=409, reason="AlreadyExists")
        return self._store(body)

    def replace_namespaced_lease(self, name, namespace, body, **_):
        self._check()
        if body.metadata.resource_version != self.lease.metadata.resource_version:
            raise ApiException(status=409, reason="Conflict")
        return self._store(body)

    def _store(self, body):
        self.version += 1
        body = copy.deepcopy(body)
        body.metadata.resource_version = str(self.version)
        self.lease = body
        self.writes.append(body.spec.holder_identity)
        return copy.deepcopy(body)


def elector(api, clock, identity, lost=None):
    settings = LeaseSettings(namespace="ops", identity=identity)
    wall = lambda: datetime(2026, 12, 1, tzinfo=UTC) + timedelta(seconds=clock.now)
    return LeaderElector(api, settings, on_lost=lost or (lambda: None), clock=clock, wall=wall)


def test_the_first_candidate_leads_and_the_second_stands_by():
    api, clock = LeaseApi(), Clock()
    first, second = elector(api, clock, "a"), elector(api, clock, "b")
    assert first._attempt() and first.leading()
    assert not second._attempt() and not second.leading()
    assert api.lease.spec.holder_identity == "a" and api.lease.spec.lease_duration_seconds == 10
    assert leaders.LEADER._value.get() == 1  # one gauge per process: the last to act led
    first.fence()
    with pytest.raises(NotLeader):
        second.fence()


def test_the_fence_closes_at_the_renew_deadline_even_when_no_renewal_returns():
    api, clock = LeaseApi(), Clock()
    lost = []
    one = elector(api, clock, "a", lost=lambda: lost.append(True))
    assert one._attempt()
    clock.now += 6.9
    assert one.leading()
    clock.now += 0.2  # 7.1 s after the renewal started: closed, whatever the renewing thread does
    assert not one.leading()
    with pytest.raises(NotLeader):
        one.fence()


def test_a_standby_takes_over_only_a_full_lease_after_the_last_renewal_it_saw():
    api, clock = LeaseApi(), Clock()
    leader, standby = elector(api, clock, "a"), elector(api, clock, "b")
    assert leader._attempt()
    assert not standby._attempt()  # sees the record now
    clock.now += 2
    assert leader._attempt()  # a renewal: the standby's count starts again when it sees it
    clock.now += 1
    assert not standby._attempt()
    clock.now += 9.5  # leader dead; 9.5 s since the standby saw its last renewal
    assert not standby._attempt()
    # the dead leader's fence closed 7 s after its last renewal started, before any takeover is possible
    assert not leader.leading()
    clock.now += 0.6
    assert standby._attempt() and standby.leading()
    assert api.lease.spec.holder_identity == "b" and api.lease.spec.lease_transitions == 1


def test_a_lost_renewal_ends_the_leadership_through_on_lost():
    api, clock = LeaseApi(), Clock()
    lost = []

    def sleep(seconds):
        clock.now += seconds

    one = LeaderElector(api, LeaseSettings(namespace="ops", identity="a"), on_lost=lambda: lost.append(clock.now),
                        clock=clock, sleep=sleep)
    assert one._attempt()
    api.down = True
    one.run()  # returns once the renew deadline has passed without a renewal
    assert lost and lost[0] - 1000.0 >= 7
    assert not one.leading() and leaders.LEADER._value.get() == 0


def test_two_candidates_racing_for_a_free_lease_cannot_both_win():
    api, clock = LeaseApi(), Clock()
    a, b = elector(api, clock, "a"), elector(api, clock, "b")
    c = elector(api, clock, "c")
    assert a._attempt() and not b._attempt() and not c._attempt()
    clock.now += 11  # a is dead: b and c both see the Lease expired, both read it, both write
    stale = api.read_namespaced_lease("x", "ops")
    assert b._attempt()
    c._observed = (stale.spec.holder_identity, stale.spec.renew_time, stale.metadata.resource_version)
    c._lease = stale
    stale.spec.holder_identity = "c"
    with pytest.raises(ApiException) as conflict:
        api.replace_namespaced_lease("x", "ops", stale)
    assert conflict.value.status == 409 and api.lease.spec.holder_identity == "b"


def test_release_hands_the_lease_to_a_standby_at_its_next_try():
    api, clock = LeaseApi(), Clock()
    leader, standby = elector(api, clock, "a"), elector(api, clock, "b")
    assert leader._attempt() and not standby._attempt()
    leader.release()
    assert api.lease.spec.holder_identity is None and not leader.leading()
    clock.now += 2
    assert standby._attempt() and standby.leading()


def test_settings_that_cannot_keep_one_leader_are_refused():
    with pytest.raises(ValueError, match="renew deadline < lease duration"):
        LeaseSettings(identity="a", lease_seconds=5, renew_deadline_seconds=6)
    with pytest.raises(ValueError, match="identity"):
        LeaseSettings()


def test_the_lease_namespace_is_the_pods_then_the_kubeconfigs(monkeypatch, tmp_path):
    monkeypatch.setenv("POD_NAMESPACE", "operators")
    assert leaders.default_lease_namespace() == "operators"
    monkeypatch.delenv("POD_NAMESPACE")
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts:\n- name: c\n  context: "
                          "{cluster: k, user: u, namespace: team-a}\nclusters:\n- name: k\n  cluster: "
                          "{server: 'https://127.0.0.1:6443'}\nusers:\n- name: u\n  user: {}\n")
    monkeypatch.setattr(leaders, "SERVICE_ACCOUNT_NAMESPACE", str(tmp_path / "absent"))
    assert leaders.default_lease_namespace(str(kubeconfig)) == "team-a"
    assert leaders.default_lease_namespace(str(tmp_path / "missing")) == "default"


def test_kube_checks_the_fence_before_every_mutating_call_and_never_before_a_read():
    calls = []
    kube = Kube(client.ApiClient(), attempts=1, fence=lambda: (_ for _ in ()).throw(NotLeader("standby")))
    with pytest.raises(NotLeader):
        kube._call("create", "pods", lambda: calls.append("create"))
    with pytest.raises(NotLeader):
        kube._call("apply", "configmaps", lambda: calls.append("apply"))
    assert kube._call("get", "pods", lambda: calls.append("get") or "read") == "read"
    assert calls == ["get"]
