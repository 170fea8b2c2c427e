"""Prints the planner's calibration table (docs/planner.md, "Calibration") from the published runs:
    PYTHONPATH=operator python hack/calibration_table.py
tests/unit/core/planner/test_calibration.py checks that the table in the docs is this output."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from ascend_hybrid.planner import calibration

RUNS = Path(__file__).resolve().parents[1] / "tests" / "support" / "fixtures" / "planner" / "published-runs.yaml"


def main() -> int:
    scored = calibration.score_all(yaml.safe_load(RUNS.read_text()))
    print(calibration.document(scored))
    return 0


if __name__ == "__main__":
    sys.exit(main())
