"""Bare-pod manifests for tests and benchmarks, and stopping helper processes by pid."""

import sys

import pytest

from ascend_hybrid.devcluster.kube import processes
from ascend_hybrid.devcluster.kube.waiting import wait_until
from ascend_hybrid.devcluster.testing.pods import GANG_GATE, outcome_annotations, pod_manifest


def test_pod_manifest_pins_gates_and_asks_for_npus():
    pod = pod_manifest("p", node="node-002", chips=4, gated=True, annotations={"a": "b"}, labels={"l": "v"},
                       owner={"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "u"})
    spec = pod["spec"]
    assert spec["containers"][0]["name"] == "ascend"
    assert spec["containers"][0]["resources"]["limits"]["huawei.com/Ascend910"] == "4"
    term = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
    assert term["matchExpressions"] == [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-002"]}]
    assert spec["schedulingGates"] == [{"name": GANG_GATE}]
    assert pod["metadata"]["ownerReferences"][0]["uid"] == "u"


def test_a_bare_pod_asks_for_nothing_and_is_not_pinned():
    spec = pod_manifest("p")["spec"]
    assert "resources" not in spec["containers"][0] and "affinity" not in spec and "schedulingGates" not in spec


def test_outcome_annotations():
    assert outcome_annotations("fail", exit_code=3, after_seconds=2.5) == {
        "sim.hybrid.ascend.dev/outcome": "fail", "sim.hybrid.ascend.dev/exit-code": "3",
        "sim.hybrid.ascend.dev/after-seconds": "2.5"}
    assert outcome_annotations("succeed") == {"sim.hybrid.ascend.dev/outcome": "succeed"}
    with pytest.raises(ValueError):
        outcome_annotations("explode")


def test_a_helper_is_stopped_by_pid_only_when_its_marker_matches(tmp_path):
    marker = str(tmp_path / "cluster-dir")
    command = [sys.executable, "-c", "import time; time.sleep(60)", marker]
    pid = processes.start_detached(command, tmp_path / "helper.log", tmp_path / "helper.pid")
    try:
        assert processes.read_pid(tmp_path / "helper.pid") == pid
        wait_until(lambda: processes.is_ours(pid, marker), 10, "the helper's command line to show its marker")
        assert not processes.is_ours(pid, "/some/other/cluster")
        assert processes.stop(pid, marker="/some/other/cluster")  # not ours: left alone
        assert processes.is_alive(pid)
        assert processes.stop(pid, marker=marker, grace=5)
        assert not processes.is_alive(pid)
    finally:
        if processes.is_alive(pid):
            processes.stop(pid)


def test_a_dead_pid_counts_as_stopped():
    assert processes.stop(2 ** 22 + 12345)
    assert not processes.is_alive(2 ** 22 + 12345)


def test_an_exiting_process_is_waited_for_not_taken_for_someone_elses(monkeypatch):
    """Between releasing its memory (empty command line) and turning zombie, a process is still alive: stop()
    must wait for it to go, or `down` reports a cluster gone while its apiserver still exits."""
    states = iter(["S"] * 5)
    monkeypatch.setattr(processes, "_proc_state", lambda pid: next(states, None))
    monkeypatch.setattr(processes, "cmdline", lambda pid: "")
    monkeypatch.setattr(processes.os, "kill", lambda pid, signum: pytest.fail("an unproven pid was signalled"))
    assert processes.stop(4242, marker="/clusters/ahj", grace=5)
    assert next(states, None) is None  # it polled until the process was gone


def test_an_exiting_process_that_never_goes_is_reported(monkeypatch):
    monkeypatch.setattr(processes, "_proc_state", lambda pid: "D")
    monkeypatch.setattr(processes, "cmdline", lambda pid: "")
    assert not processes.stop(4242, marker="/clusters/ahj", grace=0.2)
