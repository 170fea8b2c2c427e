"""The benchmarks' profile summary (devtools/profiles.py) over py-spy's raw stacks."""

from __future__ import annotations

from pathlib import Path

from ascend_hybrid.devtools.profiles import frame_name, summarize, summarize_file

RAW = """\
<module> (ascend_hybrid/cli/__main__.py:3);run (ascend_hybrid/controller/loop.py:200);decide (ascend_hybrid/reconcile/decision.py:80) 30
<module> (ascend_hybrid/cli/__main__.py:3);run (ascend_hybrid/controller/loop.py:210);loads (json/__init__.py:346) 10
<module> (ascend_hybrid/cli/__main__.py:3);walk (x.py:1);walk (x.py:2);walk (x.py:3) 5
not a stack line
"""


def test_own_counts_the_innermost_frame_and_within_counts_each_function_once_per_sample():
    profile = summarize(RAW)
    assert profile.samples == 45
    assert profile.own["decide (ascend_hybrid/reconcile/decision.py)"] == 30
    assert profile.own["loads (json/__init__.py)"] == 10
    assert profile.within["run (ascend_hybrid/controller/loop.py)"] == 40, "its two lines are one function"
    assert profile.within["walk (x.py)"] == 5, "recursion counts once"
    assert profile.within["<module> (ascend_hybrid/cli/__main__.py)"] == 45
    table = profile.table(top=2)
    assert "45 samples of the GIL" in table and "66.7%" in table and "decide (ascend_hybrid/reconcile/decision.py)" in table
    within = table.split("within")[1]
    assert "run (ascend_hybrid/controller/loop.py)" in within and "walk (x.py)" not in within, "the operator's own"


def test_a_frame_without_a_file_is_kept_whole_and_a_missing_profile_has_no_samples(tmp_path: Path):
    assert frame_name("process_idle") == "process_idle"
    assert frame_name("f (a (b).py:3)") == "f (a (b).py:3)"
    empty = summarize_file(tmp_path / "none.txt")
    assert empty.samples == 0 and "no samples" in empty.table()
