"""The docs name only what exists: every file of the repository, function or class of the operator, flag of its
commands and field of the AscendHybridJob that README.md and docs/*.md name in `code` must be there.

What it reads: each `span` of the Markdown outside fenced blocks, and each line of a fenced block that runs one of
our commands (the blocks' YAML and other tools' commands are not read). A span is checked when it has a shape only
our names have:
- a path under one of the repository's folders (`operator/…`, `docs/…`, `tests/…`), or under a sub-package of the
  operator (`gang/placement.py`): the file (or folder) exists; a `:line` suffix is allowed;
- `package/module.Name` or `module.Name[.member]` where `module` is a module of the operator (`podview.node_of`,
  `reconcile/decision.ring_split`, `Controller.place`-style members of classes): the module defines it;
- `ascend-hybrid … --flag` (a command line of ours): some command of the project declares the flag (argparse);
  a bare `--flag` may be another tool's (MindSpeed's, podman's) and is not checked;
- `spec.…` or `status.…` (a field path, `[…]`, `=value` and `: …` stripped): the CRD's schema has it.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import yaml

from support.paths import REPO_ROOT

PACKAGE = REPO_ROOT / "operator" / "ascend_hybrid"
DOCS = (REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md")))
TOP_DIRS = ("operator", "trainer", "tests", "bench", "hack", "docs", "deploy", "charts", "crds", ".ci")
SUB_PACKAGES = tuple(path.name for path in PACKAGE.iterdir() if (path / "__init__.py").exists())
# Flags of other programs that our command lines in the docs pass through (`ascend-hybrid --help` is argparse's).
EXTERNAL_FLAGS = frozenset({"--help"})
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
SPAN = re.compile(r"`([^`\n]+)`")
PATH = re.compile(r"^(?:\.\./)?([\w.-]+(?:/[\w.*-]+)+/?)(?::\d+(?:-\d+)?)?$")
EXTENSIONS = ("py", "md", "yaml", "yml", "j2", "json", "sh", "txt", "toml", "tpl", "svg", "cfg", "ini")
ATTRIBUTE = re.compile(r"^(?:([a-z_]+)/)?([a-z_]+)\.([A-Za-z_]\w*)(?:\.([A-Za-z_]\w*))?(?:\(\))?$")
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")
FIELD = re.compile(r"^(spec|status)\.([\w.\[\]…]+)")
# modules named bare (`podview.node_of`) that are not also a field or object the docs talk about (placement, kube)
DISTINCT_MODULES = frozenset({"podview", "ranktable", "render", "decision", "placement_record", "recovery_steps",
                              "elastic_steps", "queue_steps", "membership", "inventory", "backlog", "clusterwatch",
                              "listwatch", "podwatch", "hardening", "chartgen", "toolchain", "allocation", "layout",
                              "anomalies", "failures", "policy", "hints", "refusals", "strategy", "state"})


def spans(doc: Path) -> list[str]:
    text = doc.read_text()
    commands = [line.strip() for block in FENCE.findall(text) for line in block.splitlines()
                if line.strip().startswith(OUR_COMMANDS)]
    return SPAN.findall(FENCE.sub("", text)) + commands


@cache
def module_files() -> dict[str, list[Path]]:
    """Module name → files of the operator (and trainer) with that name."""
    found: dict[str, list[Path]] = {}
    for root in (PACKAGE, REPO_ROOT / "trainer" / "ascend_hybrid_trainer"):
        for path in root.rglob("*.py"):
            found.setdefault(path.stem, []).append(path)
    return found


@cache
def defined(path: Path) -> frozenset[str]:
    """Names a module defines at its top level, and `Class.member` for its classes' members."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        if isinstance(node, ast.ClassDef):
            for member in node.body:
                if isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef):
                    names.add(f"{node.name}.{member.name}")
                elif isinstance(member, ast.AnnAssign) and isinstance(member.target, ast.Name):
                    names.add(f"{node.name}.{member.target.id}")
                elif isinstance(member, ast.Assign):
                    names.update(f"{node.name}.{t.id}" for t in member.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.ImportFrom):
            names.update(alias.asname or alias.name for alias in node.names)
    return frozenset(names)


@cache
def declared_flags() -> frozenset[str]:
    flags: set[str] = set()
    for root in ("operator", "trainer", "bench", "hack"):
        for path in (REPO_ROOT / root).rglob("*.py"):
            text = path.read_text()
            for call in re.finditer(r"add_argument\(([^)]*)", text):
                for flag in re.findall(r'"(--[\w-]+)"', call.group(1)):
                    flags.add(flag)
                    if "BooleanOptionalAction" in call.group(0) or "BooleanOptionalAction" in text[call.end():call.end() + 200]:
                        flags.add("--no-" + flag[2:])
    return frozenset(flags)


@cache
def crd_schema() -> dict:
    crd = yaml.safe_load((REPO_ROOT / "crds" / "ascendhybridjobs.hybrid.ascend.dev.yaml").read_text())
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def path_problem(span: str) -> str | None:
    matched = PATH.match(span)
    if matched is None or "*" in span or "<" in span or "{" in span:
        return None
    path = matched.group(1).rstrip("/")
    first, last = path.split("/")[0], path.rsplit("/", 1)[-1]
    if "." in last and last.rsplit(".", 1)[1] not in EXTENSIONS:
        return None  # package/module.Name: attribute_problem's
    if "..." in path:
        return None
    if first in TOP_DIRS:
        exists = (REPO_ROOT / path).exists()
    elif first in SUB_PACKAGES:
        exists = (PACKAGE / path).exists() or (PACKAGE / f"{path}.py").exists()  # a folder, file or module
    else:
        return None
    return None if exists else f"no such file: {path}"


def attribute_problem(span: str) -> str | None:
    matched = ATTRIBUTE.match(span)
    if matched is None:
        return None
    package, module, name, member = matched.groups()
    if name in EXTENSIONS and member is None:
        return None  # a file name: path_problem's
    if module not in module_files() or (package is None and module not in DISTINCT_MODULES):
        return None
    files = [f for f in module_files()[module] if package is None or f.parent.name == package]
    if not files or (package is None and len(files) > 1):
        return None if package is None else f"no module {package}/{module}"
    wanted = name if member is None or name[:1].islower() else f"{name}.{member}"
    if name[:1].islower() and member is not None:
        return None  # module.function.attribute: a value's field, not a definition
    return None if wanted in defined(files[0]) else f"{package + '/' if package else ''}{module} defines no {wanted}"


OUR_COMMANDS = ("ascend-hybrid", "make ", ".venv/bin/", "bench/", "python -m ascend_hybrid")


def flag_problems(span: str) -> list[str]:
    """Flags in a command of ours (a bare `--flag` may be another tool's: MindSpeed's, podman's)."""
    if not span.lstrip().startswith(OUR_COMMANDS):
        return []
    return [f"no command declares {flag}" for flag in FLAG.findall(span)
            if flag not in declared_flags() and flag not in EXTERNAL_FLAGS]


def field_problem(span: str) -> str | None:
    matched = FIELD.match(span)
    if matched is None:
        return None
    root, rest = matched.groups()
    parts = [part for part in re.sub(r"\[[^\]]*\]", "", rest).split(".") if part]
    if any(part in ("…", "...") or not part.isidentifier() for part in parts):
        return None
    schema = crd_schema()["properties"][root]
    if not parts or parts[0] not in (schema.get("properties") or {}):
        return None  # another object's field (a pod's spec.nodeName, status.hostIP)
    for position, part in enumerate(parts):
        if schema.get("type") == "array":
            schema = schema.get("items") or {}
        if schema.get("x-kubernetes-preserve-unknown-fields") or "additionalProperties" in schema:
            return None  # free-form below here
        properties = schema.get("properties") or {}
        if part not in properties:
            return f"{root}.{'.'.join(parts[:position + 1])} is no field of the CRD"
        schema = properties[part]
    return None


def problems_of(span: str) -> list[str]:
    found = [path_problem(span), attribute_problem(span), field_problem(span)]
    return [problem for problem in found if problem] + flag_problems(span)


def test_every_name_the_docs_give_exists():
    missing = [f"{doc.relative_to(REPO_ROOT)}: `{span}`: {problem}"
               for doc in DOCS for span in spans(doc) for problem in problems_of(span)]
    assert not missing, "the docs name what is not there:\n" + "\n".join(sorted(set(missing)))


def test_the_check_finds_a_name_that_is_not_there():
    assert problems_of("operator/ascend_hybrid/gang/no_such_module.py") == [
        "no such file: operator/ascend_hybrid/gang/no_such_module.py"]
    assert problems_of("gang/placement.py:12") == []
    assert problems_of("reconcile/decision.no_such_step") == ["reconcile/decision defines no no_such_step"]
    assert problems_of("podview.node_of") == []
    assert problems_of("ascend-hybrid dev-cluster up --no-such-flag") == ["no command declares --no-such-flag"]
    assert problems_of("ascend-hybrid run --device-plugin-mode auto") == []
    assert problems_of("spec.npu.perPod") == [] and problems_of("spec.npu.per_pod") == [
        "spec.npu.per_pod is no field of the CRD"]
    assert problems_of("spec.template.env[0].name") == []  # free-form below env
