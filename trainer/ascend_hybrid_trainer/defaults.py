"""Every default of the trainer's job contract, once: the job.json reader (`config.py`), the local runner's command
line (`cli.py`) and the launcher take them from here. PARALLELISM, MODEL, TRAINING and CHECKPOINT are the CRD's
defaults (operator/ascend_hybrid/spec/api.py); the trainer keeps this table because it never imports the operator, and
tests/contract/test_operator_trainer.py checks that the two agree, key by key."""

from __future__ import annotations

from typing import Any  # the values mix ints, floats and strings; each reader knows its key's type

PARALLELISM: dict[str, Any] = {"data": 1, "tensor": 1, "pipeline": 1, "expert": 1, "expertPlacement": "dataParallel",
               "virtualPipelineStages": 1, "context": 1}
MODEL: dict[str, Any] = {"preset": "tiny"}
TRAINING: dict[str, Any] = {"steps": 1000, "seqLength": 128, "learningRate": 1e-3, "seed": 0, "recompute": "none",
            "optimizerShard": False, "sequenceParallel": False, "flashAttention": False}
CHECKPOINT: dict[str, Any] = {"everySteps": 100}

# job.json settings the trainer reads that the CRD does not carry (yet). The contract test compares each with the
# CRD's default as soon as the CRD has the field, so the two can never silently differ.
#   gradientClipNorm      0 = no clipping; else the global L2 norm of the gradients is clipped to it.
#   divergenceLossFactor  the loss above this many times its lowest value so far is a divergence (0 = off).
#   divergenceGradFactor  the gradient norm above this many times its running median is a divergence (0 = off).
# Why 10 and 100: docs/troubleshooting.md, "Numerical divergence".
TRAINING_EXTENSIONS: dict[str, Any] = {"gradientClipNorm": 0.0, "divergenceLossFactor": 10.0, "divergenceGradFactor": 100.0}
# Model settings with no CRD default of their own: kvHeads absent = heads (multi-head attention), ffnType absent =
# gelu, topK the experts per token, capacityFactor and auxLossWeight of the MoE router (design §3, docs/trainer.md).
MODEL_EXTENSIONS: dict[str, Any] = {"ffnType": "gelu", "topK": 2, "capacityFactor": 1.25, "auxLossWeight": 0.01}

# The AHJ_* environment the launcher and the workers read (design §8-§9, docs/trainer.md).
ENV: dict[str, Any] = {
    "AHJ_METRICS_PORT": 9400,
    "AHJ_LOG_EVERY_STEPS": 10,
    "AHJ_CHECKPOINT_KEEP": 2,
    "AHJ_RANKTABLE_TIMEOUT_SECONDS": 600.0,
    "AHJ_STOP_GRACE_SECONDS": 10.0,
    "AHJ_RECOVERY_WAIT_SECONDS": 600.0,
    "AHJ_TERMINATION_LOG": "/dev/termination-log",
}
CHECKPOINT_DIR = "/checkpoints"  # where the operator mounts the job's checkpoint claim (design §6)
