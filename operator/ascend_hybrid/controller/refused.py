"""An API error no retry can fix (400, 403, 422), told apart in `kube.py` and handed to the core as a `Refusal`."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from kubernetes.client.exceptions import ApiException

from ascend_hybrid.diagnosis.refusals import REFUSED_STATUSES, Refusal


class Refused(ApiException):
    """An ApiException (existing handlers still catch it) that knows the call: verb, resource, object name."""

    def __init__(self, error: ApiException, verb: str, resource: str, args: tuple = (), kwargs: dict | None = None):
        super().__init__(status=error.status, reason=error.reason)
        self.body, self.headers = error.body, error.headers
        self.verb, self.resource = verb, resource
        status = _status(error)
        self.message = str(status.get("message") or _text(error.body) or error.reason or f"HTTP {error.status}").strip()
        self.name, self.namespace = _target(status, args, kwargs or {})

    def refusal(self, namespace: str) -> Refusal:
        return Refusal(verb=self.verb, resource=self.resource, name=self.name, namespace=self.namespace or namespace,
                       status=int(self.status), message=self.message, at=datetime.now(UTC))

    def __str__(self) -> str:
        return f"{self.verb} {self.resource} {self.name}: {self.status} {self.reason}: {self.message}"


def is_refusal(error: ApiException) -> bool:
    return error.status in REFUSED_STATUSES


def _text(body) -> str:
    return body.decode(errors="replace") if isinstance(body, bytes) else str(body or "")


def _status(error: ApiException) -> dict:
    """The apiserver's Status object (message, details.name), or {} when the body is not one."""
    try:
        status = json.loads(_text(error.body))
    except ValueError:
        return {}
    return status if isinstance(status, dict) else {}


def _target(status: dict, args: tuple, kwargs: dict) -> tuple[str, str]:
    """(name, namespace) of the refused object: the Status's details, else the manifest the call sent."""
    name = str((status.get("details") or {}).get("name") or "")
    for value in (*args, kwargs.get("body")):
        metadata = value.get("metadata") if isinstance(value, dict) else None
        if isinstance(metadata, dict):
            return name or str(metadata.get("name") or ""), str(metadata.get("namespace") or "")
    return name, ""
