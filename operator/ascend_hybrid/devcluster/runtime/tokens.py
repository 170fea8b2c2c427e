"""ServiceAccount tokens for container-runtime pods (IO): the TokenRequest API, as the kubelet asks it.

Each token is requested for the pod's ServiceAccount, bound to the pod (boundObjectRef: it dies with the pod), for
the audience and lifetime its projected volume source names (no audience: the apiserver's own), and replaced once
volumes.refresh_due says so. The runtime's own credentials request it; the container only ever holds the token.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from typing import cast

from kubernetes import client

from ascend_hybrid.devcluster.kube.client import describe
from ascend_hybrid.devcluster.runtime.launch import NotRunnable
from ascend_hybrid.devcluster.runtime.volumes import TokenSource, refresh_due, token_sources

REQUEST_TIMEOUT_SECONDS = 10


@dataclass(frozen=True)
class Issued:
    token: str
    issued: float   # epoch seconds
    expires: float


class Tokens:
    def __init__(self, core: client.CoreV1Api, log):
        self.core, self.log = core, log
        self.issued: dict[tuple[str, TokenSource], Issued] = {}

    def for_pod(self, pod: dict, now: float | None = None) -> dict[TokenSource, str]:
        """The pod's tokens, requested or refreshed as due. NotRunnable (FailedMount) when one cannot be had: on a
        failed refresh the current token is kept while it is valid."""
        now = time.time() if now is None else now
        uid, tokens = pod["metadata"]["uid"], {}
        for source in token_sources(pod):
            held = self.issued.get((uid, source))
            if held is None or refresh_due(held.issued, held.expires, now):
                try:
                    held = self._request(pod, source, now)
                    self.issued[(uid, source)] = held
                except Exception as error:  # noqa: BLE001 - the pod waits (or keeps its token) and says why
                    if held is None or now >= held.expires:
                        raise NotRunnable("FailedMount", f"ServiceAccount token for {source.service_account!r}: "
                                          f"{describe(error)}") from None
                    self.log(f"token refresh for {pod['metadata']['namespace']}/{pod['metadata']['name']} failed, "
                             f"keeping the current one: {describe(error)}")
            tokens[source] = held.token
        return tokens

    def _request(self, pod: dict, source: TokenSource, now: float) -> Issued:
        meta = pod["metadata"]
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {
            "audiences": [source.audience] if source.audience else [],
            "expirationSeconds": source.expiration_seconds,
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}}}
        # validate_call builds the model from the dict; a granted TokenRequest always has the token and its expiry
        answer = self.core.create_namespaced_service_account_token(
            source.service_account, meta["namespace"], cast(client.AuthenticationV1TokenRequest, body),
            _request_timeout=REQUEST_TIMEOUT_SECONDS)
        status = cast(client.V1TokenRequestStatus, answer.status)
        expires = cast(datetime, status.expiration_timestamp).timestamp()
        return Issued(cast(str, status.token), now, expires)

    def forget(self, uid: str) -> None:
        for key in [key for key in self.issued if key[0] == uid]:
            del self.issued[key]
