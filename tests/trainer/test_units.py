"""The trainer's pure pieces: launcher env, rank table, device ids, checkpoints bookkeeping, data sources,
npu-smi parsing, the CLI's install hint. The MindSpore-backed ones (MindRecord, MoE routing) are marked."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from ascend_hybrid_trainer import checkpoint, cli
from ascend_hybrid_trainer.config import ConfigError, DataError
from ascend_hybrid_trainer.data import NumpyTokens, SyntheticTokens, open_token_source, rank_slice
from ascend_hybrid_trainer.device import detect_device_target, logical_device_id, parse_aicore_usage, visible_devices
from ascend_hybrid_trainer.launcher import describe_exit, exit_code_of, read_pod_launch, scheduler_env, worker_env
from ascend_hybrid_trainer.rank_table import (
    RankTableTimeout,
    local_device_ids,
    local_pods_rank_table,
    wait_for_completed,
    write_json_atomically,
)

POD_ENV = {"MS_ROLE": "MS_WORKER", "MS_SCHED_HOST": "10.96.0.12", "MS_SCHED_PORT": "2222", "MS_WORKER_NUM": "16",
           "MS_LOCAL_WORKER": "8", "MS_NODE_RANK": "1", "RANK_TABLE_FILE": "/user/serverid/devindex/config/hccl.json",
           "RANK_SIZE": "16", "RANK_START": "8", "POD_IP": "127.20.0.2", "PATH": "/usr/bin"}


def test_workers_get_their_rank_device_and_the_cluster_address():
    launch = read_pod_launch(POD_ENV)
    env = worker_env(POD_ENV, launch, local_index=3, device_id=3, pod_chips=[str(c) for c in range(8)])
    assert (env["MS_NODE_ID"], env["RANK_ID"], env["DEVICE_ID"], env["AHJ_LOCAL_RANK"]) == ("11", "11", "3", "3")
    assert (env["MS_ROLE"], env["MS_WORKER_NUM"], env["RANK_SIZE"]) == ("MS_WORKER", "16", "16")
    assert env["MS_SCHED_HOST"] == "10.96.0.12"  # not pod 0: the Service's ClusterIP routes to pod 0
    assert env["MS_WORKER_IP"] == "127.20.0.2" and env["PATH"] == "/usr/bin"


def test_pod_zero_points_scheduler_and_workers_at_its_own_ip():
    env = {**POD_ENV, "MS_NODE_RANK": "0", "RANK_START": "0"}
    launch = read_pod_launch(env)
    assert launch.runs_scheduler
    assert worker_env(env, launch, 0, 0, ["0"])["MS_SCHED_HOST"] == "127.20.0.2"
    scheduler = scheduler_env(env, launch)
    assert (scheduler["MS_ROLE"], scheduler["MS_SCHED_HOST"], scheduler["MS_SCHED_PORT"]) == (
        "MS_SCHED", "127.20.0.2", "2222")
    assert "MS_NODE_ID" not in scheduler


def test_a_one_rank_job_runs_stand_alone_without_cluster_variables():
    env = {**POD_ENV, "MS_WORKER_NUM": "1", "RANK_SIZE": "1", "MS_LOCAL_WORKER": "1", "RANK_START": "0",
           "MS_NODE_RANK": "0"}
    launch = read_pod_launch(env)
    assert not launch.runs_scheduler
    assert not {"MS_ROLE", "MS_SCHED_HOST", "MS_NODE_ID"} & set(worker_env(env, launch, 0, 0, ["0"]))


def test_rank_table_launch_passes_the_hccl_variables_only():
    env = {**POD_ENV, "AHJ_LAUNCH_MODE": "ranktable"}
    launch = read_pod_launch(env)
    worker = worker_env(env, launch, 0, 5, ["5"])
    assert not launch.runs_scheduler and "MS_ROLE" not in worker
    assert (worker["RANK_TABLE_FILE"], worker["RANK_ID"], worker["DEVICE_ID"], worker["RANK_SIZE"]) == (
        POD_ENV["RANK_TABLE_FILE"], "8", "5", "16")


@pytest.mark.parametrize("change,message", [
    ({"RANK_TABLE_FILE": ""}, "RANK_TABLE_FILE is not set"),
    ({"MS_WORKER_NUM": "8"}, "MS_WORKER_NUM=8 and RANK_SIZE=16 must be equal"),
    ({"RANK_START": "12"}, r"RANK_START=12 \+ MS_LOCAL_WORKER=8 must lie within RANK_SIZE=16"),
    ({"AHJ_LAUNCH_MODE": "mpirun"}, "AHJ_LAUNCH_MODE='mpirun'"),
    ({"MS_LOCAL_WORKER": "x"}, "MS_LOCAL_WORKER='x': must be an integer"),
])
def test_inconsistent_pod_env_is_refused_naming_the_variable(change, message):
    with pytest.raises(ConfigError, match=message):
        read_pod_launch({**POD_ENV, **change})


def test_exit_codes_follow_the_shell_convention():
    assert (exit_code_of(0), exit_code_of(3), exit_code_of(-9)) == (0, 3, 137)
    assert describe_exit(-9) == "code -9 (killed by SIGKILL)" and describe_exit(2) == "code 2"


def test_device_ids_come_from_the_rank_table_and_respect_visible_devices():
    table = local_pods_rank_table(pods=2, per_pod=2)
    assert local_device_ids(table, range(2, 4), "hccl.json") == ["2", "3"]
    with pytest.raises(ConfigError, match=r"no device for rank\(s\) \[4\]"):
        local_device_ids(table, range(3, 5), "hccl.json")
    assert logical_device_id("5", None, rank=0) == 5
    assert logical_device_id("5", ["4", "5"], rank=0) == 1
    with pytest.raises(ConfigError, match="rank 3 is on chip 6, but ASCEND_VISIBLE_DEVICES=4,5 does not list it"):
        logical_device_id("6", ["4", "5"], rank=3)


@pytest.mark.parametrize(("raw", "chips"), [
    ("4,5", ["4", "5"]), ("Ascend910-4,Ascend910-5", ["4", "5"]), (" Ascend910-0 , Ascend910-12 ", ["0", "12"]),
    ("Ascend910B-3", ["3"]), ("", None)])
def test_visible_devices_take_numbers_and_mindclusters_device_names(raw, chips):
    """MindCluster's ascend-operator injects ASCEND_VISIBLE_DEVICES from the device plugin's huawei.com/Ascend910
    annotation: "Ascend910-4,Ascend910-5"; the Ascend docker runtime and this launcher read chip 4 and 5."""
    assert visible_devices({"ASCEND_VISIBLE_DEVICES": raw}) == chips
    if chips:
        assert logical_device_id(chips[-1], chips, rank=0) == len(chips) - 1


def test_visible_devices_refuse_what_names_no_chip():
    with pytest.raises(ConfigError, match="'npu-x' is neither a chip number"):
        visible_devices({"ASCEND_VISIBLE_DEVICES": "Ascend910-1,npu-x"})


def test_local_pods_on_one_host_get_unique_server_ids():
    table = local_pods_rank_table(pods=3, per_pod=1)
    ids = [server["server_id"] for server in table["server_list"]]
    assert len(set(ids)) == 3 and {server["host_ip"] for server in table["server_list"]} == {"127.0.0.1"}
    assert local_pods_rank_table(pods=1, per_pod=2)["server_list"][0]["server_id"] == "127.0.0.1"


def test_device_target_detection(tmp_path):
    assert detect_device_target({}, dev_root=str(tmp_path)) == "CPU"
    (tmp_path / "davinci3").touch()
    assert detect_device_target({}, dev_root=str(tmp_path)) == "Ascend"
    assert detect_device_target({"AHJ_DEVICE_TARGET": "CPU"}, dev_root=str(tmp_path)) == "CPU"
    with pytest.raises(ConfigError, match="AHJ_DEVICE_TARGET='GPU'"):
        detect_device_target({"AHJ_DEVICE_TARGET": "GPU"})


def test_waiting_for_the_rank_table_returns_once_it_is_completed(tmp_path):
    path = tmp_path / "hccl.json"
    path.write_text(json.dumps({"status": "initializing"}))
    completed = local_pods_rank_table(1, 1)
    threading.Timer(0.3, write_json_atomically, args=(str(path), completed)).start()
    assert wait_for_completed(str(path), timeout_seconds=10, poll_seconds=0.05) == completed
    path.write_text("{half written")
    with pytest.raises(RankTableTimeout, match=r"status: absent or unreadable"):
        wait_for_completed(str(path), timeout_seconds=0.2, poll_seconds=0.05)


def test_checkpoint_pruning_keeps_the_newest_committed_and_anything_newer():
    assert checkpoint.steps_to_prune([100, 200, 300, 400], committed=300, keep=2) == [100]
    assert checkpoint.steps_to_prune([100, 200], committed=200, keep=2) == []
    assert checkpoint.steps_to_prune([100, 200, 300], committed=300, keep=0) == []


def test_checkpoint_commit_round_trip_and_a_corrupt_marker(tmp_path):
    assert checkpoint.read_latest(str(tmp_path)) is None
    checkpoint.commit(str(tmp_path), 40, 3.5, 2, "data_parallel")
    assert checkpoint.read_latest(str(tmp_path)) == {"step": 40, "loss": 3.5, "worldSize": 2,
                                                     "mode": "data_parallel"}
    (tmp_path / "rank_0").mkdir()
    for name in ("step_20.ckpt", "step_40.ckpt", ".partial_step_60.ckpt", "notes.txt"):
        (tmp_path / "rank_0" / name).touch()
    assert checkpoint.steps_on_disk(str(tmp_path / "rank_0")) == [20, 40]
    (tmp_path / "latest.json").write_text("{")
    with pytest.raises(RuntimeError, match="latest.json is not valid JSON"):
        checkpoint.read_latest(str(tmp_path))


def test_synthetic_batches_depend_on_seed_and_step_only():
    source = SyntheticTokens(vocab=512, seq_length=16, seed=7)
    first = source.global_batch(3, 8)
    assert first.shape == (8, 17) and first.dtype == np.int32 and first.max() < 512
    assert np.array_equal(first, SyntheticTokens(512, 16, 7).global_batch(3, 8))
    assert not np.array_equal(first, source.global_batch(4, 8))


@pytest.mark.parametrize("degree", [1, 2, 4, 8])
def test_data_parallel_slices_rebuild_the_global_batch(degree):
    batch = SyntheticTokens(512, 8, 0).global_batch(1, 8)
    assert np.array_equal(np.concatenate([rank_slice(batch, rank, degree) for rank in range(degree)]), batch)


def test_numpy_dataset_stream_and_samples(tmp_path):
    stream = np.arange(100, dtype=np.int64) % 50
    np.save(tmp_path / "stream.npy", stream)
    source = open_token_source(str(tmp_path / "stream.npy"), vocab=50, seq_length=9, seed=0)
    assert isinstance(source, NumpyTokens)
    assert np.array_equal(source.global_batch(0, 2), stream[:20].reshape(2, 10))
    assert np.array_equal(source.global_batch(5, 2), stream[:20].reshape(2, 10))  # 10 windows: wraps around
    with pytest.raises(DataError, match=r"token ids must lie in \[0, model.vocab=40\)"):
        NumpyTokens(str(tmp_path / "stream.npy"), 9, vocab=40).global_batch(0, 10)
    with pytest.raises(DataError, match="samples need at least seqLength\\+1=101 tokens"):
        NumpyTokens(str(tmp_path / "stream.npy"), 100, vocab=50)
    with pytest.raises(DataError, match="expected a .npy file or a .mindrecord file"):
        open_token_source(str(tmp_path), 50, 9, 0)
    (tmp_path / "garbage.npy").write_bytes(b"not numpy")
    with pytest.raises(DataError, match="garbage.npy: not a readable .npy array"):
        open_token_source(str(tmp_path / "garbage.npy"), 50, 9, 0)


def test_npu_smi_usage_is_parsed():
    output = "NPU ID : 4\nChip ID : 0\nHBM Usage Rate(%) : 12\nAicore Usage Rate(%) : 37\n"
    assert parse_aicore_usage(output) == 37.0
    assert parse_aicore_usage("npu-smi: command failed") is None


def test_without_mindspore_the_command_says_how_to_install_it(monkeypatch, capsys):
    real_find_spec = cli.importlib.util.find_spec
    monkeypatch.setattr(cli.importlib.util, "find_spec",
                        lambda name, *rest: None if name == "mindspore" else real_find_spec(name, *rest))
    assert cli.main(["local", "--data", "1"]) == 3
    assert "pip install 'ascend-hybrid[trainer]'" in capsys.readouterr().err


@pytest.mark.trainer
def test_mindrecord_dataset_reads_like_the_numpy_one(tmp_path):
    from mindspore.mindrecord import FileWriter

    samples = (np.arange(60, dtype=np.int32) % 30).reshape(6, 10)
    writer = FileWriter(str(tmp_path / "tokens.mindrecord"), shard_num=1, overwrite=True)
    writer.add_schema({"input_ids": {"type": "int32", "shape": [-1]}}, "tokens")
    writer.write_raw_data([{"input_ids": row} for row in samples])
    writer.commit()
    np.save(tmp_path / "tokens.npy", samples)
    from_record = open_token_source(str(tmp_path / "tokens.mindrecord"), vocab=30, seq_length=9, seed=0)
    from_numpy = open_token_source(str(tmp_path / "tokens.npy"), vocab=30, seq_length=9, seed=0)
    for step in (0, 1, 2, 5, 1):  # in order, past the end, and back (a resume)
        assert np.array_equal(from_record.global_batch(step, 4), from_numpy.global_batch(step, 4)), step


@pytest.mark.trainer
def test_moe_routing_respects_capacity_and_gate_weights():
    import mindspore as ms

    from ascend_hybrid_trainer.config import ModelConfig
    from ascend_hybrid_trainer.model import MoEFeedForward

    ms.set_context(mode=ms.PYNATIVE_MODE)
    config = ModelConfig(layers=1, hidden=8, heads=2, ffn_hidden=16, vocab=32, experts=4, top_k=2,
                         capacity_factor=0.5)
    moe = MoEFeedForward(config, tokens_per_group=16, groups=2, shards=None)
    assert moe.capacity == 4  # ceil(0.5 · 16 · 2 / 4)
    rng = np.random.RandomState(0)
    probs = rng.dirichlet(np.ones(4), size=(2, 16)).astype(np.float32)
    probs[:, :, 0] += 1.0  # expert 0 is everybody's favourite: it overflows
    probs /= probs.sum(-1, keepdims=True)
    dispatch, combine, first = (t.asnumpy() for t in moe.route(ms.Tensor(probs)))
    assert dispatch.sum(axis=(1, 3)).max() <= moe.capacity * 1.0  # no expert takes more than its capacity
    assert dispatch.max() == 1.0 and (dispatch.sum(axis=3) <= 1).all()  # one slot per token and expert at most
    assert np.all(combine.sum(axis=(2, 3)) <= 1.0 + 1e-6)
    assert (dispatch[:, :4, 0, :].sum(axis=-1) == 1).all()  # the first tokens got expert 0's slots, in order
    assert (dispatch[:, 4:, 0, :] == 0).all()
    assert np.array_equal(first.argmax(-1), probs.argmax(-1))
    output, _ = moe(ms.Tensor(rng.randn(32, 8).astype(np.float32)))
    assert output.shape == (32, 8)
    moe.router.weight.set_data(ms.Tensor(np.zeros((4, 8), np.float32)))
    _, balance = moe(ms.Tensor(rng.randn(32, 8).astype(np.float32)))
    assert float(balance) == pytest.approx(1.0)  # uniform router probabilities: the Switch loss is exactly 1


def test_a_ranks_timing_is_the_mean_of_its_recent_steps_written_for_its_pod(tmp_path):
    from ascend_hybrid_trainer import timing

    clock = [0.0]
    rank = timing.RankTiming(3, str(tmp_path), clock=lambda: clock[0])
    for step in range(1, 31):  # one step a second: the first ten at 1 s compute, then the rank turns slow
        clock[0] = float(step)
        rank.record(step, 2.0, 1.0 if step <= 10 else 1.5)
        if step <= timing.WARMUP_STEPS:  # compilation and warm-up: not timed
            assert rank.figures().steps == 0
    figures = rank.figures()
    assert figures.steps == 16  # the steps that ended within the last 15 s
    assert (figures.step, figures.compute_seconds, figures.wait_seconds) == (30, 1.5, 0.5)
    assert timing.read_all(str(tmp_path)) == [figures]
    whole = timing.RankTiming(0, None, clock=lambda: clock[0])
    whole.record(1, 2.0, None)  # one compiled graph (semi-auto): no compute share
    assert whole.figures().compute_seconds is None and timing.read_all(None) == []


def test_a_checkpoint_interval_follows_the_file_the_launcher_rewrites_and_keeps_its_own_without_one(tmp_path):
    fixed = checkpoint.Interval(50, None)
    assert [step for step in range(1, 201) if fixed.due(step)] == [50, 100, 150, 200]
    path = tmp_path / "interval.json"
    following = checkpoint.Interval(50, str(path))
    assert following.due(50)
    path.write_text('{"everySteps": 20, "fromStep": 0}')  # a new process reads it at once
    assert [step for step in range(51, 101) if following.due(step)] == [60, 80, 100]
    path.write_text("{half")  # a torn file is not read: the interval in force stays
    assert following.due(120) and not following.due(130)


def test_a_save_the_operator_asks_for_comes_on_top_of_the_interval(tmp_path):
    path = tmp_path / "interval.json"
    interval = checkpoint.Interval(100, str(path))
    path.write_text('{"everySteps": 100, "fromStep": 0, "saveAt": 137}')
    assert [step for step in range(101, 220) if interval.due(step)] == [137, 200]


def test_an_interval_told_directly_takes_the_new_one_from_its_from_step_and_ignores_what_does_not_parse():
    interval = checkpoint.Interval(100)  # a fresh process: its own interval until the operator's fromStep
    interval.told({"everySteps": 57, "fromStep": 314, "saveAt": 280})
    assert [step for step in range(270, 400) if interval.due(step)] == [280, 300, 342, 399]
    for garbage in ({"everySteps": "x"}, {"fromStep": 5}, None, ["everySteps"]):
        interval.told(garbage)
    assert interval.every == 57 and interval.due(456) and not interval.due(400)


def test_a_window_of_timed_steps_among_untimed_ones_keeps_their_compute_and_wait(tmp_path):
    """On Ascend one step in several is timed apart: the compute and wait are those of the timed steps."""
    from ascend_hybrid_trainer import timing

    clock = [0.0]
    rank = timing.RankTiming(0, None, clock=lambda: clock[0])
    for step in range(1, 81):  # a step every 2 s, one in 8 timed
        clock[0] = 2.0 * step
        rank.record(step, 2.0, 1.5 if step % 8 == 0 else None)
    figures = rank.figures()
    assert (figures.step_seconds, figures.compute_seconds, figures.wait_seconds) == (2.0, 1.5, 0.5)
    assert figures.steps > 15 / 2  # older steps kept until two timed ones are in the window
