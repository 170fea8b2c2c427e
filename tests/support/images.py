"""Building the images for tests/images and running commands in them: `hack/images.sh` (what `make images`
runs) and podman under the script's private config. Every container runs with `--network none` under a unique
name and is removed afterwards, even when its command outlives its timeout."""

from __future__ import annotations

import os
import shlex
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

from support.paths import REPO_ROOT

SCRIPT = REPO_ROOT / "hack" / "images.sh"
# A cold build measured on 2 shared cores: tools 19 s, base 36 s, operator 23 s, trainer 120 s (840 MB of wheels).
# The image tests run under IMAGES_TIMEOUT_S (pytest-timeout counts the session fixture's setup in the first test
# that uses it); the build gets a little less, so that its own message comes first.
IMAGES_TIMEOUT_S = 1800
BUILD_TIMEOUT_S = IMAGES_TIMEOUT_S - 60


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


def build(log: Path) -> Images:
    """`hack/images.sh build` (output to `log`), then the images and the env under which podman sees them. Raises
    BuildFailed with the end of the log when the script fails or outlives BUILD_TIMEOUT_S."""
    with log.open("w") as out:
        try:
            proc = subprocess.run([str(SCRIPT), "build"], stdout=out, stderr=subprocess.STDOUT,
                                  timeout=BUILD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise BuildFailed(f"hack/images.sh build ran past {BUILD_TIMEOUT_S} s; log: {log}") from None
    if proc.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
        raise BuildFailed(f"hack/images.sh build exited {proc.returncode} (log: {log}):\n{tail}")
    env = dict(os.environ)
    for line in _script("env").stdout.splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        env[key] = shlex.split(value)[0]
    operator, trainer = _script("tags").stdout.split()
    return Images(operator=operator, trainer=trainer, env=env, build_log=log)


class BuildFailed(Exception):
    pass
