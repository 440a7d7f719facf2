"""TLS on the sidecar's own HTTP API (the config's ``tls:`` section), with real ``kvcast serve
sidecar`` processes, certificates of a CA made here and real sockets: with ``client_ca`` the API
is served over mutual TLS, a client without a certificate or with one of another CA is refused
at the handshake and never gets an HTTP answer, and the bearer token still applies on top;
without ``client_ca`` any client that trusts the CA is served; plain HTTP gets no answer from
either; files that do not load are one line naming the keys."""

from __future__ import annotations

import os
import re
import secrets
import signal
import socket
import ssl
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from serve_processes import start
from typer.testing import CliRunner

from kvcast.cli.app import app
from kvcast.serving.cluster.certs import make_cluster_certs
from kvcast.serving.tls import ENV, TlsFiles

pytest.importorskip("cryptography.x509")  # make_cluster_certs needs it

TLS_READY = re.compile(r"sidecar (\S+) ready: http=https://(\S+) .*api_tls=(\S+) agent_tls=off")
runner = CliRunner()


def _config(tmp_path: Path, tls: dict[str, str] | None) -> str:
    data: dict[str, Any] = {
        "listen": "127.0.0.1:0", "nodes": [{"name": "gpu-0"}], "tick_ms": 100.0,
        "decision_log": {"path": None}, "tls": tls,
    }  # fmt: skip
    path = tmp_path / "sidecar.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def _env(token: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "KVCAST_TOKEN" and k not in ENV.values()}
    return env | {"KVCAST_TOKEN": token}


def _no_http_answer(address: str, context: ssl.SSLContext) -> str:
    """Connect to ``address`` with ``context`` and ask for /healthz; how it was refused (an
    AssertionError if any HTTP answer came back). TLS 1.2: the handshake itself fails; TLS 1.3:
    the client's side of it may finish first, then the server's refusal closes the connection
    before any answer."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5.0) as raw:
        try:
            tls = context.wrap_socket(raw, server_hostname=host)
        except (ssl.SSLError, OSError) as err:
            return f"handshake: {err}"
        with tls:
            try:
                tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: sidecar\r\n\r\n")
                answer = tls.recv(4096)
            except (ssl.SSLError, OSError) as err:
                return f"after handshake: {err}"
    assert answer == b"", f"the server answered: {answer[:80]!r}"
    return "closed"


def _contexts(ca: Path, rogue: TlsFiles, tls_max: ssl.TLSVersion) -> dict[str, ssl.SSLContext]:
    """A client that trusts ``ca`` with no certificate, and one with a certificate of another
    CA, both at most ``tls_max``."""
    no_cert = ssl.create_default_context(cafile=str(ca))
    stranger = ssl.create_default_context(cafile=str(ca))
    stranger.load_cert_chain(str(rogue.cert), str(rogue.key))
    for ctx in (no_cert, stranger):
        ctx.maximum_version = tls_max
    return {"no certificate": no_cert, "another CA's certificate": stranger}


def test_mutual_tls_refuses_a_missing_or_foreign_client_certificate_at_the_handshake(
    tmp_path: Path,
) -> None:
    certs = make_cluster_certs(tmp_path / "tls", ["sidecar", "client"])
    rogue = make_cluster_certs(tmp_path / "rogue", ["rogue"])["rogue"]
    side = certs["sidecar"]
    tls = {"cert": str(side.cert), "key": str(side.key), "client_ca": str(side.ca)}
    token = secrets.token_hex(16)
    proc = start(["serve", "sidecar", "--config", _config(tmp_path, tls)], _env(token))
    try:
        match = proc.wait_ready(TLS_READY)
        address, base = match.group(2), f"https://{match.group(2)}"
        assert match.group(3) == "mutual"
        # TLS 1.2: the handshake itself fails; TLS 1.3: no answer ever comes
        refused = {
            f"{who}, TLS {v.name}": _no_http_answer(address, ctx)
            for v in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3)
            for who, ctx in _contexts(side.ca, rogue, v).items()
        }
        assert all(how.startswith("handshake") for w, how in refused.items() if "1_2" in w), refused
        with pytest.raises(httpx.HTTPError):  # plain HTTP to the TLS port
            httpx.get(f"http://{address}/healthz", timeout=5.0)

        ours = certs["client"].client_context()
        with httpx.Client(base_url=base, verify=ours, timeout=10.0) as http:
            assert http.get("/healthz").json()["status"] == "ok"
            # the token still says what may be commanded
            assert http.post("/v1/mode", json={"mode": "active"}).status_code == 401
            auth = {"Authorization": f"Bearer {token}"}
            r = http.post("/v1/mode", json={"mode": "active"}, headers=auth)
            assert r.status_code == 200 and http.get("/v1/mode").json()["mode"] == "active"
        assert proc.stop(signal.SIGINT) == 0, "".join(proc.log)
    finally:
        proc.kill()
    assert not any("Traceback" in line for line in proc.log), "".join(proc.log)


def test_tls_without_a_client_ca_serves_any_client_that_trusts_the_servers_ca(
    tmp_path: Path,
) -> None:
    side = make_cluster_certs(tmp_path / "tls", ["sidecar"])["sidecar"]
    tls = {"cert": str(side.cert), "key": str(side.key)}
    proc = start(["serve", "sidecar", "--config", _config(tmp_path, tls)], _env("t" * 32))
    try:
        match = proc.wait_ready(TLS_READY)
        address = match.group(2)
        assert match.group(3) == "on"
        no_cert = ssl.create_default_context(cafile=str(side.ca))  # trusts the CA, no cert
        r = httpx.get(f"https://{address}/healthz", verify=no_cert, timeout=5.0)
        assert r.json()["status"] == "ok"
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            httpx.get(f"https://{address}/healthz", timeout=5.0)  # a client not trusting it
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://{address}/healthz", timeout=5.0)
        assert proc.stop(signal.SIGTERM) == 0, "".join(proc.log)
    finally:
        proc.kill()


def test_tls_files_that_are_missing_or_do_not_load_are_one_line_naming_the_keys(
    tmp_path: Path,
) -> None:
    side = make_cluster_certs(tmp_path / "tls", ["sidecar"])["sidecar"]
    env = {"KVCAST_TOKEN": None} | {v: None for v in ENV.values()}
    missing = {"cert": str(tmp_path / "nope.crt"), "key": str(side.key)}
    r = runner.invoke(app, ["serve", "sidecar", "--config", _config(tmp_path, missing)], env=env)
    assert r.exit_code == 2 and "key 'tls.cert'" in r.output, r.output
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    bad = {"cert": str(side.cert), "key": str(side.key), "client_ca": str(garbage)}
    r = runner.invoke(app, ["serve", "sidecar", "--config", _config(tmp_path, bad)], env=env)
    assert r.exit_code == 2, r.output
    assert "tls.cert/tls.key/tls.client_ca: cannot load" in r.output, r.output
    assert "Traceback" not in r.output
