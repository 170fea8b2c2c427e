"""The CPU trainer image, as built by `make images`: its first `python` imports MindSpore, the dynamic linker finds
every library MindSpore's CPU backend links, and it trains (DP 1, DP 2) with no network at all."""

from __future__ import annotations

import json
import math
import re

import pytest

from support.images import IMAGES_TIMEOUT_S
from support.losses import LAYERS

pytestmark = [pytest.mark.images, pytest.mark.timeout(IMAGES_TIMEOUT_S)]

# Run inside the image by its first `python`: every shared object under MindSpore's package, `ldd`-ed with the
# package's own library folders on LD_LIBRARY_PATH. MindSpore loads its libraries from those folders (through its
# extension modules' RUNPATH), so a sibling they need is already loaded when they are; what `ldd` still reports
# "not found" must come from the system.
LDD_PROBE = r"""
import importlib.util, json, os, re, subprocess
root = importlib.util.find_spec("mindspore").submodule_search_locations[0]
objects = sorted(os.path.join(d, f) for d, _, files in os.walk(root) for f in files
                 if re.search(r"\.so(\.[0-9]+)*$", f) and not os.path.islink(os.path.join(d, f)))
folders = sorted({os.path.dirname(o) for o in objects})
env = dict(os.environ, LD_LIBRARY_PATH=":".join(folders))
missing = {}
for o in objects:
    out = subprocess.run(["ldd", o], env=env, capture_output=True, text=True).stdout
    lost = sorted({line.split()[0] for line in out.splitlines() if "not found" in line})
    if lost:
        missing[os.path.relpath(o, root)] = lost
print(json.dumps({"root": root, "objects": [os.path.relpath(o, root) for o in objects], "missing": missing}))
"""

# MindSpore's wheel carries every backend. The Ascend and GPU plugins (and the MPI collective, the Ascend graph
# engine backend) link the runtimes of their devices, which a CPU image does not have and does not need: CANN
# (Ascend), CUDA (GPU), Open MPI. Only those plugins may miss only those libraries.
ACCELERATOR_PLUGIN = re.compile(
    r"^lib/(plugin/(ascend|gpu[0-9.]+)/|plugin/libmindspore_(ascend|gpu|ops_ascend)\.so"
    r"|libmindspore_ge_backend\.so$|libmpi_collective\.so$)")
CANN = {"libascend_hal.so", "libascendcl.so", "libc_sec.so", "libge_runner.so", "libgraph.so", "libhccl.so",
        "libnnopbase.so", "libplatform.so", "libruntime.so", "libmsprofiler.so", "libatb.so", "libascendalog.so",
        "libmmpa.so", "libprofapi.so", "libregister.so", "libexe_graph.so", "libopapi.so", "libacl_dvpp.so",
        "libacl_dvpp_mpi.so", "libacl_dvpp_op.so"}
CUDA = re.compile(r"^lib(cublas|cuda|cudart|cudnn|cufft|curand|cusolver|cusparse|nvrtc)\.so(\.[0-9.]+)?$")
OPEN_MPI = {"libmpi.so.40"}

STEP = re.compile(r'^\{"step": ')


def accelerator_runtime(library: str) -> bool:
    return library in CANN or library in OPEN_MPI or bool(CUDA.match(library))


def test_the_first_python_on_path_imports_mindspore(images):
    proc = images.run(images.trainer, "-c",
                      "import shutil, sys, mindspore, numpy; "
                      "print(shutil.which('python'), sys.executable, mindspore.__version__, numpy.__version__)",
                      entrypoint="python", timeout=180)
    assert proc.returncode == 0, proc.stderr
    which, executable, mindspore, numpy = proc.stdout.split()
    assert (mindspore, numpy) == ("2.10.0", "1.26.4")
    assert which == executable, "the python on PATH is not the one that ran"


def test_ldd_finds_every_library_of_mindspore_cpu(images):
    proc = images.run(images.trainer, "-c", LDD_PROBE, entrypoint="python", timeout=600)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.splitlines()[-1])
    objects = set(report["objects"])
    # what the CPU backend loads is among what was checked
    assert {"_c_expression.cpython-311-x86_64-linux-gnu.so", "lib/libmindspore_cpu.so", "lib/libdnnl.so.3",
            "lib/libmindspore_core.so", "lib/plugin/cpu/libakg.so"} <= objects, sorted(objects)
    problems = []
    for path, libraries in sorted(report["missing"].items()):
        plugin = bool(ACCELERATOR_PLUGIN.match(path))
        for library in libraries:
            if not (plugin and accelerator_runtime(library)):
                problems.append(f"{library} (needed by mindspore/{path})")
    assert not problems, "ldd: not found in the CPU trainer image: " + ", ".join(problems)


def losses(stdout: str) -> list[float]:
    return [json.loads(line)["loss"] for line in stdout.splitlines() if STEP.match(line)]


def train(images, data: int):
    """`ascend-hybrid-trainer local` through the image's entrypoint, 3 steps of global batch 2, no network."""
    proc = images.run(images.trainer, "local", "--data", str(data), "--layers", str(LAYERS), "--steps", "3", "--global-batch", "2",
                      "--seed", "0", "--metrics-port", "0", timeout=600)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def dp1(images):
    return train(images, 1)


def test_the_trainer_image_trains_dp1_without_a_network(dp1):
    run = losses(dp1.stdout)
    assert len(run) == 3, dp1.stdout
    assert all(math.isfinite(loss) for loss in run)
    assert run[-1] < run[0], run
    assert "all 1 local processes succeeded" in dp1.stderr


def test_the_trainer_image_trains_dp2_with_the_losses_of_dp1(images, dp1):
    proc = train(images, 2)
    assert "all 2 local processes succeeded" in proc.stderr
    run, reference = losses(proc.stdout), losses(dp1.stdout)
    assert len(run) == 3, proc.stdout
    assert max(abs(a - b) for a, b in zip(run, reference)) < 1e-5, (run, reference)
