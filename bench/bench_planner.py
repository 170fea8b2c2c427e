"""Strategy planner speed at cluster scale: `plan` over 16 384 NPUs, for the seed's MoE model (seed §4.5,
docs/design.md §11) and a dense 175 B GPT.

    PYTHONPATH=operator .venv/bin/python bench/bench_planner.py [--rounds N] [--world N]

Goal (printed, never asserted): under 2 s per plan. Prints the median wall time of the rounds (and the median CPU
time, steadier on a shared machine), the strategies considered and evaluated, the time per considered strategy, and
the ratio of the median to the goal (below 1 meets it).
"""

from __future__ import annotations

import argparse
import statistics
import time

from ascend_hybrid.planner import hardware, search
from ascend_hybrid.spec import rules

GOAL_SECONDS = 2.0
JOBS = {  # "seed §4.5": the seed article's case, docs/design.md §11
    "moe-100b (seed §4.5 model)": {"model": {"preset": "moe-100b"},
                                   "training": {"globalBatchSize": 8192, "seqLength": 4096}},
    "dense 175 B GPT": {"model": {"preset": "custom", "layers": 96, "hidden": 12288, "heads": 96, "vocab": 51200},
                        "training": {"globalBatchSize": 8192, "seqLength": 2048}},
}


def job(spec: dict) -> dict:
    return {"apiVersion": "hybrid.ascend.dev/v1alpha1", "kind": "AscendHybridJob", "metadata": {"name": "bench"},
            "spec": {"parallelism": {"data": 8}, "npu": {"chip": "910B"}, **spec}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="plans per job; the median is printed")
    parser.add_argument("--world", type=int, default=16384)
    args = parser.parse_args()
    hw = hardware.builtin("910B")
    ratios = []
    for name, spec in JOBS.items():
        resolved = rules.parse(job(spec))
        times, cpu, result = [], [], None
        for _ in range(args.rounds):
            start, start_cpu = time.perf_counter(), time.process_time()
            result = search.plan(resolved, hw, args.world)
            times.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)
        median = statistics.median(times)
        ratios.append(median / GOAL_SECONDS)
        best = result.candidates[0].strategy if result.candidates else None
        print(f"{name}: world {args.world}: median {median:.3f} s of {args.rounds} rounds "
              f"(min {min(times):.3f}, max {max(times):.3f}; CPU median {statistics.median(cpu):.3f} s); "
              f"{result.considered} strategies considered, "
              f"{result.fitting + result.rejected.by_reason.get('out of memory', 0)} evaluated, {result.fitting} fit; "
              f"{1e6 * median / result.considered:.1f} µs per strategy; ratio to the {GOAL_SECONDS:g} s goal "
              f"{median / GOAL_SECONDS:.2f}")
        if best:
            print(f"  best: DP {best.data} TP {best.tensor} PP {best.pipeline} EP {best.expert} "
                  f"m {best.micro_batches} v {best.virtual_stages} {best.recompute}")
    print(f"planner time / {GOAL_SECONDS:g} s goal at {args.world} NPUs: "
          + ", ".join(f"{name.split(' ')[0]} {ratio:.2f}" for name, ratio in zip(JOBS, ratios)))


if __name__ == "__main__":
    main()
