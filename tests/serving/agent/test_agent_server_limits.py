"""What an unauthenticated or misbehaving peer can hold on the transfer port: the authenticated
peers served at once are bounded (the rest are refused as busy once their Hello is read), the
connections waiting for their Hello are a pool of their own where a new one closes the oldest
(of each at most a header and a 4 KiB Hello are taken from its socket, see
test_agent_transfer_auth_first.py), a peer that sends no complete Hello and request is answered
and cut off at the request timeout, and so is one that stops taking a pull's bytes (its handler
and the blocks it holds are not kept forever)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time

import pytest
from transfer_peer import TOKEN, until

from kvcast.serving.agent import Agent, HostBuffer, checksum
from kvcast.serving.agent.tcp_server import TransferServer, read_frame
from kvcast.serving.messages import (
    HEADER_SIZE,
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

HELLO = encode(Hello("raw-puller", TOKEN))
MiB = 1 << 20


def test_authenticated_peers_beyond_the_limit_are_refused_busy_once_their_hello_is_read(
    run, control_api, fill_agent, metric
) -> None:
    async def scenario() -> None:
        async with control_api(token=TOKEN, max_transfer_connections=2, request_timeout_s=2.0) as (
            api,
            control,
        ):
            agent = control.agent
            fill_agent(agent, "t", {1: 4096})
            host, _, port = agent.address.rpartition(":")
            holders = []
            for _ in range(2):  # authenticated, and then nothing more
                reader, writer = await asyncio.open_connection(host, int(port))
                writer.write(HELLO)
                holders.append((reader, writer))
            await until(lambda: agent.server.connections == 2)

            started = time.monotonic()
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(HELLO)
            busy = await read_frame(reader)
            assert isinstance(busy, Error) and busy.code is ErrorCode.BUSY, busy
            assert await reader.read() == b""  # closed
            assert time.monotonic() - started < 1.0  # at once, not at the request timeout (2 s)
            writer.close()
            assert agent.server.stats.busy_refused == 1

            for held, w in holders:  # answered at the request timeout, then closed
                err = await read_frame(held)
                assert isinstance(err, Error) and err.code is ErrorCode.BAD_REQUEST
                assert "no complete request within 2 s" in err.message, err.message
                assert await held.read() == b""
                w.close()
            await until(lambda: agent.server.connections == 0)

            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(HELLO + encode(PullRequest("c", "t", (1,))))
            mtype, _ = decode_header(await reader.readexactly(HEADER_SIZE))
            assert mtype is MsgType.BLOCK_HEADER  # served again once the others are gone
            writer.close()
            text = (await api.get("/metrics")).text
            assert metric(text, "kvcast_agent_transfer_busy_refusals_total") == 1

    run(scenario(), timeout=15.0)


def test_connections_that_send_no_hello_cannot_keep_out_a_peer_with_a_token(
    run, control_api, fill_agent, metric
) -> None:
    """Connections still waiting for their Hello are a pool of at most ``max_transfer_hellos``
    that takes none of the authenticated peers' slots, and a new connection always gets a
    place in it: while a flood of silent connections goes on (hundreds a second against a
    pool of 4), every pull of a peer with a token is served, and the flood closes only its
    own kind."""

    async def scenario() -> None:
        async with control_api(token=TOKEN, max_transfer_connections=2, max_transfer_hellos=4,
                               request_timeout_s=10.0) as (api, control):  # fmt: skip
            agent = control.agent
            fill_agent(agent, "t", {1: 4096})
            host, _, port = agent.address.rpartition(":")
            silent: list[asyncio.StreamWriter] = []
            flooding = True

            async def flood() -> None:
                while flooding:
                    silent.append((await asyncio.open_connection(host, int(port)))[1])
                    await asyncio.sleep(0.001)

            flooder = asyncio.create_task(flood())
            await until(lambda: agent.server.stats.hellos_dropped >= 20)
            for k in range(20):
                reader, writer = await asyncio.open_connection(host, int(port))
                writer.write(HELLO + encode(PullRequest(f"c{k}", "t", (1,))))
                mtype, _ = decode_header(await reader.readexactly(HEADER_SIZE))
                assert mtype is MsgType.BLOCK_HEADER, k  # served in the middle of the flood
                writer.close()
            flooding = False
            await flooder
            stats = agent.server.stats
            assert stats.pulls_served == 20 and stats.busy_refused == 0
            assert stats.hellos_dropped >= len(silent) - 4  # all but the pool's last four
            assert stats.bad_requests == 0  # a closed silent connection is not a bad request
            text = (await api.get("/metrics")).text
            assert metric(text, "kvcast_agent_transfer_hellos_dropped_total") >= 20
            for w in silent:
                w.close()

    run(scenario(), timeout=30.0)


@pytest.mark.parametrize("sent", [b"", b"\0", HELLO[:8]], ids=["nothing", "a byte", "part"])
def test_a_hello_in_before_a_burst_of_silent_connections_is_served(
    run, config, sent: bytes
) -> None:
    """A peer's Hello is in the kernel when the event loop, held up for a moment, accepts it
    together with a burst of connections that fill the pool, sending nothing, a byte or part
    of a Hello: its whole Hello waiting marks it as one to keep (the oldest of the others is
    closed instead), and its pull is served."""

    async def scenario() -> None:
        async with Agent(config(token=TOKEN, max_transfer_hellos=4)) as agent:
            agent.store.put("t", 1, HostBuffer.from_bytes(b"kv" * 50),
                            checksum(HostBuffer.from_bytes(b"kv" * 50).view()))  # fmt: skip
            host, _, port = agent.address.rpartition(":")
            peer = socket.create_connection((host, int(port)))
            peer.sendall(HELLO + encode(PullRequest("c", "t", (1,))))
            time.sleep(0.05)  # the loop held up: nothing accepted meanwhile
            burst = [socket.create_connection((host, int(port))) for _ in range(4)]
            for sock in burst:
                sock.sendall(sent)
            await until(lambda: agent.server.stats.pulls_served == 1)
            assert agent.server.stats.hellos_dropped == 1  # a silent one
            for sock in (peer, *burst):
                sock.close()

    run(scenario(), timeout=15.0)


def test_a_peer_that_stops_taking_bytes_is_cut_off_at_the_request_timeout(
    run, config, fill_agent
) -> None:
    async def scenario() -> None:
        async with Agent(config(token=TOKEN, request_timeout_s=0.3)) as agent:
            fill_agent(agent, "t", {1: 16 * MiB})
            host, _, port = agent.address.rpartition(":")
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window
            sock.setblocking(False)
            await asyncio.get_running_loop().sock_connect(sock, (host, int(port)))
            reader, writer = await asyncio.open_connection(sock=sock)
            writer.write(HELLO + encode(PullRequest("c", "t", (1,))))
            await writer.drain()
            # read nothing: the source's buffers fill and it can send no more
            await until(lambda: agent.server.stats.stalled == 1, timeout_s=5.0)
            assert agent.server.connections == 0  # the handler is gone
            got = b""
            try:
                while chunk := await reader.read(1 << 20):
                    got += chunk
            except ConnectionError:
                pass  # reset: what the kernel still held was dropped
            assert len(got) < 16 * MiB  # never the whole block, let alone the Done after it
            writer.close()
            assert agent.server.stats.blocks_sent == 0

    run(scenario(), timeout=15.0)


def test_the_connection_limit_is_the_agents_config() -> None:
    from kvcast.serving.agent import AgentConfig

    cfg = AgentConfig(capacity_bytes=MiB, speculative_quota_bytes=0)
    assert cfg.max_transfer_connections == 256
    agent = Agent(cfg.model_copy(update={"max_transfer_connections": 3}))
    assert agent.server.max_connections == 3


def _tight_buffers(server: TransferServer) -> list[tuple[str, int]]:
    """Give each pull ``server`` serves a 4 KiB send buffer (a busy link: the kernel then takes
    little of a reply, the transport keeps the rest) and record its close: ("closing", bytes
    the transport still holds), then ("closed", 0) once the close has ended."""
    send_block, close = server.send_block, server._close
    seen: list[tuple[str, int]] = []

    async def small_send_buffer(writer, *args):  # type: ignore[no-untyped-def]
        sock = writer.transport.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        await send_block(writer, *args)

    async def closing(writer):  # type: ignore[no-untyped-def]
        seen.append(("closing", writer.transport.get_write_buffer_size()))
        await close(writer)
        seen.append(("closed", 0))

    server.send_block, server._close = small_send_buffer, closing  # type: ignore[method-assign]
    return seen


async def _request(address: str, request: PullRequest) -> socket.socket:
    """A raw puller with a 4 KiB receive buffer that has sent its Hello and ``request`` and
    read nothing."""
    host, _, port = address.rpartition(":")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(sock, (host, int(port)))
    await loop.sock_sendall(sock, HELLO + encode(request))
    return sock


async def _read_all(sock: socket.socket) -> bytes:
    got = bytearray()
    with contextlib.suppress(ConnectionError):
        while chunk := await asyncio.get_running_loop().sock_recv(sock, 1 << 20):
            got += chunk
    return bytes(got)


def test_a_done_is_still_delivered_after_a_normal_pull(run, config, fill_agent) -> None:
    """The bounded close does not cut the last frames short: a puller that takes them only
    once the source is closing (well within the request timeout) still gets the whole block
    and the Done, though the source's transport still held part of them when it closed (with
    the kernel taking it all, a close that dropped what the transport holds would pass too)."""

    async def scenario() -> None:
        async with Agent(config(token=TOKEN, request_timeout_s=5.0)) as agent:
            source = fill_agent(agent, "t", {1: 48 << 10})
            seen = _tight_buffers(agent.server)
            sock = await _request(agent.address, PullRequest("c", "t", (1, 2)))
            try:
                await until(lambda: bool(seen))  # nothing read until the source closes
                got = await _read_all(sock)
            finally:
                sock.close()
            assert seen[0][1] > 0, "the source's transport held nothing when it closed"
            frames, at = [], 0
            while at < len(got):
                mtype, length = decode_header(got[at : at + HEADER_SIZE])
                msg = decode_body(mtype, got[at + HEADER_SIZE : at + HEADER_SIZE + length])
                at += HEADER_SIZE + length
                frames.append(msg)
                if isinstance(msg, BlockHeader):
                    assert got[at : at + msg.nbytes] == source[1]
                    at += msg.nbytes
            assert [type(f) for f in frames] == [BlockHeader, Done], frames
            assert frames[-1] == Done("c", 1, (2,))

    run(scenario(), timeout=15.0)


def test_a_peer_that_never_takes_the_last_bytes_is_cut_off_at_close(
    run, config, fill_agent
) -> None:
    """The close is bounded too: a puller that stops reading once the pull is written leaves
    the source's handler (its socket, the bytes it holds) for the request timeout, not for
    ever; what it never took is dropped."""

    async def scenario() -> None:
        async with Agent(config(token=TOKEN, request_timeout_s=0.3)) as agent:
            fill_agent(agent, "t", {1: 48 << 10})
            seen = _tight_buffers(agent.server)
            sock = await _request(agent.address, PullRequest("c", "t", (1,)))
            try:
                await until(lambda: ("closed", 0) in seen, timeout_s=5.0)
                got = await _read_all(sock)
            finally:
                sock.close()
            assert seen[0][1] > 0, "the source's transport held nothing when it closed"
            assert not got.endswith(encode(Done("c", 1, ())))  # cut off: the tail never came

    run(scenario(), timeout=15.0)


def test_a_pull_refused_busy_is_retried_and_lands_once_the_source_has_room(
    run, config, fill_agent
) -> None:
    async def scenario() -> None:
        async with (
            Agent(config(token=TOKEN, max_transfer_connections=1)) as src,
            Agent(config(token=TOKEN, max_retries=20)) as dst,
        ):
            source = fill_agent(src, "t", {1: 4096})
            host, _, port = src.address.rpartition(":")
            _, holder = await asyncio.open_connection(host, int(port))
            holder.write(HELLO)  # authenticated, then holding its slot
            await until(lambda: src.server.connections == 1)
            asyncio.get_running_loop().call_later(0.3, holder.close)
            result = await dst.pull(src.address, [1], "t", time.monotonic() + 5.0)
            assert result.ok and result.attempts > 1, result
            assert src.server.stats.busy_refused >= 1
            held = dst.store.peek("t", 1)
            assert held is not None and bytes(held.buffer.view()) == source[1]

    run(scenario(), timeout=15.0)


def test_a_slow_peer_that_keeps_taking_bytes_is_not_cut_off(run, config, fill_agent) -> None:
    """The source's timeout is on progress, not on a whole block: a rate-limited puller
    taking 8 MiB over about 2 s from a source with a 0.8 s request timeout gets it all (the
    margin: a loaded test machine may hold the event loop up for a while)."""

    async def scenario() -> None:
        async with (
            Agent(config(token=TOKEN, request_timeout_s=0.8)) as src,
            Agent(config(token=TOKEN, link_bytes_per_s=4 * MiB, link_burst_bytes=64 << 10)) as dst,
        ):
            source = fill_agent(src, "t", {1: 8 * MiB})
            started = time.monotonic()
            result = await dst.pull(src.address, [1], "t", time.monotonic() + 10.0)
            assert result.ok and result.attempts == 1, result
            assert time.monotonic() - started > 1.0  # it was slow
            assert src.server.stats.stalled == 0
            held = dst.store.peek("t", 1)
            assert held is not None and bytes(held.buffer.view()) == source[1]

    run(scenario(), timeout=15.0)
