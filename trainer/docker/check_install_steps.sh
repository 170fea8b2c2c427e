#!/bin/bash
# Runs the Dockerfile's install steps in fresh virtualenvs, because no container engine runs here:
#   1. the `wheel` stage: pip wheel of the project;
#   2. the `operator` stage's install.sh: `ascend-hybrid` works, and `ascend-hybrid-trainer` says how to get
#      MindSpore instead of crashing;
#   3. the `trainer` stage's install.sh (MindSpore from PyPI) and its entrypoint script: a 2-step local run.
# Usage: trainer/docker/check_install_steps.sh [PYTHON]   (default python3; needs network access to PyPI)
set -euo pipefail
python=${1:-python3}
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d -t ahj-install-check-XXXXXX)
trap 'rm -rf "$work"' EXIT
export MINDSPORE_VERSION=${MINDSPORE_VERSION:-2.10.0} NUMPY_VERSION=${NUMPY_VERSION:-1.26.4}

echo "== wheel stage"
"$python" -m venv "$work/build"
"$work/build/bin/python" -m pip wheel --quiet --no-cache-dir --disable-pip-version-check --no-deps \
    --wheel-dir "$work/wheels" "$repo"
ls "$work/wheels"

echo "== operator stage"
"$python" -m venv "$work/operator"
PATH="$work/operator/bin:$PATH" sh "$repo/trainer/docker/install.sh" operator "$work/wheels"
"$work/operator/bin/ascend-hybrid" --help >/dev/null
set +e
"$work/operator/bin/ascend-hybrid-trainer" local --data 1 2>"$work/no-mindspore.txt"
code=$?
set -e
cat "$work/no-mindspore.txt"
[ "$code" -eq 3 ] && grep -q "pip install 'ascend-hybrid\[trainer\]'" "$work/no-mindspore.txt"

echo "== trainer stage"
"$python" -m venv "$work/trainer"
PATH="$work/trainer/bin:$PATH" sh "$repo/trainer/docker/install.sh" trainer "$work/wheels"
cd "$work"
PATH="$work/trainer/bin:$PATH" "$repo/trainer/docker/entrypoint.sh" local --data 1 --steps 2 --metrics-port 0 \
    | tee "$work/steps.txt"
[ "$(grep -c '"step"' "$work/steps.txt")" -eq 2 ]
echo "== install steps OK"
