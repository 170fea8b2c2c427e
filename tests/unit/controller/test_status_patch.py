"""The status merge patch (Kube.patch_job_status): a key dropped anywhere in the status really goes."""

from __future__ import annotations

from ascend_hybrid.controller.kube import merge_patch


def test_nested_keys_dropped_are_sent_as_null_and_lists_whole():
    old = {"phase": "Restarting", "recovery": {"generation": 1, "rung": "RestartRanks"}, "avoidedNodes": ["a"],
           "placement": {"attempt": 1, "nodes": ["a", "b"]}, "message": "m"}
    new = {"phase": "Running", "recovery": {"generation": 1}, "avoidedNodes": ["a", "b"],
           "placement": {"attempt": 1, "nodes": ["a", "c"]}}
    assert merge_patch(old, new) == {"phase": "Running", "recovery": {"rung": None}, "avoidedNodes": ["a", "b"],
                                     "placement": {"nodes": ["a", "c"]}, "message": None}
    assert merge_patch(new, new) == {}
    assert merge_patch({"recovery": {"rung": "x"}}, {}) == {"recovery": None}
