"""The TLS handshake's bound on every TLS listener kvcast runs, with real ``kvcast serve``
processes, certificates made here and raw sockets on loopback: the sidecar's API (its ``tls:``
section) and an agent's control API (``KVCAST_TLS_*``), both bounded by their config's
``http.tls_handshake_timeout_s``, and the agent's transfer server, bounded by
``transfer_tls_handshake_timeout_s``. A peer that connects and sends nothing, sends part of a
ClientHello, or dribbles one a byte at a time is disconnected once the bound has passed (not
after asyncio's default 60 s); a client that completes its handshake is served, after the
bound as well, while such peers hold connections open.

This is also the check on the installed uvicorn of what :class:`kvcast.serving.http.server.
_Server` reads of uvicorn's internals (its own start-up, with asyncio's
``ssl_handshake_timeout``): a stalled handshake cut, a client served, the server started."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from serve_processes import Service, start
from slow_peer import closed_after

from kvcast.serving.cluster.certs import make_cluster_certs
from kvcast.serving.messages import (
    HEADER_SIZE,
    Done,
    Hello,
    PullRequest,
    decode_body,
    decode_header,
    encode,
)
from kvcast.serving.tls import ENV

pytest.importorskip("cryptography.x509")  # make_cluster_certs needs it

BOUND = 1.0  # the handshake bound every listener is given here
LONG = 30.0  # the bounds not under test
AGENT_TLS_READY = re.compile(r"agent (\S+) ready: http=https://(\S+) transfer=(\S+) .*tls=mutual")
SIDECAR_TLS_READY = re.compile(r"sidecar (\S+) ready: http=https://(\S+) .*api_tls=mutual")
LISTENERS = ("sidecar API", "agent API", "agent transfer")


def _write(path: Path, data: dict[str, Any]) -> str:
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.fixture(scope="module")
def listeners(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One sidecar (mutual TLS on its API) and one agent (mutual TLS on both its listeners),
    every handshake bounded by :data:`BOUND`: each TLS listener's HOST:PORT by name, and
    ``client``: the files of a certificate of the cluster's CA, to connect with."""
    tmp = tmp_path_factory.mktemp("tls-handshake")
    certs = make_cluster_certs(tmp / "tls", ["sidecar", "agent", "client"])
    base = {k: v for k, v in os.environ.items() if k != "KVCAST_TOKEN" and k not in ENV.values()}
    http = {"tls_handshake_timeout_s": BOUND, "header_timeout_s": LONG, "body_timeout_s": LONG,
            "timeout_keep_alive_s": LONG}  # fmt: skip
    sidecar_tls = {"cert": str(certs["sidecar"].cert), "key": str(certs["sidecar"].key),
                   "client_ca": str(certs["sidecar"].ca)}  # fmt: skip
    sidecar_yaml = _write(tmp / "sidecar.yaml", {
        "listen": "127.0.0.1:0", "nodes": [{"name": "gpu-0"}], "decision_log": {"path": None},
        "tls": sidecar_tls, "http": http,
    })  # fmt: skip
    agent_yaml = _write(tmp / "agent.yaml", {
        "node_id": "gpu-0", "listen": "127.0.0.1:0", "transfer_listen": "127.0.0.1:0",
        "capacity_bytes": "64MiB", "speculative_quota_bytes": "16MiB",
        "request_timeout_s": LONG, "transfer_tls_handshake_timeout_s": BOUND, "http": http,
    })  # fmt: skip
    agent_env = base | {ENV["cert"]: str(certs["agent"].cert), ENV["key"]: str(certs["agent"].key),
                        ENV["ca"]: str(certs["agent"].ca)}  # fmt: skip
    started: list[Service] = []
    try:
        started.append(start(["serve", "sidecar", "--config", sidecar_yaml], base))
        started.append(start(["serve", "agent", "--config", agent_yaml], agent_env))
        sidecar = started[0].wait_ready(SIDECAR_TLS_READY)
        agent = started[1].wait_ready(AGENT_TLS_READY)
        yield {"sidecar API": sidecar.group(2), "agent API": agent.group(2),
               "agent transfer": agent.group(3), "client": certs["client"]}  # fmt: skip
    finally:
        for service in started:
            service.kill()


def _connect(address: str) -> socket.socket:
    host, port = address.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=5.0)


def _client_hello() -> bytes:
    """A real ClientHello, as a TLS client sends it first (a few hundred bytes)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(incoming, outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    hello = outgoing.read()
    assert hello[:1] == b"\x16" and len(hello) > 100, hello[:16]  # a handshake record
    return hello


def _hello_part() -> bytes:
    hello = _client_hello()
    return hello[: len(hello) // 2]


STALLS: dict[str, Callable[[], tuple[bytes, float]]] = {
    "sends nothing": lambda: (b"", 0.0),
    "sends half a ClientHello": lambda: (_hello_part(), 0.0),
    "dribbles a ClientHello": lambda: (_client_hello(), 0.1),
}


@pytest.mark.parametrize("stall", STALLS)
@pytest.mark.parametrize("listener", LISTENERS)
def test_a_peer_that_stalls_its_handshake_is_cut_off_at_the_bound(
    listeners: dict[str, Any], listener: str, stall: str
) -> None:
    send, drip_s = STALLS[stall]()
    with _connect(listeners[listener]) as sock:
        started = time.monotonic()
        if not drip_s:
            sock.sendall(send)
        limit_s = BOUND + 4.0  # asyncio's default bound is 60 s
        elapsed = closed_after(sock, started, send if drip_s else b"", drip_s or 0.1, limit_s)
    assert BOUND - 0.2 <= elapsed <= BOUND + 3.0, f"{listener}: cut after {elapsed:.2f} s"


def _http_get(tls: ssl.SSLSocket) -> int:
    tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: kvcast\r\nConnection: close\r\n\r\n")
    data = b""
    while chunk := tls.recv(4096):
        data += chunk
    assert data.startswith(b"HTTP/1.1 "), data[:80]
    return int(data.split(b" ")[1])


def _pull_nothing(tls: ssl.SSLSocket) -> Done:
    """A Hello (the agent has no token) and a request for a block it lacks: its Done."""
    tls.sendall(encode(Hello("tester", "")) + encode(PullRequest("c-1", "acme", (7,))))
    data = b""
    while len(data) < HEADER_SIZE or len(data) < HEADER_SIZE + decode_header(data[:HEADER_SIZE])[1]:
        chunk = tls.recv(4096)
        assert chunk, f"closed after {data!r}"
        data += chunk
    mtype, length = decode_header(data[:HEADER_SIZE])
    done = decode_body(mtype, data[HEADER_SIZE : HEADER_SIZE + length])
    assert isinstance(done, Done), done
    return done


@pytest.mark.parametrize("listener", LISTENERS)
def test_a_client_that_completes_its_handshake_is_served_past_the_bound(
    listeners: dict[str, Any], listener: str
) -> None:
    """Among twenty peers stalling their handshakes, a client with the cluster's certificate
    completes its own, waits past the bound (which is the handshake's only) and is served;
    the twenty have been closed by the server meanwhile."""
    address = listeners[listener]
    stalled = [_connect(address) for _ in range(20)]
    try:
        host = address.rsplit(":", 1)[0]
        context = listeners["client"].client_context()  # mutual TLS: the cluster's certificate
        with context.wrap_socket(_connect(address), server_hostname=host) as tls:
            time.sleep(BOUND + 0.5)
            if listener == "agent transfer":
                assert _pull_nothing(tls) == Done("c-1", 0, (7,))
            else:
                assert _http_get(tls) == 200
        for sock in stalled:  # each already closed by the server: its end of stream is there
            sock.settimeout(1.0)
            with contextlib.suppress(ConnectionResetError):
                assert sock.recv(1) == b"", listener
    finally:
        for sock in stalled:
            sock.close()
