"""The docs and the tree agree: docs/architecture.md's module map has one row per sub-package (in layer order for
the core), each sub-package's `__init__.py` is its map, and every "design §N" / "seed §N" the code cites resolves
in docs/design.md."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from support.layers import CORE_ORDER, SHELL
from support.paths import REPO_ROOT

PACKAGE = REPO_ROOT / "operator" / "ascend_hybrid"
ARCHITECTURE = REPO_ROOT / "docs" / "architecture.md"
DESIGN = REPO_ROOT / "docs" / "design.md"
SOURCES = (REPO_ROOT / "operator", REPO_ROOT / "trainer", REPO_ROOT / "tests", REPO_ROOT / "bench")


def sub_packages() -> list[str]:
    return sorted(path.name for path in PACKAGE.iterdir() if (path / "__init__.py").is_file())


def module_map_rows(text: str) -> list[str]:
    """The first cell of each row of the table under '## Module map', without its backquotes and slash."""
    section = text.split("## Module map", 1)[1].split("\n## ", 1)[0]
    return [match[1] for match in re.finditer(r"^\| `([a-z_]+)/` \|", section, re.MULTILINE)]


def cited(pattern: str) -> set[str]:
    found = set()
    for root in SOURCES:
        for path in root.rglob("*.py"):
            found |= set(re.findall(pattern, path.read_text()))
    return found


def test_the_module_map_has_one_row_per_sub_package_and_the_core_in_layer_order():
    rows = module_map_rows(ARCHITECTURE.read_text())
    assert sorted(rows) == sub_packages(), "docs/architecture.md's module map and the tree disagree"
    assert len(rows) == len(set(rows))
    assert [row for row in rows if row in CORE_ORDER] == list(CORE_ORDER)
    assert set(sub_packages()) == set(CORE_ORDER) | set(SHELL)


def test_every_sub_package_says_what_it_holds():
    for name in sub_packages():
        init = PACKAGE / name / "__init__.py"
        docstring = ast.get_docstring(ast.parse(init.read_text()))
        assert docstring and len(docstring) > 80, f"{init.relative_to(REPO_ROOT)} has no map of its modules"
        modules = [path.stem for path in (PACKAGE / name).glob("*.py") if not path.stem.startswith("__")]
        if name not in ("controller", "devcluster", "devtools"):  # the shell's maps are in architecture.md
            missing = [module for module in modules if f"`{module}`" not in docstring]
            assert not missing, f"{name}/__init__.py does not name {missing}"


def test_every_design_section_the_code_cites_exists():
    headings = set(re.findall(r"^## (\d+)\. ", DESIGN.read_text(), re.MULTILINE))
    sections = {number.split(".")[0] for number in cited(r"design §(\d+(?:\.\d+)?)")}
    assert sections and sections <= headings, f"cited but not in docs/design.md: {sorted(sections - headings)}"


def test_every_seed_section_the_code_cites_is_explained_in_design_section_11():
    seed = DESIGN.read_text().split("## 11. ", 1)[1]
    explained = set(re.findall(r"\*\*§(\d+(?:\.\d+)?) ", seed))
    cited_sections = cited(r"seed §(\d+(?:\.\d+)?)")
    assert cited_sections and cited_sections <= explained, f"not in design §11: {sorted(cited_sections - explained)}"


def test_the_planted_disagreements_are_found(tmp_path: Path):
    text = ARCHITECTURE.read_text()
    assert "gang" in module_map_rows(text)
    assert "gang" not in module_map_rows(text.replace("| `gang/` |", "| `gang.py` |"))
