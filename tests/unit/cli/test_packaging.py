"""The repository's top-level `operator/` folder must never shadow the standard library's `operator` module."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PROBE = """
import importlib.machinery, json, sys
spec = importlib.machinery.PathFinder.find_spec("operator", sys.path)
import operator
import ascend_hybrid, ascend_hybrid.cli, ascend_hybrid.gang.render
from importlib.resources import files
print(json.dumps({
    "found": spec.origin if spec else None,
    "namespace": bool(spec and spec.origin is None),
    "file": getattr(operator, "__file__", None),
    "itemgetter": operator.itemgetter(1)([0, 7]),
    "package": ascend_hybrid.__file__,
    "templates": sorted(p.name for p in (files("ascend_hybrid") / "gang" / "templates").iterdir()),
}))
"""


@pytest.mark.parametrize("how", ["cwd", "sys.path", "PYTHONPATH"])
def test_operator_is_the_standard_library(repo_root, how, tmp_path):
    env = None
    cwd = tmp_path
    code = PROBE
    if how == "cwd":
        cwd = repo_root
    elif how == "sys.path":
        code = f"import sys; sys.path.insert(0, {str(repo_root)!r})\n" + PROBE
    else:
        import os
        env = {**os.environ, "PYTHONPATH": str(repo_root)}
    result = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    stdlib = sys.modules["operator"].__file__
    assert found["itemgetter"] == 7
    assert found["file"] == stdlib
    assert found["found"] == stdlib, "sys.path lookup of `operator` must resolve to the standard library"
    assert not found["namespace"]
    assert found["package"] == str(repo_root / "operator" / "ascend_hybrid" / "__init__.py")
    assert {"pod.yaml.j2", "service.yaml.j2", "configmap.yaml.j2"} <= set(found["templates"])


def test_repo_operator_folder_is_no_package(repo_root):
    assert (repo_root / "operator" / "ascend_hybrid" / "__init__.py").exists()
    assert not (repo_root / "operator" / "__init__.py").exists()
    assert not (repo_root / "operator.py").exists()


def test_console_script_is_installed(cli_path):
    result = subprocess.run([str(cli_path), "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    for command in ("validate", "layout", "render", "ranktable", "crd"):
        assert command in result.stdout


def test_every_package_of_the_source_tree_ships_in_the_wheel(repo_root):
    """pyproject lists the packages by hand (package-dir maps operator/ and trainer/): a new subpackage that is not
    listed works in the editable install and is missing from every image. A folder of data files (templates/)
    is listed too: setuptools warns about a data folder that is not a listed package."""
    import tomllib

    listed = set(tomllib.loads((repo_root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = set()
    for top, folder in (("ascend_hybrid", repo_root / "operator" / "ascend_hybrid"),
                        ("ascend_hybrid_trainer", repo_root / "trainer" / "ascend_hybrid_trainer")):
        for path in [folder, *folder.rglob("*")]:
            if path.is_dir() and path.name != "__pycache__" and any(child.is_file() for child in path.iterdir()):
                found.add(".".join([top, *path.relative_to(folder).parts]))
    assert found == listed
