"""The layering rules of docs/architecture.md, checked over the import statements of every source module.

- the pure core (every sub-package but cli/, controller/, devtools/ and devcluster/) imports only the standard library
  (but no sockets, processes or threads), pydantic, jinja2, yaml and prometheus_client's text parser, and itself;
- inside the core, a sub-package imports only the ones below it in CORE_ORDER (contracts at the bottom, reconcile at
  the top) and itself;
- `controller/` may import the core but cli/; the core never imports `controller/`;
- only cli/ and `devtools/` import `devtools/` or `devcluster/`;
- `devcluster/` imports nothing of the operator (it is the test oracle of the operator's Ascend knowledge);
- the trainer imports nothing of the operator, and the operator nothing of the trainer;
- no two modules import each other, directly or round a loop, counting the imports inside functions and under
  TYPE_CHECKING (a cycle hidden that way is still one the reader must hold in mind).
"""

from __future__ import annotations

import ast
import shutil
import sys
from pathlib import Path

import pytest

from support.layers import CORE_ORDER, SHELL
from support.paths import REPO_ROOT

PACKAGE = "ascend_hybrid"
TRAINER = "ascend_hybrid_trainer"
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
    """controller, devtools, devcluster, or the core sub-package (`core` for the package's own top modules)."""
    parts = module.split(".")
    if len(parts) < 2 or parts[0] != PACKAGE:
        return "outside"
    if parts[1] in SHELL or parts[1] in CORE_ORDER:
        return parts[1]
    return "core"


def is_core(layer: str) -> bool:
    return layer == "core" or layer in CORE_ORDER


def rank(layer: str) -> int:
    """The package's own top modules (entry points, the map) sit above every sub-package."""
    return CORE_ORDER.index(layer) if layer in CORE_ORDER else len(CORE_ORDER)


def is_stdlib(module: str) -> bool:
    return module.split(".")[0] in sys.stdlib_module_names


def core_violation(layer: str, imported: str) -> str | None:
    ours = within(imported, PACKAGE)
    if ours:
        target = layer_of(imported)
        if not is_core(target):
            return f"the core imports {target}/ ({imported})"
        if target != layer and rank(target) > rank(layer):
            return f"{layer}/ imports {target}/, a layer above it ({imported})"
        return None
    if is_stdlib(imported):
        if any(within(imported, banned) for banned in CORE_FORBIDDEN_STDLIB):
            return f"the core does I/O or threads ({imported})"
        return None
    if not any(within(imported, allowed) for allowed in CORE_THIRD_PARTY):
        return f"the core imports {imported}"
    return None


def shell_violation(layer: str, imported: str) -> str | None:
    if not within(imported, PACKAGE):
        return None
    target = layer_of(imported)
    if layer == "controller" and target in ("devtools", "devcluster", "cli"):
        return f"controller/ imports {target} ({imported})"
    if layer == "devcluster" and target != "devcluster":
        return f"devcluster/ imports the operator ({imported})"
    return None


def violations(root: Path) -> list[str]:
    found = []
    for name, path in modules(root, PACKAGE).items():
        layer = layer_of(name)
        where = f"{path.relative_to(root)}"
        for line, imported in imports_of(name, path):
            if within(imported, TRAINER):
                complaint: str | None = f"the operator imports the trainer ({imported})"
            elif is_core(layer):
                complaint = core_violation(layer, imported)
            else:
                complaint = shell_violation(layer, imported)
            if complaint:
                found.append(f"{where}:{line}: {complaint}")
    for name, path in modules(root, TRAINER).items():
        for line, imported in imports_of(name, path):
            if within(imported, PACKAGE):
                found.append(f"{path.relative_to(root)}:{line}: the trainer imports the operator ({imported})")
    return found


def cycles(root: Path, package: str) -> list[list[str]]:
    """The import cycles among the package's modules (strongly connected components of two or more), each sorted.
    `from package import module` counts as importing the module; a module importing its own package does not."""
    found = modules(root, package)
    graph = {name: {imported for _, imported in imports_of(name, path)
                    if imported in found and imported != name and not within(name, imported)}
             for name, path in found.items()}
    return sorted(sorted(component) for component in components(graph) if len(component) > 1)


def components(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components, iteratively (no recursion limit to mind)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            step = next(successors, None)
            if step is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    found.append(component)
            elif step not in index:
                index[step] = low[step] = len(index)
                stack.append(step)
                on_stack.add(step)
                work.append((step, iter(sorted(graph[step]))))
            elif step in on_stack:
                low[node] = min(low[node], index[step])
    return found


def source_tree() -> Path:
    return REPO_ROOT / "operator"


def test_the_source_tree_keeps_its_layers():
    found = violations(source_tree()) + violations(REPO_ROOT / "trainer")
    assert found == [], "\n".join(found)


def test_no_module_imports_round_a_cycle():
    found = cycles(source_tree(), PACKAGE) + cycles(REPO_ROOT / "trainer", TRAINER)
    assert found == [], found


@pytest.mark.parametrize("module, source, cycle", [
    ("controller/placing.py", "\ndef _later():\n    from ascend_hybrid.controller import loop\n",
     ["ascend_hybrid.controller.loop", "ascend_hybrid.controller.placing"]),
    ("controller/children.py", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
     "    from ascend_hybrid.controller.loop import Controller\n",
     ["ascend_hybrid.controller.children", "ascend_hybrid.controller.loop"]),
    ("gang/layout.py", "from ascend_hybrid.gang import placement\n",
     ["ascend_hybrid.gang.layout", "ascend_hybrid.gang.placement"]),
])
def test_a_planted_cycle_is_found(planted, module, source, cycle):
    path = planted / PACKAGE / module
    path.write_text(path.read_text() + "\n" + source)
    assert any(set(cycle) <= set(found) for found in cycles(planted, PACKAGE)), cycles(planted, PACKAGE)


def test_the_layers_are_what_the_architecture_says():
    layers = {name: layer_of(name) for name in modules(source_tree(), PACKAGE)}
    assert layers[f"{PACKAGE}.reconcile.decision"] == "reconcile"
    assert layers[f"{PACKAGE}.contracts.ascend"] == layers[f"{PACKAGE}.contracts.chips"] == "contracts"
    assert layers[f"{PACKAGE}.controller.kube"] == layers[f"{PACKAGE}.controller.handlers"] == "controller"
    assert layers[f"{PACKAGE}.devtools.demo"] == "devtools"
    assert layers[f"{PACKAGE}.devcluster.runtime.service"] == "devcluster"
    assert set(CORE_ORDER) | set(SHELL) == {
        path.name for path in (source_tree() / PACKAGE).iterdir() if (path / "__init__.py").exists()}


def test_at_most_six_modules_stay_at_the_top():
    top = [path.name for path in (source_tree() / PACKAGE).glob("*.py")]
    assert len(top) <= 6, top


@pytest.fixture
def planted(tmp_path) -> Path:
    shutil.copytree(source_tree() / PACKAGE, tmp_path / PACKAGE, ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


@pytest.mark.parametrize("module, source, complaint", [
    ("gang/placement.py", "import kubernetes\n", "the core imports kubernetes"),
    ("gang/layout.py", "from kopf import Memo\n", "the core imports kopf"),
    ("gang/ranktable.py", "import subprocess\n", "the core does I/O or threads (subprocess)"),
    ("monitoring/progress.py", "import prometheus_client\n", "the core imports prometheus_client"),
    ("gang/render.py", "from ascend_hybrid.controller import kube\n", "the core imports controller/"),
    ("contracts/names.py", "from ascend_hybrid.spec import api\n", "contracts/ imports spec/, a layer above it"),
    ("gang/backlog.py", "from ascend_hybrid.reconcile.decision import Decision\n",
     "gang/ imports reconcile/, a layer above it"),
    ("spec/rules.py", "from ..diagnosis import policy\n", "spec/ imports diagnosis/, a layer above it"),
    ("controller/kube.py", "from ..devcluster.kube import client\n", "controller/ imports devcluster"),
    ("controller/loop.py", "from ascend_hybrid.cli import main\n", "controller/ imports cli"),
    ("reconcile/strategy.py", "from ascend_hybrid.cli import plan\n", "the core imports cli/"),
    ("devcluster/cluster.py", "from ascend_hybrid.spec import rules\n", "devcluster/ imports the operator"),
    ("spec/rules.py", "import ascend_hybrid_trainer.config\n", "the operator imports the trainer"),
])
def test_a_planted_violation_is_found(planted, module, source, complaint):
    path = planted / PACKAGE / module
    path.write_text(path.read_text() + "\n" + source)
    found = violations(planted)
    assert len(found) >= 1 and any(complaint in line and module in line for line in found), found
