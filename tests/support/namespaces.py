"""A namespace of one test: made with its default ServiceAccount in place, deleted (in the background) after."""

from __future__ import annotations

import contextlib
import uuid

from kubernetes import client

from ascend_hybrid.devcluster.kube.waiting import wait_until


def namespace_name(prefix: str, test_name: str, stem_length: int, suffix_length: int) -> str:
    stem = "".join(ch if ch.isalnum() else "-" for ch in test_name.lower())[:stem_length].strip("-")
    return f"{prefix}-{stem}-{uuid.uuid4().hex[:suffix_length]}"


@contextlib.contextmanager
def scratch_namespace(core: client.CoreV1Api, name: str):
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    wait_until(lambda: core.read_namespaced_service_account("default", name), 30,
               f"the default ServiceAccount of namespace {name}")
    try:
        yield name
    finally:
        try:
            core.delete_namespace(name, propagation_policy="Background")
        except client.ApiException as error:
            if error.status != 404:
                raise
