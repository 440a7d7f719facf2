"""Certificates for ``kvcast cluster up --tls``: one cluster CA and a certificate per process.

:func:`make_cluster_certs` writes, into one directory (``<workdir>/tls/``): the CA's
certificate ``ca.pem``, and for each name (the sidecar, every agent, the replay client)
``<name>.crt`` and ``<name>.key``. Every certificate names ``127.0.0.1`` and ``localhost``
(the addresses the peers dial on loopback) and may serve and connect (server and client
auth), as :mod:`kvcast.serving.tls` expects. Keys are ECDSA P-256, written mode 0600 in a
directory of mode 0700. The CA's key lives in memory only: once the certificates are signed
nobody can make another one, and every start makes a new CA (the old files stop working).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from collections.abc import Sequence
from pathlib import Path

from kvcast.serving.tls import TlsFiles

__all__ = ["CA_FILE", "VALID_DAYS", "make_cluster_certs"]
CA_FILE = "ca.pem"
VALID_DAYS = 30  # the cluster runs on one machine for a while; every start makes new ones


def _write(path: Path, data: bytes, mode: int) -> Path:
    """``data`` into ``path`` created afresh with ``mode`` (never a moment more permissive)."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return path


def make_cluster_certs(directory: Path, names: Sequence[str]) -> dict[str, TlsFiles]:
    """A new CA and one certificate + key per name in ``directory``; the files by name.

    ValueError when ``cryptography`` is not installed, a name is not a plain file name, or
    names repeat."""
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    except ImportError:
        raise ValueError(
            "--tls needs the cryptography package: pip install 'kvcast[serve]'"
        ) from None
    if len(set(names)) != len(names):
        raise ValueError(f"certificate names repeat: {list(names)}")
    for name in names:
        if not name or name in (".", "..") or "/" in name:
            raise ValueError(f"not a certificate name: {name!r}")

    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    now = dt.datetime.now(dt.UTC)
    start, end = now - dt.timedelta(minutes=5), now + dt.timedelta(days=VALID_DAYS)

    def subject(cn: str) -> x509.Name:
        return x509.Name([
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "kvcast local cluster"),
            x509.NameAttribute(NameOID.COMMON_NAME, cn),
        ])  # fmt: skip

    pem = serialization.Encoding.PEM
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = subject("kvcast cluster CA")
    ca_cert = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(start).not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(
            digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
            key_encipherment=False, data_encipherment=False, key_agreement=False,
            encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    ca_path = _write(directory / CA_FILE, ca_cert.public_bytes(pem), 0o644)
    loopback = x509.SubjectAlternativeName(
        [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    )
    usage = x509.ExtendedKeyUsage(
        [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    )
    out = {}
    for name in names:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder().subject_name(subject(name)).issuer_name(ca_name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=True, key_cert_sign=False, crl_sign=False,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(loopback, critical=False)
            .add_extension(usage, critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256())
        )  # fmt: skip
        key_pem = key.private_bytes(
            pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        out[name] = TlsFiles(
            cert=_write(directory / f"{name}.crt", cert.public_bytes(pem), 0o644),
            key=_write(directory / f"{name}.key", key_pem, 0o600),
            ca=ca_path,
        )
    return out
