# The two commands of the README: `make demo` and `make test`. Everything else is set up by them.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: demo demo-kueue test check unit setup toolchain crd lint hooks bench bench-4096 clean images

demo: setup toolchain
	mkdir -p build
	$(BIN)/ascend-hybrid plan -f deploy/examples/seed-moe-128.yaml --evaluate --svg build/seed-moe-128.svg
	$(BIN)/ascend-hybrid demo

# Two teams' jobs against one Kueue quota: one runs, the other waits WaitingForQuota, then runs (docs/kueue.md).
demo-kueue: setup toolchain
	$(BIN)/ascend-hybrid demo --kueue

test: setup toolchain lint
	$(BIN)/ascend-hybrid crd check
	$(BIN)/ascend-hybrid chart check
	$(BIN)/pytest; status=$$?; \
	  if [ $$status -eq 5 ]; then echo "pytest collected no tests: that is a failure" >&2; exit 1; fi; \
	  exit $$status

# The inner loop, hermetic on a clean clone (no Go toolchain, no cluster): lint (ruff, mypy, layering), the unit
# tests but the few that need the toolchain's helm or Kueue manifests, and the contract tests.
check: lint
	$(BIN)/pytest -q -m "not toolchain" tests/unit tests/contract

unit: setup
	$(BIN)/pytest -q -m "not toolchain" tests/unit

setup: $(VENV)/.installed

# tests/ goes on the venv's path (a .pth file, as an editable install does) so that bench/ imports tests/support.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,trainer]'
	$(BIN)/python -c 'import pathlib, sysconfig; pathlib.Path(sysconfig.get_path("purelib"), "ascend-hybrid-tests.pth").write_text(str(pathlib.Path("tests").resolve()) + "\n")'
	touch $@

toolchain: setup
	$(BIN)/ascend-hybrid dev-cluster build --with-prometheus --with-kueue --with-volcano

lint: setup
	$(BIN)/ruff check operator trainer tests bench
	$(BIN)/python hack/mypy_baseline.py
	$(BIN)/pytest -q -p no:cacheprovider tests/contract/test_layering.py

# A pre-commit hook that runs `make lint` (hack/hooks/pre-commit).
hooks:
	git config core.hooksPath hack/hooks

crd: setup
	$(BIN)/ascend-hybrid crd write
	$(BIN)/ascend-hybrid chart write

# The operator and CPU-trainer images with rootful podman, no registry (hack/images.sh; tests/images use it too).
images:
	hack/images.sh build

# Every benchmark at sizes that finish in about 30 min on 2 cores, then a summary (hack/bench.sh, docs/performance.md);
# bench-4096: the 16 384-NPU gang on 4 096 simulated nodes.
bench: setup toolchain
	hack/bench.sh $(BIN)/python

bench-4096: setup toolchain
	hack/bench.sh $(BIN)/python 4096

clean:
	rm -rf $(VENV) build *.egg-info
