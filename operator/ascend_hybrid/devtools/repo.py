"""The source checkout these tools work on, found once."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

MARKERS = ("pyproject.toml", "crds", "charts")


class NotACheckout(RuntimeError):
    pass


@lru_cache(maxsize=1)
def repo_root() -> Path:
    """The repository holding this package (operator/ascend_hybrid/devtools → three levels up)."""
    root = Path(__file__).resolve().parents[3]
    if not all((root / marker).exists() for marker in MARKERS):
        raise NotACheckout(f"{root} is not a source checkout of ascend-hybrid (no {', '.join(MARKERS)}): "
                           "this command writes generated files into the repository")
    return root


def chart_dir() -> Path:
    return repo_root() / "charts" / "ascend-hybrid-operator"
