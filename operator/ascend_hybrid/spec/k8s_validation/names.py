"""Label keys and values, DNS-1123 labels and subdomains (apimachinery content/kube.go, dns.go) and environment variable names (IsRelaxedEnvVarName)."""

from __future__ import annotations

import re

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
