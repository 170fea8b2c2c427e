"""The core's edge with the status it reads and writes: the observed status parsed once into the typed model
(AscendHybridJobStatus), and the model dumped once into the plain dict the shell merge-patches the job with.

The round trip is exact for a status the model accepts: `dump(parse(raw)) == raw`. Fields the core set to None
leave the dump, so the shell's merge patch sends null for them, as deleting the key from a dict did.
"""

from __future__ import annotations

import copy
import functools
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from ascend_hybrid.spec.api import AscendHybridJobStatus

ALIAS_OF: dict[str, str] = {name: info.alias or name for name, info in AscendHybridJobStatus.model_fields.items()}


@dataclass
class Parsed:
    """The observed status, typed. `unparsed` holds the top-level fields (by their JSON name) that did not validate:
    the status is the operator's own output and the CRD's schema checked it, so only a status written by another
    version of the operator (or by hand) has any. They are carried through verbatim unless the core sets them."""

    model: AscendHybridJobStatus
    unparsed: dict[str, Any] = field(default_factory=dict)


def parse(raw: Mapping[str, Any]) -> Parsed:
    """`raw` as the model; a field that does not validate is left out of the model and kept in `unparsed`, so one
    odd field neither fails the job's reconcile nor is lost from its status. Nothing of `raw` is shared with the
    result: pydantic copies what it validates, and the free-form objects of status.plan are copied here. A key the
    models do not declare inside a known field (a newer operator's, left by a rollback) is dropped, not the field:
    the models forbid unknown keys, and one would otherwise lose the whole placement or every condition."""
    try:
        parsed = Parsed(AscendHybridJobStatus.model_validate(raw))
    except ValidationError:
        parsed = parse_leniently(raw)
    plan = parsed.model.plan
    if plan is not None:  # dict[str, Any] keeps the nested objects it was given
        plan.memory, plan.time, plan.alternative = (copy.deepcopy(plan.memory), copy.deepcopy(plan.time),
                                                    copy.deepcopy(plan.alternative))
    return parsed


def parse_leniently(raw: Mapping[str, Any]) -> Parsed:
    """A status the models refuse as it is: undeclared keys inside known fields dropped (walking the whole status
    costs about a millisecond, so only here), then each top-level field that still does not validate kept aside."""
    raw = {**raw, **known_only(AscendHybridJobStatus, raw)}
    try:
        return Parsed(AscendHybridJobStatus.model_validate(raw))
    except ValidationError as error:
        bad = {str(problem["loc"][0]) for problem in error.errors() if problem["loc"]}
        valid = {key: value for key, value in raw.items() if key not in bad}
        return Parsed(AscendHybridJobStatus.model_validate(valid),
                      {key: copy.deepcopy(raw[key]) for key in bad if key in raw})


def known_only(model: type[BaseModel], data: Mapping[str, Any]) -> dict[str, Any]:
    """The keys of `data` that `model` declares (by their JSON name), each value cleaned of undeclared keys at every
    depth."""
    return {alias: known_value(info.annotation, data[alias]) for name, info in model.model_fields.items()
            if (alias := info.alias or name) in data}


def known_value(annotation: Any, value: Any) -> Any:
    """`value` cleaned as the annotation's model, list of models or map of models says; anything else as it is."""
    for kind in leaf_types(annotation):
        origin, arguments = typing.get_origin(kind), typing.get_args(kind)
        if isinstance(kind, type) and issubclass(kind, BaseModel) and isinstance(value, Mapping):
            return known_only(kind, value)
        if origin is list and isinstance(value, list) and arguments:
            return [known_value(arguments[0], item) for item in value]
        if origin is dict and isinstance(value, Mapping) and len(arguments) == 2:
            return {key: known_value(arguments[1], item) for key, item in value.items()}
    return value


def dump(parsed: Parsed) -> dict[str, Any]:
    """The plain status dict: the fields present when parsed or set since, without those set to None, and the
    unparsed ones the core did not set."""
    model = parsed.model
    mark_filled(model)
    out: dict[str, Any] = model.model_dump(by_alias=True, exclude_unset=True, exclude_none=True, mode="json")
    touched = {ALIAS_OF[name] for name in model.model_fields_set}
    for key, value in parsed.unparsed.items():
        if key not in touched:
            out[key] = value
    return out


def mark_filled(model: BaseModel) -> None:
    """A list or dict field left at its (empty) default and then filled in place is not `set` to pydantic, so
    `exclude_unset` would drop it: it is marked set here. Sub-models are visited; an unset one is not walked."""
    set_fields = model.model_fields_set
    values = model.__dict__
    for name in containers(type(model)):
        value = values[name]
        if isinstance(value, BaseModel):
            if name in set_fields:
                mark_filled(value)
        elif isinstance(value, list):
            if value and name not in set_fields:
                set_fields.add(name)
            for item in value:
                if isinstance(item, BaseModel):
                    mark_filled(item)
        elif isinstance(value, dict) and value:
            set_fields.add(name)


@functools.cache
def containers(model: type[BaseModel]) -> tuple[str, ...]:
    """The fields of `model` that may hold a list, a dict or a model: the only ones mark_filled looks at (a pass
    dumps hundreds of scalar fields)."""
    return tuple(name for name, info in model.model_fields.items()
                 if not all(kind in SCALARS for kind in leaf_types(info.annotation)))


SCALARS = (str, int, float, bool, type(None))


def leaf_types(annotation: Any) -> tuple[Any, ...]:
    """The types a field's annotation admits (the members of a union, else the annotation itself)."""
    members = typing.get_args(annotation) if isinstance(annotation, types.UnionType) else ()
    return members or (annotation,)
