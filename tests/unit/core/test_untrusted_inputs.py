"""Every reader of what pods and ConfigMaps write is bounded and total (contracts/untrusted.py and its callers): a
launcher's report, a rank table's gzipped copy, a trainer's metrics page, a device annotation, a termination
record. Malformed input is refused by name — never an exception of another kind in a reconcile pass, never a
value the status cannot hold."""

from __future__ import annotations

import base64
import gzip
import json
import math
import sys
import zlib
from datetime import UTC, datetime

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ascend_hybrid.contracts import ascend, untrusted
from ascend_hybrid.diagnosis import failures, recovery
from ascend_hybrid.gang import ranktable
from ascend_hybrid.monitoring import progress
from ascend_hybrid.ranktable_sidecar import sync_once
from ascend_hybrid.spec.api import MAX_WORLD_SIZE
from ascend_hybrid.spec.causes import CAUSES
from support.projection import project

NOW = datetime(2026, 12, 2, 8, 0, 0, tzinfo=UTC)
GOOD = {"uid": "u-1", "generation": 1, "state": "Started", "time": "2026-12-02T08:00:00.000000Z", "resumedFrom": 4}


def report(**changes) -> str:
    return json.dumps({**GOOD, **changes})


def deep(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.fixture(autouse=True)
def recursion_limit_as_mindspore_sets_it():
    """Importing MindSpore raises the process's recursion limit to 10000, under which the decoder reads deep(5000)
    whole: the bounds here must hold under that limit, not the default one."""
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(10000)
    yield
    sys.setrecursionlimit(before)


def test_nesting_is_counted_outside_strings_only():
    assert untrusted.depth('{"a": "[[[[", "b": [[1]]}') == 3
    assert untrusted.depth('["\\\"[[", {}]') == 2
    with pytest.raises(untrusted.Rejected) as refused:
        untrusted.json_value(deep(untrusted.MAX_DEPTH + 1), 1 << 20, "x")
    assert refused.value.reason == untrusted.TOO_DEEP
    assert untrusted.json_value(deep(untrusted.MAX_DEPTH), 1 << 20, "x") is not None


# -- the launchers' reports ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "reason"), [
    (report(time="2026-12-02T08:00:00"), untrusted.BAD_TIME),            # naive: a TypeError in the ledger before
    (report(time="yesterday"), untrusted.BAD_TIME),
    (report(time="9999-12-31T23:59:59Z"), untrusted.BAD_TIME),
    ('{"state": "Started", "uid": "u", "generation": 0, "x": ' + deep(3000) + "}", untrusted.TOO_DEEP),
    ('{"state": "Started", "uid": "u", "generation": 0, "resumedFrom": -' + "1" * 400 + "}", untrusted.OUT_OF_RANGE),
    (report(resumedFrom=-1), untrusted.OUT_OF_RANGE),
    (report(generation=2 ** 40), untrusted.OUT_OF_RANGE),                 # a raised generation past any restart
    (report(rank=MAX_WORLD_SIZE), untrusted.OUT_OF_RANGE),
    (report(step=2 ** 60), untrusted.OUT_OF_RANGE),
    (report(step=1e400), untrusted.OUT_OF_RANGE),
    (report(generation=True), untrusted.MALFORMED),
    (report(state="Done"), untrusted.MALFORMED),
    (report(uid=7), untrusted.MALFORMED),
    ("[1, 2]", untrusted.MALFORMED),
    ("{not json", untrusted.NOT_JSON),
    (report(detail="x" * 10_000), untrusted.TOO_LARGE),
])
def test_a_malformed_report_is_refused_by_name(text, reason):
    with pytest.raises(untrusted.Rejected) as refused:
        recovery.parse_report(text)
    assert refused.value.reason == reason, refused.value


def test_a_cause_outside_the_known_ones_reads_as_unknown():
    assert recovery.parse_report(report(state="Failed", cause="ConfigError")).cause == "ConfigError"
    assert recovery.parse_report(report(state="Failed", cause="Pwned" * 10)).cause == "Unknown"
    assert recovery.parse_report(report(state="Failed", cause=["ConfigError"])).cause == "Unknown"
    assert recovery.parse_report(report(state="Failed")).cause is None


def test_a_channel_with_junk_beside_good_reports_reads_the_good_ones():
    data = {"generation": "3", "job-a1-0": report(), "job-a1-1": deep(5000), "job-a1-2": report(time="2026-01-01")}
    generation, reports = recovery.read_channel(data)
    assert generation == 3 and set(reports) == {"job-a1-0"}
    good = reports["job-a1-0"]
    assert (good.uid, good.generation, good.state, good.resumed_from) == ("u-1", 1, "Started", 4)
    assert good.time == datetime(2026, 12, 2, 8, 0, tzinfo=UTC)
    assert recovery.read_channel({"generation": "9" * 5000})[0] is None
    assert recovery.read_channel({"generation": "²"})[0] is None


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner,
                                                                                 max_size=4), max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(fields=st.dictionaries(st.sampled_from(["uid", "generation", "state", "time", "resumedFrom", "step", "cause",
                                               "rank", "detail", "other"]), _json),
       base=st.booleans())
def test_any_report_is_read_within_bounds_or_refused(fields, base):
    text = json.dumps({**(GOOD if base else {}), **fields})
    try:
        read = recovery.parse_report(text)
    except untrusted.Rejected as refused:
        assert refused.reason in untrusted.REASONS
        return
    assert 0 <= read.generation <= recovery.MAX_GENERATION
    assert all(value is None or 0 <= value <= recovery.MAX_STEP for value in (read.step, read.resumed_from))
    assert read.rank is None or 0 <= read.rank < MAX_WORLD_SIZE
    assert read.cause is None or read.cause in CAUSES
    assert read.time is None or read.time.tzinfo is not None
    assert (NOW - read.time if read.time else None) is not None or read.time is None  # comparable with the clock


def test_reports_of_pods_not_of_the_current_attempt_are_screened_once():
    members = {"job-a2-0": "new-0", "job-a2-1": "new-1"}
    before = {"generation": "1", "job-a1-0": report(uid="old-0")}
    after = {**before, "job-a2-0": report(uid="new-0"), "job-a2-1": report(uid="forged"),
             "job-a1-1": report(uid="old-1"), "job-a2-9": "{]"}
    ignored = {item.pod: item.reason for item in recovery.screen_reports(before, after, members)}
    # the unchanged old report is not counted again; a report naming a member with another UID is not its
    assert ignored == {"job-a2-1": recovery.STALE, "job-a1-1": recovery.STALE, "job-a2-9": untrusted.NOT_JSON}
    assert recovery.screen_reports(after, after, members) == []


# -- termination records and the device plugin's annotations ---------------------------------------------------
def test_a_termination_record_nested_too_deep_or_with_huge_numbers_is_no_record():
    assert failures.parse_termination_message('{"cause": "Unknown", "x": ' + deep(3000) + "}") is None
    parsed = failures.parse_termination_message('{"cause": "DataError", "rank": ' + "9" * 30 + ', "step": -3}')
    assert parsed is not None and parsed["rank"] is None and parsed["step"] == -3


def test_a_device_annotation_nested_too_deep_or_with_strange_ids_reads_as_none():
    def pod(raw: str) -> dict:
        return {"metadata": {"annotations": {ascend.DEVICE_ANNOTATION: raw}}}
    assert ascend.pod_devices(pod('{"devices": ' + deep(5000) + "}")) is None
    assert ascend.pod_device_config(pod('{"a": ' + deep(5000) + "}")) is None
    assert ascend.pod_devices(pod('{"devices": [{"device_id": "' + "9" * 400 + '"}]}')) is None
    assert ascend.pod_devices(pod('{"devices": [{"device_id": "-1"}]}')) is None
    assert ascend.chip_ids("Ascend910-²,Ascend910-3," + "9" * 5000) == frozenset({3})


def test_a_deviceinfo_nested_too_deep_is_no_health_information():
    name = ascend.DEVICEINFO_PREFIX + "deep-node"
    info = ascend.parse_deviceinfo({"metadata": {"name": name, "namespace": ascend.DEVICEINFO_NAMESPACE},
                                    "data": {ascend.DEVICEINFO_KEY: deep(5000)}})
    assert info is not None and info.unusable == frozenset()


# -- the rank table --------------------------------------------------------------------------------------------
def bomb(size: int) -> bytes:
    """`size` zero bytes gzipped: about a thousandth of their size."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, untrusted.GZIP_WINDOW)
    chunk = b"\0" * (1 << 20)
    return b"".join([*(compressor.compress(chunk) for _ in range(size >> 20)), compressor.flush()])


def bombed_config_map(packed: bytes) -> dict:
    pointer = {"status": "completed", "version": "1.0", "server_count": "1", "compressed": ranktable.COMPRESSED_KEY}
    return {"data": {ranktable.TABLE_KEY: json.dumps(pointer), ranktable.VERSION_KEY: "1"},
            "binaryData": {ranktable.COMPRESSED_KEY: base64.b64encode(packed).decode()}}


def test_a_gzip_bomb_in_the_rank_table_is_refused_while_it_expands():
    packed = bomb(1 << 30)  # a gigabyte, from about a megabyte: what an apiserver-sized ConfigMap can hold
    assert len(packed) < 1100 * 1024
    table, refused = ranktable.read_config_map(bombed_config_map(packed))
    assert table == {} and refused is not None and refused.reason == untrusted.TOO_LARGE
    assert ranktable.from_config_map(bombed_config_map(packed)) == {}


@pytest.mark.parametrize(("binary", "reason"), [
    (b"not gzip at all", untrusted.MALFORMED),
    (gzip.compress(b"[" * 5000 + b"]" * 5000), untrusted.TOO_DEEP),
    (gzip.compress(b'{"status": "completed", "server_count": ' + b"9" * 100 + b"}"), untrusted.OUT_OF_RANGE),
    (gzip.compress(b"\xff\xfe"), untrusted.MALFORMED),
    (gzip.compress(b"[1, 2]"), untrusted.MALFORMED),
    (gzip.compress(b"{}")[:-6], untrusted.MALFORMED),  # truncated
])
def test_a_broken_gzipped_table_is_refused_by_name(binary, reason):
    table, refused = ranktable.read_config_map(bombed_config_map(binary))
    assert table == {} and refused is not None and refused.reason == reason, refused


def test_binary_data_larger_than_a_configmap_is_not_even_decoded():
    config_map = bombed_config_map(b"")
    config_map["binaryData"][ranktable.COMPRESSED_KEY] = "A" * (ranktable.ENCODED_LIMIT + 4)
    assert ranktable.read_config_map(config_map)[1].reason == untrusted.TOO_LARGE


def test_the_expansion_bound_holds_the_largest_table_a_job_can_have():
    largest = ranktable.table_size_bound(MAX_WORLD_SIZE, 1)  # one-chip pods, longest addresses and ids
    assert largest < ranktable.EXPANDED_LIMIT < 1.5 * largest
    assert ranktable.EXPANDED_LIMIT > 5 * ranktable.table_size_bound(16384, 1)


def test_the_expander_refuses_a_bomb_once_and_keeps_the_table_it_wrote(tmp_path):
    source, target = tmp_path / "source", tmp_path / "target"
    good = {"status": "completed", "version": "1.0", "server_count": "0", "server_list": []}
    project(source, {"metadata": {"name": "rings-config-job"},
                     "data": {ranktable.TABLE_KEY: json.dumps(good), ranktable.VERSION_KEY: "1"}})
    seen, written = sync_once(source, target, None)
    assert written is not None
    project(source, {"metadata": {"name": "rings-config-job"}, **bombed_config_map(bomb(256 << 20))})
    said: list[str] = []
    seen, written = sync_once(source, target, seen, said.append)
    assert written is None and len(said) == 1 and "expands past" in said[0]
    assert json.loads((target / ranktable.TABLE_KEY).read_text()) == good  # the last good table stays
    assert sync_once(source, target, seen, said.append) == (seen, None) and len(said) == 1  # not read again


@settings(max_examples=100, deadline=None)
@given(pointer=st.text(max_size=80), binary=st.binary(max_size=300))
def test_any_configmap_reads_as_a_table_or_a_refusal(pointer, binary):
    config_map = {"data": {ranktable.TABLE_KEY: pointer},
                  "binaryData": {ranktable.COMPRESSED_KEY: base64.b64encode(binary).decode()}}
    table, refused = ranktable.read_config_map(config_map)
    assert isinstance(table, dict) and (refused is None or refused.reason in untrusted.REASONS)


# -- the trainers' metrics pages -------------------------------------------------------------------------------
PAGE = """# HELP ascend_trainer_step the step
# TYPE ascend_trainer_step gauge
ascend_trainer_step abc
ascend_trainer_loss 2.5
ascend_trainer_step_seconds_sum 30
ascend_trainer_step_seconds_count 10
ascend_trainer_npu_utilization_percent{device="0"} 80
ascend_trainer_npu_utilization_percent{device="1" 70
ascend_trainer_tokens_per_second 1e300
something_else{ malformed but not read
"""


def test_a_malformed_line_is_skipped_alone_and_said():
    sample = progress.from_trainer_text({0: PAGE}, NOW, {0: "job-a1-0"})
    assert sample.ok and sample.step is None and sample.loss == 2.5 and sample.step_seconds == 3.0
    assert [chip.chip for chip in sample.chips] == ["0"]
    assert sample.tokens_per_second is None  # past what any figure means
    assert sample.rejected_lines == 3 and sample.rejected[0].startswith("job-a1-0 line 3")


def test_figures_that_are_not_finite_or_out_of_range_are_no_figures():
    sample = progress.from_trainer_text({0: "ascend_trainer_step +Inf\nascend_trainer_loss NaN\n"}, NOW)
    assert (sample.step, sample.loss, sample.rejected_lines) == (None, None, 0)
    assert progress.training_status(sample, 100).model_fields_set == set()  # nothing to write
    answered = progress.from_prometheus({"step": float("inf"), "loss": 1e300, "npu_percent": 50.0}, NOW,
                                        {"chips": [({"pod_name": "p", "id": "0"}, float("inf"))]})
    assert (answered.step, answered.loss, answered.npu_percent, answered.chips) == (None, None, 50.0, ())
    assert progress.training_status(answered, 100).step is None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["ascend_trainer_step", "ascend_trainer_loss", "ascend_trainer_step_seconds_sum",
                                 "ascend_trainer_step_seconds_count", "ascend_trainer_npu_utilization_percent",
                                 "other"]) | st.text(max_size=12), max_size=6),
       st.lists(st.text(max_size=30), max_size=6))
@example(series=["ascend_trainer_step"], tails=["\r{"])  # a line that opens with its labels names no series
def test_any_page_gives_a_sample_within_bounds(series, tails):
    page = "\n".join(f"{name}{tail}" for name, tail in zip(series, tails, strict=False))
    sample = progress.from_trainer_text({0: page, 1: page}, NOW)
    for value in (sample.step, sample.loss, sample.tokens_per_second, sample.step_seconds_sum, sample.step_count):
        assert value is None or (math.isfinite(value) and abs(value) <= progress.MAX_FIGURE)
    progress.training_status(sample, 100)
    progress.utilization_status(sample)
