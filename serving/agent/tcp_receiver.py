"""Client side of one TCP pull: frames parsed in place, payloads landed straight in buffers.

An :class:`asyncio.BufferedProtocol` lets the kernel write into our memory. Control frames
(and small blocks, several per read) arrive in a staging area and are parsed there; once a
block's header is known, the rest of its payload is received directly into the block's own
buffer, one copy as with a raw ``recv_into``.
"""

from __future__ import annotations

import asyncio

from kvcast.serving.agent.buffers import BlockBuffer, BufferAllocator
from kvcast.serving.agent.rate_limit import TokenBucket
from kvcast.serving.agent.transport import BlockSink, PullRefused, TransportError
from kvcast.serving.messages import (
    HEADER_SIZE,
    BlockHeader,
    Done,
    Error,
    ErrorCode,
    ProtocolError,
    decode_body,
    decode_header,
)

_FINAL_ERRORS = (ErrorCode.UNAUTHORIZED, ErrorCode.BAD_REQUEST)


class PullProtocol(asyncio.BufferedProtocol):
    """Receives ``BlockHeader`` + payload frames until ``Done``; the result is :attr:`done`."""

    def __init__(
        self,
        sink: BlockSink,
        allocator: BufferAllocator,
        max_block_bytes: int,
        bucket: TokenBucket | None = None,
        chunk_bytes: int = 1 << 20,
        staging_bytes: int = 256 << 10,
    ) -> None:
        self.done: asyncio.Future[Done] = asyncio.get_running_loop().create_future()
        self._sink, self._allocator, self._max_block = sink, allocator, max_block_bytes
        self._bucket, self._chunk = bucket, chunk_bytes
        self._transport: asyncio.Transport | None = None
        self._staging = memoryview(bytearray(staging_bytes))
        self._start = self._end = 0  # unparsed bytes are staging[start:end]
        self._block: tuple[BlockHeader, BlockBuffer, memoryview] | None = None
        self._filled = 0  # payload bytes of the current block received so far

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        if self.done.done():
            return self._staging  # bytes after the end are ignored
        if self._block is not None:
            view = self._block[2][self._filled :]
        else:
            if self._end == len(self._staging):
                self._compact(need=2 * len(self._staging) if self._start == 0 else 0)
            view = self._staging[self._end :]
        return view[: self._chunk] if self._bucket is not None else view

    def buffer_updated(self, nbytes: int) -> None:
        if self.done.done():
            return
        if self._bucket is not None and (delay := self._bucket.consume(nbytes)) > 0:
            self._pause(delay)
        try:
            if self._block is not None:
                self._filled += nbytes
                if self._filled == len(self._block[2]):
                    self._finish_block()
            else:
                self._end += nbytes
            self._parse()
        except PullRefused as err:
            self._fail(err)
        except Exception as err:  # a bad frame, a sink that refuses a block, ...
            self._fail(TransportError(f"{type(err).__name__}: {err}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self._block = None  # a half-received block is never committed: its buffer goes now
        if not self.done.done():
            self.done.set_exception(TransportError(f"connection lost: {exc or 'closed by peer'}"))

    def _parse(self) -> None:
        """Act on every complete frame in the staging area."""
        while self._block is None and not self.done.done():
            available = self._end - self._start
            if available < HEADER_SIZE:
                break
            mtype, length = decode_header(self._staging[self._start : self._start + HEADER_SIZE])
            if available < HEADER_SIZE + length:
                self._compact(need=HEADER_SIZE + length)
                break
            body_at = self._start + HEADER_SIZE
            self._start = body_at + length
            self._on_message(decode_body(mtype, self._staging[body_at : self._start]))
        if self._start == self._end:
            self._start = self._end = 0

    def _on_message(self, msg: object) -> None:
        if isinstance(msg, BlockHeader):
            if msg.nbytes > self._max_block:
                raise ProtocolError(f"block of {msg.nbytes} B exceeds {self._max_block} B")
            buffer = self._allocator.allocate(msg.nbytes)
            view = buffer.view()
            take = min(msg.nbytes, self._end - self._start)
            view[:take] = self._staging[self._start : self._start + take]
            self._start += take
            self._block, self._filled = (msg, buffer, view), take
            if take == msg.nbytes:
                self._finish_block()
        elif isinstance(msg, Done):
            self.done.set_result(msg)
        elif isinstance(msg, Error):
            err_type = PullRefused if msg.code in _FINAL_ERRORS else TransportError
            raise err_type(f"peer said {msg.code.name}: {msg.message}")
        else:
            raise ProtocolError(f"unexpected {type(msg).__name__} from the source")

    def _finish_block(self) -> None:
        assert self._block is not None
        header, buffer, _ = self._block
        self._block = None
        self._sink(header, buffer)

    def _compact(self, need: int) -> None:
        """Move unparsed bytes to the front; grow the staging area to ``need`` bytes if needed."""
        pending = bytes(self._staging[self._start : self._end])
        if need > len(self._staging):
            self._staging = memoryview(bytearray(need))
        self._staging[: len(pending)] = pending
        self._start, self._end = 0, len(pending)

    def _fail(self, err: Exception) -> None:
        self._block = None  # see connection_lost
        if not self.done.done():
            self.done.set_exception(err)
        if self._transport is not None:
            self._transport.abort()

    def _pause(self, delay: float) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        transport.pause_reading()
        asyncio.get_running_loop().call_later(delay, self._resume)

    def _resume(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.resume_reading()
