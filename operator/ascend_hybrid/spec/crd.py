"""The CRD generated from the pydantic models: structural schema, CEL rules, printer columns (pure).

Writing it into crds/ and the chart, and checking them for drift, is `devtools/chartgen.py`'s job."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from ascend_hybrid.contracts import names
from ascend_hybrid.spec import api
from ascend_hybrid.spec.rules import NAME_RULE_CEL, NAME_RULE_MESSAGE, RULES

CRD_FILE_NAME = f"{api.PLURAL}.{names.GROUP}.yaml"

PRINTER_COLUMNS = [
    {"name": "World", "type": "integer", "jsonPath": ".status.worldSize"},
    # the degrees the pods run with (status.parallelism): the spec's, or the planner's for an auto job
    {"name": "TP", "type": "integer", "jsonPath": ".status.parallelism.tensor"},
    {"name": "PP", "type": "integer", "jsonPath": ".status.parallelism.pipeline"},
    {"name": "DP", "type": "integer", "jsonPath": ".status.parallelism.data"},
    {"name": "EP", "type": "integer", "jsonPath": ".status.parallelism.expert"},
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Util", "type": "number", "jsonPath": ".status.utilization.npuPercent", "description": "Mean NPU utilization, percent"},
    {"name": "Step", "type": "integer", "jsonPath": ".status.training.step"},
    {"name": "Restarts", "type": "integer", "jsonPath": ".status.restarts"},
    {"name": "Goodput", "type": "number", "jsonPath": ".status.goodput",
     "description": "Fraction of wall time since the job first ran that went to steps that were kept"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {"name": "Placement", "type": "string", "jsonPath": ".status.placement.summary", "priority": 1},
    {"name": "TP-Local", "type": "string", "jsonPath": ".status.placement.tensorGroupsNodeLocal", "priority": 1,
     "description": "TP groups that sit inside one node"},
    {"name": "Loss", "type": "number", "jsonPath": ".status.training.loss", "priority": 1},
    {"name": "StepRatio", "type": "number", "jsonPath": ".status.plan.stepTimeRatio", "priority": 1,
     "description": "Measured / predicted step seconds"},
    {"name": "Cause", "type": "string", "jsonPath": ".status.lastFailure.cause", "priority": 1,
     "description": "Why the last failed attempt ended (docs/troubleshooting.md)"},
]

def _structural(node: Any, definitions: dict[str, Any]) -> Any:
    """Inlines $refs, turns `anyOf [X, null]` into nullable X, drops what a structural schema forbids."""
    if isinstance(node, list):
        return [_structural(item, definitions) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = copy.deepcopy(definitions[node["$ref"].split("/")[-1]])
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _structural(merged, definitions)
    node = _inline_combinators(dict(node), definitions)
    _to_openapi_v3(node)
    optional = "default" in node and node["default"] is None  # a field that is absent unless the user sets it
    if optional:
        node.pop("default")
    out = _with_structural_children(node, definitions)
    if out.get("type") == "integer":
        # Kubernetes integers are int64 (the apiserver decodes nothing wider); the format says so in the schema and
        # in `kubectl explain`, and rules.parse refuses wider integers with the same bound.
        out.setdefault("format", "int64")
    if out.get("type") == "object" and "properties" in out and "default" not in out and not optional:
        # Defaulting every object lets nested defaults (and the CEL rules relying on them) apply; an optional one
        # (autoConstraints) stays absent, so has() tells whether the user set it.
        if not out.get("required"):
            out["default"] = {}
    return out


def _inline_combinators(node: dict[str, Any], definitions: dict[str, Any]) -> dict[str, Any]:
    """`anyOf [X, null]` becomes X, nullable; a single `allOf` is merged in."""
    if "anyOf" in node:
        options = node.pop("anyOf")
        variants = [v for v in options if v.get("type") != "null"]
        nullable = len(variants) < len(options)
        if len(variants) != 1:
            raise ValueError(f"cannot express union {variants} in a structural schema")
        base = _structural(variants[0], definitions)
        if "default" in node and node["default"] is None:
            base.pop("default", None)  # an optional object: absent unless set, not defaulted to {}
        node = {**base, **{k: v for k, v in node.items() if k not in base or k in ("description", "default")}}
        if nullable:
            node["nullable"] = True
    if "allOf" in node and len(node["allOf"]) == 1:
        base = _structural(node.pop("allOf")[0], definitions)
        node = {**base, **node}
    return node


def _to_openapi_v3(node: dict[str, Any]) -> None:
    """JSON Schema 2020 keywords (pydantic's) as Kubernetes' OpenAPI v3.0 subset says them, in place."""
    node.pop("title", None)
    if isinstance(node.get("description"), str):  # an attribute docstring wraps at 120 columns; the text is one line
        node["description"] = node["description"].replace("\n", " ")
    if node.get("additionalProperties") is False:
        node.pop("additionalProperties")
    if node.get("additionalProperties") is True:
        node.pop("additionalProperties")
        node["x-kubernetes-preserve-unknown-fields"] = True
    for exclusive, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        # JSON Schema 2020 (pydantic) writes the bound itself; OpenAPI v3.0 (Kubernetes) wants a boolean flag.
        if not isinstance(node.get(exclusive, True), bool):
            node[bound], node[exclusive] = node[exclusive], True
    if "enum" in node and "type" not in node and not node.get("x-kubernetes-preserve-unknown-fields"):
        # An untyped node that preserves unknown fields is how a field takes values of two types (api.RECOMPUTE_SCHEMA).
        node["type"] = "string"


def _with_structural_children(node: dict[str, Any], definitions: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for key, value in node.items():
        if key == "properties":
            out[key] = {name: _structural(schema, definitions) for name, schema in value.items()}
            for name in node.get("required", ()):
                # A default would satisfy `required` before validation runs and hide the missing field.
                out[key][name].pop("default", None)
        elif key in ("items", "additionalProperties"):
            out[key] = _structural(value, definitions)
        else:
            out[key] = value
    return out


def _model_schema(model: type[api.ApiModel]) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    definitions = raw.pop("$defs", {})
    return _structural(raw, definitions)


def _check_descriptions(schema: dict[str, Any], path: str) -> None:
    for name, child in schema.get("properties", {}).items():
        if not child.get("description"):
            raise ValueError(f"{path}.{name} has no description: kubectl explain would be empty")
        _check_descriptions(child, f"{path}.{name}")
    if "items" in schema:
        _check_descriptions(schema["items"], f"{path}[]")


def spec_schema() -> dict[str, Any]:
    schema = _model_schema(api.AscendHybridJobSpec)
    schema.pop("default", None)
    schema["description"] = "Desired state: parallel degrees, NPUs, model, training, pod template and policies."
    schema["x-kubernetes-validations"] = [
        {"rule": rule.cel, "messageExpression": rule.cel_message} for rule in RULES if rule.cel
    ]
    return schema


def _without_defaults(schema: Any) -> Any:
    """The status is written by the operator only; apiserver defaults would show empty objects in it."""
    if isinstance(schema, dict):
        return {key: _without_defaults(value) for key, value in schema.items() if key != "default"}
    if isinstance(schema, list):
        return [_without_defaults(item) for item in schema]
    return schema


def status_schema() -> dict[str, Any]:
    schema = _without_defaults(_model_schema(api.AscendHybridJobStatus))
    schema["description"] = "Observed state written by the operator."
    return schema


def build() -> dict[str, Any]:
    spec, status = spec_schema(), status_schema()
    _check_descriptions(spec, "spec")
    _check_descriptions(status, "status")
    root = {
        "type": "object",
        "description": "A hybrid-parallel (data, tensor, pipeline, expert) MindSpore training job on Ascend NPUs.",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string", "description": "API version of this object."},
            "kind": {"type": "string", "description": "Kind of this object."},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
        "x-kubernetes-validations": [{"rule": NAME_RULE_CEL, "message": NAME_RULE_MESSAGE}],
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{api.PLURAL}.{names.GROUP}",
                     "labels": {"app.kubernetes.io/name": "ascend-hybrid-operator", "app.kubernetes.io/component": "crd"}},
        "spec": {
            "group": names.GROUP,
            "names": {"kind": api.KIND, "plural": api.PLURAL, "singular": api.SINGULAR,
                      "shortNames": list(api.SHORT_NAMES), "categories": list(api.CATEGORIES),
                      "listKind": f"{api.KIND}List"},
            "scope": "Namespaced",
            "versions": [{
                "name": api.VERSION, "served": True, "storage": True,
                "subresources": {"status": {}},
                "additionalPrinterColumns": PRINTER_COLUMNS,
                "schema": {"openAPIV3Schema": root},
            }],
        },
    }


def render() -> str:
    header = "# Generated by `ascend-hybrid crd write` from operator/ascend_hybrid/spec/api.py. Do not edit.\n"
    return header + yaml.safe_dump(build(), sort_keys=False, width=120, allow_unicode=True)
