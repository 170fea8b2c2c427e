"""The dev cluster's one way to replace a file that another process reads while it changes (a ConfigMap volume
the trainer reads, a target list Prometheus reads): write beside it, then rename over it, so a reader sees the
old file or the new one, never half of either."""

from __future__ import annotations

import os
from pathlib import Path


def replace_file(path: Path, content: bytes, mode: int | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_bytes(content)
    if mode is not None:
        temporary.chmod(mode)
    os.replace(temporary, path)
