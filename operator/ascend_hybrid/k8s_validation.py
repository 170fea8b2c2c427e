"""Kubernetes' own validation rules, checked before any pod exists (pure: standard library only).

The operator copies the job's template into every pod it creates; whatever the apiserver would refuse there (a label
key, an env name, a quantity, a toleration…) would only show up as a refused pod. This module applies the same rules
to the job's own fields, so `ascend-hybrid validate` and the reconcile (the job fails with `InvalidSpec`) name the
job's field and the rule instead. The rules and their messages are those of Kubernetes 1.36:

- label keys (qualified names), label values, DNS-1123 labels and subdomains: k8s.io/apimachinery v0.36.3,
  pkg/api/validate/content/kube.go (`IsLabelKey`, `IsLabelValue`) and dns.go (`IsDNS1123Label`,
  `IsDNS1123Subdomain`); label maps as pkg/apis/meta/v1/validation `ValidateLabels`;
- annotation keys (qualified names, lower-cased first) and the 256 KiB total: pkg/api/validation/objectmeta.go
  `ValidateAnnotations`;
- environment variable names: pkg/util/validation/validation.go `IsRelaxedEnvVarName` (printable ASCII except '=';
  the RelaxedEnvironmentVariableValidation gate is GA and gone in 1.36, so the apiserver always applies it);
- quantities: pkg/api/resource/quantity.go `ParseQuantity` (the scanner `parseQuantityString` and the suffixes of
  suffix.go, ported as they are, quirks included); resource names, non-negative values, integer extended
  resources and requests ≤ limits: kubernetes pkg/apis/core/validation `ValidateResourceRequirements`;
- tolerations: pkg/apis/core/validation `ValidateTolerations` (Lt/Gt need the alpha gate
  TaintTolerationComparisonOperators, off by default in 1.36, so only Equal and Exists are accepted);
- images: the kubelet parses them with github.com/distribution/reference `ParseNormalizedNamed` (regexp.go's
  ReferenceRegexp; a name that does not parse leaves the pod waiting in `InvalidImageName` for ever).

Regular expressions are written once, without anchors, in the common subset of RE2 (CEL's `matches`, at admission)
and Python's `re` (`fullmatch` here): explicit ASCII classes instead of `\\w` and `[[:xdigit:]]`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from decimal import MAX_EMAX, MIN_EMIN, Context, Decimal
from typing import Any

# --- apimachinery content/kube.go and dns.go ---------------------------------------------------------------------

DNS1123_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_LABEL_MAX = 63
DNS1123_LABEL_MESSAGE = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
                         "must start and end with an alphanumeric character")
DNS1123_SUBDOMAIN = DNS1123_LABEL + "(\\." + DNS1123_LABEL + ")*"
DNS1123_SUBDOMAIN_MAX = 253
DNS1123_SUBDOMAIN_MESSAGE = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
                             "or '.', and must start and end with an alphanumeric character")
LABEL_KEY_NAME = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
LABEL_KEY_NAME_MAX = 63
LABEL_KEY_NAME_MESSAGE = ("must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
                          "alphanumeric character")
LABEL_VALUE = "(" + LABEL_KEY_NAME + ")?"
LABEL_VALUE_MAX = 63
LABEL_VALUE_MESSAGE = ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
                       "and must start and end with an alphanumeric character")
# A whole label key in one expression, for CEL: an optional subdomain prefix and '/', then a name of at most 63
# characters. The prefix's own 253-character bound is a second CEL test (see rules.py).
LABEL_KEY = "(" + DNS1123_SUBDOMAIN + "/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
LABEL_KEY_MAX = DNS1123_SUBDOMAIN_MAX + 1 + LABEL_KEY_NAME_MAX
TOTAL_ANNOTATION_SIZE = 256 * (1 << 10)  # objectmeta.go TotalAnnotationSizeLimitB

_EXAMPLES_NAME = "(e.g. 'MyName', 'my.name' or '123-abc')"
_EXAMPLES_VALUE = "(e.g. 'MyValue', 'my_value' or '12345')"


def _full(pattern: str, value: str) -> bool:
    return re.fullmatch(pattern, value) is not None


def _size(value: str) -> int:
    return len(value.encode("utf-8"))  # Go's len(string): bytes


def dns1123_label_errors(value: str) -> list[str]:
    errors = []
    if _size(value) > DNS1123_LABEL_MAX:
        errors.append(f"must be no more than {DNS1123_LABEL_MAX} bytes")
    if not _full(DNS1123_LABEL, value):
        errors.append("must not contain dots" if _full(DNS1123_SUBDOMAIN, value)
                      else f"{DNS1123_LABEL_MESSAGE} (e.g. 'my-name' or '123-abc')")
    return errors


def dns1123_subdomain_errors(value: str) -> list[str]:
    errors = []
    if _size(value) > DNS1123_SUBDOMAIN_MAX:
        errors.append(f"must be no more than {DNS1123_SUBDOMAIN_MAX} bytes")
    if not _full(DNS1123_SUBDOMAIN, value):
        errors.append(f"{DNS1123_SUBDOMAIN_MESSAGE} (e.g. 'example.com')")
    return errors


def label_key_errors(value: str) -> list[str]:
    """content.IsLabelKey (IsQualifiedName): [prefix/]name, prefix a DNS-1123 subdomain, name ≤ 63 characters."""
    parts = value.split("/")
    errors: list[str] = []
    if len(parts) > 2:
        return [f"a valid label key {LABEL_KEY_NAME_MESSAGE} {_EXAMPLES_NAME} with an optional DNS subdomain prefix "
                "and '/' (e.g. 'example.com/MyName')"]
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            errors.append("prefix part must be non-empty")
        else:
            errors += [f"prefix part {message}" for message in dns1123_subdomain_errors(prefix)]
    if not name:
        errors.append("name part must be non-empty")
    elif _size(name) > LABEL_KEY_NAME_MAX:
        errors.append(f"name part must be no more than {LABEL_KEY_NAME_MAX} bytes")
    if not _full(LABEL_KEY_NAME, name):
        errors.append(f"name part {LABEL_KEY_NAME_MESSAGE} {_EXAMPLES_NAME}")
    return errors


def label_value_errors(value: str) -> list[str]:
    errors = []
    if _size(value) > LABEL_VALUE_MAX:
        errors.append(f"must be no more than {LABEL_VALUE_MAX} bytes")
    if not _full(LABEL_VALUE, value):
        errors.append(f"{LABEL_VALUE_MESSAGE} {_EXAMPLES_VALUE}")
    return errors


# --- apimachinery util/validation: IsRelaxedEnvVarName ------------------------------------------------------------

ENV_NAME_MESSAGE = "a valid environment variable name must consist only of printable ASCII characters other than '='"


def env_var_name_errors(value: str) -> list[str]:
    errors = []
    if not value:
        errors.append("environment variable name must be non-empty")
    if any(not " " <= character <= "~" or character == "=" for character in value):
        errors.append(ENV_NAME_MESSAGE)
    return errors


# --- apimachinery api/resource: ParseQuantity ---------------------------------------------------------------------

QUANTITY_FORMAT_MESSAGE = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
_DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SUFFIXES = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_INT64_MAX = 2 ** 63 - 1
_EXACT = Context(prec=80, Emax=MAX_EMAX, Emin=MIN_EMIN)


class QuantityError(ValueError):
    pass


def _scan_quantity(text: str) -> tuple[bool, str, str, str, str]:
    """parseQuantityString: (positive, numeric part, numerator, denominator, suffix), exactly as Go scans them."""
    positive, pos, end = True, 0, len(text)
    if text[:1] in ("-", "+"):
        positive = text[0] == "+"
        pos = 1
    while pos < end and text[pos] == "0":  # leading zeros
        pos += 1
    if pos >= end:
        return positive, text, "0", "", ""
    start = pos
    while pos < end and text[pos].isdigit() and text[pos].isascii():
        pos += 1
    numerator = text[start:pos] or "0"
    if pos >= end:
        return positive, text, numerator, "", ""
    denominator = ""
    if text[pos] == ".":
        pos += 1
        start = pos
        while pos < end and text[pos].isdigit() and text[pos].isascii():
            pos += 1
        denominator = text[start:pos]
        if pos >= end:
            return positive, text, numerator, denominator, ""
    value, suffix_start = text[:pos], pos
    while pos < end and text[pos] in "eEinumkKMGTP":
        pos += 1
    if pos < end and text[pos] in "+-":
        pos += 1
    while pos < end and text[pos].isdigit() and text[pos].isascii():
        pos += 1
    if pos < end:
        raise QuantityError(QUANTITY_FORMAT_MESSAGE)
    return positive, value, numerator, denominator, text[suffix_start:]


def parse_quantity(text: str) -> Decimal:
    """ParseQuantity: the value of a Kubernetes quantity ('500m', '16Gi', '1e3'), QuantityError with apimachinery's
    message. Like ParseQuantity it refuses surrounding whitespace; the apiserver trims it from JSON first
    (Quantity.UnmarshalJSON), so callers checking a field's value strip it (`json_quantity`)."""
    if not text:
        raise QuantityError(QUANTITY_FORMAT_MESSAGE)
    if text == "0":
        return Decimal(0)
    positive, value, numerator, denominator, suffix = _scan_quantity(text)
    if suffix in _DECIMAL_SUFFIXES:
        base, exponent = 10, _DECIMAL_SUFFIXES[suffix]
    elif suffix in _BINARY_SUFFIXES:
        base, exponent = 2, _BINARY_SUFFIXES[suffix]
    elif len(suffix) > 1 and suffix[0] in "eE" and re.fullmatch("[-+]?[0-9]+", suffix[1:]):
        base, exponent = 10, int(suffix[1:])
        if not -2 ** 63 <= exponent <= _INT64_MAX:
            raise QuantityError("unable to parse quantity's suffix")
    else:
        raise QuantityError("unable to parse quantity's suffix")
    digits = numerator + denominator
    if not _fast_path(base, exponent, numerator, denominator) and not any(c.isdigit() for c in value):
        # ParseQuantity's slow path reads the numeric part with inf.Dec, which needs at least one digit
        raise QuantityError("unable to parse numeric part of quantity")
    scale = (exponent if base == 10 else 0) - len(denominator)
    mantissa = _EXACT.multiply(Decimal(int(digits)), Decimal(1 if base == 10 else 1 << exponent))
    magnitude = mantissa.scaleb(max(-10 ** 17, min(10 ** 17, scale)), _EXACT)
    return magnitude if positive else -magnitude


def json_quantity(text: str) -> Decimal:
    """A quantity as the apiserver decodes it from JSON: trimmed (strings.TrimSpace), then ParseQuantity."""
    return parse_quantity(text.strip())


def _fast_path(base: int, exponent: int, numerator: str, denominator: str) -> bool:
    """Whether ParseQuantity's int64 fast path takes the number (then even '.' or '+' read as 0)."""
    if base == 10:
        precision, scale = 18 - (len(numerator) + len(denominator)), exponent - len(denominator)
        mantissa = 1
    elif exponent >= 0 and not denominator:
        precision, scale = 15 - len(numerator) - int(exponent * 3 / 10) - 1, 0
        mantissa = 1 << exponent
    else:
        return False
    if precision < 0 or scale < -9:
        return False
    shifted = int(numerator + denominator)
    return shifted <= _INT64_MAX and shifted * mantissa <= _INT64_MAX


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


def env_problems(path: str, env: list[Mapping]) -> list[str]:
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


def toleration_problems(path: str, tolerations: list[Mapping]) -> list[str]:
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


def volume_problems(path: str, volumes: list[Mapping], reserved: Iterable[str]) -> list[str]:
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


def volume_mount_problems(path: str, mounts: list[Mapping], volumes: Iterable[str],
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


# --- distribution/reference: the image the kubelet will pull -------------------------------------------------------

_ALPHANUMERIC = "[a-z0-9]+"
_SEPARATOR = "(?:[._]|__|[-]+)"
_DOMAIN_COMPONENT = "(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN_AND_PORT = ("(?:" + _DOMAIN_COMPONENT + "(?:\\." + _DOMAIN_COMPONENT + ")*|\\[(?:[a-fA-F0-9:]+)\\])"
                    "(?::[0-9]+)?")
_PATH_COMPONENT = _ALPHANUMERIC + "(?:" + _SEPARATOR + _ALPHANUMERIC + ")*"
_REMOTE_NAME = _PATH_COMPONENT + "(?:/" + _PATH_COMPONENT + ")*"
_TAG = "[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_DIGEST = "[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*[:][0-9A-Fa-f]{32,}"
_NAME = "(?:" + _DOMAIN_AND_PORT + "/)?" + _REMOTE_NAME
IMAGE_REFERENCE = _NAME + "(?::" + _TAG + ")?(?:@" + _DIGEST + ")?"
IMAGE_REFERENCE_MESSAGE = ("is not an image reference the kubelet can pull ([registry[:port]/]lowercase/path[:tag]"
                           "[@sha256:digest], no whitespace; e.g. 'registry.example.com/team/trainer:1.0')")
IMAGE_MAX = 4096
_REPOSITORY_MAX = 255  # reference.RepositoryNameTotalLengthMax
_DIGEST_HEX = {"sha256": 64, "sha384": 96, "sha512": 128}


def image_detail_errors(image: str) -> list[str]:
    """What ParseNormalizedNamed refuses beyond IMAGE_REFERENCE: a bare 64-hex id, a repository name over 255
    characters, a digest of an unknown algorithm or of the wrong length (lower-case hex, as go-digest wants)."""
    if not _full(IMAGE_REFERENCE, image):
        return []
    if _full("[a-f0-9]{64}", image):
        return ["cannot specify 64-byte hexadecimal strings (an image id is not a name)"]
    errors = []
    path = _repository_path(image)
    if path is not None and len(path) > _REPOSITORY_MAX:
        errors.append(f"repository name must not be more than {_REPOSITORY_MAX} characters")
    if "@" in image:
        algorithm, _, encoded = image.rpartition("@")[2].partition(":")
        if algorithm not in _DIGEST_HEX:
            errors.append(f"unsupported digest algorithm {algorithm!r} (sha256, sha384 or sha512)")
        elif not _full(f"[a-f0-9]{{{_DIGEST_HEX[algorithm]}}}", encoded):
            errors.append(f"a {algorithm} digest is {_DIGEST_HEX[algorithm]} lower-case hexadecimal characters")
    return errors


def _repository_path(image: str) -> str | None:
    """The repository path Parse measures, after ParseNormalizedNamed's splitDockerDomain: a first component
    without '.', ':' or upper case is no registry (docker.io is), and a one-component name gets 'library/'."""
    first, slash, rest = image.partition("/")
    if not slash:
        domain, remainder = "docker.io", image
    elif first == "localhost" or "." in first or ":" in first or first.lower() != first:
        domain, remainder = first, rest
    elif first == "index.docker.io":
        domain, remainder = "docker.io", rest
    else:
        domain, remainder = "docker.io", image
    if domain == "docker.io" and "/" not in remainder:
        remainder = "library/" + remainder
    reference = re.fullmatch("(" + _NAME + ")(?::" + _TAG + ")?(?:@" + _DIGEST + ")?", f"{domain}/{remainder}")
    name = reference and re.fullmatch("(?:" + _DOMAIN_AND_PORT + ")/(" + _REMOTE_NAME + ")", reference.group(1))
    return name.group(1) if name else None


def is_image_reference(image: str) -> bool:
    return bool(image) and _full(IMAGE_REFERENCE, image)


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
    shape = OBJECT_SHAPES.get(obj.get("kind"))
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
