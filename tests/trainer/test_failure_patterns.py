"""The failure table (failures.py) on real log lines, the pod's verdict over its processes, the termination record
and the divergence rules. Pure: no MindSpore; the real processes are in test_failures.py."""

from __future__ import annotations

import json
import math
import signal

import pytest

from ascend_hybrid_trainer import failures
from ascend_hybrid_trainer.config import ConfigError, DataError
from ascend_hybrid_trainer.divergence import DivergenceError, DivergenceMonitor
from ascend_hybrid_trainer.failures import (
    EXIT_CODES,
    PATTERNS,
    Cause,
    Ended,
    TerminationRecord,
    classify,
    pod_verdict,
    read_record,
    record_for_exception,
    write_record,
)
from ascend_hybrid_trainer.rank_table import RankTableTimeout

# Whole lines as MindSpore 2.10.0 printed them on this machine (CPU, 127.0.0.1), in the provocations of
# docs/troubleshooting.md "How the patterns were measured".
SCHEDULER_UNREACHABLE = [
    "[ERROR] DISTRIBUTED(24458,7fa8cb06ab80,python):2026-12-01-19:41:26.028.769 "
    "[mindspore/ccsrc/cluster/topology/cluster_context.cc:307] BuildCluster] Failed to initialize the node.",
    "[ERROR] DISTRIBUTED(24458,7fa8cb06ab80,python):2026-12-01-19:41:26.028.855 "
    "[mindspore/ccsrc/cluster/topology/cluster_context.cc:94] Initialize] Building networking for MS_WORKER failed.",
    "[ERROR] DISTRIBUTED(24458,7fa8cb06ab80,python):2026-12-01-19:41:26.028.884 [mindspore/ccsrc/cluster/init.cc:114] "
    "InitializeCluster] Failed to initialize cluster.",
    "Traceback (most recent call last):",
    "  File \"/work/main/.venv/lib/python3.11/site-packages/mindspore/communication/management.py\", line 210, in init",
    "    init_cluster()",
    "RuntimeError: Failed to initialize distributed job cluster because some processes in the cluster are not "
    "successfully spawned. You can run command: 'grep -rn -E 'ERROR|CRITICAL' -C 10' in your log directory to "
    "filter out error info. It may be one of the following reasons:",
    "1.Spawned worker process number is not as expected.",
]
PEER_KILLED_WORKER = [  # rank 0 when rank 1 was SIGKILLed mid-training
    "[ERROR] DISTRIBUTED(3784,7f824a7fc6c0,python):2026-12-01-19:45:37.694.987 "
    "[mindspore/ccsrc/cluster/rpc/core/collective_ops_impl.cc:162] RunRingAllReduce] Ring ReduceScatter wait "
    "receiving [1,13] failed.",
    "[ERROR] KERNEL(3784,7f824a7fc6c0,python):2026-12-01-19:45:37.695.058 "
    "[mindspore/ops/kernel/cpu/native/allreduce_cpu_kernel.cc:89] Launch] AllReduceCPUKernelMod launch failed.",
    "Traceback (most recent call last):",
    "RuntimeError: Launch kernel failed, name:Default/AllReduce-op0",
    "[INFO] DISTRIBUTED(3784,7f826139b6c0,python):2026-12-01-19:45:37.707.734 "
    "[mindspore/ccsrc/cluster/rpc/core/communicator/tcp_server.cc:314] Start] Event base dispatch success!",
]
PEER_KILLED_SCHEDULER = [
    "[ERROR] DISTRIBUTED(3781,7f2ce759e6c0,python):2026-12-01-19:45:37.447.449 "
    "[mindspore/ccsrc/cluster/topology/meta_server_node.cc:548] UpdateTopoState] The node: 1 is timed out. It may "
    "exit with exception, please check this node's log.",
    "[ERROR] DISTRIBUTED(3781,7f2d165cab80,python):2026-12-01-19:45:39.873.305 "
    "[mindspore/ccsrc/cluster/topology/meta_server_node.cc:95] Finalize] There are 1 abnormal compute graph nodes.",
    "RuntimeError: The total number of timed out node is 1. Timed out node list is: [const vector]{1}, worker 1 is "
    "the first one timed out, please check its log.",
]


@pytest.mark.parametrize("pattern", PATTERNS, ids=[f"{p.cause.value}:{p.regex.pattern[:40]}" for p in PATTERNS])
def test_each_pattern_recognises_its_published_line(pattern):
    found = classify([pattern.example])
    assert found is not None and found.cause == pattern.cause, (pattern.example, found)
    assert pattern.regex.search(pattern.example)
    assert pattern.source


@pytest.mark.parametrize("lines, cause, rank", [
    (SCHEDULER_UNREACHABLE, Cause.HCCL_CONNECT_TIMEOUT, None),
    (PEER_KILLED_WORKER, Cause.HCCL_EXEC_TIMEOUT, None),
    (PEER_KILLED_SCHEDULER, Cause.PEER_FAILED, 1),
])
def test_whole_measured_logs_classify_as_their_cause(lines, cause, rank):
    found = classify(lines)
    assert (found.cause, found.rank) == (cause, rank)


def test_progress_messages_never_decide_the_cause():
    retry = ("[WARNING] DISTRIBUTED(25541,7f7e7f9e6b80,python):2026-12-01-19:41:35.231.064 "
             "[mindspore/ccsrc/cluster/topology/compute_graph_node.cc:193] Register] Failed to connect to the meta "
             "server node url: 127.0.0.1:19999 Building networking for MS_WORKER failed.")
    assert classify([retry, "ValueError: something else entirely"]) is None


def test_hccls_refusal_of_the_rank_table_is_its_own_cause_not_the_timeouts_it_causes():
    """Two pods on one node with one server_id, or a "-1" device IP: HCCL refuses hccl.json while the communicator
    forms (EI0004), mindspore.communication.init() fails, and the other ranks time out. Never Unknown."""
    lines = [
        "[ERROR] HCCL(3012,python):2026-12-02-08:10:11.123.400 [topoinfo_ranktableParser.cc:537] [3012]"
        "[Check][UniqueAndInsertPool]errNo[0x0000000005000001] [server_id]:[127.15.0.1] is already exist",
        "EI0004: [PID: 3012] 2026-12-02-08:10:11.123.456 The ranktable is invalid, Reason:[The IP is used repeatedly.]",
        "[ERROR] DISTRIBUTED(3012,7f2c,python):2026-12-02-08:10:41.000.000 "
        "[mindspore/ccsrc/cluster/topology/cluster_context.cc:94] Initialize] Building networking for MS_WORKER failed.",
        "RuntimeError: Failed to initialize distributed job cluster because some processes in the cluster are not "
        "successfully spawned.",
    ]
    found = classify(lines)
    assert found is not None and found.cause == Cause.RANK_TABLE_REJECTED
    assert "is already exist" in found.line or "EI0004" in found.line
    assert EXIT_CODES[Cause.RANK_TABLE_REJECTED] == 17
    invalid_ip = classify(["[ERROR] HCCL(9,python):2026-12-02-08:10:11.1 [topoinfo_ranktableParser.cc:470] [9]"
                           "[Check][UniquePara]errNo[0x0000000005000001] ip[-1] is not a valid ip address"])
    assert invalid_ip is not None and invalid_ip.cause == Cause.RANK_TABLE_REJECTED


def test_out_of_memory_wins_over_the_timeouts_it_causes():
    exec_timeout = next(pattern for pattern in PATTERNS if pattern.cause == Cause.HCCL_EXEC_TIMEOUT)
    lines = [exec_timeout.example, "RuntimeError: Device(id:0) memory isn't enough and alloc failed, kernel name: "
                                  "MatMul-op12, alloc size: 2147483648B.", SCHEDULER_UNREACHABLE[1]]
    assert classify(lines).cause == Cause.DEVICE_OUT_OF_MEMORY


def test_the_exit_codes_are_distinct_and_clear_of_python_and_the_signals():
    codes = list(EXIT_CODES.values())
    assert len(set(codes)) == len(codes) == len(Cause)
    assert all(code < 126 for code in codes) and 0 not in codes
    assert failures.MISSING_RUNTIME_EXIT not in codes
    assert failures.CAUSE_OF_EXIT[failures.MISSING_RUNTIME_EXIT] == Cause.CONFIG_ERROR


@pytest.mark.parametrize("error, cause, step", [
    (ConfigError("training.steps=0: must be >= 1"), Cause.CONFIG_ERROR, 0),
    (DataError("AHJ_DATASET_PATH=/x.npy: no such file"), Cause.DATA_ERROR, 0),
    (RankTableTimeout("rank table hccl.json not completed after 600 s"), Cause.RANK_TABLE_TIMEOUT, 0),
    (DivergenceError(7, "loss is nan at step 7"), Cause.NUMERICAL_DIVERGENCE, 7),
    (RuntimeError(PATTERNS[1].example.removeprefix("RuntimeError: ")), Cause.DEVICE_OUT_OF_MEMORY, 0),
    (RuntimeError(PEER_KILLED_SCHEDULER[-1].removeprefix("RuntimeError: ")), Cause.PEER_FAILED, 0),
    (ZeroDivisionError("division by zero"), Cause.UNKNOWN, 0),
])
def test_a_process_classifies_the_exception_that_ends_it(error, cause, step):
    record = record_for_exception(error, 3, 0)
    assert (record.cause, record.step) == (cause.value, step)
    assert record.rank == (1 if cause == Cause.PEER_FAILED else 3)
    if cause == Cause.UNKNOWN:
        assert record.detail == "ZeroDivisionError: division by zero"


def ended(name, rank, code, order, **extra) -> Ended:
    return Ended(name=name, rank=rank, returncode=code, order=order, **extra)


def test_a_peer_lost_in_another_pod_is_named_not_the_collective_timeout_it_caused():
    """Pod 0 of the SIGKILL test: rank 0's all-reduce fails first (its own record says Unknown, its stderr the
    ring timeout); the scheduler, stopped by the launcher, had logged which worker was lost."""
    worker = ended("rank 0", 0, 1, 1.0, tail=PEER_KILLED_WORKER,
                   record=TerminationRecord("Unknown", 0, 41, "RuntimeError: Launch kernel failed"))
    scheduler = ended("MindSpore scheduler", None, -15, 2.0, stopped=True, tail=PEER_KILLED_SCHEDULER[:1])
    verdict = pod_verdict([scheduler, worker])
    # the scheduler may also fail on its own first, with its own PeerFailed record and no step
    on_its_own = ended("MindSpore scheduler", None, 13, 0.5, record=TerminationRecord("PeerFailed", 1, None, "x"))
    assert pod_verdict([on_its_own, worker]).record.step == 41
    # ... and then the launcher stops the worker, whose progress record still tells the step
    stopped = ended("rank 0", 0, -15, 1.0, stopped=True, record=failures.progress_record(0, 17))
    assert pod_verdict([on_its_own, stopped]).record.step == 17
    assert (verdict.record.cause, verdict.record.rank, verdict.record.step) == ("PeerFailed", 1, 41)
    assert verdict.exit_code == EXIT_CODES[Cause.PEER_FAILED]
    assert verdict.record.detail == (
        "rank 0 ended after another rank was lost: The node: 1 is timed out. It may exit with exception, please "
        "check this node's log. (its own error: AllReduceCPUKernelMod launch failed.)")


def test_a_worker_mindspore_ended_with_sigterm_is_an_echo_of_the_lost_peer():
    """Measured: ~30 s after rank 1 was SIGKILLed, MindSpore sent rank 0 a SIGTERM (no error line of its own); the
    scheduler, stopped by the launcher after that, had logged the lost node."""
    worker = ended("rank 0", 0, -signal.SIGTERM, 1.0, record=failures.progress_record(0, 3),
                   tail=["[rank 0] training data_parallel on CPU: steps 1..100000, global batch 2, seq 32",
                         PEER_KILLED_WORKER[-1]])
    scheduler = ended("MindSpore scheduler", None, -signal.SIGTERM, 2.0, stopped=True, tail=PEER_KILLED_SCHEDULER[:1])
    verdict = pod_verdict([scheduler, worker])
    assert (verdict.record.cause, verdict.record.rank, verdict.record.step) == ("PeerFailed", 1, 3)
    alone = pod_verdict([worker])  # no word of a lost peer: the SIGTERM stands, with the shell's code
    assert (alone.record.cause, alone.exit_code) == ("Unknown", 143)
    assert alone.record.detail == ("rank 0 exited with code -15 (killed by SIGTERM): [rank 0] training data_parallel "
                                   "on CPU: steps 1..100000, global batch 2, seq 32")  # the INFO line is no error


def test_the_first_real_cause_wins_over_an_earlier_echo():
    echo = ended("rank 3", 3, 12, 1.0, record=TerminationRecord("HCCLExecTimeout", 3, 9, "EI0002: ..."))
    oom = ended("rank 2", 2, 14, 2.0, record=TerminationRecord("DeviceOutOfMemory", 2, 9, "Out of Memory!!!"))
    later = ended("rank 5", 5, 15, 3.0, record=TerminationRecord("NumericalDivergence", 5, 9, "loss is nan"))
    verdict = pod_verdict([echo, oom, later])
    assert (verdict.record.cause, verdict.record.rank, verdict.exit_code) == ("DeviceOutOfMemory", 2, 14)


def test_processes_the_launcher_stopped_are_not_failures():
    first = ended("rank 1", 1, 16, 1.0, record=TerminationRecord("DataError", 1, 0, "no such file"))
    stopped = ended("rank 0", 0, -15, 2.0, stopped=True, tail=["Traceback", "KeyboardInterrupt"])
    assert pod_verdict([stopped, first]).record.cause == "DataError"
    with pytest.raises(ValueError):
        pod_verdict([stopped])


def test_a_killed_worker_is_unknown_with_the_shells_code_unless_the_oom_killer_did_it():
    killed = ended("rank 1", 1, -signal.SIGKILL, 1.0, tail=['{"step": 2, "loss": 5.9}'])
    verdict = pod_verdict([killed])
    assert (verdict.record.cause, verdict.exit_code) == ("Unknown", 137)
    assert verdict.record.detail.startswith("rank 1 exited with code -9 (killed by SIGKILL)")
    oom = pod_verdict([ended("rank 1", 1, -signal.SIGKILL, 1.0, oom_killed=True)])
    assert (oom.record.cause, oom.exit_code) == ("DeviceOutOfMemory", 14)
    assert "OOM killer" in oom.record.detail


def test_a_worker_killed_mid_step_is_known_by_its_progress_record(tmp_path):
    """MindSpore ends a worker whose collective failed with its own SIGTERM, and SIGKILL leaves no word at all: the
    record the worker rewrote at the start of each step still tells the step."""
    writer = failures.ProgressWriter(str(tmp_path / "rank-1.json"), 1)
    for step in (1, 2, 3):
        writer.step(step)
    progress = read_record(str(tmp_path / "rank-1.json"))
    assert failures.is_progress(progress) and progress.step == 3
    killed = pod_verdict([ended("rank 1", 1, -signal.SIGKILL, 1.0, record=progress)])
    assert (killed.record.cause, killed.record.step, killed.exit_code) == ("Unknown", 3, 137)
    assert killed.record.detail == "rank 1 exited with code -9 (killed by SIGKILL)"
    collective = pod_verdict([ended("rank 0", 0, -signal.SIGTERM, 1.0, record=progress, tail=[
        "[ERROR] DISTRIBUTED(886,7f6e951fa6c0,python):2026-12-01-20:40:59.165.006 "
        "[mindspore/ccsrc/cluster/rpc/core/collective_ops_impl.cc:284] ReduceBroadcastAllReduce] Broadcast wait "
        "sending 87 failed."])])
    assert (collective.record.cause, collective.record.step) == ("HCCLExecTimeout", 3)
    assert collective.record.detail == "Broadcast wait sending 87 failed."
    writer.clear()
    assert (tmp_path / "rank-1.json").read_text() == ""  # success leaves no termination message
    unwritable = failures.ProgressWriter(str(tmp_path / "absent" / "x.json"), 0, lambda message: None)
    unwritable.step(1)
    assert not unwritable.working


def test_without_a_record_the_exit_code_and_then_the_log_tell_the_cause():
    assert pod_verdict([ended("rank 0", 0, 15, 1.0)]).record.cause == "NumericalDivergence"
    connect = pod_verdict([ended("rank 1", 1, 1, 1.0, tail=SCHEDULER_UNREACHABLE)])
    assert (connect.record.cause, connect.exit_code) == ("HCCLConnectTimeout", 11)
    unknown = pod_verdict([ended("rank 0", 0, 1, 1.0, tail=["Traceback (most recent call last):",
                                                             "  File \"x.py\", line 1", "KeyError: 'vocab'"])])
    assert (unknown.record.cause, unknown.exit_code) == ("Unknown", 1)
    assert unknown.record.detail == "rank 0 exited with code 1: KeyError: 'vocab'"


def test_the_record_is_one_line_of_json_clipped_for_the_kubelet(tmp_path):
    record = TerminationRecord("Unknown", 0, 3, "line one\nline two " + "x" * 5000)
    line = record.to_json()
    assert "\n" not in line and len(line.encode()) < 4096
    parsed = json.loads(line)
    assert set(parsed) == {"cause", "rank", "step", "detail"} and parsed["detail"].startswith("line one line two")
    assert TerminationRecord.from_json('{"cause": "Bogus"}') is None
    assert TerminationRecord.from_json("not json") is None


def test_the_record_is_written_atomically_and_an_unwritable_path_never_raises(tmp_path):
    path = tmp_path / "termination-log"
    path.write_text("stale content that is longer than the new record " * 10)
    record = TerminationRecord("DataError", 1, 0, "AHJ_DATASET_PATH=/x.npy: no such file")
    assert write_record(str(path), record)
    assert read_record(str(path)) == record and path.read_text().count("\n") == 1
    assert [p.name for p in tmp_path.iterdir()] == ["termination-log"]  # no temporary file left behind
    said = []
    assert not write_record(str(tmp_path / "missing-dir" / "log"), record, said.append)
    assert "termination record not written" in said[0] and "DataError" in said[0]
    assert not write_record("/dev/ahj-no-such-termination-log", record, said.append)
    assert "does not exist" in said[1]


def test_the_oom_kill_count_is_read_from_the_cgroup(tmp_path):
    v2 = tmp_path / "memory.events"
    v2.write_text("low 0\nhigh 0\nmax 4\noom 2\noom_kill 2\noom_group_kill 0\n")
    assert failures.oom_kills([str(tmp_path / "absent"), str(v2)]) == 2
    assert failures.oom_kills([str(tmp_path / "absent")]) is None


def test_divergence_catches_the_finite_explosion_of_a_huge_learning_rate():
    monitor = DivergenceMonitor(loss_factor=10, grad_factor=100)
    monitor.observe(1, 6.26, 14.3)
    with pytest.raises(DivergenceError) as diverged:
        monitor.observe(2, 2.4e13, 3.1e12)
    assert diverged.value.step == 2
    assert str(diverged.value) == ("loss 2.4e+13 at step 2 is above 10 x its lowest value so far (6.26 at step 1); "
                                   "lower training.learningRate or set training.gradientClipNorm")


@pytest.mark.parametrize("loss, norm, message", [(math.nan, 1.0, "loss is nan at step 3"),
                                                 (math.inf, 1.0, "loss is inf at step 3"),
                                                 (5.0, math.nan, "gradient norm is nan at step 3")])
def test_divergence_catches_non_finite_numbers_whatever_the_factors(loss, norm, message):
    monitor = DivergenceMonitor(loss_factor=0, grad_factor=0)
    monitor.observe(1, 6.0, 2.0)
    monitor.observe(2, 5.5, 2.0)
    with pytest.raises(DivergenceError, match=message):
        monitor.observe(3, loss, norm)


def test_divergence_of_the_gradient_norm_is_judged_against_its_running_median():
    monitor = DivergenceMonitor(loss_factor=10, grad_factor=100)
    for step, norm in enumerate([3.0, 2.0, 900.0, 2.5, 2.0], start=1):  # one spike of 300x before 5 are known
        monitor.observe(step, 5.0, norm)
    monitor.observe(6, 5.0, 240.0)  # 96 x the median 2.5: a spike, not a divergence
    with pytest.raises(DivergenceError, match=r"gradient norm 300 at step 7 is above 100 x its median of the last "
                                              r"6 steps \(2\.75\)"):
        monitor.observe(7, 5.0, 300.0)
    off = DivergenceMonitor(loss_factor=0, grad_factor=0)
    for step in range(1, 10):
        off.observe(step, 5.0 * 10**step, 10.0**step)  # both rules off: only NaN/Inf stop it


def test_a_rising_loss_below_the_factor_is_training_not_divergence():
    monitor = DivergenceMonitor(loss_factor=10, grad_factor=100)
    for step, loss in enumerate([6.2, 4.0, 3.1, 9.5, 30.0], start=1):  # 30 < 10 x 3.1
        monitor.observe(step, loss, 1.0)
    with pytest.raises(DivergenceError, match="above 10 x its lowest value so far \\(3.1 at step 3\\)"):
        monitor.observe(6, 31.5, 1.0)
