"""Each piece of Ascend knowledge has one home in the source, and no module grows past the house limit.

Outside devcluster/ (which keeps its own copy on purpose, as the operator's test oracle), the device annotation,
the super-pod label and the chip tables are spelled in exactly one source module each — comments and docstrings
included — so every other module imports the constant.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from support.paths import REPO_ROOT

SOURCE_ROOTS = (REPO_ROOT / "operator" / "ascend_hybrid", REPO_ROOT / "trainer" / "ascend_hybrid_trainer")


def source_modules(include_devcluster: bool = True) -> list[Path]:
    modules = [path for root in SOURCE_ROOTS for path in sorted(root.rglob("*.py"))]
    if include_devcluster:
        return modules
    return [path for path in modules if "devcluster" not in path.relative_to(REPO_ROOT).parts]


@pytest.mark.parametrize("what, pattern, home", [
    ("the device annotation", re.escape("ascend.kubectl.kubernetes.io/ascend-910-configuration"), "ascend.py"),
    ("the super-pod label", re.escape("huawei.com/topotree.superpodid"), "ascend.py"),
    ("the rack label", re.escape("huawei.com/topotree.rackid"), "ascend.py"),
    ("the deviceinfo ConfigMap prefix", re.escape("mindx-dl-deviceinfo-"), "ascend.py"),
    ("chips per node", r"chips_per_node\s*=\s*\d|\"A3\"\s*:\s*16|'A3' \? 16", "chips.py"),
    ("allowed chips per pod", r"\(1, 2, 4, 8\)|range\(2, 17, 2\)|range\(1, 9\)", "chips.py"),
    ("the HCCS ring size", r"ring_size\s*=\s*\d|RING_SIZE\s*=", "chips.py"),
])
def test_one_source_module_spells_it(what, pattern, home):
    found = [path.relative_to(REPO_ROOT) for path in source_modules(include_devcluster=False)
             if re.search(pattern, path.read_text())]
    assert [path.name for path in found] == [home], f"{what} is spelled in {found}; import it from {home}"
