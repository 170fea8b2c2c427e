"""The rank-table expander: a native sidecar (an init container with `restartPolicy: Always`) in each pod of a job
whose hccl.json may outgrow its ConfigMap (ranktable.may_exceed_config_map: from 2 745 ranks of 1-chip pods, 6 496
of 8-chip pods). It keeps the complete table at RANK_TABLE_FILE, in an emptyDir the pod's containers share, in step
with the ConfigMap.

Why: a ConfigMap holds at most 1 MiB and a complete 16 384-rank table is ≈ 1.2 MB even compact, so the operator
writes it gzipped into binaryData and leaves in hccl.json only a pointer (ranktable.config_map_data). HCCL,
MindSpore's `parse_hccl_file` and MindFormers' tools read RANK_TABLE_FILE as a complete table; the pointer would
stop them. The table changes on every recovery and elastic resize, so a one-shot init step is not enough: this
runs beside the training container for the pod's life and rewrites the file whenever the ConfigMap changes.

The kubelet projects the ConfigMap volume as files (binaryData decoded) and swaps them atomically through the
`..data` link; this polls that link (else the files' text), and writes the complete table and then the `version`
counter (what MindCluster's TaskD reads at RANK_TABLE_DIR/version), each by rename, so a reader never sees half a
file. Run: `python3 -m ascend_hybrid.ranktable_sidecar --source DIR --target DIR` (the operator image).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ascend_hybrid.contracts import untrusted
from ascend_hybrid.gang.ranktable import COMPRESSED_KEY, ENCODED_LIMIT, TABLE_KEY, VERSION_KEY, MissingCopy, expand

POLL_SECONDS = 1.0


@dataclass(frozen=True)
class Expanded:
    table: str     # the complete hccl.json
    version: str   # the ConfigMap's `version` counter, as text
    status: str    # the table's status (initializing / completed), for the log


def _read(path: Path, limit: int) -> bytes:
    """At most `limit` bytes of the file; untrusted.Rejected when it holds more (the kubelet projects at most a
    ConfigMap's 1 MiB: more is not a ConfigMap)."""
    with path.open("rb") as handle:
        content = handle.read(limit + 1)
    if len(content) > limit:
        raise untrusted.Rejected(untrusted.TOO_LARGE, f"{path.name} is more than the {limit} bytes read")
    return content


def read_source(source: Path) -> Expanded | None:
    """The complete table and version from the projected ConfigMap at `source`; None while it is absent, or caught
    between a pointer and its gzipped copy (the next poll sees both). Raises untrusted.Rejected for a table refused
    (over its size, expanding past ranktable.EXPANDED_LIMIT, not gzip, not JSON)."""
    try:
        text = _read(source / TABLE_KEY, ENCODED_LIMIT).decode("utf-8")
        version = _read(source / VERSION_KEY, 64).decode("utf-8").strip() if (source / VERSION_KEY).exists() else ""
        packed = source / COMPRESSED_KEY
        binary = {COMPRESSED_KEY: _read(packed, ENCODED_LIMIT)} if packed.exists() else {}
    except (OSError, UnicodeDecodeError):
        return None
    try:
        table = expand(text, binary)
    except MissingCopy:
        return None
    return Expanded(table, version, _status_of(table))


def _status_of(table: str) -> str:
    """The status for the log, without parsing a megabyte: MindCluster's key order puts `status` first."""
    head = table[:64]
    for status in ("completed", "initializing"):
        if f'"status":"{status}"' in head or f'"status": "{status}"' in head:
            return status
    return "unknown"


def fingerprint(source: Path) -> str:
    """What changes whenever the kubelet projects a new ConfigMap: the `..data` link's target (a new timestamped
    directory per update); without it (a plain directory, as in tests), the files' sizes and times."""
    try:
        return "link:" + os.readlink(source / "..data")
    except OSError:
        pass
    parts = []
    for name in (TABLE_KEY, VERSION_KEY, COMPRESSED_KEY):
        try:
            stat = (source / name).stat()
            parts.append(f"{name}:{stat.st_size}:{stat.st_mtime_ns}")
        except OSError:
            parts.append(f"{name}:-")
    return "files:" + ",".join(parts)


def _replace(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.chmod(temporary, 0o644)  # MindCluster's mode for hccl.json and version: every container user reads them
    os.replace(temporary, path)


def write_target(target: Path, expanded: Expanded) -> None:
    """hccl.json first, then `version`: a reader that saw the counter grow finds the table it counts."""
    target.mkdir(parents=True, exist_ok=True)
    _replace(target / TABLE_KEY, expanded.table)
    _replace(target / VERSION_KEY, expanded.version)


def sync_once(source: Path, target: Path, last: str | None,
              say=lambda line: print(line, file=sys.stderr, flush=True)) -> tuple[str | None, Expanded | None]:
    """One poll: (the fingerprint now in step, what was written or None). A source caught mid-update is tried
    again at the next poll (its fingerprint is not recorded); a table refused is said once and not read again
    until the ConfigMap changes (the file keeps the last good table)."""
    seen = fingerprint(source)
    if seen == last:
        return last, None
    try:
        expanded = read_source(source)
    except untrusted.Rejected as rejected:
        if fingerprint(source) != seen:  # changed while read: read the new one at the next poll
            return last, None
        say(f"ranktable-expander: the ConfigMap's table is refused, {target / TABLE_KEY} kept: {rejected}")
        return seen, None
    if expanded is None:
        return last, None
    current = target / TABLE_KEY
    try:
        unchanged = current.read_text(encoding="utf-8") == expanded.table and \
            (target / VERSION_KEY).read_text(encoding="utf-8") == expanded.version
    except OSError:
        unchanged = False
    if not unchanged:
        write_target(target, expanded)
    return seen, (None if unchanged else expanded)


def run(source: Path, target: Path, poll_seconds: float = POLL_SECONDS, once: bool = False) -> int:
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    last: str | None = None
    while not stopping:
        started = time.perf_counter()
        last, written = sync_once(source, target, last)
        if written is not None:
            print(f"ranktable-expander: wrote {target / TABLE_KEY} ({len(written.table)} bytes, status "
                  f"{written.status}, version {written.version or '-'}) in "
                  f"{(time.perf_counter() - started) * 1000:.0f} ms", flush=True)
        if once:
            return 0 if last is not None else 1
        time.sleep(poll_seconds)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m ascend_hybrid.ranktable_sidecar",
                                     description="keep the complete hccl.json of a rank-table ConfigMap in a "
                                                 "shared directory")
    parser.add_argument("--source", required=True, help="the mounted rank-table ConfigMap")
    parser.add_argument("--target", required=True, help="the shared directory RANK_TABLE_FILE is in")
    parser.add_argument("--poll-seconds", type=float, default=POLL_SECONDS)
    parser.add_argument("--once", action="store_true", help="expand once and exit (1: the source is unreadable)")
    args = parser.parse_args(argv)
    if args.poll_seconds <= 0:
        print(f"error: --poll-seconds={args.poll_seconds}: must be > 0", file=sys.stderr)
        return 2
    return run(Path(args.source), Path(args.target), args.poll_seconds, args.once)


if __name__ == "__main__":
    sys.exit(main())
