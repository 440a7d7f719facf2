"""The engine's keep-alive HTTP/1.1 client: one request per write, ``Content-Length``
answers, a closed keep-alive connection retried once on a fresh one, and refusals (no
server, not HTTP, a header that could end the head early) as one clear error."""

from __future__ import annotations

import asyncio

import pytest

from kvcast.serving.cluster.engine_http import EngineHttp, EngineHttpError
from kvcast.serving.cluster.ports import free_ports


async def _server(answer: bytes, *, close_after: bool) -> tuple[asyncio.Server, list[bytes]]:
    """A loopback server answering every request with ``answer``; ``close_after``: then it
    drops the connection without saying so (as a keep-alive timeout does)."""
    heads: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)  # fmt: skip
                await reader.readexactly(length)
                heads.append(head)
                writer.write(answer)
                await writer.drain()
                if close_after:
                    break
        except asyncio.IncompleteReadError:
            pass
        writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0), heads


OK = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-type: application/json\r\n\r\n{}"


def test_requests_reuse_a_connection_and_carry_the_headers(run_async) -> None:
    async def main() -> None:
        server, heads = await _server(OK, close_after=False)
        port = server.sockets[0].getsockname()[1]
        client = EngineHttp(f"http://127.0.0.1:{port}", {"Authorization": "Bearer t"}, 2)
        for i in range(3):
            assert await client.request("PUT", "/v1/blocks", bytes(i + 1)) == (200, b"{}")
        assert await client.post_json("/v1/evict", {"a": 1}) == (200, {})
        await client.aclose()
        server.close()
        assert len(heads) == 4 and b"Authorization: Bearer t" in heads[0]
        assert b"Content-Length: 3" in heads[2] and heads[3].startswith(b"POST /v1/evict ")

    run_async(main())


def test_a_connection_the_server_dropped_is_retried_on_a_fresh_one(run_async) -> None:
    async def main() -> None:
        server, heads = await _server(OK, close_after=True)
        port = server.sockets[0].getsockname()[1]
        client = EngineHttp(f"http://127.0.0.1:{port}", connections=1)
        for _ in range(3):
            assert (await client.request("GET", "/healthz"))[0] == 200
            await asyncio.sleep(0.05)  # the server's close reaches the idle connection
        await client.aclose()
        server.close()
        assert len(heads) == 3

    run_async(main())


def test_when_the_server_dropped_every_idle_connection_the_retry_opens_a_new_one(
    run_async,
) -> None:
    """A keep-alive timeout closes all the idle connections at once: the retry must not take
    the next idle one (as dead as the first), it opens a fresh connection."""

    async def main() -> None:
        server, heads = await _server(OK, close_after=True)
        port = server.sockets[0].getsockname()[1]
        client = EngineHttp(f"http://127.0.0.1:{port}", connections=4)
        # four requests at once: four connections, each then idle and closed by the server
        got = await asyncio.gather(*(client.request("GET", "/healthz") for _ in range(4)))
        assert [status for status, _ in got] == [200] * 4
        await asyncio.sleep(0.05)  # the server's closes reach the idle connections
        assert (await client.request("PUT", "/v1/blocks", b"x"))[0] == 200
        await client.aclose()
        server.close()
        assert len(heads) == 5

    run_async(main())


def test_no_server_or_no_http_is_one_error(run_async) -> None:
    async def main() -> None:
        (port,) = free_ports(1)
        with pytest.raises(EngineHttpError, match="PUT /v1/blocks: ConnectionRefusedError"):
            await EngineHttp(f"http://127.0.0.1:{port}").request("PUT", "/v1/blocks", b"x")
        server, _ = await _server(b"SSH-2.0-nope\r\n\r\n", close_after=True)
        port = server.sockets[0].getsockname()[1]
        with pytest.raises(EngineHttpError, match=r"not an HTTP/1\.x response"):
            await EngineHttp(f"http://127.0.0.1:{port}").request("GET", "/healthz")
        server.close()

    run_async(main())


def test_headers_that_could_end_the_head_are_refused() -> None:
    with pytest.raises(ValueError, match="printable ASCII"):
        EngineHttp("http://127.0.0.1:1", {"X-Kvcast-Tenant": "a\r\nX-Evil: 1"})
    with pytest.raises(ValueError, match="http://HOST:PORT"):
        EngineHttp("https://127.0.0.1")
