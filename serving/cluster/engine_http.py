"""A small keep-alive HTTP/1.1 client for an engine's calls to its agent (the replay's hot
path: thousands of ``PUT /v1/blocks`` a minute).

Why not httpx here: per request it costs about 2 ms of CPU (its pool scans every connection,
twice), more than the agent spends storing the block. This client writes each request in one
``write`` (head and body), reads ``Content-Length`` responses only (what the agent's uvicorn
sends), speaks TLS to an ``https://`` agent (``ssl_context``: the client certificate and CA of
a cluster with mutual TLS), keeps up to ``connections`` connections open, and retries a request
once on a fresh connection when a reused one turns out closed (the server drops idle keep-alive
connections after a few seconds, all at once; every call here is idempotent), skipping idle
connections whose close has already arrived. On Linux it asks for an immediate ACK
(``TCP_QUICKACK``) before each read: a server that writes a response's head and body separately
with Nagle on would otherwise wait for the client's delayed ACK, 40 ms per request.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
from typing import Any
from urllib.parse import urlsplit

Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]
QUICKACK = getattr(socket, "TCP_QUICKACK", None)
MAX_HEAD = 64 << 10


class EngineHttpError(Exception):
    """The agent could not be reached, or answered something that is not HTTP/1.1."""


class EngineHttp:
    """Requests to one agent over up to ``connections`` keep-alive connections."""

    def __init__(
        self, base_url: str, headers: dict[str, str] | None = None, connections: int = 8,
        timeout_s: float = 10.0, ssl_context: ssl.SSLContext | None = None,
    ) -> None:  # fmt: skip
        url = urlsplit(base_url)
        if url.scheme not in ("http", "https") or not url.hostname or not url.port:
            raise ValueError(f"agent URL must be http://HOST:PORT (or https://), got {base_url!r}")
        if url.scheme == "https" and ssl_context is None:
            raise ValueError(f"{base_url}: https needs an SSL context (a client certificate)")
        self.host, self.port, self.timeout_s = url.hostname, url.port, timeout_s
        self._tls = (
            {"ssl": ssl_context, "server_hostname": self.host} if url.scheme == "https" else {}
        )
        self._common = f"Host: {self.host}:{self.port}" + _fields(headers)
        self._slots = asyncio.Semaphore(connections)
        self._idle: list[Connection] = []

    async def request(
        self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> tuple[int, bytes]:
        """(status, body); :class:`EngineHttpError` when no answer came."""
        fields = self._common + _fields(headers)
        head = f"{method} {path} HTTP/1.1\r\n{fields}\r\nContent-Length: {len(body)}"
        message = head.encode("latin-1") + b"\r\n\r\n" + body
        async with self._slots:
            for attempt in (0, 1):
                conn = self._take_idle() if attempt == 0 else None  # the retry: a fresh one
                reused = conn is not None
                try:
                    async with asyncio.timeout(self.timeout_s):
                        if conn is None:
                            conn = await asyncio.open_connection(self.host, self.port, **self._tls)
                        status, data, keep = await _exchange(conn, message)
                except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                        TimeoutError, ValueError) as err:  # fmt: skip
                    if conn is not None:
                        conn[1].close()
                    if reused and attempt == 0 and not isinstance(err, TimeoutError):
                        continue  # the server had closed it: once more on a new connection
                    raise EngineHttpError(f"{method} {path}: {type(err).__name__}: {err}") from None
                if keep:
                    self._idle.append(conn)
                else:
                    conn[1].close()
                return status, data
        raise AssertionError("unreachable")

    def _take_idle(self) -> Connection | None:
        """An idle connection, skipping those the server is already known to have closed
        (their FIN read: a keep-alive timeout closes every idle one at once)."""
        while self._idle:
            conn = self._idle.pop()
            if not conn[0].at_eof():
                return conn
            conn[1].close()
        return None

    async def post_json(
        self, path: str, obj: Any, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        fields = {"Content-Type": "application/json"} | (headers or {})
        status, data = await self.request("POST", path, json.dumps(obj).encode(), fields)
        return status, json.loads(data) if data else None

    async def aclose(self) -> None:
        while self._idle:
            _, writer = self._idle.pop()
            writer.close()


def _fields(headers: dict[str, str] | None) -> str:
    """``headers`` as header lines (each after a CRLF); printable ASCII only, so that no value
    can end the head early."""
    items = (headers or {}).items()
    if not all(" " <= c <= "~" for k, v in items for c in k + v):
        raise ValueError("header names and values must be printable ASCII")
    return "".join(f"\r\n{k}: {v}" for k, v in items)


async def _exchange(conn: Connection, message: bytes) -> tuple[int, bytes, bool]:
    reader, writer = conn
    writer.write(message)
    await writer.drain()
    sock = writer.get_extra_info("socket")
    if QUICKACK is not None and sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, QUICKACK, 1)
    head = await reader.readuntil(b"\r\n\r\n")
    if len(head) > MAX_HEAD:
        raise ValueError("response head too long")
    status_line, *fields = head.decode("latin-1").split("\r\n")
    version, _, rest = status_line.partition(" ")
    code = rest[:3]
    if not version.startswith("HTTP/1.") or not code.isdigit():
        raise ValueError(f"not an HTTP/1.x response: {status_line[:40]!r}")
    found = {k.strip().lower(): v.strip() for k, _, v in (f.partition(":") for f in fields if f)}
    if "chunked" in found.get("transfer-encoding", "").lower():
        raise ValueError("chunked responses are not supported")
    data = await reader.readexactly(int(found.get("content-length", "0")))
    keep = found.get("connection", "").lower() != "close" and version == "HTTP/1.1"
    return int(code), data, keep
