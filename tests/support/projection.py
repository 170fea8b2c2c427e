"""A ConfigMap volume as the kubelet projects it (pkg/volume/util AtomicWriter): the files of one version in a
timestamped directory, `..data` a link to it, swapped by rename on every update, and each key a link through
`..data`; binaryData decoded. For the rank-table expander's tests, which must see updates as the kubelet makes them."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

from ascend_hybrid.devcluster.runtime.launch import configmap_source_files

_generation = itertools.count(1)


def project(directory: Path, config_map: dict, volume: str = "source") -> None:
    """Writes (or updates) `config_map` into `directory` as the kubelet does."""
    directory.mkdir(parents=True, exist_ok=True)
    staged = directory / f"..2026_12_02_00_00_00.{next(_generation):09d}"
    files = configmap_source_files(config_map["metadata"].get("namespace", "default"), volume,
                                   {"name": config_map["metadata"]["name"]},
                                   {(config_map["metadata"].get("namespace", "default"), config_map["metadata"]["name"]):
                                    config_map}, staged)
    staged.mkdir()
    for path, content in files.items():
        path.write_bytes(content)
    old = os.readlink(directory / "..data") if (directory / "..data").is_symlink() else None
    link = directory / "..data_tmp"
    os.symlink(staged.name, link)
    os.replace(link, directory / "..data")  # the atomic switch: readers see the old files or the new, never a mix
    for path in files:
        user_link = directory / path.name
        if not user_link.is_symlink():
            os.symlink(f"..data/{path.name}", user_link)
    for stale in directory.iterdir():
        if stale.is_symlink() and not stale.name.startswith("..") and not (directory / "..data" / stale.name).exists():
            stale.unlink()
    if old is not None:
        for path in (directory / old).iterdir():
            path.unlink()
        (directory / old).rmdir()
