"""The small real job `ascend-hybrid demo` runs beside its simulated large ones (pure): DP 2 on 2 pods of 1 chip,
preset tiny, a few hundred steps, its pods run by the process runtime, so its step and loss move for real in
`kubectl get ahj` and in the cluster's Prometheus."""

from __future__ import annotations

from .podfiles import PROCESS_RUNTIME, RUNTIME_ANNOTATION

EXAMPLE_NAME = "tiny-dp2-real"
GROUP, VERSION = "hybrid.ascend.dev", "v1alpha1"


def process_runtime_example(name: str = EXAMPLE_NAME, namespace: str = "default", steps: int = 300) -> dict:
    """About 0.3 s a step on 2 CPU cores (seqLength 32), so a few minutes of visible progress."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "AscendHybridJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "parallelism": {"data": 2},
            "npu": {"chip": "910B", "perPod": 1},
            "model": {"preset": "tiny"},
            "training": {"steps": steps, "globalBatchSize": 2, "seqLength": 32, "seed": 0},
            "template": {"metadata": {"annotations": {RUNTIME_ANNOTATION: PROCESS_RUNTIME}}},
        },
    }


def progress_columns() -> str:
    """For `kubectl get ahj -o custom-columns=…`: the printer columns have Step but no loss."""
    return ("NAME:.metadata.name,PHASE:.status.phase,STEP:.status.training.step,LOSS:.status.training.loss,"
            "PROGRESS%:.status.training.progressPercentage")


def prometheus_queries(name: str = EXAMPLE_NAME, namespace: str = "default", attempt: int = 1) -> dict[str, str]:
    """PromQL for the step and loss that pod 0's trainer serves on its IP:9400 (the operator reads pod 0 too)."""
    selector = f'namespace="{namespace}",pod="{name}-a{attempt}-0"'
    return {"step": f"ascend_trainer_step{{{selector}}}", "loss": f"ascend_trainer_loss{{{selector}}}"}
