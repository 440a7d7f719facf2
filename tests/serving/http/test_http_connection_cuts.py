"""Each connection the HTTP server cuts before a route sees its request is counted once, by
reason, in its :class:`ConnectionCuts` (an in-process server on loopback, raw sockets): a head
not in within ``header_timeout_s`` (head_timeout), an oversized head (bad_request: 400), a
request past ``limit_concurrency`` (over_limit: 503); a request served is not counted."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

from starlette.types import Receive, Scope, Send

from kvcast.serving.http.connection_cuts import CUT_REASONS, ConnectionCuts
from kvcast.serving.http.server import HttpServer
from kvcast.serving.http.server_config import HttpServerConfig

GET = b"GET / HTTP/1.1\r\nHost: kvcast\r\n\r\n"
NONE_CUT = dict.fromkeys(CUT_REASONS, 0)


HANDLED: list[bytes] = []  # the bodies the app read whole


async def ok(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["path"] == "/early":  # answers before reading the body (as a 401 or a 413 does)
        headers = [(b"content-type", b"text/plain"), (b"content-length", b"2")]
        await send({"type": "http.response.start", "status": 401, "headers": headers})
        await send({"type": "http.response.body", "body": b"no"})
        return
    body, more = b"", True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        body, more = body + message.get("body", b""), message.get("more_body", False)
    HANDLED.append(body)
    headers = [(b"content-type", b"text/plain"), (b"content-length", b"2")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": b"ok"})


@contextlib.asynccontextmanager
async def serving() -> AsyncIterator[HttpServer]:
    limits = HttpServerConfig(
        limit_concurrency=3, max_connections=4, header_timeout_s=0.3, body_timeout_s=0.3,
        max_incomplete_head_bytes=1024, timeout_keep_alive_s=30.0,
    )  # fmt: skip
    http = HttpServer(ok, "127.0.0.1", 0, grace_s=0.1, limits=limits)
    await http.start()
    try:
        yield http
    finally:
        await http.stop()


def run(scenario: Callable[[HttpServer], Awaitable[None]]) -> None:
    async def main() -> None:
        async with serving() as http:
            await asyncio.wait_for(scenario(http), 20.0)

    asyncio.run(main())


async def _connect(http: HttpServer) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = http.address.rsplit(":", 1)
    return await asyncio.open_connection(host, int(port))


async def _status(reader: asyncio.StreamReader) -> int:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5.0)
    return int(head.split(b" ")[1])


async def _served(http: HttpServer) -> int:
    reader, writer = await _connect(http)
    writer.write(GET)
    try:
        return await _status(reader)
    finally:
        writer.close()


def test_a_request_served_cuts_nothing() -> None:
    async def scenario(server: HttpServer) -> None:
        assert await _served(server) == 200
        assert server.cuts.counts == NONE_CUT

    run(scenario)


def test_a_silent_connection_is_counted_once_as_head_timeout() -> None:
    async def scenario(server: HttpServer) -> None:
        reader, writer = await _connect(server)
        assert await asyncio.wait_for(reader.read(), 5.0) == b""  # closed, nothing answered
        writer.close()
        assert server.cuts.counts == NONE_CUT | {"head_timeout": 1}

    run(scenario)


def test_an_oversized_head_is_counted_as_bad_request() -> None:
    async def scenario(server: HttpServer) -> None:
        reader, writer = await _connect(server)
        writer.write(b"GET / HTTP/1.1\r\nHost: kvcast\r\nX-Pad: " + b"a" * 2048)  # unfinished
        assert await _status(reader) == 400
        writer.close()
        assert server.cuts.counts == NONE_CUT | {"bad_request": 1}

    run(scenario)


def test_a_request_past_limit_concurrency_is_counted_as_over_limit() -> None:
    async def scenario(server: HttpServer) -> None:
        idle = [await _connect(server) for _ in range(2)]  # with the third: the limit of 3
        reader, writer = await _connect(server)
        await asyncio.sleep(0.05)  # the server has accepted all three
        writer.write(GET)
        assert await _status(reader) == 503
        writer.close()
        for _, w in idle:
            w.close()
        assert server.cuts.counts["over_limit"] == 1
        await asyncio.sleep(0.05)
        assert await _served(server) == 200  # served again once they are gone
        assert server.cuts.counts["over_limit"] == 1

    run(scenario)


def test_a_body_not_in_within_body_timeout_is_cut_and_never_handled() -> None:
    async def scenario(server: HttpServer) -> None:
        HANDLED.clear()
        reader, writer = await _connect(server)
        writer.write(b"POST / HTTP/1.1\r\nHost: kvcast\r\nContent-Length: 10\r\n\r\nabc")
        assert await asyncio.wait_for(reader.read(), 5.0) == b""  # closed, nothing answered
        writer.close()
        assert server.cuts.counts == NONE_CUT | {"body_timeout": 1}
        assert HANDLED == []
        reader, writer = await _connect(server)  # a body in pieces, but in time: handled
        writer.write(b"POST / HTTP/1.1\r\nHost: kvcast\r\nContent-Length: 6\r\n\r\nabc")
        await asyncio.sleep(0.1)
        writer.write(b"def")
        assert await _status(reader) == 200
        writer.close()
        assert HANDLED == [b"abcdef"] and server.cuts.counts["body_timeout"] == 1

    run(scenario)


def test_a_body_sent_after_its_early_answer_leaves_the_next_head_on_its_deadline() -> None:
    async def scenario(server: HttpServer) -> None:
        reader, writer = await _connect(server)
        writer.write(b"POST /early HTTP/1.1\r\nHost: kvcast\r\nContent-Length: 5\r\n\r\n")
        assert await _status(reader) == 401
        await reader.readexactly(2)
        writer.write(b"hello")  # the body, after its answer: the connection is idle again
        assert await asyncio.wait_for(reader.read(), 5.0) == b""  # cut: no head came
        writer.close()
        assert server.cuts.counts == NONE_CUT | {"head_timeout": 1}

    run(scenario)


def test_a_body_deadline_grows_with_the_declared_length() -> None:
    async def scenario(server: HttpServer) -> None:
        HANDLED.clear()
        size = 1 << 19  # at body_min_bytes_per_s (1 MiB/s): 0.5 s on top of the 0.3 s base
        reader, writer = await _connect(server)
        writer.write(b"POST / HTTP/1.1\r\nHost: kvcast\r\nContent-Length: %d\r\n\r\n" % size)
        await asyncio.sleep(0.5)  # past the base alone, within the body's own deadline
        writer.write(b"x" * size)
        assert await _status(reader) == 200
        writer.close()
        assert len(HANDLED) == 1 and HANDLED[0] == b"x" * size
        assert server.cuts.counts == NONE_CUT

    run(scenario)


def test_a_connection_past_max_connections_is_closed_at_once() -> None:
    async def scenario(server: HttpServer) -> None:
        held = [await _connect(server) for _ in range(4)]  # the cap
        await asyncio.sleep(0.05)
        reader, writer = await _connect(server)
        assert await asyncio.wait_for(reader.read(), 0.25) == b""  # before any head timeout
        writer.close()
        assert server.cuts.counts == NONE_CUT | {"over_connections": 1}
        for _, w in held:
            w.close()

    run(scenario)


def test_the_family_reports_every_reason_with_its_count() -> None:
    cuts = ConnectionCuts()
    cuts.cut("bad_request")
    cuts.cut("over_limit", 2)
    fam = cuts.family("kvcast_x_")
    assert fam.name == "kvcast_x_http_connections_cut_total" and fam.kind == "counter"
    assert dict((labels[0], v) for labels, v in fam.samples) == NONE_CUT | {
        "bad_request": 1.0, "over_limit": 2.0,
    }  # fmt: skip


def test_each_server_counts_in_its_own_cuts() -> None:
    a = HttpServer(ok, "127.0.0.1", 0)
    b = HttpServer(ok, "127.0.0.1", 0)
    assert a.cuts is not b.cuts
