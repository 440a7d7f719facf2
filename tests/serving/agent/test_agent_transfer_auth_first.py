"""Protocol version 2 on real loopback sockets: a transfer server checks a peer's token (its
Hello, at most 4 KiB, bounded from the frame header) before it reads any pull request; a peer
of protocol version 1 is refused at once in a frame it can read, saying which side to upgrade,
whichever side it is; and an authenticated pull still moves its bytes byte-identical."""

from __future__ import annotations

import asyncio
import logging
import time

from kvcast.serving.agent import Agent, BlockStore, PullStatus, TransferServer
from kvcast.serving.messages import (
    HEADER,
    HEADER_SIZE,
    MAGIC,
    MAX_BODY,
    MAX_HELLO_BODY,
    VERSION,
    BlockHeader,
    Done,
    Error,
    ErrorCode,
    Hello,
    MsgType,
    PullRequest,
    decode_body,
    decode_header,
    encode,
)

TOKEN = "transfer-token"
SERVER_LOG = "kvcast.serving.agent.tcp_server"


class _CountingReader:
    """A stream reader that counts the bytes its user took."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader, self.taken = reader, 0

    async def readexactly(self, n: int) -> bytes:
        data = await self._reader.readexactly(n)
        self.taken += len(data)
        return data


class CountingServer(TransferServer):
    """Records, per connection, how many bytes the server took from its peer."""

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.taken: list[int] = []

    async def _converse(self, reader, writer) -> None:  # type: ignore[no-untyped-def]
        counting = _CountingReader(reader)
        try:
            await super()._converse(counting, writer)  # type: ignore[arg-type]
        finally:
            self.taken.append(counting.taken)


async def until(condition, timeout_s: float = 3.0) -> None:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.01)


async def counting_server(token: str | None = TOKEN, timeout_s: float = 5.0) -> CountingServer:
    server = CountingServer(BlockStore(1 << 20, 0), token, request_timeout_s=timeout_s)
    await server.start()
    return server


async def send(address: str, payload: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, _, port = address.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(payload)
    await writer.drain()
    return reader, writer


async def reply(reader: asyncio.StreamReader) -> object:
    mtype, length = decode_header(await reader.readexactly(HEADER_SIZE))
    return decode_body(mtype, await reader.readexactly(length))


async def closed(reader: asyncio.StreamReader) -> bool:
    try:
        return await reader.read() == b""
    except ConnectionError:
        return True  # reset: the source closed with the peer's unread bytes still queued


def test_a_bad_token_is_refused_before_any_of_the_pull_request_is_read(
    run, config, fill_agent, caplog
) -> None:
    """A real puller writes its Hello and a request of 8192 hashes (~74 KB) in one send; the
    source takes the Hello's bytes alone, refuses it, and the puller still reads the refusal
    (not a reset) on its first attempt. The source logs the node the Hello names."""

    async def scenario() -> None:
        src = Agent(config(token=TOKEN))
        src.server = CountingServer(src.store, TOKEN, request_timeout_s=5.0)
        async with src, Agent(config(token="wrong", node_id="intruder")) as bad:
            fill_agent(src, "t", {1: 4096})
            deadline = time.monotonic() + 3.0
            result = await bad.pull(src.address, range(1, 8193), "t", deadline)
            assert result.status is PullStatus.REFUSED and result.attempts == 1, result
            assert "UNAUTHORIZED" in result.error
            await until(lambda: bool(src.server.taken))
            assert src.server.taken == [len(encode(Hello("intruder", "wrong")))]
            stats = src.server.stats
            assert stats.auth_refused == 1 and stats.bad_requests == 0 and stats.blocks_sent == 0
        logged = [r.getMessage() for r in caplog.records if r.name == SERVER_LOG]
        assert len(logged) == 1 and "node 'intruder'" in logged[0], logged
        assert "bad token" in logged[0] and "wrong" not in logged[0]  # never the token

    caplog.set_level(logging.WARNING, logger=SERVER_LOG)
    run(scenario(), timeout=10.0)


def test_a_bad_hello_alone_is_refused_at_once_without_waiting_for_a_request(run) -> None:
    async def scenario() -> None:
        server = await counting_server(timeout_s=5.0)
        try:
            for token in ("wrong", ""):
                started = time.monotonic()
                reader, writer = await send(server.address, encode(Hello("n", token)))
                refused = await reply(reader)
                assert isinstance(refused, Error) and refused.code is ErrorCode.UNAUTHORIZED
                assert time.monotonic() - started < 1.0  # not at the request timeout (5 s)
                assert await closed(reader)
                writer.close()
            assert server.stats.auth_refused == 2
        finally:
            await server.stop()

    run(scenario(), timeout=10.0)


def test_a_header_announcing_a_large_hello_is_cut_from_the_header_alone(run) -> None:
    """Neither a body over the Hello limit nor any other first frame is read: the peer is
    answered from the 12 header bytes, at once."""

    async def scenario() -> None:
        server = await counting_server(timeout_s=5.0)
        try:
            for mtype, length, reason in (
                (MsgType.HELLO, MAX_HELLO_BODY + 1, f"exceeds {MAX_HELLO_BODY}"),
                (MsgType.HELLO, MAX_BODY, f"exceeds {MAX_HELLO_BODY}"),
                (MsgType.PULL_REQUEST, MAX_BODY, "expected a Hello first"),
            ):
                started = time.monotonic()
                header = HEADER.pack(MAGIC, VERSION, mtype, 0, length)
                reader, writer = await send(server.address, header + b"\0" * (64 << 10))
                refused = await reply(reader)
                assert isinstance(refused, Error) and refused.code is ErrorCode.BAD_REQUEST
                assert reason in refused.message, refused.message
                assert time.monotonic() - started < 1.0
                assert await closed(reader)
                writer.close()
            await until(lambda: len(server.taken) == 3)
            assert server.taken == [HEADER_SIZE] * 3
            assert server.stats.bad_requests == 3 and server.stats.auth_refused == 0
        finally:
            await server.stop()

    run(scenario(), timeout=10.0)


def _v1_pull_request(command_id: str, tenant: str, hashes: tuple[int, ...], token: str) -> bytes:
    """The frame a version-1 puller sends: version 1 in the header, the token last."""
    body = encode(PullRequest(command_id, tenant, hashes))[HEADER_SIZE:]
    body += len(token.encode()).to_bytes(2, "big") + token.encode()
    return HEADER.pack(MAGIC, 1, MsgType.PULL_REQUEST, 0, len(body)) + body


async def _v1_reply(reader: asyncio.StreamReader) -> Error:
    """Read a reply as a version-1 puller does: it accepts only version-1 headers."""
    magic, version, mtype, flags, length = HEADER.unpack(await reader.readexactly(HEADER_SIZE))
    assert (magic, version, mtype, flags) == (MAGIC, 1, MsgType.ERROR, 0)
    refused = decode_body(MsgType.ERROR, await reader.readexactly(length))  # same body in v1
    assert isinstance(refused, Error)
    return refused


def test_a_version_1_puller_is_refused_in_a_frame_it_reads_saying_it_must_be_upgraded(
    run, control_api, metric, caplog
) -> None:
    """Version 1 is refused, not served: no rolling upgrade across versions. The old puller
    reads a version-1 Error (BAD_REQUEST: final for it, not retried) at once; the source takes
    the header alone, counts the refusal in its metrics and logs it, once a period."""

    async def scenario() -> None:
        async with control_api(token=TOKEN, request_timeout_s=5.0) as (api, control):
            src = control.agent
            await src.server.stop()  # served again by a server that counts what it reads
            src.server = server = CountingServer(src.store, TOKEN, request_timeout_s=5.0)
            await server.start()
            for _ in range(2):
                started = time.monotonic()
                frame = _v1_pull_request("c", "t", tuple(range(1, 2000)), TOKEN)
                reader, writer = await send(server.address, frame)
                refused = await _v1_reply(reader)
                assert time.monotonic() - started < 1.0  # not a hang to the request timeout
                assert refused.code is ErrorCode.BAD_REQUEST
                assert refused.message == (
                    f"this source speaks kvcast transfer protocol version {VERSION}; the puller "
                    "speaks version 1 and must be upgraded"
                )
                assert await closed(reader)
                writer.close()
            await until(lambda: len(server.taken) == 2)
            assert server.taken == [HEADER_SIZE, HEADER_SIZE]
            stats = server.stats
            assert stats.version_refused == 2 and stats.bad_requests == stats.auth_refused == 0
            text = (await api.get("/metrics")).text
            assert metric(text, "kvcast_agent_transfer_version_refusals_total") == 2
            await server.stop()
        logged = [r.getMessage() for r in caplog.records if r.name == SERVER_LOG]
        assert len(logged) == 1 and "must be upgraded" in logged[0], logged

    caplog.set_level(logging.WARNING, logger=SERVER_LOG)
    run(scenario(), timeout=10.0)


def test_a_pull_from_a_version_1_source_is_refused_saying_the_source_must_be_upgraded(
    run, config
) -> None:
    """A version-1 source answers a version-2 Hello with a version-1 Error (its decoder refuses
    the header): the puller reports that, once, as a refusal naming the version to upgrade,
    not as a bad frame to retry."""
    seen: list[bytes] = []

    async def v1_source(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await reader.readexactly(HEADER_SIZE))
        why = encode(Error(ErrorCode.BAD_REQUEST, "", "bad header: version 2"))[HEADER_SIZE:]
        writer.write(HEADER.pack(MAGIC, 1, MsgType.ERROR, 0, len(why)) + why)
        await writer.drain()
        writer.close()

    async def scenario() -> None:
        source = await asyncio.start_server(v1_source, "127.0.0.1", 0)
        port = source.sockets[0].getsockname()[1]
        try:
            async with Agent(config(token=TOKEN, max_retries=3)) as dst:
                result = await dst.pull(f"127.0.0.1:{port}", [1], "t", time.monotonic() + 3)
            assert result.status is PullStatus.REFUSED and result.attempts == 1, result
            assert "the source speaks kvcast transfer protocol version 1" in result.error
            assert "upgrade the source" in result.error
            assert dst.client.stats.refused == 1
            assert len(seen) == 1 and seen[0][4] == VERSION  # the Hello's header
        finally:
            source.close()
            await source.wait_closed()

    run(scenario(), timeout=10.0)


def test_an_authenticated_raw_puller_gets_its_blocks_byte_identical(
    run, config, fill_agent
) -> None:
    """The wire order, from a raw socket: Hello, then PullRequest, in; each block's header and
    exact bytes, then Done (listing what the source lacks), out."""

    async def scenario() -> None:
        async with Agent(config(token=TOKEN)) as src:
            source = fill_agent(src, "t", {1: 1, 2: 300 << 10, 3: (4 << 20) + 7})
            request = encode(Hello("raw", TOKEN)) + encode(PullRequest("c", "t", (3, 9, 1, 2)))
            reader, writer = await send(src.address, request)
            got: dict[int, bytes] = {}
            while not isinstance(msg := await reply(reader), Done):
                assert isinstance(msg, BlockHeader), msg
                got[msg.block_hash] = await reader.readexactly(msg.nbytes)
            writer.close()
            assert msg == Done("c", 3, (9,))
            assert got == source and list(got) == [3, 1, 2]
            assert src.server.stats.pulls_served == 1 and src.server.stats.auth_refused == 0

    run(scenario(), timeout=10.0)
