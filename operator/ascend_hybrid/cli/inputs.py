"""What the CLI reads: YAML and JSON files (or stdin) of Kubernetes objects, strictly — duplicate keys, syntax errors
with line and column, objects of the wrong shape and several jobs in one file are each one `error:` line — and
the argument parser whose usage errors are one line too."""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from ascend_hybrid.contracts import names
from ascend_hybrid.spec import api, rules
from ascend_hybrid.spec.k8s_validation import object_problems
from ascend_hybrid.spec.resolved import ResolvedJob

EXIT_BAD_INPUT = 2
MAX_PROBLEMS_SHOWN = 20


class InputError(Exception):
    """Bad input: one line (or a few, one per problem) on stderr, exit code 2."""

    def __init__(self, *lines: str):
        super().__init__("\n".join(lines))
        self.lines = lines


class ArgumentParser(argparse.ArgumentParser):
    """argparse, but a usage error is one `error:` line and exit code 2, like every other bad input."""

    def error(self, message: str):
        self.exit(EXIT_BAD_INPUT, f"error: {self.prog}: {message} (see {self.prog} --help)\n")


# --- YAML as kubectl reads it, and stricter where PyYAML is silent ----------------------------------------------

if TYPE_CHECKING:  # a class, not a variable, for mypy: CSafeLoader has SafeLoader's interface
    from yaml import SafeLoader as _BaseLoader
else:
    _BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: `kubectl get pods -A` is large


class DuplicateKeyError(yaml.YAMLError):
    def __init__(self, key, first, mark):
        super().__init__(f"duplicate key {key!r}")
        self.key, self.first, self.mark = key, first, mark


class StrictLoader(_BaseLoader):
    """SafeLoader that refuses a key given twice in one mapping (PyYAML keeps the last silently) and reads
    exponent floats without a dot or a signed exponent (1e-3, 2E5) as numbers, as kubectl's YAML 1.2 does."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            first: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # merged keys may be overridden, as YAML's merge key says
                key = self.construct_object(key_node, deep=True)
                try:
                    seen = first.get(key)
                except TypeError:
                    continue  # an unhashable key: SafeConstructor reports it
                if seen is not None:
                    raise DuplicateKeyError(key, seen, key_node.start_mark)
                first[key] = key_node.start_mark
        return super().construct_mapping(node, deep)


StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."))


def _where(mark) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}"


def _yaml_problem(path: str, error: yaml.YAMLError, text: str) -> str:
    if isinstance(error, DuplicateKeyError):
        return (f"{path}: duplicate key {error.key!r} at {_where(error.mark)} (first at {_where(error.first)}): "
                "YAML would keep only the last value, silently")
    if isinstance(error, yaml.MarkedYAMLError):
        where = f" at {_where(error.problem_mark)}" if error.problem_mark else ""
        context = ""
        if error.context and error.problem:
            started = error.context_mark and error.context_mark != error.problem_mark
            context = f" ({error.context}" + (f" started at {_where(error.context_mark)}" if started else "") + ")"
        return f"{path}: not valid YAML{where}: {error.problem or error.context}{context}"
    if isinstance(error, yaml.reader.ReaderError):
        before = text[: error.position]
        line, column = before.count("\n") + 1, len(before) - (before.rfind("\n") + 1) + 1
        return (f"{path}: not valid YAML at line {line}, column {column}: unacceptable character "
                f"#x{error.character:04x}: special characters are not allowed (a binary file?)")
    return f"{path}: not valid YAML ({str(error).splitlines()[0]})"


@dataclass(frozen=True)
class Document:
    obj: dict
    where: str  # "document 2 (line 14)", "document 1 (line 1), item 3"


def _read(path: str) -> str:
    if path == "-":
        try:
            return sys.stdin.read()
        except UnicodeDecodeError as error:
            raise InputError(f"-: standard input is not UTF-8 text ({error.reason} at byte {error.start})") from None
    try:
        return Path(path).read_text()
    except OSError as error:
        raise InputError(f"{path}: {error.strerror or error}") from None
    except UnicodeDecodeError as error:
        raise InputError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from None


def load_documents(path: str) -> list[Document]:
    """Every Kubernetes object of a YAML file or stream (`-`): separate documents, and the items of a List
    (as `kubectl get -o yaml` prints), each with where it was. Refuses anything that is not an object."""
    text = _read(path)
    documents: list[Document] = []
    count = 0
    loader = StrictLoader(text)
    try:
        while loader.check_node():
            node = loader.get_node()
            count += 1
            where = f"document {count} (line {node.start_mark.line + 1})"
            data = loader.construct_document(node)
            if data is None:
                continue
            if not isinstance(data, dict):
                raise InputError(f"{path}: {where} is {_kind_of(data)}, not a Kubernetes object")
            kind = data.get("kind")
            if isinstance(kind, str) and kind.endswith("List") and isinstance(data.get("items"), list):
                for index, item in enumerate(data["items"]):
                    if not isinstance(item, dict):
                        raise InputError(f"{path}: {where}, item {index + 1} is {_kind_of(item)}, "
                                         "not a Kubernetes object")
                    documents.append(Document(item, f"{where}, item {index + 1}"))
            else:
                documents.append(Document(data, where))
    except yaml.YAMLError as error:
        raise InputError(_yaml_problem(path, error, text)) from None
    except RecursionError:
        raise InputError(f"{path}: nested too deeply to be a Kubernetes object") from None
    finally:
        loader.dispose()
    if not count and not text.strip(" \t\r\n"):
        raise InputError(f"{path}: empty: no YAML document")
    for document in documents:
        api_version, kind = document.obj.get("apiVersion"), document.obj.get("kind")
        missing = [field for field, value in (("apiVersion", api_version), ("kind", kind))
                   if not isinstance(value, str) or not value]
        if missing:
            raise InputError(f"{path}: {document.where}: not a Kubernetes object: {' and '.join(missing)} "
                             f"{'is' if len(missing) == 1 else 'are'} required")
    return documents


def load_yaml(path: str):
    """The one YAML document of a file (a hardware description), read as strictly as the objects above."""
    text = _read(path)
    loader = StrictLoader(text)
    try:
        return loader.get_single_data()
    except yaml.YAMLError as error:
        raise InputError(_yaml_problem(path, error, text)) from None
    except RecursionError:
        raise InputError(f"{path}: nested too deeply") from None
    finally:
        loader.dispose()


def _kind_of(value) -> str:
    return {str: "a string", int: "a number", float: "a number", bool: "a boolean", list: "a list"}.get(
        type(value), type(value).__name__)


def load_objects(path: str, kinds: tuple[str, ...] = ("Node", "Pod", "ConfigMap")) -> list[dict]:
    """The objects of a file; those of `kinds` must have the shape the API gives them (k8s_validation)."""
    documents = load_documents(path)
    problems = []
    seen: dict[tuple, str] = {}
    for document in documents:
        obj = document.obj
        if obj.get("kind") not in kinds:
            continue
        label = f"{path}: {document.where}: {obj['kind']}"
        problems += [f"{label}: {problem}" for problem in object_problems(obj)]
        metadata = obj.get("metadata")
        if isinstance(metadata, dict) and isinstance(metadata.get("name"), str):
            key = (obj["kind"], metadata.get("namespace") if isinstance(metadata.get("namespace"), str) else None,
                   metadata["name"])
            if key in seen:
                problems.append(f"{label} {metadata['name']!r}: given twice ({seen[key]} too)")
            seen.setdefault(key, document.where)
    if problems:
        shown = problems[:MAX_PROBLEMS_SHOWN]
        more = len(problems) - len(shown)
        raise InputError(*shown, *([f"{path}: … and {more} more problems"] if more else []))
    return [document.obj for document in documents]


def job_documents(path: str) -> list[Document]:
    return jobs_of(path, load_documents(path))


def jobs_of(path: str, documents: list[Document]) -> list[Document]:
    """The AscendHybridJob documents of a file; none is an error that says what the file holds instead."""
    jobs = [document for document in documents if document.obj.get("kind") == api.KIND]
    if not jobs:
        raise InputError(f"{path}: no {api.KIND} object found{_kinds_found(documents)}")
    return jobs


def _kinds_found(documents: list[Document]) -> str:
    """What the file holds instead, naming `kind` and the kind expected (a near miss as such)."""
    if not documents:
        return ""
    found = [f"{document.where} has kind {document.obj.get('kind')!r}" for document in documents[:3]]
    more = f" (and {len(documents) - 3} more)" if len(documents) > 3 else ""
    near = [document for document in documents if str(document.obj.get("kind")).lower() == api.KIND.lower()]
    hint = " (kinds are case-sensitive)" if near else ""
    return (f": {'; '.join(found)}{more}; expected kind: {api.KIND}{hint}, apiVersion: "
            f"{names.GROUP}/{api.VERSION}")


def check_job(path: str, document: Document) -> ResolvedJob:
    body = document.obj
    if body.get("apiVersion") != f"{names.GROUP}/{api.VERSION}":
        raise InputError(f"{path}: apiVersion must be {names.GROUP}/{api.VERSION}, got {body.get('apiVersion')!r}")
    return rules.parse(body)


def load_job(path: str) -> tuple[dict, ResolvedJob]:
    """The one AscendHybridJob of a file (layout, render, ranktable and plan take one job)."""
    jobs = job_documents(path)
    if len(jobs) > 1:
        raise InputError(f"{path}: {len(jobs)} {api.KIND} objects ({', '.join(job_label(d) for d in jobs)}); "
                         "this command takes one: give it a file with only that job")
    return jobs[0].obj, check_job(path, jobs[0])


def job_label(document: Document) -> str:
    metadata = document.obj.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    return repr(name) if isinstance(name, str) and name else document.where


def of_kind(objects: list[dict], kind: str) -> list[dict]:
    return [o for o in objects if o.get("kind") == kind]
