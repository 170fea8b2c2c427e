"""Where the repository and its examples are."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = REPO_ROOT / "deploy" / "examples"
PLANNER_FIXTURES = REPO_ROOT / "tests" / "support" / "fixtures" / "planner"
