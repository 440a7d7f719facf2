"""Writing to a peer that may stall: what the transfer server sends waits for the peer to take
it, and a peer that takes none of it for a whole timeout is cut off.

A slow peer that keeps taking bytes is waited for, however slowly it reads: each timeout period
the bytes it has not taken yet are counted again (the transport's buffer and, on Linux, what
the kernel holds unacknowledged: megabytes on a fast link, without which a slow peer would look
stalled until the kernel's buffer drained), and only a period in which that count did not fall
is a stall (:class:`PeerStalled`, the transport aborted, what it held released).
"""

from __future__ import annotations

import asyncio
import contextlib
import struct

try:  # the bytes a TCP socket holds that its peer has not acknowledged (Linux)
    from fcntl import ioctl
    from termios import TIOCOUTQ
except ImportError:  # pragma: no cover - not Linux: the transport's own buffer only
    TIOCOUTQ = None


class PeerStalled(ConnectionError):
    """The peer took none of the bytes written to it for the request timeout."""


def unsent_bytes(transport: asyncio.WriteTransport) -> int:
    """Bytes written to ``transport`` that its peer has not taken yet: the transport's buffer
    and, where the OS says, what the kernel holds unacknowledged."""
    n = transport.get_write_buffer_size()
    sock = transport.get_extra_info("socket")
    if TIOCOUTQ is not None and sock is not None:
        with contextlib.suppress(OSError):
            n += struct.unpack("i", ioctl(sock.fileno(), TIOCOUTQ, b"\0\0\0\0"))[0]
    return n


async def drain(writer: asyncio.StreamWriter, timeout_s: float, flushed: bool = False) -> None:
    """Wait until the peer has taken what was written (``flushed``: every byte, else down to
    the transport's low-water mark); :class:`PeerStalled` when it takes none of it for
    ``timeout_s``."""
    transport = writer.transport
    left = transport.get_write_buffer_size()
    if not left or (not flushed and left <= transport.get_write_buffer_limits()[0]):
        await writer.drain()  # at or below the low-water mark: writing is not paused
        return
    loop = asyncio.get_running_loop()
    stalled = False

    def watch(before: int) -> None:  # each period: the peer took bytes, or it is cut off
        nonlocal timer, stalled
        if (now := unsent_bytes(transport)) >= before:
            stalled = True
            transport.abort()  # wakes the drain below (a timeout context costs ~5 us more)
        else:
            timer = loop.call_later(timeout_s, watch, now)

    timer = loop.call_later(timeout_s, watch, unsent_bytes(transport))
    try:
        await (_flushed(writer) if flushed else writer.drain())
    except ConnectionError:
        if not stalled:
            raise
    finally:
        timer.cancel()
    if stalled:
        raise PeerStalled(f"took no bytes for {timeout_s:g} s")


async def close(writer: asyncio.StreamWriter, timeout_s: float) -> None:
    """Close after the last bytes are sent; a peer that does not take them within
    ``timeout_s`` is cut off."""
    writer.close()
    try:
        async with asyncio.timeout(timeout_s):
            await writer.wait_closed()
    except TimeoutError:
        writer.transport.abort()
    except ConnectionError:
        pass


async def _flushed(writer: asyncio.StreamWriter) -> None:
    """Wait until the transport has handed every queued byte to the kernel."""
    transport = writer.transport
    if not transport.get_write_buffer_size():
        return
    low, high = transport.get_write_buffer_limits()
    transport.set_write_buffer_limits(high=0)
    try:
        await writer.drain()
    finally:
        if not transport.is_closing():
            transport.set_write_buffer_limits(high, low)
