"""The transfer server answers malformed or unexpected input with one Error frame and a count."""

from __future__ import annotations

import asyncio

import pytest

from kvcast.serving.agent import BlockStore, TransferServer
from kvcast.serving.messages import Done, Error, ErrorCode, decode_body, decode_header, encode


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
    "payload",
    [b"GET / HTTP/1.1\r\n\r\n" + b"\x00" * 8, encode(Done("c", 0)), b"KVCT\x01\x01\x00\x00"],
    ids=["garbage", "wrong-message", "truncated"],
)
def test_bad_request_gets_a_bad_request_error_and_is_counted(run, payload: bytes) -> None:
    async def scenario() -> None:
        # a truncated request is detected by the request timeout
        reply, server = await exchange(payload, timeout_s=0.2)
        assert isinstance(reply, Error) and reply.code is ErrorCode.BAD_REQUEST
        assert server.stats.bad_requests == 1

    run(scenario())
