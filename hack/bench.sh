#!/usr/bin/env bash
# `make bench`: every benchmark at a size that finishes in about 30 min on 2 cores (docs/performance.md; the
# many-jobs round stops at 10 min), each output kept in build/bench/<name>.txt, then the last line of each (its
# ratios) as the summary.
#
#   hack/bench.sh [PYTHON]          the default runs
#   hack/bench.sh PYTHON 4096       the 16 384-NPU gang (4 096 nodes, 2 048 pods; 1 round): its start, then its
#                                   restart by each rung of the recovery ladder, on one cluster (~30 min)
set -euo pipefail
python=${1:-.venv/bin/python}
out=build/bench
mkdir -p "$out"

if [[ ${2:-} == 4096 ]]; then
  runs=("operator-2048 bench/bench_operator.py --nodes 4096 --pods 2048 --rounds 1 --name ahj-bench-4096 --keep"
        "restart-2048 bench/bench_restart.py --nodes 4096 --pods 2048 --rounds 1 --name ahj-bench-4096 --no-elastic")
else
  runs=(
    "planner bench/bench_planner.py"
    "placement bench/bench_placement.py"
    "ranktable bench/bench_ranktable.py"
    "timed-step bench/bench_timed_step.py --rounds 3"
    "operator-128 bench/bench_operator.py --nodes 256 --pods 128 --rounds 5"
    "operator-64 bench/bench_operator.py --nodes 128 --pods 64 --rounds 5"
    "restart-128 bench/bench_restart.py --nodes 256 --pods 128 --rounds 3"
    "many-jobs bench/bench_many_jobs.py --nodes 1000 --jobs 1000 --rounds 1 --timeout 600"
    "api-cost bench/bench_api_cost.py --count 300 --rounds 3"
    "watch bench/bench_watch.py --pods 1000 --jobs 100 --rounds 3"
    "devcluster bench/bench_devcluster.py"
  )
fi

for run in "${runs[@]}"; do
  read -r name script flags <<<"$run"
  echo "== $name: $script $flags"
  # shellcheck disable=SC2086 # the flags are words
  "$python" "$script" $flags | tee "$out/$name.txt"
done

echo "== summary (the last line of each, build/bench/)"
for run in "${runs[@]}"; do
  read -r name _ <<<"$run"
  printf '%-14s %s\n' "$name" "$(tail -n 1 "$out/$name.txt")"
done
