"""How a job body's problems are worded before the rules run: pydantic's errors as the apiserver would word them
(the field, what it must be), numbers Kubernetes cannot hold (NaN, ±Infinity, beyond int64), and what the
apiserver would refuse in the pods that CEL cannot see (map keys, free-form objects). rules.parse gathers them."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from ascend_hybrid.contracts import names
from ascend_hybrid.spec import k8s_validation as k8s
from ascend_hybrid.spec.api import AscendHybridJobSpec

INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1
_EXPECTED = {"int_type": "an integer", "int_parsing": "an integer", "int_from_float": "an integer",
             "float_type": "a number", "float_parsing": "a number", "string_type": "a string",
             "bool_type": "a boolean", "bool_parsing": "a boolean", "dict_type": "an object",
             "model_type": "an object", "model_attributes_type": "an object", "list_type": "a list",
             "finite_number": "a finite number"}
_NON_FINITE_WORDS = {"inf", "+inf", "-inf", "infinity", "+infinity", "-infinity", "nan", ".inf", "-.inf", ".nan"}


def field_path(loc: tuple) -> str:
    return "spec" + "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc)


def shown(value: Any) -> str:
    """A value as the user wrote it in YAML: 'text', 3, true, null, short JSON for objects and lists."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, int | float):
        return str(value)
    text = repr(value) if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= 80 else text[:77] + "…"


def pydantic_problem(error: Mapping[str, Any]) -> str:
    path = field_path(tuple(error["loc"]))
    kind, context, value = error["type"], error.get("ctx", {}), error.get("input")
    if kind == "extra_forbidden":
        return f"{path}: unknown field"
    if kind == "missing":
        return f"{path}: is required"
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        symbol = {"greater_than_equal": "≥", "greater_than": ">", "less_than_equal": "≤", "less_than": "<"}[kind]
        bound = next(iter(context.values()))
        return f"{path}={shown(value)} must be {symbol} {bound}"
    if kind == "enum":
        return f"{path}={shown(value)} must be one of {context.get('expected')}"
    if kind == "string_too_long":
        return f"{path}={shown(value)}: must be at most {context['max_length']} characters"
    if kind == "too_long":
        return f"{path}: must have at most {context['max_length']} items"
    if kind in _EXPECTED:
        expected = _EXPECTED[kind]
        if expected == "a number" and isinstance(value, str) and value.strip().lower() in _NON_FINITE_WORDS:
            expected = "a finite number (JSON and Kubernetes have no NaN or Infinity)"
        elif expected == "a string" and isinstance(value, int | float) and not isinstance(value, bool):
            expected = f"a string (quote it: '{value}')"
        return f"{path}={shown(value)}: must be {expected}"
    if kind == "value_error" and "error" in context:  # a validator's own words
        return f"{path}={shown(value)}: {context['error']}"
    return f"{path}={shown(value)}: {error['msg'][:1].lower()}{error['msg'][1:]}"


def number_problems(value: Any, loc: tuple = ()) -> dict[tuple, str]:
    """Numbers Kubernetes cannot hold, by location: NaN and ±Infinity (not JSON: YAML's .nan and .inf) and integers
    beyond int64 (the apiserver's, and the CRD's `format: int64`)."""
    found: dict[tuple, str] = {}
    if isinstance(value, Mapping):
        for key, item in value.items():
            found.update(number_problems(item, (*loc, str(key))))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found.update(number_problems(item, (*loc, index)))
    elif isinstance(value, float) and not math.isfinite(value):
        found[loc] = f"{field_path(loc)}={shown(value)}: must be a finite number (JSON and Kubernetes have no NaN or Infinity)"
    elif isinstance(value, int) and not isinstance(value, bool) and not INT64_MIN <= value <= INT64_MAX:
        found[loc] = (f"{field_path(loc)}={value}: is beyond the int64 range of Kubernetes integers "
                      f"({INT64_MIN} to {INT64_MAX})")
    return found


def sanitized(value: Any, bad: dict[tuple, str], loc: tuple = ()) -> Any:
    """The spec with every value _number_problems reported replaced by 0, so the schema stage still sees the rest."""
    if loc in bad:
        return 0
    if isinstance(value, Mapping):
        return {key: sanitized(item, bad, (*loc, str(key))) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [sanitized(item, bad, (*loc, index)) for index, item in enumerate(value)]
    return value


def template_problems(spec: AscendHybridJobSpec) -> list[str]:
    """What the apiserver would refuse in the pods and CEL cannot see (map keys, free-form objects): Kubernetes' own
    rules from k8s_validation/, each problem naming the job's field."""
    template = spec.template
    npu = spec.npu.resource  # the operator sets it in requests and limits itself
    operator_volumes = [names.RANK_TABLE_VOLUME, names.JOB_CONFIG_VOLUME]
    operator_paths = [names.RANK_TABLE_DIR, names.JOB_CONFIG_DIR]
    if spec.training.checkpoint:
        operator_volumes.append(names.CHECKPOINT_VOLUME)
        operator_paths.append(names.CHECKPOINT_DIR)
    user_volumes = [v["name"] for v in template.volumes if isinstance(v.get("name"), str)]
    return [
        *k8s.label_problems("spec.template.metadata.labels", template.metadata.labels),
        *k8s.annotation_problems("spec.template.metadata.annotations", template.metadata.annotations),
        *k8s.label_problems("spec.template.nodeSelector", template.node_selector),
        *k8s.env_problems("spec.template.env", template.env),
        *k8s.env_name_problems("spec.hccl.env", spec.hccl.env),
        *k8s.resources_problems("spec.template.resources",
                                {k: v for k, v in template.resources.requests.items() if k != npu},
                                {k: v for k, v in template.resources.limits.items() if k != npu}),
        *k8s.toleration_problems("spec.template.tolerations", template.tolerations),
        *k8s.volume_problems("spec.template.volumes", template.volumes, operator_volumes),
        *k8s.volume_mount_problems("spec.template.volumeMounts", template.volume_mounts,
                                   operator_volumes + user_volumes, operator_paths),
    ]


def json_default(value: Any) -> Any:
    return dict(value) if isinstance(value, Mapping) else str(value)  # YAML dates become strings, as with kubectl
