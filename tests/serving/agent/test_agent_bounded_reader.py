"""The bounded reader takes from a peer's socket only its lookahead, or what it was asked for
when that is more (a real loopback socket): the rest waits in the kernel, and reads return
exactly the bytes asked for, in order, across pauses."""

from __future__ import annotations

import asyncio

from kvcast.serving.agent.bounded_reader import BoundedReader, PeerProtocol

LOOKAHEAD = 16


async def _serve(handler) -> tuple[asyncio.AbstractServer, int]:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: PeerProtocol(handler, LOOKAHEAD), "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def test_the_reader_takes_its_lookahead_then_what_it_is_asked_for_and_no_more() -> None:
    data = bytes(range(256)) * 4096  # 1 MiB, a recognisable sequence
    taken: list[int] = []
    got: list[bytes] = []
    done = asyncio.Event()

    async def handler(reader: BoundedReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(0.2)  # the peer has sent all it can meanwhile
        taken.append(len(reader._buffer))  # taken from the socket, not yet read
        got.append(await reader.readexactly(4))
        got.append(await reader.readexactly(1000))
        await asyncio.sleep(0.1)
        taken.append(len(reader._buffer))
        got.append(await reader.readexactly(len(data) - 1004))
        writer.close()
        done.set()

    async def main() -> None:
        server, port = await _serve(handler)
        _, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(data)
        await asyncio.wait_for(done.wait(), 20.0)
        w.close()
        server.close()

    asyncio.run(main())
    assert taken == [LOOKAHEAD, 0]  # the lookahead; then exactly the 1000 bytes asked for
    assert b"".join(got) == data


def test_a_read_past_the_peers_end_raises_incomplete_read_with_what_came() -> None:
    errors: list[asyncio.IncompleteReadError] = []
    done = asyncio.Event()

    async def handler(reader: BoundedReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readexactly(10)
        except asyncio.IncompleteReadError as err:
            errors.append(err)
        writer.close()
        done.set()

    async def main() -> None:
        server, port = await _serve(handler)
        _, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(b"abc")
        w.write_eof()
        await asyncio.wait_for(done.wait(), 10.0)
        w.close()
        server.close()

    asyncio.run(main())
    assert [(e.partial, e.expected) for e in errors] == [(b"abc", 10)]
