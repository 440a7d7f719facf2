"""Mutual TLS between agents and from the sidecar, with real processes and certificates made
here (``cryptography``): with ``KVCAST_TLS_*`` set, an agent's control API and transfer
server accept only clients holding a certificate of the cluster CA, a pull between two such
agents moves verified bytes, the sidecar polls them over HTTPS with its own certificate; a
client without a certificate, or with one of another CA, is refused; half a setting is one
line naming the missing variable."""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import re
import secrets
import signal
import ssl
import time
from pathlib import Path

import httpx
import pytest
import yaml
from serve_processes import SIDECAR_READY, start, start_agent

from kvcast.serving.tls import ENV, TlsFiles, tls_from_env

x509 = pytest.importorskip("cryptography.x509")
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID  # noqa: E402

AGENT_TLS_READY = re.compile(r"agent (\S+) ready: http=https://(\S+) transfer=(\S+) .*tls=mutual")


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _pem(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def make_ca(tmp: Path, name: str) -> tuple[Path, ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(_name(name)).issuer_name(_name(name))
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    return _pem(tmp / f"{name}.pem", cert.public_bytes(serialization.Encoding.PEM)), key, cert


def make_leaf(tmp: Path, name: str, ca_key: ec.EllipticCurvePrivateKey,
              ca_cert: x509.Certificate) -> tuple[Path, Path]:  # fmt: skip
    """A certificate for 127.0.0.1 / localhost, good as server and as client."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(_name(name)).issuer_name(ca_cert.subject)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                              ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())  # fmt: skip
    return (_pem(tmp / f"{name}.crt", cert.public_bytes(serialization.Encoding.PEM)),
            _pem(tmp / f"{name}.key", key_pem))  # fmt: skip


def test_half_a_tls_setting_or_a_missing_file_is_one_line_naming_it(tmp_path: Path) -> None:
    assert tls_from_env({}) is None
    with pytest.raises(ValueError, match="KVCAST_TLS_KEY, KVCAST_TLS_CA unset"):
        tls_from_env({ENV["cert"]: "x.pem"})
    nowhere = str(tmp_path / "nope.pem")
    with pytest.raises(ValueError, match=f"KVCAST_TLS_CERT={nowhere}: no such file"):
        tls_from_env({ENV["cert"]: nowhere, ENV["key"]: nowhere, ENV["ca"]: nowhere})


def test_agents_and_sidecar_speak_mutual_tls_and_refuse_strangers(tmp_path: Path) -> None:
    ca, ca_key, ca_cert = make_ca(tmp_path, "cluster-ca")
    _, rogue_key, rogue_cert = make_ca(tmp_path, "rogue-ca")
    cert, key = make_leaf(tmp_path, "node", ca_key, ca_cert)
    rogue_crt, rogue_key_pem = make_leaf(tmp_path, "rogue", rogue_key, rogue_cert)
    token = secrets.token_hex(16)
    env = {k: v for k, v in os.environ.items() if k != "KVCAST_TOKEN"} | {
        "KVCAST_TOKEN": token,
        ENV["cert"]: str(cert),
        ENV["key"]: str(key),
        ENV["ca"]: str(ca),
    }
    seed = ["--seed-blocks", "4", "--seed-tenant", "acme", "--seed-block-bytes", "64KiB"]
    procs = [start_agent("node-a", env, *seed), start_agent("node-b", env)]
    try:
        (a_http, a_tx), (b_http, _) = [p.wait_ready(AGENT_TLS_READY).group(2, 3) for p in procs]
        ours = TlsFiles(cert, key, ca).client_context()
        auth = {"Authorization": f"Bearer {token}"}
        with httpx.Client(verify=ours, timeout=10.0) as http:
            blocks = http.get(f"https://{a_http}/v1/inventory", headers=auth).json()["blocks"]
            cmd = {"command_id": "tls-1", "source": a_tx, "tenant": "acme", "deadline_s": 10.0,
                   "block_hashes": [b["block_hash"] for b in blocks]}  # fmt: skip
            done = http.post(f"https://{b_http}/v1/replicate", json=cmd, headers=auth).json()
            assert done["status"] == "ok" and len(done["committed"]) == 4, done
            held = http.get(f"https://{b_http}/v1/inventory", headers=auth).json()["blocks"]
            assert {(x["block_hash"], x["checksum"]) for x in held} == {
                (x["block_hash"], x["checksum"]) for x in blocks
            }

        no_cert = ssl.create_default_context(cafile=str(ca))
        stranger = ssl.create_default_context(cafile=str(ca))
        stranger.load_cert_chain(str(rogue_crt), str(rogue_key_pem))
        for context in (no_cert, stranger):
            refused = (httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError)
            with pytest.raises(refused), httpx.Client(verify=context, timeout=5.0) as http:
                http.get(f"https://{a_http}/healthz").raise_for_status()
        with pytest.raises(httpx.HTTPError):  # plain HTTP to a TLS port
            httpx.get(f"http://{a_http}/healthz", timeout=5.0)

        cfg = tmp_path / "sidecar.yaml"
        cfg.write_text(yaml.safe_dump({
            "listen": "127.0.0.1:0", "decision_log": {"path": None},
            "agents": {"telemetry_period_s": 0.2},
            "nodes": [{"name": "node-a", "agent": f"https://{a_http}"},
                      {"name": "node-b", "agent": f"https://{b_http}"}],
        }))  # fmt: skip
        sidecar = start(["serve", "sidecar", "--config", str(cfg)], env)
        procs.append(sidecar)
        sidecar.wait_ready(SIDECAR_READY)
        assert any("agent_tls=mutual" in line for line in sidecar.log)
        recovered = "kvcast_sidecar_recovered_block_locations 8.0"  # inventories, over mTLS
        up = [f'kvcast_sidecar_agent_up{{node="node-{n}"}} 1.0' for n in "ab"]  # polled
        deadline = time.monotonic() + 5.0
        while True:
            text = httpx.get(f"{sidecar.http}/metrics", timeout=5.0).text
            if all(u in text for u in up) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert recovered in text and all(u in text for u in up), text
        for p in procs:
            p.proc.send_signal(signal.SIGTERM)
        for p in procs:
            assert p.wait() == 0, "".join(p.log)
    finally:
        for p in procs:
            p.kill()
