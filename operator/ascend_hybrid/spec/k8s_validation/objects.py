"""The core/v1 objects given to the CLI (`--nodes`, `--pods`): the fields the operator reads, typed as the API types them."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ascend_hybrid.spec.k8s_validation.pod_fields import _key_path, quoted
from ascend_hybrid.spec.k8s_validation.quantity import QuantityError, json_quantity

# --- core/v1 objects given to the CLI (`--nodes`, `--pods`): the fields the operator reads, typed as the API types
# them. The operator trusts what the apiserver returns; a hand-written or truncated file gets this check first.

_STRING, _BOOLEAN, _INTEGER, _QUANTITY = "a string", "a boolean", "an integer", "a quantity"
_METADATA = {"name": _STRING, "namespace": _STRING, "uid": _STRING, "deletionTimestamp": _STRING,
             "labels": {"*": _STRING}, "annotations": {"*": _STRING}}
_CONTAINER = {"name": _STRING, "resources": {"requests": {"*": _QUANTITY}, "limits": {"*": _QUANTITY}}}
_SELECTOR_TERM = {"key": _STRING, "operator": _STRING, "values": [_STRING]}
OBJECT_SHAPES: dict[str, dict] = {
    "Node": {"metadata": _METADATA,
             "spec": {"unschedulable": _BOOLEAN,
                      "taints": [{"key": _STRING, "value": _STRING, "effect": _STRING, "timeAdded": _STRING}]},
             "status": {"allocatable": {"*": _QUANTITY}, "capacity": {"*": _QUANTITY},
                        "conditions": [{"type": _STRING, "status": _STRING, "lastTransitionTime": _STRING}]}},
    "Pod": {"metadata": _METADATA,
            "spec": {"nodeName": _STRING, "containers": [_CONTAINER], "initContainers": [_CONTAINER],
                     "schedulingGates": [{"name": _STRING}],
                     "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                         "nodeSelectorTerms": [{"matchExpressions": [_SELECTOR_TERM],
                                                "matchFields": [_SELECTOR_TERM]}]}}}},
            "status": {"phase": _STRING, "podIP": _STRING, "hostIP": _STRING,
                       "containerStatuses": [{"state": {"terminated": {"exitCode": _INTEGER}}}]}},
    "ConfigMap": {"metadata": _METADATA, "data": {"*": _STRING}},
}
_REQUIRED = {"Pod": ("spec",)}


def object_problems(obj: Mapping) -> list[str]:
    """Problems of one Node, Pod or ConfigMap (or the metadata.name of any object), each naming the field."""
    metadata = obj.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    problems = [] if isinstance(name, str) and name else ["metadata.name: is required"]
    kind: Any = obj.get("kind")  # any JSON value; one that names no shape finds none
    shape = OBJECT_SHAPES.get(kind)
    if shape is not None:
        problems += _shape_problems(obj, shape, "")
        problems += [f"{key}: is required" for key in _REQUIRED.get(obj["kind"], ()) if obj.get(key) is None]
    return problems


def _shape_problems(value: Any, shape: Any, path: str, nullable: bool = True) -> list[str]:
    """`value` against `shape`: a dict of fields (or {"*": values} for a map), [item] for a list, or a scalar type.
    Absent or null fields are fine (the API leaves empty ones out); list items and map values may not be null."""
    if value is None:
        return [] if nullable else [f"{path}=null: must be {_expected(shape)}"]
    if isinstance(shape, dict):
        if not isinstance(value, Mapping):
            return [f"{path}={_short(value)}: must be an object"]
        if "*" in shape:
            problems = [f"{path}: key {_short(key)} must be a string" for key in value if not isinstance(key, str)]
            return problems + [problem for key, item in value.items() if isinstance(key, str)
                               for problem in _shape_problems(item, shape["*"], _key_path(path, key), False)]
        return [problem for key, sub in shape.items()
                for problem in _shape_problems(value.get(key), sub, f"{path}.{key}" if path else key)]
    if isinstance(shape, list):
        if not isinstance(value, list):
            return [f"{path}={_short(value)}: must be a list"]
        return [problem for index, item in enumerate(value)
                for problem in _shape_problems(item, shape[0], f"{path}[{index}]", False)]
    if shape == _QUANTITY:
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            return [f"{path}={_short(value)}: must be a quantity (e.g. '8', '500m', '16Gi')"]
        if isinstance(value, float) and not math.isfinite(value):
            return [f"{path}={_short(value)}: must be a finite quantity"]
        try:
            json_quantity(str(value))
        except QuantityError as error:
            return [f"{path}={_short(value)}: is not a valid quantity: {error}"]
        return []
    wanted = {_STRING: str, _BOOLEAN: bool, _INTEGER: int}[shape]
    if not isinstance(value, wanted) or (shape == _INTEGER and isinstance(value, bool)):
        return [f"{path}={_short(value)}: must be {shape}"]
    return []


def _expected(shape: Any) -> str:
    return "an object" if isinstance(shape, dict) else "a list" if isinstance(shape, list) else shape


def _short(value: Any) -> str:
    text = quoted(value)
    return text if len(text) <= 60 else text[:57] + "…"
