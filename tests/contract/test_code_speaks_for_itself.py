"""Code states its contract, not its history: no issue numbers of a tracker the repository does not hold."""

from __future__ import annotations

import re
from pathlib import Path

from support.paths import REPO_ROOT

CODE_DIRS = ("operator", "trainer", "bench", "hack", "tests")
SUFFIXES = {".py", ".sh", ".j2", ".yaml", ".toml"}
# "issue 27", "Issue 28's", "issue-16", "(#12)"; data files quoting others' trackers (planner fixtures) are sources
TRACKER = re.compile(r"\b[Ii]ssues? ?#?\d+\b|\bissue-\d+\b|\(#\d+\)")
SOURCES = ("tests/support/fixtures/planner/",)
THIS_FILE = Path(__file__).resolve()  # its examples are what it looks for


def tracker_references(text: str) -> list[str]:
    return [match.group(0) for match in TRACKER.finditer(text)]


def test_no_code_names_a_tracker_issue():
    found = []
    for directory in CODE_DIRS:
        for path in sorted((REPO_ROOT / directory).rglob("*")):
            relative = path.relative_to(REPO_ROOT).as_posix()
            if (path.suffix not in SUFFIXES or not path.is_file() or relative.startswith(SOURCES)
                    or "/.venv/" in relative or path.resolve() == THIS_FILE):
                continue
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if tracker_references(line):
                    found.append(f"{relative}:{number}: {line.strip()[:100]}")
    assert not found, "say what the code promises, not which issue asked for it:\n" + "\n".join(found)


def test_the_check_finds_what_it_looks_for():
    assert tracker_references("a write less (issue 27: two writes)") == ["issue 27"]
    assert tracker_references("Issue 28's fields") == ["Issue 28"]
    assert sorted(tracker_references("see (#12) and issue-16")) == ["(#12)", "issue-16"]
    assert tracker_references("the issuer 27 and tissue 3, an issued token") == []
