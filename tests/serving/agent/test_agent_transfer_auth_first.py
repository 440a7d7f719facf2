"""Protocol version 2 on real loopback sockets: a transfer server checks a peer's token (its
Hello, at most 4 KiB, bounded from the frame header) before it reads any pull request, and
takes from the socket of a peer it has not authenticated at most a header and a Hello's worth
of bytes (HEADER_SIZE + MAX_HELLO_BODY), of one it has no more than that or its Hello and
request, however much the peer sends (the rest waits in the kernel until TCP flow control stops
the peer); a peer of protocol version 1 is refused at once in a frame it can read, saying which
side to upgrade, whichever side it is; and an authenticated pull still moves its bytes
byte-identical.

What the server took is measured from the kernel (Linux), not from the server's own reads: the
bytes its socket received less those still queued on it."""

from __future__ import annotations

import asyncio
import fcntl
import logging
import socket
import struct
import sys
import termios
import time
from pathlib import Path
from typing import Any

import pytest
from transfer_peer import TOKEN, until

from kvcast.serving.agent import Agent, BlockStore, PullStatus, TransferServer
from kvcast.serving.agent.tcp_server import read_frame
from kvcast.serving.agent.tcp_transport import TcpTransport
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

HELLO_WORTH = HEADER_SIZE + MAX_HELLO_BODY  # all a source takes of a peer before its token
SERVER_LOG = "kvcast.serving.agent.tcp_server"
pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="counts from Linux's tcp_info")


def taken_from(sock: Any) -> int:
    """Bytes the process has taken from the TCP socket ``sock`` (whatever it did with them):
    the bytes the socket received (``tcpi_bytes_received``) less those still queued on it."""
    while True:  # the two counts, read again until no byte arrived in between
        queued = struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0" * 4))[0]
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
        received = struct.unpack_from("=Q", info, 128)[0]  # struct tcp_info, Linux >= 4.1
        again = struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0" * 4))[0]
        if again == queued:
            return received - queued


class CountingServer(TransferServer):
    """Records how many bytes of its peer the server had taken from the socket when it answered
    (an error, or the pull it serves). With ``hold`` set, each connection waits for it before
    the server reads anything: a peer's bytes pile up first, as on a busy event loop."""

    def __init__(self, *args, hold: asyncio.Event | None = None, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.hold = hold
        self.taken: list[int] = []

    async def _converse(self, reader, writer, task) -> None:  # type: ignore[no-untyped-def]
        if self.hold is not None:
            await self.hold.wait()
        await super()._converse(reader, writer, task)

    async def _serve(self, request, writer) -> None:  # type: ignore[no-untyped-def]
        self.taken.append(taken_from(writer.get_extra_info("socket")))
        await super()._serve(request, writer)

    async def _send_error(self, writer, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        self.taken.append(taken_from(writer.get_extra_info("socket")))
        await super()._send_error(writer, *args, **kwargs)


async def counting_server(
    token: str | None = TOKEN, timeout_s: float = 5.0, hold: asyncio.Event | None = None
) -> CountingServer:
    server = CountingServer(BlockStore(1 << 20, 0), token, request_timeout_s=timeout_s, hold=hold)
    await server.start()
    return server


async def send(address: str, payload: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, _, port = address.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(payload)
    await writer.drain()
    return reader, writer


async def closed(reader: asyncio.StreamReader) -> bool:
    try:
        return await reader.read() == b""
    except ConnectionError:
        return True  # reset: the source closed with the peer's unread bytes still queued


def test_a_bad_token_is_refused_before_any_of_the_pull_request_is_read(
    run, config, fill_agent, caplog
) -> None:
    """A real puller writes its Hello and a request of 8192 hashes (~74 KB) in one send; the
    source takes a Hello's worth of those bytes from its socket, parses the Hello alone and
    refuses it, and the puller still reads the refusal on its first attempt (the source closes
    with most of the request unread: the refusal arrives before the reset). The source logs
    the node the Hello names."""

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
            assert src.server.taken == [HELLO_WORTH]
            stats = src.server.stats
            assert stats.auth_refused == 1 and stats.bad_requests == 0 and stats.blocks_sent == 0
        logged = [r.getMessage() for r in caplog.records if r.name == SERVER_LOG]
        assert len(logged) == 1 and "node 'intruder'" in logged[0], logged
        assert "bad token" in logged[0] and "wrong" not in logged[0]  # never the token

    caplog.set_level(logging.WARNING, logger=SERVER_LOG)
    run(scenario(), timeout=10.0)


def test_over_mutual_tls_a_bad_token_is_refused_and_a_good_one_served(
    run, config, fill_agent, tmp_path: Path
) -> None:
    """The same reads under asyncio's TLS layer: a puller with the cluster's certificate but a
    wrong token is refused on its first attempt (its request unread), one with the token is
    served."""
    pytest.importorskip("cryptography")
    from kvcast.serving.cluster.certs import make_cluster_certs

    tls = make_cluster_certs(tmp_path, ["a", "b", "c"])

    async def scenario() -> None:
        src = Agent(config(token=TOKEN), tls=tls["a"])
        src.server = CountingServer(
            src.store, TOKEN, request_timeout_s=5.0, ssl_context=tls["a"].server_context()
        )
        async with src, Agent(config(token="wrong", node_id="intruder"), tls=tls["b"]) as bad:
            source = fill_agent(src, "t", {1: 300 << 10})
            result = await bad.pull(src.address, range(1, 8193), "t", time.monotonic() + 3)
            assert result.status is PullStatus.REFUSED and result.attempts == 1, result
            async with Agent(config(token=TOKEN), tls=tls["c"]) as good:
                result = await good.pull(src.address, [1], "t", time.monotonic() + 3)
                assert result.ok, result
                assert bytes(good.store.peek("t", 1).buffer.view()) == source[1]
            assert src.server.stats.auth_refused == 1 and src.server.stats.pulls_served == 1

    run(scenario(), timeout=15.0)


@pytest.mark.parametrize("token", ["T" * 70000, "T" * MAX_HELLO_BODY])
def test_a_token_too_long_to_send_is_refused_without_showing_it(token: str) -> None:
    with pytest.raises(ValueError) as refused:
        TcpTransport(token=token, node_id="n")
    assert "TTTT" not in str(refused.value) and len(str(refused.value)) < 120, refused.value


def test_a_bad_hello_alone_is_refused_at_once_without_waiting_for_a_request(run) -> None:
    async def scenario() -> None:
        server = await counting_server(timeout_s=5.0)
        try:
            for token in ("wrong", ""):
                started = time.monotonic()
                reader, writer = await send(server.address, encode(Hello("n", token)))
                refused = await read_frame(reader)
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
                refused = await read_frame(reader)
                assert isinstance(refused, Error) and refused.code is ErrorCode.BAD_REQUEST
                assert reason in refused.message, refused.message
                assert time.monotonic() - started < 1.0
                assert await closed(reader)
                writer.close()
            await until(lambda: len(server.taken) == 3)
            assert server.taken == [HELLO_WORTH] * 3  # of the 64 KiB sent
            assert server.stats.bad_requests == 3 and server.stats.auth_refused == 0
        finally:
            await server.stop()

    run(scenario(), timeout=10.0)


async def flood(peer: socket.socket, data: bytes) -> int:
    """Send ``data`` on the non-blocking ``peer`` until the kernel takes none of it for 50 ms
    (the receiver's buffers are full); the bytes sent."""
    view, sent, idle = memoryview(data), 0, 0
    while idle < 10 and sent < len(view):
        try:
            sent += peer.send(view[sent : sent + (1 << 20)])
            idle = 0
        except BlockingIOError:
            idle += 1
            await asyncio.sleep(0.005)
    return sent


async def raw_peer(address: str) -> socket.socket:
    host, _, port = address.rpartition(":")
    peer = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    peer.setblocking(False)
    await asyncio.get_running_loop().sock_connect(peer, (host, int(port)))
    return peer


async def raw_reply(peer: socket.socket) -> object:
    loop, got = asyncio.get_running_loop(), b""

    async def take(n: int) -> bytes:
        nonlocal got
        while len(got) < n:
            chunk = await loop.sock_recv(peer, n - len(got))
            assert chunk, "closed before a whole frame"
            got += chunk
        data, got = got[:n], got[n:]
        return data

    mtype, length = decode_header(await take(HEADER_SIZE))
    return decode_body(mtype, await take(length))


FLOOD = bytes(64 << 20)
LARGEST_HELLO = encode(Hello("n", "t" * (MAX_HELLO_BODY - 5)))


@pytest.mark.parametrize(
    "first, answer",
    [
        (encode(Hello("n", "t" * (MAX_HELLO_BODY - 5))), ErrorCode.UNAUTHORIZED),  # the largest
        (encode(Hello("n", "wrong")), ErrorCode.UNAUTHORIZED),
        # a header announcing a Hello: its 4 KiB body is the flood's first zeros (not a Hello)
        (HEADER.pack(MAGIC, VERSION, MsgType.HELLO, 0, MAX_HELLO_BODY), ErrorCode.BAD_REQUEST),
        (HEADER.pack(MAGIC, VERSION, MsgType.PULL_REQUEST, 0, MAX_BODY), ErrorCode.BAD_REQUEST),
        (HEADER.pack(MAGIC, 1, MsgType.PULL_REQUEST, 0, MAX_BODY), None),
    ],
    ids=["largest-bad-hello", "bad-hello", "garbage-hello", "no-hello", "version-1"],
)
def test_of_a_peer_flooding_after_a_bad_or_missing_hello_the_server_holds_a_hellos_worth(
    run, first: bytes, answer: ErrorCode | None
) -> None:
    """The peer sends its first frame and all it can of 64 MiB more before the server reads a
    byte: TCP flow control stops it with megabytes sent, of which the server, when it answers,
    has taken from its socket a header and a Hello's worth (HEADER_SIZE + MAX_HELLO_BODY), not
    the 100s of KiB an asyncio stream reader takes ahead of its reads. The peer still gets the
    answer."""

    async def scenario() -> None:
        hold = asyncio.Event()
        server = await counting_server(hold=hold)
        peer = await raw_peer(server.address)
        try:
            sent = await flood(peer, first + FLOOD)
            assert 1 << 20 < sent < len(first + FLOOD)  # megabytes in the kernel, then stopped
            hold.set()
            if answer is None:  # a version-1 peer: answered in a version-1 Error
                await until(lambda: server.stats.version_refused == 1)
            else:
                refused = await raw_reply(peer)
                assert isinstance(refused, Error) and refused.code is answer, refused
            assert server.taken == [HELLO_WORTH]
        finally:
            peer.close()
            await server.stop()

    run(scenario(), timeout=15.0)


@pytest.mark.parametrize("hashes", [2, 2000], ids=["small-request", "request-over-4-KiB"])
def test_an_authenticated_peer_is_read_up_to_its_request_and_no_further(run, hashes: int) -> None:
    """After its Hello and request a peer sends all it can of 64 MiB more: the server takes
    from its socket a Hello's worth of bytes or, when they are longer, its Hello and request,
    and serves the pull, never taking what follows."""

    async def scenario() -> None:
        hold = asyncio.Event()
        server = await counting_server(hold=hold)
        peer = await raw_peer(server.address)
        try:
            request = PullRequest("c", "t", tuple(range(1, hashes + 1)))
            frames = encode(Hello("n", TOKEN)) + encode(request)
            assert await flood(peer, frames + FLOOD) > len(frames) + (1 << 20)
            hold.set()
            assert await raw_reply(peer) == Done("c", 0, request.block_hashes)
            assert server.taken == [max(HELLO_WORTH, len(frames))]
        finally:
            peer.close()
            await server.stop()

    run(scenario(), timeout=15.0)


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


def test_a_version_1_puller_is_refused_in_a_frame_it_reads_saying_to_upgrade_it(
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
                    f"the source speaks kvcast transfer protocol version {VERSION}, the puller "
                    "version 1: upgrade the puller"
                )
                assert await closed(reader)
                writer.close()
            await until(lambda: len(server.taken) == 2)
            assert server.taken == [HELLO_WORTH] * 2  # of its ~18 KB request
            stats = server.stats
            assert stats.version_refused == 2 and stats.bad_requests == stats.auth_refused == 0
            text = (await api.get("/metrics")).text
            assert metric(text, "kvcast_agent_transfer_version_refusals_total") == 2
            await server.stop()
        logged = [r.getMessage() for r in caplog.records if r.name == SERVER_LOG]
        assert len(logged) == 1 and "upgrade the puller" in logged[0], logged

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
            while not isinstance(msg := await read_frame(reader), Done):
                assert isinstance(msg, BlockHeader), msg
                got[msg.block_hash] = await reader.readexactly(msg.nbytes)
            writer.close()
            assert msg == Done("c", 3, (9,))
            assert got == source and list(got) == [3, 1, 2]
            assert src.server.stats.pulls_served == 1 and src.server.stats.auth_refused == 0

    run(scenario(), timeout=10.0)
