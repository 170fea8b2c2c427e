"""Every default of the trainer's job contract, once: the job.json reader (`config.py`) and the local runner's
command line (`cli.py`) take them from here. They are the CRD's defaults (operator/ascend_hybrid/api.py); the
trainer keeps this table because it never imports the operator, and tests/contract/test_defaults.py checks
that the two agree, key by key."""

from __future__ import annotations

PARALLELISM = {"data": 1, "tensor": 1, "pipeline": 1, "expert": 1, "expertPlacement": "dataParallel",
               "virtualPipelineStages": 1}
MODEL = {"preset": "tiny"}
TRAINING = {"steps": 1000, "seqLength": 128, "learningRate": 1e-3, "seed": 0, "recompute": "none",
            "optimizerShard": False, "sequenceParallel": False, "flashAttention": False}
CHECKPOINT = {"everySteps": 100}
