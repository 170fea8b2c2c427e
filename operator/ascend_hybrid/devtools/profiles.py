"""Where a process's CPU goes, from py-spy's sampled stacks: the benchmarks run the operator under `py-spy record
--format raw` (`--profile`) and print this summary — the functions that spend the samples themselves ("own") and
the ones whose calls hold them ("within"), by share of every sample taken while the process was on a CPU.

py-spy samples the thread holding the GIL (`--gil`), whichever it is (kopf's event loop, a worker, a watch thread),
without touching the code: the samples are the operator's Python CPU time. Without `--gil`, run as py-spy's child
(reading another process's memory needs a ptrace right a container often lacks), it cannot tell an idle thread
from a busy one and counts every thread at every sample: a measured run showed 5 threads' worth of wall time.
"""

from __future__ import annotations

import re
import shutil
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

SAMPLES_PER_SECOND = 100
PACKAGE = "ascend_hybrid"
# "function (path/to/file.py:123)" — the line is dropped: a function's samples are summed over its lines.
_FRAME = re.compile(r"^(?P<function>.*?) \((?P<file>[^()]*?)(?::\d+)?\)$")


@dataclass(frozen=True)
class Profile:
    samples: int
    own: Counter[str]
    within: Counter[str]

    def table(self, top: int = 15) -> str:
        """Two rankings, each line `share  samples  function (file)`."""
        if not self.samples:
            return "  no samples (the process spent no CPU, or py-spy could not read it)"
        lines = [f"  {self.samples} samples of the GIL's holder at {SAMPLES_PER_SECOND}/s "
                 f"(≈ {self.samples / SAMPLES_PER_SECOND:.1f} s of Python CPU)"]
        # "within" of a thread's entry frames (threading, asyncio, runpy) is every sample: only the operator's own
        # functions say where its work goes
        ours = Counter({name: count for name, count in self.within.items() if f"({PACKAGE}/" in name})
        for title, counts in (("own", self.own), ("within (an operator function or what it calls)", ours)):
            lines.append(f"  top {top} by {title}:")
            lines += [f"    {count / self.samples:6.1%} {count:7d}  {name}" for name, count in counts.most_common(top)]
        return "\n".join(lines)


def record_prefix(output: Path, rate: int = SAMPLES_PER_SECOND) -> list[str]:
    """The command words that run a program under py-spy, writing its raw (collapsed) stacks to `output`."""
    beside = Path(sys.executable).parent / "py-spy"  # the venv's, also when the venv is not activated
    spy = str(beside) if beside.exists() else shutil.which("py-spy")
    if spy is None:
        raise SystemExit("--profile needs py-spy (pip install py-spy; the project's dev extra has it)")
    return [spy, "record", "--gil", "--rate", str(rate), "--format", "raw", "--output", str(output), "--"]


def frame_name(frame: str) -> str:
    """`function (file)` of one frame: py-spy's short file name, without the line."""
    match = _FRAME.match(frame.strip())
    return frame.strip() if match is None else f"{match['function']} ({match['file']})"


def summarize(raw: str) -> Profile:
    """py-spy's raw format: one line per distinct stack, `frame;frame;…;frame count`, the outermost first."""
    own: Counter[str] = Counter()
    within: Counter[str] = Counter()
    samples = 0
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [frame_name(frame) for frame in stack.split(";") if frame.strip()]
        if not frames:
            continue
        samples += count
        own[frames[-1]] += count
        for name in set(frames):  # a recursive function counts once per sample
            within[name] += count
    return Profile(samples, own, within)


def summarize_file(path: Path) -> Profile:
    return summarize(path.read_text() if path.exists() else "")
