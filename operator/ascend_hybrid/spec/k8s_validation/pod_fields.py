"""The pod fields a job's template sets, as kubernetes pkg/apis/core/validation checks them: labels and annotations maps, env, resources, tolerations, volumes and mounts."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any, cast

from ascend_hybrid.spec.k8s_validation.names import (
    TOTAL_ANNOTATION_SIZE,
    _size,
    dns1123_label_errors,
    env_var_name_errors,
    label_key_errors,
    label_value_errors,
)
from ascend_hybrid.spec.k8s_validation.quantity import QuantityError, json_quantity

# --- kubernetes pkg/apis/core/validation: resources, tolerations, env, volumes ------------------------------------

STANDARD_CONTAINER_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage"})
TOLERATION_OPERATORS = ("Equal", "Exists")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
TOLERATION_FIELDS = frozenset({"key", "operator", "value", "effect", "tolerationSeconds"})
ENV_FIELDS = frozenset({"name", "value", "valueFrom"})
ENV_SOURCES = ("fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef", "fileKeyRef")
VOLUME_SOURCES = frozenset({
    "hostPath", "emptyDir", "gcePersistentDisk", "awsElasticBlockStore", "gitRepo", "secret", "nfs", "iscsi",
    "glusterfs", "persistentVolumeClaim", "rbd", "flexVolume", "cinder", "cephfs", "flocker", "downwardAPI", "fc",
    "azureFile", "configMap", "vsphereVolume", "quobyte", "azureDisk", "photonPersistentDisk", "projected",
    "portworxVolume", "scaleIO", "storageos", "csi", "ephemeral", "image"})
VOLUME_MOUNT_FIELDS = frozenset({"name", "mountPath", "readOnly", "recursiveReadOnly", "subPath", "subPathExpr",
                                 "mountPropagation"})


def quoted(value: Any) -> str:
    """A value in a message: plain text in double quotes when that is unambiguous, else JSON (one line always)."""
    if isinstance(value, str) and value.isprintable() and '"' not in value and "\\" not in value:
        return f'"{value}"'
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except ValueError:
        return repr(value)


def _key_path(path: str, key: str) -> str:
    return f"{path}[{quoted(key)}]"


def label_problems(path: str, labels: Mapping[str, str]) -> list[str]:
    """metav1 ValidateLabels: every key a label key, every value a label value."""
    problems = []
    for key, value in labels.items():
        errors = label_key_errors(key)
        if errors:
            problems.append(f"{path}: key {quoted(key)} is not a valid label key: {'; '.join(errors)}")
        errors = label_value_errors(value)
        if errors:
            problems.append(f"{_key_path(path, key)}={quoted(value)} is not a valid label value: {'; '.join(errors)}")
    return problems


def annotation_problems(path: str, annotations: Mapping[str, str]) -> list[str]:
    """objectmeta.go ValidateAnnotations: keys are qualified names once lower-cased; all of them ≤ 256 KiB."""
    problems = []
    for key in annotations:
        errors = label_key_errors(key.lower())
        if errors:
            problems.append(f"{path}: key {quoted(key)} is not a valid annotation key (a qualified name): "
                            f"{'; '.join(errors)}")
    total = sum(_size(key) + _size(value) for key, value in annotations.items())
    if total > TOTAL_ANNOTATION_SIZE:
        problems.append(f"{path}: {total} bytes of keys and values, more than the {TOTAL_ANNOTATION_SIZE} bytes "
                        "the apiserver allows for all annotations of a pod")
    return problems


def env_name_problems(path: str, names: Iterable[str]) -> list[str]:
    return [f"{path}: key {quoted(name)}: {'; '.join(errors)}" for name in names if (errors := env_var_name_errors(name))]


def _is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def env_problems(path: str, env: Sequence[Mapping]) -> list[str]:
    """Each entry a core/v1 EnvVar: a name as IsRelaxedEnvVarName wants it, a string value or one valueFrom source."""
    problems = []
    for index, entry in enumerate(env):
        where = f"{path}[{index}]"
        problems += [f"{where}.{key}: unknown field (an EnvVar has name, value and valueFrom)"
                     for key in entry if key not in ENV_FIELDS]
        name = entry.get("name")
        if name is None or name == "":
            problems.append(f"{where}.name: is required")
        elif not isinstance(name, str):
            problems.append(f"{where}.name={quoted(name)}: must be a string")
        elif errors := env_var_name_errors(name):
            problems.append(f"{where}.name={quoted(name)}: {'; '.join(errors)}")
        value, source = entry.get("value"), entry.get("valueFrom")
        if value is not None and not isinstance(value, str):
            problems.append(f"{where}.value={quoted(value)}: must be a string (quote it in YAML)")
        if source is not None:
            if not isinstance(source, Mapping):
                problems.append(f"{where}.valueFrom={quoted(source)}: must be an object")
            elif value:
                problems.append(f"{where}.valueFrom: may not be specified when `value` is not empty")
            else:
                given = [key for key in source if key in ENV_SOURCES]
                problems += [f"{where}.valueFrom.{key}: unknown field (one of {', '.join(ENV_SOURCES)})"
                             for key in source if key not in ENV_SOURCES]
                if len(given) > 1:
                    problems.append(f"{where}.valueFrom: may not have more than one field specified at a time "
                                    f"({', '.join(given)})")
                elif not given and all(key in ENV_SOURCES for key in source):
                    problems.append(f"{where}.valueFrom: must specify one of: {', '.join(ENV_SOURCES)}")
    return problems


def _quantity_or_problem(where: str, value: Any) -> tuple[Decimal | None, str | None]:
    try:
        return json_quantity(value), None
    except QuantityError as error:
        return None, f"{where}={quoted(value)} is not a valid quantity (e.g. '500m', '4', '16Gi', '1e3'): {error}"


def _resource_name_problem(where: str, name: str) -> str | None:
    errors = label_key_errors(name)
    if errors:
        return f"{where}: {quoted(name)} is not a valid resource name (a qualified name): {'; '.join(errors)}"
    if "/" not in name and name not in STANDARD_CONTAINER_RESOURCES and not name.startswith("hugepages-"):
        return (f"{where}: {quoted(name)} must be a standard resource for containers (cpu, memory, "
                "ephemeral-storage, hugepages-<size>) or fully qualified (example.com/device)")
    return None


def _overcommit_allowed(name: str) -> bool:
    """Native resources (no domain, or a *kubernetes.io/ one) but hugepages may be requested below their limit."""
    native = "/" not in name or "kubernetes.io/" in name
    return native and not name.startswith("hugepages-")


def resources_problems(path: str, requests: Mapping[str, str], limits: Mapping[str, str]) -> list[str]:
    """ValidateResourceRequirements on the container's cpu/memory (and any extended) requests and limits."""
    problems: list[str] = []
    values: dict[str, dict[str, Decimal]] = {"requests": {}, "limits": {}}
    for kind, table in (("limits", limits), ("requests", requests)):
        for name, raw in table.items():
            where = _key_path(f"{path}.{kind}", name)
            naming = _resource_name_problem(f"{path}.{kind}", name)
            if naming:
                problems.append(naming)
                continue
            amount, problem = _quantity_or_problem(where, raw)
            if problem:
                problems.append(problem)
                continue
            amount = cast(Decimal, amount)  # None only together with a problem
            if amount < 0:
                problems.append(f"{where}={quoted(raw)}: must be greater than or equal to 0")
            elif not _overcommit_allowed(name) and amount != amount.to_integral_value():
                problems.append(f"{where}={quoted(raw)}: must be an integer (extended resources are whole units)")
            else:
                values[kind][name] = amount
    for name, request in values["requests"].items():
        where = _key_path(f"{path}.requests", name)
        limit = values["limits"].get(name)
        if limit is None:
            if not _overcommit_allowed(name) and name not in limits:
                problems.append(f"{_key_path(f'{path}.limits', name)}: is required: a limit must be set for "
                                "resources that cannot be overcommitted (extended resources)")
        elif not _overcommit_allowed(name) and request != limit:
            problems.append(f"{where}={quoted(requests[name])}: must be equal to the {name} limit of "
                            f"{quoted(limits[name])}")
        elif request > limit:
            problems.append(f"{where}={quoted(requests[name])}: must be less than or equal to the {name} limit of "
                            f"{quoted(limits[name])}")
    return problems


def toleration_problems(path: str, tolerations: Sequence[Mapping]) -> list[str]:
    """ValidateTolerations, field by field, with the fields' types as core/v1 Toleration declares them."""
    problems = []
    for index, toleration in enumerate(tolerations):
        where = f"{path}[{index}]"
        problems += [f"{where}.{key}: unknown field (a Toleration has {', '.join(sorted(TOLERATION_FIELDS))})"
                     for key in toleration if key not in TOLERATION_FIELDS]
        wrong = [key for key in ("key", "operator", "value", "effect")
                 if toleration.get(key) is not None and not isinstance(toleration[key], str)]
        problems += [f"{where}.{key}={quoted(toleration[key])}: must be a string" for key in wrong]
        seconds = toleration.get("tolerationSeconds")
        if seconds is not None and not _is_integer(seconds):
            problems.append(f"{where}.tolerationSeconds={quoted(seconds)}: must be an integer")
        if wrong:
            continue
        key, operator = toleration.get("key") or "", toleration.get("operator") or ""
        value, effect = toleration.get("value") or "", toleration.get("effect") or ""
        if key and (errors := label_key_errors(key)):
            problems.append(f"{where}.key={quoted(key)} is not a valid taint key (a qualified name): "
                            f"{'; '.join(errors)}")
        if not key and operator != "Exists":
            problems.append(f"{where}.operator={quoted(operator)}: operator must be Exists when `key` is empty, "
                            'which means "match all values and all keys"')
        if seconds is not None and effect != "NoExecute":
            problems.append(f"{where}.effect={quoted(effect)}: effect must be 'NoExecute' when `tolerationSeconds` "
                            "is set")
        if operator in ("Equal", ""):
            if errors := label_value_errors(value):
                problems.append(f"{where}.value={quoted(value)} is not a valid toleration value (a label value): "
                                f"{'; '.join(errors)}")
        elif operator == "Exists":
            if value:
                problems.append(f"{where}.value={quoted(value)}: value must be empty when `operator` is 'Exists'")
        else:
            problems.append(f"{where}.operator={quoted(operator)}: must be one of 'Equal' or 'Exists' "
                            "(Lt and Gt need the alpha gate TaintTolerationComparisonOperators)")
        if effect and effect not in TAINT_EFFECTS:
            problems.append(f"{where}.effect={quoted(effect)}: must be one of 'NoSchedule', 'PreferNoSchedule' or "
                            "'NoExecute' (or empty: every effect)")
    return problems


def volume_problems(path: str, volumes: Sequence[Mapping], reserved: Iterable[str]) -> list[str]:
    """ValidateVolumes: a unique DNS-1123 label name and exactly one volume source each."""
    problems, seen, reserved = [], set(), set(reserved)
    for index, volume in enumerate(volumes):
        where = f"{path}[{index}]"
        name = volume.get("name")
        if name is None or name == "":
            problems.append(f"{where}.name: is required")
        elif not isinstance(name, str):
            problems.append(f"{where}.name={quoted(name)}: must be a string")
        elif errors := dns1123_label_errors(name):
            problems.append(f"{where}.name={quoted(name)} is not a valid volume name: {'; '.join(errors)}")
        elif name in reserved:
            problems.append(f"{where}.name={quoted(name)}: is the name of a volume the operator adds")
        elif name in seen:
            problems.append(f"{where}.name={quoted(name)}: duplicate volume name")
        if isinstance(name, str):
            seen.add(name)
        sources = [key for key in volume if key != "name"]
        unknown = [key for key in sources if key not in VOLUME_SOURCES]
        problems += [f"{where}.{key}: unknown field (not a volume source of core/v1 Volume)" for key in unknown]
        known = [key for key in sources if key in VOLUME_SOURCES]
        if len(known) > 1:
            problems.append(f"{where}: may not specify more than 1 volume type ({', '.join(known)})")
        elif not sources:
            problems.append(f"{where}: must specify a volume type (emptyDir, persistentVolumeClaim, configMap, …)")
    return problems


def volume_mount_problems(path: str, mounts: Sequence[Mapping], volumes: Iterable[str],
                          reserved_paths: Iterable[str]) -> list[str]:
    """validateVolumeMounts: a name that is one of the pod's volumes, a mount path, unique mount paths."""
    problems, names, seen, reserved_paths = [], set(volumes), set(), set(reserved_paths)
    for index, mount in enumerate(mounts):
        where = f"{path}[{index}]"
        problems += [f"{where}.{key}: unknown field (a VolumeMount has {', '.join(sorted(VOLUME_MOUNT_FIELDS))})"
                     for key in mount if key not in VOLUME_MOUNT_FIELDS]
        name, mount_path = mount.get("name"), mount.get("mountPath")
        if name is None or name == "":
            problems.append(f"{where}.name: is required")
        elif not isinstance(name, str):
            problems.append(f"{where}.name={quoted(name)}: must be a string")
        elif name not in names:
            problems.append(f"{where}.name={quoted(name)}: not found among the pod's volumes "
                            f"({', '.join(sorted(names))})")
        if mount_path is None or mount_path == "":
            problems.append(f"{where}.mountPath: is required")
        elif not isinstance(mount_path, str):
            problems.append(f"{where}.mountPath={quoted(mount_path)}: must be a string")
        elif mount_path in reserved_paths:
            problems.append(f"{where}.mountPath={quoted(mount_path)}: is a path the operator mounts")
        elif mount_path in seen:
            problems.append(f"{where}.mountPath={quoted(mount_path)}: must be unique")
        if isinstance(mount_path, str):
            seen.add(mount_path)
        if mount.get("readOnly") is not None and not isinstance(mount["readOnly"], bool):
            problems.append(f"{where}.readOnly={quoted(mount['readOnly'])}: must be a boolean")
    return problems
