"""Fixtures shared by every test folder: paths of the checkout, the installed console script, and the images.

Builders and hypothesis strategies are plain modules in tests/support (imported, not handed out as fixtures)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from support.paths import EXAMPLES, REPO_ROOT


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def examples() -> Path:
    return EXAMPLES


@pytest.fixture(scope="session")
def cli_path() -> Path:
    """The installed console script of the interpreter running the tests."""
    script = Path(sys.executable).parent / "ascend-hybrid"
    assert script.exists(), f"{script} missing: install the project (pip install -e .[dev])"
    return script


@pytest.fixture(scope="session")
def images(tmp_path_factory):
    """The operator and CPU-trainer images, built once a session with hack/images.sh (what `make images` runs):
    tests/images run commands inside them, tests/integration/test_container_runtime.py runs them as pods. Where
    the script cannot build, every test using them fails with the end of its log (never skips)."""
    from support.images import BuildFailed, build

    try:
        return build(tmp_path_factory.mktemp("images") / "build.log")
    except BuildFailed as failure:
        pytest.fail(str(failure), pytrace=False)
