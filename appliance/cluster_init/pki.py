"""A small cluster PKI made with ``cryptography``: one CA, one certificate per voter and worker.

Theory of operation. Keys are ECDSA P-256, signatures SHA-256. The CA certificate may sign only
end-entity certificates (``path_length=0``). Every node certificate is good for both TLS server
and client authentication (voters dial each other; the runner presents its certificate to the
worker and the worker to admission), names ``localhost`` and the node's addresses, and a voter's
also names its identity ``<node_id>.voter.appliance`` (appliance.http.tls). Private keys are
written 0600 from creation (``os.open`` with the mode, then ``fchmod``, whatever the umask); the
CA key never needs to be on a running node and ``cluster init`` says so. Nothing here implements
cryptography: it only asks the library for keys and signed certificates.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_VALID_DAYS = 3650
NODE_VALID_DAYS = 825
KEY_MODE = 0o600
CERT_MODE = 0o644


@dataclass(frozen=True)
class Issued:
    certificate: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    def cert_pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    def key_pem(self) -> bytes:
        return self.key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def new_authority(common_name: str, *, valid_days: int = CA_VALID_DAYS) -> Issued:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=valid_days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Issued(cert, key)


def issue(
    authority: Issued,
    common_name: str,
    *,
    dns_names: Iterable[str] = (),
    ip_addresses: Iterable[str] = (),
    valid_days: int = NODE_VALID_DAYS,
) -> Issued:
    """A node certificate signed by ``authority`` (server and client authentication)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = _now()
    names: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
    names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
    if not names:
        raise ValueError("a node certificate must name at least one DNS name or IP address")
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(authority.certificate.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=valid_days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=True,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(authority.key.public_key()),
            critical=False,
        )
        .sign(authority.key, hashes.SHA256())
    )
    return Issued(cert, key)


def write_private(path: Path, data: bytes) -> None:
    """A new file, mode 0600 from the first byte (refuses to replace an existing one)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, KEY_MODE)
    try:
        os.fchmod(fd, KEY_MODE)
        os.write(fd, data)
    finally:
        os.close(fd)


def write_public(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, CERT_MODE)
    try:
        os.fchmod(fd, CERT_MODE)
        os.write(fd, data)
    finally:
        os.close(fd)


def load_authority(cert_pem: bytes, key_pem: bytes) -> Issued:
    """The CA written by ``cluster init`` (``ca.pem``, ``ca.key``), to issue one more node."""
    certificate = x509.load_pem_x509_certificate(cert_pem)
    key = serialization.load_pem_private_key(key_pem, password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError("the CA key is not an ECDSA key written by cluster init")
    if certificate.public_key().public_numbers() != key.public_key().public_numbers():
        raise ValueError("the CA key does not match the CA certificate")
    return Issued(certificate, key)
