"""The transfer server answers malformed or unexpected input with one Error frame and a count."""

from __future__ import annotations

import asyncio
import socket
import struct

import pytest

from kvcast.serving.agent import BlockStore, TransferServer
from kvcast.serving.messages import (
    Done,
    Error,
    ErrorCode,
    Hello,
    PullRequest,
    decode_body,
    decode_header,
    encode,
)

HELLO = encode(Hello("n", ""))


async def exchange(payload: bytes, timeout_s: float = 10.0) -> tuple[object, TransferServer]:
    server = TransferServer(BlockStore(1 << 20, 0), request_timeout_s=timeout_s)
    host, _, port = (await server.start()).rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(payload)
    await writer.drain()
    header = await reader.readexactly(12)
    mtype, length = decode_header(header)
    reply = decode_body(mtype, await reader.readexactly(length))
    writer.close()
    await server.stop()
    return reply, server


@pytest.mark.parametrize(
    "payload, reason",
    [
        (b"GET / HTTP/1.1\r\n\r\n" + b"\x00" * 8, "magic"),
        (encode(Done("c", 0)), "expected a Hello first"),
        (encode(PullRequest("c", "t", (1,))), "expected a Hello first"),
        (HELLO + encode(Done("c", 0)), "expected a PullRequest"),
        (HELLO + HELLO, "expected a PullRequest"),
        (b"KVCT\x02\x05\x00\x00", "no complete request"),
        (HELLO + b"KVCT\x02\x01\x00\x00", "no complete request"),
        (b"", "no complete request"),
    ],
    ids=[
        "garbage", "wrong-message", "request-before-hello", "wrong-message-after-hello",
        "two-hellos", "truncated-hello", "truncated-request", "silent",
    ],
)  # fmt: skip
def test_bad_request_gets_a_bad_request_error_and_is_counted(
    run, payload: bytes, reason: str
) -> None:
    async def scenario() -> None:
        # a truncated (or absent) Hello or request is detected by the request timeout
        reply, server = await exchange(payload, timeout_s=0.2)
        assert isinstance(reply, Error) and reply.code is ErrorCode.BAD_REQUEST
        assert reason in reply.message, reply.message
        assert server.stats.bad_requests == 1

    run(scenario())


def test_stopping_with_a_pull_in_progress_reports_no_error(run) -> None:
    """Stopping the server aborts the pulls it is serving; that is the stop working, not an
    error: the event loop's exception handler (which asyncio's stream callback reaches with a
    CancelledError traceback on Python 3.11 when a handler task ends cancelled) is not called,
    and the aborted pull is counted."""

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        errors: list[dict] = []
        loop.set_exception_handler(lambda _loop, context: errors.append(context))
        server = TransferServer(BlockStore(1 << 20, 0), request_timeout_s=30.0)
        host, _, port = (await server.start()).rpartition(":")
        _reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"KVCT")  # a request's first bytes: the handler waits for the rest
        await writer.drain()
        await asyncio.sleep(0.05)
        await server.stop()
        await asyncio.sleep(0.05)  # let the stream callback run
        writer.close()
        assert errors == [], errors
        assert server.stats.aborted == 1

    run(scenario())


@pytest.mark.parametrize(
    "payload",
    [b"", HELLO[:7], HELLO[:-1], HELLO + encode(PullRequest("c", "t", (1,)))[:-1]],
    ids=["nothing", "part-of-a-header", "part-of-a-hello", "part-of-a-request"],
)
def test_a_peer_that_ends_its_stream_mid_frame_is_answered_at_once_as_a_bad_request(
    run, payload: bytes
) -> None:
    """Its end of stream ends the server's read (it does not wait for the request timeout)."""

    async def scenario() -> None:
        server = TransferServer(BlockStore(1 << 20, 0), request_timeout_s=30.0)
        host, _, port = (await server.start()).rpartition(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(payload)
        writer.write_eof()
        async with asyncio.timeout(2.0):  # not the 30 s request timeout
            mtype, length = decode_header(await reader.readexactly(12))
            reply = decode_body(mtype, await reader.readexactly(length))
        assert isinstance(reply, Error) and reply.code is ErrorCode.BAD_REQUEST, reply
        writer.close()
        await server.stop()
        assert server.stats.bad_requests == 1

    run(scenario())


def test_a_peer_that_resets_mid_frame_is_counted_as_aborted(run) -> None:
    async def scenario() -> None:
        server = TransferServer(BlockStore(1 << 20, 0), request_timeout_s=30.0)
        host, _, port = (await server.start()).rpartition(":")
        sock = socket.create_connection((host, int(port)))
        sock.sendall(HELLO[:-1])
        await asyncio.sleep(0.05)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()  # with a zero linger: a reset
        async with asyncio.timeout(2.0):  # not the 30 s request timeout
            while not server.stats.aborted:
                await asyncio.sleep(0.01)
        assert server.stats.bad_requests == 0 and server.connections == 0
        await server.stop()

    run(scenario())
