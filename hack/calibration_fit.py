"""Refits the built-in compute models on the published runs (docs/planner.md, "Calibration", Method):
    PYTHONPATH=operator python hack/calibration_fit.py [--table]   (needs scipy: the trainer extra brings it)
Over the runs not held out (the held-out runs never enter the fit; --table scores every run with the unrounded
constants, held-out ones included, for reporting only), Nelder–Mead: 910B's matmul share, half-size dimension,
FlashAttention share and vector share on the dense 910B runs by least absolute log error (the goal is a median, and
a squared loss lets the one or two runs the model misses move every constant); then 910A's matmul and vector shares
with 910B's half-size dimension, and the expert share on the MoE runs, by least squares (four and two runs: an
absolute loss would fit one of them exactly). Prints the constants; hardware.py takes them rounded (two decimals,
the half-size dimension to 10)."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import yaml
from scipy.optimize import minimize

from ascend_hybrid.planner import calibration
from ascend_hybrid.planner.hardware import BUILTIN, ComputeModel, Hardware

RUNS = Path(__file__).resolve().parents[1] / "tests" / "support" / "fixtures" / "planner" / "published-runs.yaml"


def _log_errors(runs: Sequence[calibration.PublishedRun], hardware_of: Callable[[str], Hardware]) -> list[float]:
    scored = (calibration.score(run, hardware_of) for run in runs)
    return [math.log(item.predicted / item.run.published) for item in scored if item.predicted is not None]


def _absolute(runs: Sequence[calibration.PublishedRun], hardware_of: Callable[[str], Hardware]) -> float:
    return sum(abs(error) for error in _log_errors(runs, hardware_of))


def _squared(runs: Sequence[calibration.PublishedRun], hardware_of: Callable[[str], Hardware]) -> float:
    return sum(error * error for error in _log_errors(runs, hardware_of))


def _profiles(b: ComputeModel, a: ComputeModel) -> Callable[[str], Hardware]:
    def hardware_of(chip: str) -> Hardware:
        model = a if chip == "910A" else b
        return replace(BUILTIN[chip], compute=model, compute_efficiency=model.matmul_efficiency)
    return hardware_of


def _clip(value: float) -> float:
    return min(max(value, 0.01), 1.0)


def main() -> int:
    fitted = [run for run in calibration.runs(yaml.safe_load(RUNS.read_text())) if not run.held_out and not run.needs]
    moe = [run for run in fitted if run.job["spec"]["model"].get("experts")]
    dense_b = [run for run in fitted if run.chip == "910B" and run not in moe]
    on_910a = [run for run in fitted if run.chip == "910A"]
    b0 = BUILTIN["910B"].compute
    a0 = BUILTIN["910A"].compute
    assert b0 is not None and a0 is not None

    def b_of(x: Sequence[float]) -> ComputeModel:
        return replace(b0, matmul_efficiency=_clip(x[0]), half_dim=max(x[1], 0.0), attention_efficiency=_clip(x[2]),
                       vector_efficiency=_clip(x[3]))

    start = [b0.matmul_efficiency, b0.half_dim, b0.attention_efficiency, b0.vector_efficiency]
    best = minimize(lambda x: _absolute(dense_b, _profiles(b_of(x), a0)), start, method="Nelder-Mead",
                    options={"xatol": 1e-3, "fatol": 1e-6, "maxiter": 400})
    b = b_of(best.x)

    def a_of(x: Sequence[float]) -> ComputeModel:
        return replace(a0, matmul_efficiency=_clip(x[0]), half_dim=b.half_dim, vector_efficiency=_clip(x[1]))

    best_a = minimize(lambda x: _squared(on_910a, _profiles(b, a_of(x))), [a0.matmul_efficiency, a0.vector_efficiency],
                      method="Nelder-Mead", options={"xatol": 1e-3, "fatol": 1e-6, "maxiter": 200})
    a = a_of(best_a.x)

    def e_of(x: Sequence[float]) -> ComputeModel:
        return replace(b, expert_efficiency=_clip(x[0]))

    best_e = minimize(lambda x: _squared(moe, _profiles(e_of(x), a)), [b0.expert_efficiency], method="Nelder-Mead",
                      options={"xatol": 1e-3, "fatol": 1e-6, "maxiter": 100})
    b = e_of(best_e.x)
    print(f"910B: matmul {b.matmul_efficiency:.4f} halfDim {b.half_dim:.1f} attention {b.attention_efficiency:.4f} "
          f"vector {b.vector_efficiency:.4f} expert {b.expert_efficiency:.4f} (dense loss {best.fun:.4f}, "
          f"MoE loss {best_e.fun:.4f})")
    print(f"910A: matmul {a.matmul_efficiency:.4f} vector {a.vector_efficiency:.4f} (loss {best_a.fun:.4f})")
    if "--table" in sys.argv[1:]:  # what the unrounded constants predict, held-out runs included (reported only)
        print(calibration.document(calibration.score_all(yaml.safe_load(RUNS.read_text()), _profiles(b, a))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
