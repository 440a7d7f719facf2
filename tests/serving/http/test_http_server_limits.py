"""What slow or too many clients can hold on the sidecar's API and an agent's control API (the
``http:`` section of their configs), with real ``kvcast serve`` processes and raw sockets: a
request that arrives with ``limit_concurrency`` connections open is answered 503 until some
close; a connection whose request head (request line and headers) is not all in within
``header_timeout_s`` is closed, whether it sends nothing or a byte now and then; an
unfinished head that outgrows ``max_incomplete_head_bytes`` is answered 400 and closed; an
idle kept-alive connection is closed after ``timeout_keep_alive_s``; a request whose declared
body is not all in within ``body_timeout_s`` is closed unhandled; a connection accepted with
``max_connections`` open is closed at once. Each connection cut by a bound (but the idle one)
is counted in ``/metrics``
(``kvcast_<sidecar|agent>_http_connections_cut_total{reason}``)."""

from __future__ import annotations

import os
import re
import select
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from serve_processes import AGENT_READY, SIDECAR_READY, start
from slow_peer import closed_after

from kvcast.serving.http.connection_cuts import CUT_REASONS
from kvcast.serving.tls import ENV

GET = b"GET /healthz HTTP/1.1\r\nHost: kvcast\r\n\r\n"
LONG = 30.0  # a bound that is not the one under test
NONE_CUT = dict.fromkeys(CUT_REASONS, 0.0)


def _config(tmp_path: Path, kind: str, http: dict[str, Any]) -> str:
    data: dict[str, Any] = {"listen": "127.0.0.1:0", "http": http}
    if kind == "sidecar":
        data |= {"nodes": [{"name": "gpu-0"}], "decision_log": {"path": None}}
    else:
        data |= {"node_id": "gpu-0", "transfer_listen": "127.0.0.1:0",
                 "capacity_bytes": "64MiB", "speculative_quota_bytes": "16MiB"}  # fmt: skip
    path = tmp_path / f"{kind}.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.fixture(params=["sidecar", "agent"])
def serve(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., str]]:
    """``serve(**http)``: a sidecar or an agent process with these ``http:`` bounds (the
    others long); its API's HOST:PORT."""
    kind: str = request.param
    started = []
    env = {k: v for k, v in os.environ.items() if k != "KVCAST_TOKEN" and k not in ENV.values()}

    def serve_one(**http: Any) -> str:
        bounds = {"timeout_keep_alive_s": LONG, "header_timeout_s": LONG,
                  "body_timeout_s": LONG} | http  # fmt: skip
        proc = start(["serve", kind, "--config", _config(tmp_path, kind, bounds)], env)
        started.append(proc)
        return proc.wait_ready(SIDECAR_READY if kind == "sidecar" else AGENT_READY).group(2)

    yield serve_one
    for proc in started:
        proc.kill()


def _connect(address: str) -> socket.socket:
    host, port = address.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=5.0)


def _response(sock: socket.socket) -> tuple[int, bytes]:
    """The status and body of one response (up to its Content-Length, else to the close)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        assert chunk, f"closed before a response: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lengths = [int(line.split(b":")[1]) for line in head.split(b"\r\n")
               if line.lower().startswith(b"content-length:")]  # fmt: skip
    if lengths:
        while len(body) < lengths[0]:
            body += sock.recv(4096)
    else:  # the body runs to the close
        while chunk := sock.recv(4096):
            body += chunk
    return int(head.split(b" ")[1]), body


def _get(address: str) -> int:
    with _connect(address) as sock:
        sock.sendall(GET)
        return _response(sock)[0]


def _cuts(address: str) -> dict[str, float]:
    """The server's ``http_connections_cut_total`` by reason, from its ``/metrics``."""
    with _connect(address) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: kvcast\r\n\r\n")
        status, body = _response(sock)
    assert status == 200, body[:200]
    pattern = r'^kvcast_\w+_http_connections_cut_total\{reason="(\w+)"\} (\S+)$'
    return {m[1]: float(m[2]) for m in re.finditer(pattern, body.decode(), re.M)}


def test_a_request_with_limit_concurrency_connections_open_is_answered_503(serve) -> None:
    address = serve(limit_concurrency=4)
    idle = [_connect(address) for _ in range(3)]  # three connections that never send
    try:
        deadline = time.monotonic() + 5.0
        while True:  # a fourth one's request, once the server has accepted the three
            with _connect(address) as fourth:
                fourth.sendall(GET)
                status, body = _response(fourth)
            if status != 200 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert (status, body) == (503, b"Service Unavailable")
    finally:
        for sock in idle:
            sock.close()
    deadline = time.monotonic() + 5.0
    while (status := _get(address)) != 200:  # served again once they are gone
        assert time.monotonic() < deadline, status
        time.sleep(0.05)
    cuts = _cuts(address)
    assert cuts["over_limit"] >= 1 and cuts == NONE_CUT | {"over_limit": cuts["over_limit"]}


def test_a_request_head_not_all_in_within_header_timeout_is_cut_off(serve) -> None:
    address = serve(header_timeout_s=1.0)
    with _connect(address) as silent, _connect(address) as slow:
        t0 = time.monotonic()
        slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: kvcast\r\n")
        drip = b"X-Slow: " + b"a" * 200  # a byte every 0.1 s, never the end of the head
        assert 0.8 < closed_after(slow, t0, drip) < 4.0
        assert closed_after(silent, t0) < 4.0  # sent nothing at all
    with _connect(address) as kept:  # the next head on a kept-alive connection too
        kept.sendall(GET)
        assert _response(kept)[0] == 200
        t0 = time.monotonic()
        assert 0.8 < closed_after(kept, t0, b"GET /healthz HTTP/1.1\r\n" + b"a" * 200) < 4.0
    with _connect(address) as prompt:  # a head sent in pieces, but in time, is served
        for piece in (GET[:10], GET[10:25], GET[25:]):
            prompt.sendall(piece)
            time.sleep(0.2)
        assert _response(prompt)[0] == 200
    assert _cuts(address) == NONE_CUT | {"head_timeout": 3}


def test_an_unfinished_head_past_max_incomplete_head_bytes_is_answered_400(serve) -> None:
    address = serve(max_incomplete_head_bytes="2KiB")

    def send_head(sock: socket.socket, padding: int) -> tuple[int, bytes]:
        head = b"GET /healthz HTTP/1.1\r\nHost: kvcast\r\nX-Pad: " + b"a" * padding + b"\r\n\r\n"
        for i in range(0, len(head), 512):  # in pieces, so that it is seen unfinished
            sock.sendall(head[i : i + 512])
            if select.select([sock], [], [], 0.02)[0]:  # answered: send no more
                break
        return _response(sock)

    with _connect(address) as sock:
        assert send_head(sock, 1000)[0] == 200
    with _connect(address) as sock:  # a 400 without a length: read to the close, so it closed
        assert send_head(sock, 4096) == (400, b"Invalid HTTP request received.")
    assert _cuts(address) == NONE_CUT | {"bad_request": 1}


def test_an_idle_kept_alive_connection_is_closed_after_timeout_keep_alive(serve) -> None:
    address = serve(timeout_keep_alive_s=1.0)
    with _connect(address) as sock:
        sock.sendall(GET)
        assert _response(sock)[0] == 200
        assert 0.7 < closed_after(sock, time.monotonic()) < 3.0


def test_a_body_not_all_in_within_body_timeout_is_cut_off_unhandled(
    serve, request: pytest.FixtureRequest
) -> None:
    address = serve(body_timeout_s=1.0)
    route = b"/v1/mode" if request.node.callspec.params["serve"] == "sidecar" else b"/v1/evict"
    head = (b"POST %s HTTP/1.1\r\nHost: kvcast\r\nContent-Type: application/json\r\n"
            b"Content-Length: 400\r\n\r\n") % route  # fmt: skip
    with _connect(address) as slow:
        t0 = time.monotonic()
        slow.sendall(head)
        assert 0.8 < closed_after(slow, t0, b'{"mode": "' + b"a" * 200) < 4.0
    assert _cuts(address) == NONE_CUT | {"body_timeout": 1}
    with _connect(address) as prompt:  # a body sent in pieces, but in time, is handled
        body = b'{"mode": "shadow"}'
        prompt.sendall(head.replace(b"400", str(len(body)).encode()))
        time.sleep(0.3)
        prompt.sendall(body)
        sidecar = request.node.callspec.params["serve"] == "sidecar"
        assert _response(prompt)[0] == (200 if sidecar else 422)  # its route's own answer
    assert _cuts(address)["body_timeout"] == 1


def test_a_connection_accepted_with_max_connections_open_is_closed_at_once(serve) -> None:
    address = serve(max_connections=3, limit_concurrency=2)
    held = [_connect(address) for _ in range(3)]
    try:
        with _connect(address) as fourth:  # the server holds three already
            assert closed_after(fourth, time.monotonic(), limit_s=2.0) < 1.0
    finally:
        for sock in held:
            sock.close()
    deadline = time.monotonic() + 5.0
    while (cuts := _cuts_when_served(address)) is None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert cuts["over_connections"] >= 1


def _cuts_when_served(address: str) -> dict[str, float] | None:
    """:func:`_cuts`, or None while the server still turns connections away."""
    try:
        return _cuts(address)
    except (AssertionError, ConnectionResetError, BrokenPipeError):
        return None


def test_a_chunked_body_is_refused_411_before_a_byte_of_it_is_read(
    serve, request: pytest.FixtureRequest
) -> None:
    """A ``Transfer-Encoding: chunked`` body has no bound, whatever ``Content-Length`` it also
    declares (the encoding wins): answered 411 from the head alone, the body never read."""
    address = serve()
    route = b"/v1/mode" if request.node.callspec.params["serve"] == "sidecar" else b"/v1/evict"
    for method, extra in ((b"POST", b"Content-Length: 10\r\n"), (b"POST", b""), (b"GET", b"")):
        head = (b"%s %s HTTP/1.1\r\nHost: kvcast\r\nContent-Type: application/json\r\n%s"
                b"Transfer-Encoding: chunked\r\n\r\n") % (method, route, extra)  # fmt: skip
        with _connect(address) as sock:
            sock.sendall(head)  # and not a byte of the body
            status, body = _response(sock)
        assert status == 411 and b"Transfer-Encoding" in body, (method, extra, body)
    assert _get(address) == 200
