"""The dev cluster's own CA and the serving certificate of Kueue's webhook (and metrics) server on 127.0.0.1,
made with the `cryptography` library (the dev extra): no openssl pipeline, no cert-manager.

The apiserver calls Kueue's webhooks by `url` (https://127.0.0.1:<port>/…) and trusts them through the caBundle
the dev cluster registers, so the serving certificate names IP 127.0.0.1 (and localhost). The files keep
controller-runtime's names (tls.crt, tls.key) so Kueue's certDir points straight at them.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

VALIDITY_DAYS = 365
RENEW_BEFORE_DAYS = 30
CA_NAME = "ascend-hybrid dev-cluster kueue CA"
SERVER_NAME = "kueue webhook 127.0.0.1"


@dataclass(frozen=True)
class CertFiles:
    directory: Path

    @property
    def ca(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.directory / "ca.key"

    @property
    def cert(self) -> Path:
        return self.directory / "tls.crt"

    @property
    def key(self) -> Path:
        return self.directory / "tls.key"

    def exist(self) -> bool:
        return all(path.is_file() for path in (self.ca, self.ca_key, self.cert, self.key))


def _write(path: Path, data: bytes, private: bool = False) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_bytes(data)
    if private:
        os.chmod(temporary, 0o600)
    temporary.rename(path)


def generate(directory: Path, now: dt.datetime | None = None, days: int = VALIDITY_DAYS) -> CertFiles:
    """A fresh EC P-256 CA (path length 0) and a server certificate it signs for 127.0.0.1 and localhost."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    def pem_key(key) -> bytes:
        return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())

    def usage(**granted: bool):
        flags = dict.fromkeys(("digital_signature", "content_commitment", "key_encipherment", "data_encipherment",
                               "key_agreement", "key_cert_sign", "crl_sign", "encipher_only", "decipher_only"), False)
        return x509.KeyUsage(**{**flags, **granted})

    now = now or dt.datetime.now(dt.UTC)
    not_before, not_after = now - dt.timedelta(minutes=5), now + dt.timedelta(days=days)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, CA_NAME)])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(not_before).not_valid_after(not_after)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(usage(digital_signature=True, key_cert_sign=True, crl_sign=True), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    names = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, SERVER_NAME)]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(not_before).not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(usage(digital_signature=True), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    files = CertFiles(directory)
    directory.mkdir(parents=True, exist_ok=True)
    _write(files.ca_key, pem_key(ca_key), private=True)
    _write(files.ca, ca.public_bytes(serialization.Encoding.PEM))
    _write(files.key, pem_key(key), private=True)
    _write(files.cert, cert.public_bytes(serialization.Encoding.PEM))
    return files


def still_valid(files: CertFiles, now: dt.datetime | None = None, margin_days: int = RENEW_BEFORE_DAYS) -> bool:
    """Whether the files exist and the server certificate outlives `margin_days` (else `ensure` makes new ones)."""
    if not files.exist():
        return False
    from cryptography import x509

    now = now or dt.datetime.now(dt.UTC)
    try:
        cert = x509.load_pem_x509_certificate(files.cert.read_bytes())
    except ValueError:
        return False
    return cert.not_valid_after_utc - dt.timedelta(days=margin_days) > now


def ensure(directory: Path) -> CertFiles:
    """The cluster's CA and server certificate: kept while valid (the caBundle registered stays right), else new."""
    files = CertFiles(directory)
    return files if still_valid(files) else generate(directory)
