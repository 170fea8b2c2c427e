"""One training worker (one rank): the process the launcher starts with MS_ROLE=MS_WORKER or a rank-table env.

Prints one JSON line per step on stdout from global rank 0 (`{"step": n, "loss": x, "gradNorm": g}`, x the loss
of the whole global batch, g the global norm of its gradients before clipping); everything else goes to stderr.
However it ends, it writes its termination record (failures.py) to AHJ_TERMINATION_LOG and exits with the code of
its cause.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, replace

import mindspore as ms
from mindspore import Tensor, nn, ops
from mindspore.communication import GlobalComm, create_group, get_group_size, get_rank, init

from . import checkpoint, defaults, failures, timing
from .config import RunConfig, load_run_config
from .data import inputs_and_labels, open_token_source, rank_slice
from .device import detect_device_target, read_npu_utilization
from .divergence import DivergenceMonitor
from .metrics import TrainerMetrics
from .model import GPTWithLoss
from .strategy import DATA_PARALLEL, SEMI_AUTO_PARALLEL, ParallelPlan, validate_run

TIMED_EVERY_ON_NPU = 8  # one step in this many is timed apart on Ascend (TimedStep): the overlap it costs


@dataclass
class Progress:
    step: int = 0  # the training step in progress; 0 before the first one (cluster formation, compilation)


@dataclass(frozen=True)
class WorkerIdentity:
    rank: int
    world_size: int
    local_rank: int
    device_id: int | None
    launch_mode: str  # "dynamic" (MindSpore scheduler) or "ranktable" (HCCL rank table, Ascend only)

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> WorkerIdentity:
        device = env.get("DEVICE_ID")
        return cls(rank=int(env.get("RANK_ID") or env.get("MS_NODE_ID") or 0),
                   world_size=int(env.get("RANK_SIZE") or env.get("MS_WORKER_NUM") or 1),
                   local_rank=int(env.get("AHJ_LOCAL_RANK") or 0),
                   device_id=int(device) if device not in (None, "") else None,
                   launch_mode=env.get("AHJ_LAUNCH_MODE") or "dynamic")


def log(identity: WorkerIdentity, message: str) -> None:
    print(f"[rank {identity.rank}] {message}", file=sys.stderr, flush=True)


def start_mindspore(identity: WorkerIdentity, device_target: str, plan: ParallelPlan) -> None:
    ms.set_context(mode=ms.GRAPH_MODE)  # semi-auto and pipeline parallel need graph mode; CPU runs it too
    ms.set_device(device_target, identity.device_id if device_target == "Ascend" else None)
    if identity.distributed:
        # Dynamic cluster: init() reads MS_ROLE/MS_SCHED_HOST/MS_SCHED_PORT/MS_WORKER_NUM/MS_NODE_ID.
        # Rank table (Ascend only): init("hccl") reads RANK_TABLE_FILE/RANK_ID/DEVICE_ID/RANK_SIZE.
        if identity.launch_mode == "ranktable":
            init("hccl")
        else:
            init()
        if (get_rank(), get_group_size()) != (identity.rank, identity.world_size):
            raise RuntimeError(f"MindSpore formed rank {get_rank()} of {get_group_size()}, the launcher assigned "
                               f"rank {identity.rank} of {identity.world_size} (MS_NODE_ID/RANK_ID not honoured)")
    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(**plan.context)


def global_norm(grads):
    """The L2 norm of all gradients together (one scalar; cheap next to the backward pass that made them)."""
    return ops.sqrt(ops.addn([ops.reduce_sum(ops.square(grad)) for grad in grads]))


def clipped(grads, norm, clip_norm: float):
    """Global-norm clipping: every gradient scaled by clip / max(norm, clip), so the update keeps its direction
    and its norm is at most clip (Pascanu et al. 2013)."""
    scale = clip_norm / ops.maximum(norm, clip_norm)
    return tuple([grad * scale for grad in grads])


def pipeline_group(identity: WorkerIdentity, stages: int) -> str:
    """The ranks at this rank's position in every pipeline stage (Ascend only), created once."""
    stage_size = identity.world_size // stages
    position = identity.rank % stage_size
    name = f"ahj_pipeline_{position}"
    create_group(name, list(range(position, identity.world_size, stage_size)))
    return name


def build_train_step(network, optimizer, plan: ParallelPlan, data_degree: int, clip_norm: float,
                     stage_group: str | None = None, timed_every: int = 1):
    """A compiled step (a TimedStep): forward, backward, gradient reduction for the mode, global gradient norm,
    optional clipping, optimizer update. A call returns (loss, gradient norm): the loss of the whole global batch on
    every rank that reports it, the norm of the reduced (mean) gradients before clipping, the same number on every
    rank; the step keeps the seconds of this rank's own compute in it.

    microBatches > 1 without a pipeline accumulates: on CPU (stand-alone, data parallel) the step runs the
    micro-batches one after the other and adds their gradients before the one reduction and update; in semi-auto
    (Ascend) MindSpore's GradAccumulation cell does it."""
    if plan.uses_pipeline or (plan.mode == SEMI_AUTO_PARALLEL and plan.accumulates_gradients):
        # Ascend only: micro-batches flow through the stages (or one after the other), gradients accumulate
        from mindspore.parallel.nn import GradAccumulation, Pipeline, PipelineGradReducer

        network = (Pipeline if plan.uses_pipeline else GradAccumulation)(network, plan.micro_batches)
        reduce_gradients = PipelineGradReducer(optimizer.parameters)
    elif plan.mode == DATA_PARALLEL:
        reduce_gradients = nn.DistributedGradReducer(optimizer.parameters, mean=True, degree=data_degree,
                                                     group=GlobalComm.WORLD_COMM_GROUP)
    else:  # stand-alone, or semi-auto where the framework inserts the gradient all-reduce itself
        reduce_gradients = ops.identity
    grad_fn = ms.value_and_grad(network, None, optimizer.parameters)
    sum_over_ranks = ops.AllReduce(group=GlobalComm.WORLD_COMM_GROUP) if plan.mode == DATA_PARALLEL else None
    # Under a pipeline each stage holds its own layers: the squared norms of the stages are added up.
    sum_over_stages = ops.AllReduce(group=stage_group) if stage_group else None

    def finish(loss, grads):
        grads = reduce_gradients(grads)
        if sum_over_stages is not None:
            norm = ops.sqrt(sum_over_stages(ops.addn([ops.reduce_sum(ops.square(grad)) for grad in grads])))
        else:
            norm = global_norm(grads)
        if clip_norm:
            grads = clipped(grads, norm, clip_norm)
        optimizer(grads)
        if sum_over_ranks is not None:
            loss = sum_over_ranks(loss) / data_degree  # each rank's loss is the mean of its equal slice
        return loss, norm

    @ms.jit
    def step(input_ids, labels):
        loss, grads = grad_fn(input_ids, labels)
        return finish(loss, grads)

    if plan.mode == SEMI_AUTO_PARALLEL:
        return TimedStep(step)  # the framework places the collectives inside the graph: no split to time

    micro_batches = plan.micro_batches

    @ms.jit
    def local_gradients(input_ids, labels):
        return grad_fn(input_ids, labels)

    @ms.jit
    def accumulated_gradients(input_ids, labels):  # the loop is unrolled at compile time: one graph, one call
        rows = input_ids.shape[0] // micro_batches
        total_loss, total_grads = grad_fn(input_ids[:rows], labels[:rows])
        for index in range(1, micro_batches):
            loss, grads = grad_fn(input_ids[index * rows:(index + 1) * rows],
                                  labels[index * rows:(index + 1) * rows])
            total_loss = total_loss + loss
            total_grads = tuple([total + grad for total, grad in zip(total_grads, grads)])
        return total_loss / micro_batches, tuple([grad / micro_batches for grad in total_grads])

    @ms.jit
    def reduce_and_update(loss, grads):
        return finish(loss, grads)

    @ms.jit
    def accumulating_step(input_ids, labels):
        loss, grads = accumulated_gradients(input_ids, labels)
        return finish(loss, grads)

    compute = accumulated_gradients if plan.accumulates_gradients else local_gradients
    whole = accumulating_step if plan.accumulates_gradients else step
    return TimedStep(whole, compute, reduce_and_update, timed_every)


class TimedStep:
    """One training step, and the seconds of this rank's own compute in it (`compute_seconds`, None for a step not
    timed). A timed data-parallel step runs as two compiled graphs — the local forward and backward, then the
    gradient all-reduce and the update — and waits for the first to finish before timing it, so the rest is the wait
    for the slowest rank. That costs the overlap of the backward pass with the gradient all-reduce the one graph has
    on Ascend, so there one step in `every` is timed (AHJ_TIMED_STEP_EVERY, default 8; on CPU, which overlaps
    nothing, every step); 0 times none. The first timed step compiles its graphs: its compute is not kept. Semi-auto
    parallel (Ascend) runs one graph, whose compute share is not known."""

    def __init__(self, whole, compute=None, reduce_and_update=None, every: int = 1):
        self.whole, self.compute, self.reduce_and_update, self.every = whole, compute, reduce_and_update, every
        self.compute_seconds: float | None = None
        self.calls = self.timed = 0

    def __call__(self, input_ids, labels):
        self.calls += 1
        self.compute_seconds = None
        if self.compute is None or self.every <= 0 or self.calls % self.every:
            return self.whole(input_ids, labels)
        started = time.perf_counter()
        loss, grads = self.compute(input_ids, labels)
        ms.runtime.synchronize()
        self.timed += 1
        if self.timed > 1 or self.every == 1:  # every step timed: the process's warm-up is skipped by timing.py
            self.compute_seconds = time.perf_counter() - started
        # mutable: a tuple handed to a compiled graph is otherwise a constant of it, compiled anew for every step
        return self.reduce_and_update(loss, ms.mutable(grads))


def make_loss_reporter(plan: ParallelPlan, identity: WorkerIdentity, stage_group: str | None):
    """Under pipeline parallelism only the last stage computes the loss: every rank all-reduces over its pipeline
    group (the ranks at the same position of each stage), the other stages contributing zero, so rank 0 prints
    it and each pod's metrics show it. The Pipeline and GradAccumulation cells sum the micro-batch losses, so
    their mean is the global-batch loss. Ascend only."""
    if plan.uses_pipeline:
        is_last_stage = identity.rank // (identity.world_size // plan.pipeline_stages) == plan.pipeline_stages - 1
        all_reduce = ops.AllReduce(group=stage_group)
        micro_batches = plan.micro_batches
        return lambda loss: float(all_reduce(loss if is_last_stage else ops.zeros_like(loss))) / micro_batches
    if plan.mode == SEMI_AUTO_PARALLEL and plan.accumulates_gradients:
        return lambda loss: float(loss) / plan.micro_batches
    return lambda loss: float(loss)


def make_optimizer(parameters, learning_rate: float, plan: ParallelPlan):
    """Adam with bias correction: its first updates are ±learning_rate, where AdamWeightDecay (no bias
    correction) moves every weight ~3x that far and makes the first steps spike. MindSpore's parallel optimizer
    in data_parallel mode accepts only AdamWeightDecay or Lamb (Ascend), so that one combination gets
    AdamWeightDecay."""
    if plan.mode == DATA_PARALLEL and plan.context.get("enable_parallel_optimizer"):
        return nn.AdamWeightDecay(parameters, learning_rate=learning_rate, weight_decay=0.0)
    return nn.Adam(parameters, learning_rate=learning_rate)


class TrainState(nn.Cell):
    """Network + optimizer as one cell, so a checkpoint holds parameters and optimizer moments together."""

    def __init__(self, network, optimizer):
        super().__init__(auto_prefix=False)
        self.network, self.optimizer = network, optimizer


def resume(state, root: str, per_rank: bool, identity: WorkerIdentity) -> int:
    """The step of the newest committed checkpoint, loaded into `state`; 0 for a fresh start."""
    latest = checkpoint.read_latest(root)
    if latest is None:
        return 0
    path = checkpoint.checkpoint_file(root, identity.rank if per_rank else 0, latest["step"])
    if not os.path.exists(path):
        raise RuntimeError(f"{root}/latest.json names step {latest['step']} but {path} is missing (the claim "
                           f"holds checkpoints of a job with another world size or layout?)")
    missing, _ = ms.load_param_into_net(state, ms.load_checkpoint(path))
    if missing:
        raise RuntimeError(f"checkpoint {path} does not fit this model: {len(missing)} parameters absent, e.g. "
                           f"{', '.join(missing[:3])} (was the model or parallel layout changed?)")
    log(identity, f"resumed from {path}: step {latest['step']}, loss {latest.get('loss')}")
    return latest["step"]


def save(state, root: str, step: int, loss: float, identity: WorkerIdentity, plan: ParallelPlan,
         per_rank: bool, keep: int) -> None:
    writes = per_rank or identity.rank == 0
    if writes:
        directory = checkpoint.rank_directory(root, identity.rank)
        os.makedirs(directory, exist_ok=True)
        temporary = os.path.join(directory, f".partial_step_{step}.ckpt")
        ms.save_checkpoint(state, temporary, integrated_save=not per_rank)
        os.replace(temporary, checkpoint.checkpoint_file(root, identity.rank, step))
    if per_rank and identity.distributed:
        from mindspore.communication.comm_func import barrier

        barrier()  # every rank's slice of this step is on disk before rank 0 commits it
    if identity.rank == 0:
        checkpoint.commit(root, step, loss, identity.world_size, plan.mode)
    if writes:
        for old in checkpoint.steps_to_prune(checkpoint.steps_on_disk(directory), step, keep):
            os.remove(checkpoint.checkpoint_file(root, identity.rank, old))


def start_metrics(config: RunConfig, identity: WorkerIdentity, env: Mapping[str, str], own: timing.RankTiming):
    if identity.local_rank != 0:
        return None
    chips = [int(chip) for chip in (env.get("AHJ_POD_CHIPS") or "").split(",") if chip.strip()]
    shared = env.get("AHJ_TIMING_DIR")
    metrics = TrainerMetrics(npu_reader=(lambda: read_npu_utilization(chips)) if chips else None,
                             rank_timings=(lambda: timing.read_all(shared)) if shared else (lambda: [own.figures()]))
    address = env.get("POD_IP") or "127.0.0.1"
    try:
        port = metrics.serve(address, config.metrics_port)
    except OSError as error:
        # Metrics are for watching the job; a taken port must not stop the training, but it must be visible.
        log(identity, f"metrics endpoint {address}:{config.metrics_port} not served ({error}); set "
                      f"AHJ_METRICS_PORT to a free port")
        return None
    log(identity, f"metrics on http://{address}:{port}/metrics")
    return metrics


def termination_log(env: Mapping[str, str]) -> str:
    return env.get("AHJ_TERMINATION_LOG") or defaults.ENV["AHJ_TERMINATION_LOG"]


def train(config: RunConfig, identity: WorkerIdentity, env: Mapping[str, str], progress: Progress) -> int:
    degrees, model_config, training = config.parallelism, config.model, config.training
    device_target = detect_device_target(env)
    plan = validate_run(degrees, model_config, training, identity.world_size, device_target, identity.launch_mode)
    source = open_token_source(config.dataset_path, model_config.vocab, training.seq_length, training.seed)
    start_mindspore(identity, device_target, plan)
    ms.set_seed(training.seed)  # identical initial weights on every rank and at every DP degree
    if plan.mode == SEMI_AUTO_PARALLEL:  # full batch: one forward pass sees a micro-batch of the global batch
        micro_batch, routing_groups = training.global_batch_size // plan.micro_batches, degrees.data
    else:  # each DP rank its slice, one micro-batch of it per forward pass
        micro_batch, routing_groups = plan.micro_batch_size, 1
    network = GPTWithLoss(model_config, plan, training.seq_length, micro_batch, routing_groups)
    optimizer = make_optimizer(network.trainable_params(), training.learning_rate, plan)
    stage_group = pipeline_group(identity, plan.pipeline_stages) if plan.uses_pipeline else None
    timed_every = int(env.get("AHJ_TIMED_STEP_EVERY") or (1 if device_target == "CPU" else TIMED_EVERY_ON_NPU))
    step_fn = build_train_step(network, optimizer, plan, degrees.data, training.gradient_clip_norm, stage_group,
                               timed_every)
    report_loss = make_loss_reporter(plan, identity, stage_group)
    monitor = DivergenceMonitor(training.divergence_loss_factor, training.divergence_grad_factor)
    state = TrainState(network, optimizer)
    per_rank = plan.mode == SEMI_AUTO_PARALLEL or bool(plan.context.get("enable_parallel_optimizer"))
    keep = config.checkpoint_keep
    start_step = resume(state, config.checkpoint_dir, per_rank, identity) if config.checkpoint_dir else 0
    rank_timing = timing.RankTiming(identity.rank, env.get("AHJ_TIMING_DIR"))
    metrics = start_metrics(config, identity, env, rank_timing)
    if metrics is not None:
        metrics.step.set(start_step)
    if start_step >= training.steps:
        log(identity, f"checkpoint is at step {start_step} >= training.steps={training.steps}: nothing to train")
        return 0
    interval = checkpoint.Interval(training.checkpoint_every, env.get("AHJ_CHECKPOINT_INTERVAL_FILE"))
    tokens_per_step = training.global_batch_size * training.seq_length
    log(identity, f"training {plan.mode} on {device_target}: steps {start_step + 1}..{training.steps}, global "
                  f"batch {training.global_batch_size}, seq {training.seq_length}")
    writer = failures.ProgressWriter(termination_log(env), identity.rank, lambda message: log(identity, message))
    for step in range(start_step + 1, training.steps + 1):
        progress.step = step
        writer.step(step)
        batch = source.global_batch(step, training.global_batch_size)
        if not plan.full_batch:
            batch = rank_slice(batch, identity.rank, degrees.data)
        input_ids, labels = inputs_and_labels(batch)
        started = time.perf_counter()
        raw_loss, raw_norm = step_fn(Tensor(input_ids), Tensor(labels))
        loss, grad_norm = report_loss(raw_loss), float(raw_norm)
        seconds = time.perf_counter() - started
        rank_timing.record(step, seconds, step_fn.compute_seconds)
        if identity.rank == 0:
            print(json.dumps({"step": step, "loss": loss, "gradNorm": grad_norm}), flush=True)
        if metrics is not None:
            metrics.record_step(step, loss, seconds, training.global_batch_size, tokens_per_step, grad_norm)
        monitor.observe(step, loss, grad_norm)  # every rank sees the same numbers: all stop at the same step
        if step % config.log_every == 0 or step == training.steps:
            log(identity, f"step {step}/{training.steps} loss {loss:.5f} step {seconds:.3f} s "
                          f"{tokens_per_step / seconds:.0f} tokens/s")
        if config.checkpoint_dir and (interval.due(step) or step == training.steps):
            saving = time.perf_counter()
            save(state, config.checkpoint_dir, step, loss, identity, plan, per_rank, keep)
            if metrics is not None:
                metrics.record_save(time.perf_counter() - saving)
    writer.clear()
    return 0


def main(env: Mapping[str, str] = os.environ) -> int:
    identity = WorkerIdentity.from_env(env)
    progress = Progress()
    try:
        return train(load_run_config(env), identity, env, progress)
    except Exception as error:  # noqa: BLE001 - every end is classified, written down and given its exit code
        record = failures.record_for_exception(error, identity.rank, progress.step)
        if record.cause == failures.Cause.HCCL_CONNECT_TIMEOUT.value and env.get("MS_SCHED_HOST"):
            record = replace(record, detail=(
                f"the MindSpore cluster did not form within MS_TOPO_TIMEOUT={env.get('MS_TOPO_TIMEOUT', '1800')} s "
                f"(scheduler {env['MS_SCHED_HOST']}:{env.get('MS_SCHED_PORT')}, {identity.world_size} ranks): "
                f"{record.detail}"))
        if record.cause == failures.Cause.UNKNOWN.value:
            traceback.print_exc()  # an unforeseen error: the whole story, for whoever debugs it
        else:
            log(identity, f"error: {error}")
        log(identity, f"ended with {record.cause} at step {progress.step}")
        failures.write_record(termination_log(env), record, lambda message: log(identity, message))
        return record.exit_code()
