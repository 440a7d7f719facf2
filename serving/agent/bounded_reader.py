"""The reading side of a transfer server's connection, bounded: what the server takes from a
peer's socket is its lookahead, or the frames it has asked for, never more.

asyncio's stream reader takes up to 2 x its 64 KiB limit, plus one 256 KiB read, ahead of what
its reader asks for; of a peer that has not authenticated yet that would be ~384 KiB per
connection. :class:`PeerProtocol` keeps asyncio's stream writer (its flow control and close)
and reads through a :class:`BoundedReader`, a buffered protocol's read target that pauses the
transport once its allowance is used up: the rest of what the peer sends waits in the kernel,
and TCP flow control stops the peer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

MAX_READ = 256 << 10  # the most one read of a peer's socket takes (asyncio's own read size)


class FrameSource(Protocol):
    """What the server reads a peer's frames from (a :class:`BoundedReader`)."""

    async def readexactly(self, n: int) -> bytes: ...


class BoundedReader:
    """The reading side of one peer's connection, which bounds what the server takes from the
    socket: in all, ``lookahead`` bytes, or as many as have been asked for (:meth:`readexactly`)
    when that is more. The transport reads while this allowance lasts, one scratch area at a
    time, and is paused once it is used up: one read takes a Hello and the request after it
    when both fit the lookahead, and the server never holds more of a peer than the lookahead
    or the frames it has asked for. What else the peer sends waits in the kernel, and TCP flow
    control stops the peer once the socket's receive buffer is full.

    A peer's end of stream or a lost connection ends a waiting read as it would end
    :meth:`asyncio.StreamReader.readexactly`: :class:`asyncio.IncompleteReadError`, or the
    connection's error."""

    def __init__(self, lookahead: int) -> None:
        if lookahead < 1:
            raise ValueError("lookahead must be >= 1")
        self._lookahead = lookahead
        self._left = lookahead  # bytes it may still take from the socket
        self._scratch = bytearray(lookahead)  # where the transport reads them
        self._buffer = bytearray()  # taken, not yet read
        self._transport: asyncio.ReadTransport | None = None
        self._wanted = 0  # bytes the waiting read needs buffered
        self._waiter: asyncio.Future[None] | None = None
        self._eof = False
        self._error: BaseException | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.ReadTransport)
        self._transport = transport

    async def readexactly(self, n: int) -> bytes:
        """The next ``n`` bytes from the peer."""
        if self._waiter is not None:
            raise RuntimeError("readexactly() called while another read is waiting")
        if len(self._buffer) < n:
            if self._error is not None:
                raise self._error
            if self._eof:
                partial, self._buffer = bytes(self._buffer), bytearray()
                raise asyncio.IncompleteReadError(partial, n)
            self._allow(n - len(self._buffer))
            self._wanted, self._waiter = n, asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
                if len(self._scratch) > self._lookahead:  # a large read's: not kept
                    self._scratch = bytearray(min(self._left, self._lookahead))
        data = bytes(self._buffer[:n])
        del self._buffer[:n]
        return data

    def _allow(self, shortfall: int) -> None:
        """Let the transport take ``shortfall`` more bytes, if the allowance is less."""
        if shortfall <= self._left:
            return
        assert self._transport is not None
        if not self._left:
            self._transport.resume_reading()
        self._left = shortfall
        self._scratch = bytearray(min(shortfall, MAX_READ))

    def buffered(self) -> bytes:
        """What has been taken from the socket and not read yet (a copy)."""
        return bytes(self._buffer)

    def get_buffer(self) -> memoryview:
        """Where the transport's next read goes: the allowance, up to one scratch area."""
        return memoryview(self._scratch)[: self._left]

    def buffer_updated(self, nbytes: int) -> None:
        self._buffer += memoryview(self._scratch)[:nbytes]
        self._left -= nbytes
        if not self._left:
            assert self._transport is not None
            self._transport.pause_reading()  # before the loop polls the socket again
        waiter = self._waiter
        if waiter is not None and not waiter.done() and len(self._buffer) >= self._wanted:
            waiter.set_result(None)

    def feed_eof(self) -> None:
        self._eof = True
        if self._waiter is not None and not self._waiter.done():
            partial, self._buffer = bytes(self._buffer), bytearray()
            self._waiter.set_exception(asyncio.IncompleteReadError(partial, self._wanted))

    def set_exception(self, error: BaseException) -> None:
        self._error = error
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(error)


Handler = Callable[[BoundedReader, asyncio.StreamWriter], Coroutine[Any, Any, None]]


class PeerProtocol(asyncio.StreamReaderProtocol, asyncio.BufferedProtocol):
    """asyncio's stream protocol (its :class:`asyncio.StreamWriter`, with the writer's flow
    control and close) whose reading goes through a :class:`BoundedReader`: a buffered
    protocol, so that the transport reads into the reader's scratch area, never more than the
    reader allows."""

    def __init__(self, handler: Handler, lookahead: int) -> None:
        self.reader = BoundedReader(lookahead)
        super().__init__(None, lambda _, writer: handler(self.reader, writer))

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.reader.connection_made(transport)
        super().connection_made(transport)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.reader.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self.reader.buffer_updated(nbytes)

    def eof_received(self) -> bool:
        self.reader.feed_eof()
        return bool(super().eof_received())  # the writing side stays open (but over TLS)

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is None:
            self.reader.feed_eof()
        else:
            self.reader.set_exception(exc)
        super().connection_lost(exc)
