"""Tests inside the built images (marker `images`).

The session first builds both images with hack/images.sh, the script `make images` runs (incremental: the base,
the build layers and the wheels are cached under ~/.cache/ascend-hybrid/). Where podman, buildah, runc or
mmdebstrap are missing the script installs them with apt-get; where it cannot build, every test here fails with
the end of its log (never skips). Every container runs with `--network none` under a unique name and is removed
afterwards, even when the test times out.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / "hack" / "images.sh"
# A cold build on 2 cores: tools ≈ 20 s, base ≈ 1-2 min, operator ≈ 30 s, trainer ≈ 2 min (≈ 840 MB of wheels).
BUILD_TIMEOUT_S = 3600


@dataclass(frozen=True)
class Images:
    operator: str
    trainer: str
    env: dict[str, str]
    build_log: Path

    def podman(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(["podman", *args], env=self.env, capture_output=True, text=True, timeout=timeout)

    def run(self, image: str, *command: str, entrypoint: str | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess:
        """`podman run --rm --network none IMAGE COMMAND…`, removed even when it outlives `timeout`."""
        name = f"ahj-images-test-{uuid.uuid4().hex[:12]}"
        argv = ["run", "--rm", "--network", "none", "--name", name]
        if entrypoint is not None:
            argv += ["--entrypoint", entrypoint]
        try:
            return self.podman(*argv, image, *command, timeout=timeout)
        finally:
            self.podman("rm", "--force", "--ignore", "--time", "0", name, timeout=120)


def _script(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, check=True, timeout=60, **kwargs)


@pytest.fixture(scope="session")
def images(tmp_path_factory) -> Images:
    log = tmp_path_factory.mktemp("images") / "build.log"
    with log.open("w") as out:
        try:
            proc = subprocess.run([str(SCRIPT), "build"], stdout=out, stderr=subprocess.STDOUT,
                                  timeout=BUILD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"hack/images.sh build ran past {BUILD_TIMEOUT_S} s; log: {log}", pytrace=False)
    if proc.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
        pytest.fail(f"hack/images.sh build exited {proc.returncode} (log: {log}):\n{tail}", pytrace=False)
    env = dict(os.environ)
    for line in _script("env").stdout.splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        env[key] = shlex.split(value)[0]
    operator, trainer = _script("tags").stdout.split()
    return Images(operator=operator, trainer=trainer, env=env, build_log=log)
