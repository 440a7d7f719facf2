"""Client side of one TCP pull: frames parsed in place, few and large reads.

An :class:`asyncio.BufferedProtocol` lets the kernel write into our memory. Each read takes
as much as the socket holds, up to the staging area's size (4 MiB): with Python's event loop,
the number of reads, not the bytes copied, is what a pull costs (a loop turn per read). Control
frames, small blocks (many per read) and the parts of large blocks that share a read with
other frames are parsed and landed from the staging area: a block's bytes are copied to its
own buffer. While the rest of a large block is at least a staging area long, it is received
straight into the block's buffer instead (one copy, as with a raw ``recv_into``). Either way
the block's xxh3 is computed over its buffer as the bytes land there (while they are still in
the CPU cache) and handed to the sink with the block, which verifies it against the header's
checksum before committing anything. A source of another protocol version (whose reply, an
``Error`` at best, has a header of its version) refuses the pull: retrying will not help.
"""

from __future__ import annotations

import asyncio

from kvcast.serving.agent.buffers import BlockBuffer, BufferAllocator
from kvcast.serving.agent.checksum import RunningChecksum, checksum
from kvcast.serving.agent.transport import BlockSink, PullRefused, TransportError
from kvcast.serving.messages import (
    HEADER_SIZE,
    VERSION,
    BlockHeader,
    Done,
    Error,
    ErrorCode,
    ProtocolError,
    VersionMismatch,
    decode_body,
    decode_header,
    version_refusal,
)
from kvcast.serving.token_bucket import TokenBucket

_FINAL_ERRORS = (ErrorCode.UNAUTHORIZED, ErrorCode.BAD_REQUEST)
STAGING_BYTES = 4 << 20


class _Landing:
    """A large block whose bytes are arriving."""

    __slots__ = ("buffer", "digest", "filled", "header", "view")

    def __init__(self, header: BlockHeader, buffer: BlockBuffer) -> None:
        self.header, self.buffer = header, buffer
        self.view = buffer.view()
        self.filled = 0  # payload bytes received so far
        self.digest = RunningChecksum()  # over view[:filled]

    @property
    def missing(self) -> int:
        return len(self.view) - self.filled

    def land(self, data: memoryview) -> None:
        """Copy ``data`` (received in the staging area) to the next bytes of the block."""
        n = len(data)
        self.view[self.filled : self.filled + n] = data
        self.received(n)

    def received(self, n: int) -> None:
        """The next ``n`` bytes of the block are now in its buffer."""
        self.digest.update(self.view[self.filled : self.filled + n])
        self.filled += n


class PullProtocol(asyncio.BufferedProtocol):
    """Receives ``BlockHeader`` + payload frames until ``Done``; the result is :attr:`done`.

    ``staging`` (at least twice ``small_block_bytes``) may be reused across pulls, one at a
    time: memory already touched costs no page faults.
    """

    def __init__(
        self,
        sink: BlockSink,
        allocator: BufferAllocator,
        max_block_bytes: int,
        bucket: TokenBucket | None = None,
        chunk_bytes: int = 1 << 20,
        staging: bytearray | None = None,
        small_block_bytes: int = 256 << 10,
    ) -> None:
        self.done: asyncio.Future[Done] = asyncio.get_running_loop().create_future()
        self._sink, self._allocator, self._max_block = sink, allocator, max_block_bytes
        self._bucket, self._chunk = bucket, chunk_bytes
        self._transport: asyncio.Transport | None = None
        self._staging = memoryview(staging if staging is not None else bytearray(STAGING_BYTES))
        self._small = min(small_block_bytes, len(self._staging) // 2)
        self._start = self._end = 0  # unparsed bytes are staging[start:end]
        self._block: _Landing | None = None  # a large block whose bytes are arriving
        self._direct = False  # the last get_buffer was the block's own buffer
        self._staged: BlockHeader | None = None  # a small block whose payload is being staged

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        if self.done.done():  # bytes after the end are ignored (staging may serve a new pull)
            return memoryview(bytearray(64 << 10))
        block = self._block
        self._direct = block is not None and block.missing >= len(self._staging)
        if block is not None and self._direct:
            view = block.view[block.filled :]
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
            if self._direct and (block := self._block) is not None:
                block.received(nbytes)
                if not block.missing:
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
        """Act on every complete frame (and staged block bytes) in the staging area."""
        while not self.done.done():
            available = self._end - self._start
            if (block := self._block) is not None:
                if not available:
                    break
                take = min(block.missing, available)
                block.land(self._staging[self._start : self._start + take])
                self._start += take
                if not block.missing:
                    self._finish_block()
                continue
            if (header := self._staged) is not None:
                if available < header.nbytes:
                    self._make_room(header.nbytes)
                    break
                self._staged = None
                self._deliver_staged(header)
                continue
            if available < HEADER_SIZE:
                self._make_room(HEADER_SIZE)
                break
            raw = self._staging[self._start : self._start + HEADER_SIZE]
            try:
                mtype, length = decode_header(raw)
            except VersionMismatch as err:
                raise PullRefused(version_refusal(err.version, VERSION)) from None
            if available < HEADER_SIZE + length:
                self._make_room(HEADER_SIZE + length)
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
            if msg.nbytes <= self._small:
                self._staged = msg  # _parse delivers it once its payload is staged
            else:
                self._block = _Landing(msg, self._allocator.allocate(msg.nbytes))
        elif isinstance(msg, Done):
            self.done.set_result(msg)
        elif isinstance(msg, Error):
            err_type = PullRefused if msg.code in _FINAL_ERRORS else TransportError
            raise err_type(f"peer said {msg.code.name}: {msg.message}")
        else:
            raise ProtocolError(f"unexpected {type(msg).__name__} from the source")

    def _deliver_staged(self, header: BlockHeader) -> None:
        """Copy a small block's staged payload into its own buffer, checksum it there, sink it."""
        buffer = self._allocator.allocate(header.nbytes)
        view = buffer.view()
        view[:] = self._staging[self._start : self._start + header.nbytes]
        self._start += header.nbytes
        self._sink(header, buffer, checksum(view))

    def _finish_block(self) -> None:
        assert self._block is not None
        block, self._block = self._block, None
        self._sink(block.header, block.buffer, block.digest.value())

    def _make_room(self, need: int) -> None:
        """Ensure the staging area can hold ``need`` bytes from the first unparsed one."""
        if len(self._staging) - self._start < need:
            self._compact(need)

    def _compact(self, need: int) -> None:
        """Move unparsed bytes to the front; grow the staging area to ``need`` bytes if needed."""
        pending = bytes(self._staging[self._start : self._end])
        if need > len(self._staging):
            self._staging = memoryview(bytearray(need))
        self._staging[: len(pending)] = pending
        self._start, self._end = 0, len(pending)

    def _fail(self, err: Exception) -> None:
        self._block = self._staged = None  # see connection_lost
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
