"""Fixtures shared by every test folder: paths of the checkout and the installed console script.

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
