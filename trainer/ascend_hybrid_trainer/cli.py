"""ascend-hybrid-trainer: `launch` (the image entrypoint), `local` (N CPU pods on this machine), and the two
processes the launcher starts, `worker` and `scheduler`."""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import sys

from . import defaults, failures

INSTALL_HINT = ("install the trainer extra: pip install 'ascend-hybrid[trainer]' (MindSpore 2.10.0 and numpy "
                "1.26.4; on Ascend use the MindSpore wheel that matches the image's CANN toolkit)")


def missing_runtime() -> str | None:
    """Why the trainer cannot run here, or None. Checked before anything imports MindSpore."""
    for module in ("mindspore", "numpy", "prometheus_client"):
        if importlib.util.find_spec(module) is None:
            return f"ascend-hybrid-trainer needs the Python package {module!r}, which is not installed; {INSTALL_HINT}"
    numpy_version = importlib.metadata.version("numpy")
    if int(numpy_version.split(".")[0]) >= 2:
        return (f"numpy {numpy_version} is installed; MindSpore 2.10 needs numpy 1.x (numpy 2 breaks it): "
                f"pip install numpy==1.26.4")
    return None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ascend-hybrid-trainer", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("launch", help="pod entrypoint: wait for hccl.json, start the scheduler (pod 0) and the "
                                       "pod's workers from the operator's env (design §8-§9)")
    local = commands.add_parser("local", help="run the launcher for N local CPU pods (one worker each); rank 0 "
                                              "prints one JSON line per step")
    local.add_argument("--data", type=int, required=True, help="data-parallel degree = local worker processes")
    local.add_argument("--tensor", type=int, default=1, help="tensor-parallel degree (CPU refuses > 1)")
    local.add_argument("--pipeline", type=int, default=1, help="pipeline degree (CPU refuses > 1)")
    local.add_argument("--expert", type=int, default=1, help="expert-parallel degree (CPU refuses > 1)")
    local.add_argument("--preset", default=defaults.MODEL["preset"],
                       help=f"model preset: tiny, gpt-1b, moe-100b (default {defaults.MODEL['preset']})")
    local.add_argument("--layers", type=int, help="override the preset's layer count")
    local.add_argument("--experts", type=int, help="override the preset's MoE experts (0 = dense)")
    local.add_argument("--top-k", type=int, help="experts per token (MoE)")
    local.add_argument("--kv-heads", type=int, help="key/value heads (grouped-query attention; default: heads)")
    local.add_argument("--ffn-type", choices=("gelu", "swiglu"), help="feed-forward block (default gelu)")
    local.add_argument("--micro-batches", type=int, help="micro-batches per step; without a pipeline the step "
                                                          "accumulates their gradients (default 1)")
    local.add_argument("--recompute", choices=("none", "selective", "full"),
                       help=f"activation recomputation (default {defaults.TRAINING['recompute']})")
    local.add_argument("--gradient-clip-norm", type=float,
                       help="clip the global gradient norm to this (default 0: no clipping)")
    local.add_argument("--divergence-loss-factor", type=float, help="stop when the loss exceeds this many times "
                       f"its lowest value (default {defaults.TRAINING_EXTENSIONS['divergenceLossFactor']:g}, 0 off)")
    local.add_argument("--divergence-grad-factor", type=float, help="stop when the gradient norm exceeds this many "
                       f"times its running median (default "
                       f"{defaults.TRAINING_EXTENSIONS['divergenceGradFactor']:g}, 0 off)")
    local.add_argument("--steps", type=int, default=defaults.TRAINING["steps"])
    local.add_argument("--seed", type=int, default=defaults.TRAINING["seed"])
    local.add_argument("--global-batch", type=int, help="samples per step over all ranks (default: data)")
    local.add_argument("--seq-length", type=int, default=defaults.TRAINING["seqLength"])
    local.add_argument("--learning-rate", type=float, default=defaults.TRAINING["learningRate"])
    local.add_argument("--dataset", help="token data: a .npy file (2-D samples or 1-D stream) or a .mindrecord "
                                         "file with an input_ids column; default: synthetic tokens")
    local.add_argument("--checkpoint-dir", help="keep checkpoints here (and resume from them); default: a "
                                                "temporary directory removed at exit")
    local.add_argument("--checkpoint-every", type=int, default=defaults.CHECKPOINT["everySteps"])
    local.add_argument("--metrics-port", type=int, help="metrics port of pod 0; pod p uses port + p (default 9400; "
                                                        "0: free ports chosen by the kernel)")
    local.add_argument("--workdir", help="where job.json and hccl.json are written (kept); default: temporary")
    commands.add_parser("worker", help="one training rank (started by the launcher)")
    commands.add_parser("scheduler", help="the MindSpore scheduler process (started by the launcher in pod 0)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    problem = missing_runtime()
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        if args.command in ("launch", "worker", "scheduler"):  # a pod's process: say so in its termination message
            failures.write_record(os.environ.get("AHJ_TERMINATION_LOG") or defaults.ENV["AHJ_TERMINATION_LOG"],
                                  failures.TerminationRecord(failures.Cause.CONFIG_ERROR.value, None, 0, problem))
        return failures.MISSING_RUNTIME_EXIT
    if args.command == "launch":
        from .generations import live
        from .launcher import main as launch_main

        return launch_main(across_generations=live)
    if args.command == "local":
        from .local import main as local_main

        return local_main(args)
    if args.command == "worker":
        from .train import main as worker_main

        return worker_main()
    from .scheduler import main as scheduler_main

    return scheduler_main()
