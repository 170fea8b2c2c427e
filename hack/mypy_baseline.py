"""mypy with a baseline that only shrinks: every file's error count against .mypy-baseline.json.

    python hack/mypy_baseline.py            # fails when a file has more errors than its baseline (or a new file any)
    python hack/mypy_baseline.py --update   # after fixing errors: writes the smaller counts (never larger ones)

Where the baseline is 0 (or the file is absent from it) a file must stay clean; the pure core and the planner are
checked with strict flags (pyproject's [tool.mypy] overrides)."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / ".mypy-baseline.json"
ERROR = re.compile(r"^(?P<file>[^:]+\.py):\d+: error: ")


def run_mypy() -> tuple[Counter[str], str]:
    done = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary", "--no-pretty"], cwd=ROOT,
                          capture_output=True, text=True)
    if done.returncode not in (0, 1) or "INTERNAL ERROR" in done.stdout + done.stderr:
        raise SystemExit(f"mypy did not run: exit {done.returncode}\n{done.stdout}{done.stderr}")
    counts: Counter[str] = Counter()
    for line in done.stdout.splitlines():
        match = ERROR.match(line)
        if match:
            counts[match["file"]] += 1
    return counts, done.stdout


def grown(counts: Counter[str], baseline: dict[str, int]) -> dict[str, tuple[int, int]]:
    """Files with more errors than their baseline allows: file → (baseline, now)."""
    return {file: (baseline.get(file, 0), n) for file, n in sorted(counts.items()) if n > baseline.get(file, 0)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help="write the counts that shrank into the baseline")
    args = parser.parse_args(argv)
    baseline: dict[str, int] = json.loads(BASELINE.read_text()) if BASELINE.exists() else {}
    counts, output = run_mypy()
    worse = grown(counts, baseline)
    total, allowed = sum(counts.values()), sum(baseline.values())
    if worse:
        print(output, end="")
        for file, (was, now) in worse.items():
            print(f"mypy: {file}: {now} errors, the baseline allows {was}", file=sys.stderr)
        return 1
    if args.update:
        smaller = {file: n for file, n in sorted(counts.items()) if n}
        BASELINE.write_text(json.dumps(smaller, indent=1, sort_keys=True) + "\n")
        print(f"mypy: baseline written: {total} errors in {len(smaller)} files (was {allowed})")
        return 0
    print(f"mypy: {total} errors, within the baseline's {allowed}"
          + (" (run hack/mypy_baseline.py --update to lock in the fixes)" if total < allowed else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
