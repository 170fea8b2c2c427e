"""/metrics behind Kubernetes authentication and authorization, as controller-runtime's filtered metrics server.

A scrape must carry `Authorization: Bearer <token>`. The token is authenticated by a TokenReview and the user it
names must be allowed `get` on the non-resource URL `/metrics` by a SubjectAccessReview (the ClusterRole the
chart grants Prometheus: `nonResourceURLs: [/metrics], verbs: [get]`). Answers: 401 without a valid token, 403
when not allowed, else the Prometheus text. Decisions are cached per token (allowed 60 s, denied 10 s), so a
scrape every 30 s costs two reviews a minute at most. Served over TLS (tokens must not cross the network in the
clear): the certificate in --metrics-cert-dir (tls.crt, tls.key), else a self-signed one made at start.
"""

from __future__ import annotations

import hashlib
import logging
import ssl
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from kubernetes import client
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

log = logging.getLogger(__name__)
ALLOWED_TTL, DENIED_TTL = 60.0, 10.0
METRICS_PATH = "/metrics"


class Reviewer:
    """TokenReview + SubjectAccessReview with a small cache: token → (status code, until)."""

    def __init__(self, api_client: client.ApiClient, clock=time.monotonic):
        self.authn = client.AuthenticationV1Api(api_client)
        self.authz = client.AuthorizationV1Api(api_client)
        self.clock = clock
        self._cache: dict[str, tuple[int, float]] = {}
        self._lock = threading.Lock()

    def decide(self, authorization: str | None) -> int:
        """200, 401 or 403 for the request's Authorization header."""
        scheme, _, token = (authorization or "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return 401
        key = hashlib.sha256(token.encode()).hexdigest()
        now = self.clock()
        with self._lock:
            cached = self._cache.get(key)
            if cached and cached[1] > now:
                return cached[0]
        code = self._review(token)
        with self._lock:
            if len(self._cache) > 1024:
                self._cache = {k: v for k, v in self._cache.items() if v[1] > now}
            self._cache[key] = (code, now + (ALLOWED_TTL if code == 200 else DENIED_TTL))
        return code

    def _review(self, token: str) -> int:
        review = self.authn.create_token_review(client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token)))
        status = review.status
        if status is None or not status.authenticated or status.user is None:
            return 401
        user = status.user
        access = self.authz.create_subject_access_review(client.V1SubjectAccessReview(
            spec=client.V1SubjectAccessReviewSpec(
                user=user.username, groups=user.groups, uid=user.uid, extra=user.extra,
                non_resource_attributes=client.V1NonResourceAttributes(path=METRICS_PATH, verb="get"))))
        return 200 if access.status is not None and access.status.allowed else 403


def handler_for(reviewer: Reviewer):
    class MetricsHandler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] != METRICS_PATH:
                return self._answer(404, b"not found\n")
            try:
                code = reviewer.decide(self.headers.get("Authorization"))
            except Exception as error:  # noqa: BLE001 - the apiserver unreachable: refuse, never serve unchecked
                log.warning("metrics: could not review a token: %s", error)
                return self._answer(503, b"cannot review the token now\n")
            if code == 401:
                return self._answer(401, b"Unauthorized\n", {"WWW-Authenticate": 'Bearer realm="metrics"'})
            if code != 200:
                return self._answer(403, b"Forbidden: get /metrics is not allowed\n")
            self._answer(200, generate_latest(REGISTRY), {"Content-Type": CONTENT_TYPE_LATEST})

        def _answer(self, code: int, body: bytes, headers: dict | None = None) -> None:
            self.send_response(code)
            for name, value in (headers or {"Content-Type": "text/plain; charset=utf-8"}).items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:  # one line per scrape would drown the operator's log
            return

    return MetricsHandler


def self_signed(directory: Path, host: str = "ascend-hybrid-operator-metrics") -> tuple[Path, Path]:
    """A fresh EC key and a one-year self-signed certificate (what controller-runtime makes without a cert dir)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    now = datetime.now(UTC)
    certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                   .serial_number(x509.random_serial_number()).not_valid_before(now - timedelta(minutes=5))
                   .not_valid_after(now + timedelta(days=365))
                   .add_extension(x509.SubjectAlternativeName([x509.DNSName(host), x509.DNSName("localhost")]),
                                  critical=False)
                   .sign(key, hashes.SHA256()))
    cert_file, key_file = directory / "tls.crt", directory / "tls.key"
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    key_file.chmod(0o600)
    return cert_file, key_file


def serve_authenticated(address: str, port: int, api_client: client.ApiClient, cert_dir: str | None = None,
                        reviewer: Reviewer | None = None) -> ThreadingHTTPServer:
    """Starts the HTTPS server on a daemon thread and returns it."""
    if cert_dir:
        cert_file, key_file = Path(cert_dir) / "tls.crt", Path(cert_dir) / "tls.key"
    else:
        cert_file, key_file = self_signed(Path(tempfile.mkdtemp(prefix="ahj-metrics-tls-")))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    server = ThreadingHTTPServer((address, port), handler_for(reviewer or Reviewer(api_client)))
    server.daemon_threads = True
    # the handshake happens in the handler thread (on first read), so a slow client cannot hold the accept loop
    server.socket = context.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
    threading.Thread(target=server.serve_forever, name="ahj-metrics", daemon=True).start()
    log.info("metrics: https://%s:%d%s behind TokenReview + SubjectAccessReview", address, port, METRICS_PATH)
    return server
