"""The layering rules of docs/architecture.md, checked over the import statements of every source module.

- the pure core (the modules at the top of `ascend_hybrid/` and its `planner/`) imports only the standard library
  (but no sockets, processes or threads), pydantic, jinja2, yaml and prometheus_client's text parser, and itself;
- `controller/` may import the core; the core never imports `controller/`;
- only the CLI modules and `devtools/` import `devtools/` or `devcluster/`;
- `devcluster/` imports nothing of the operator (it is the test oracle of the operator's Ascend knowledge);
- the trainer imports nothing of the operator, and the operator nothing of the trainer.
"""

from __future__ import annotations

import ast
import shutil
import sys
from pathlib import Path

import pytest

from support.paths import REPO_ROOT

PACKAGE = "ascend_hybrid"
TRAINER = "ascend_hybrid_trainer"
CLI_MODULES = {f"{PACKAGE}.cli", f"{PACKAGE}.cli_input", f"{PACKAGE}.plan_cli"}
CORE_THIRD_PARTY = ("pydantic", "jinja2", "yaml", "prometheus_client.parser")
CORE_FORBIDDEN_STDLIB = ("socket", "subprocess", "threading", "multiprocessing", "asyncio", "concurrent",
                         "urllib.request", "http", "ssl", "selectors")


def modules(root: Path, package: str) -> dict[str, Path]:
    found = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def imports_of(name: str, path: Path) -> list[tuple[int, str]]:
    """(line, absolute module) of every import, relative ones resolved; `from X import y` also yields X.y."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module == "__future__":
                continue
            found.append((node.lineno, module))
            found += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
    return found


def within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def layer_of(module: str) -> str:
    if within(module, f"{PACKAGE}.controller"):
        return "controller"
    if within(module, f"{PACKAGE}.devtools"):
        return "devtools"
    if within(module, f"{PACKAGE}.devcluster"):
        return "devcluster"
    if module in CLI_MODULES:
        return "cli"
    return "core"


def is_stdlib(module: str) -> bool:
    return module.split(".")[0] in sys.stdlib_module_names


def violations(root: Path) -> list[str]:
    found = []
    for name, path in modules(root, PACKAGE).items():
        layer = layer_of(name)
        where = f"{path.relative_to(root)}"
        for line, imported in imports_of(name, path):
            ours = within(imported, PACKAGE)
            if within(imported, TRAINER):
                found.append(f"{where}:{line}: the operator imports the trainer ({imported})")
            elif layer == "core":
                if ours and layer_of(imported) != "core":
                    found.append(f"{where}:{line}: the core imports {layer_of(imported)}/ ({imported})")
                elif not ours and is_stdlib(imported):
                    if any(within(imported, banned) for banned in CORE_FORBIDDEN_STDLIB):
                        found.append(f"{where}:{line}: the core does I/O or threads ({imported})")
                elif not ours and not any(within(imported, allowed) for allowed in CORE_THIRD_PARTY):
                    found.append(f"{where}:{line}: the core imports {imported}")
            elif layer == "controller" and ours and layer_of(imported) in ("devtools", "devcluster", "cli"):
                found.append(f"{where}:{line}: controller/ imports {layer_of(imported)} ({imported})")
            elif layer == "devcluster" and ours and layer_of(imported) != "devcluster":
                found.append(f"{where}:{line}: devcluster/ imports the operator ({imported})")
    for name, path in modules(root, TRAINER).items():
        for line, imported in imports_of(name, path):
            if within(imported, PACKAGE):
                found.append(f"{path.relative_to(root)}:{line}: the trainer imports the operator ({imported})")
    return found


def source_tree() -> Path:
    return REPO_ROOT / "operator"


def test_the_source_tree_keeps_its_layers():
    found = violations(source_tree()) + violations(REPO_ROOT / "trainer")
    assert found == [], "\n".join(found)


def test_the_layers_are_what_the_architecture_says():
    layers = {name: layer_of(name) for name in modules(source_tree(), PACKAGE)}
    assert layers[f"{PACKAGE}.reconcile"] == layers[f"{PACKAGE}.ascend"] == layers[f"{PACKAGE}.chips"] == "core"
    assert layers[f"{PACKAGE}.controller.kube"] == layers[f"{PACKAGE}.controller.handlers"] == "controller"
    assert layers[f"{PACKAGE}.devtools.demo"] == "devtools"
    assert layers[f"{PACKAGE}.devcluster.runtime.service"] == "devcluster"


@pytest.fixture
def planted(tmp_path) -> Path:
    shutil.copytree(source_tree() / PACKAGE, tmp_path / PACKAGE, ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


@pytest.mark.parametrize("module, source, complaint", [
    ("placement.py", "import kubernetes\n", "the core imports kubernetes"),
    ("layout.py", "from kopf import Memo\n", "the core imports kopf"),
    ("ranktable.py", "import subprocess\n", "the core does I/O or threads (subprocess)"),
    ("progress.py", "import prometheus_client\n", "the core imports prometheus_client"),
    ("render.py", "from .controller import kube\n", "the core imports controller/"),
    ("controller/kube.py", "from ..devcluster.kube import client\n", "controller/ imports devcluster"),
    ("devcluster/cluster.py", "from .. import rules\n", "devcluster/ imports the operator"),
    ("rules.py", "import ascend_hybrid_trainer.config\n", "the operator imports the trainer"),
])
def test_a_planted_violation_is_found(planted, module, source, complaint):
    path = planted / PACKAGE / module
    path.write_text(path.read_text() + "\n" + source)
    found = violations(planted)
    assert len(found) >= 1 and any(complaint in line and module in line for line in found), found
