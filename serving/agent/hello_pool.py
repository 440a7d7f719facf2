"""The transfer server's connections whose Hello is not in yet: a pool of their own.

Peers that connect and send nothing must not take the slots of those that authenticate, so
the server counts a connection among its authenticated peers only once its Hello is read, and
keeps the others here, at most ``size`` of them. A new connection always gets a place; a full
pool closes its oldest connection without a whole Hello waiting to be read (taken into the
reader's buffer, or in the kernel), else its oldest. A peer's Hello follows its connect within
a round trip, so it is read long before ``size`` newer connections arrive; and on an event loop
held up for a moment (which accepts a batch of connections before it reads any) a whole Hello
already in is what marks its connection as one to keep (a byte, or part of a frame, does not).
A flood of connections that send no whole Hello takes no slot, and closes such connections
before any peer's. Over TLS the Hello usually sits in asyncio's TLS buffers, where this cannot
see it: the pool is then first in, first out (only holders of a cluster certificate get there).
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import socket
import sys
import termios
from collections import OrderedDict
from collections.abc import Hashable

from kvcast.serving.agent.bounded_reader import BoundedReader, FrameSource
from kvcast.serving.messages import (
    HEADER_SIZE,
    MsgType,
    ProtocolError,
    VersionMismatch,
    decode_header,
)


class HelloPool:
    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"a Hello pool holds at least one connection, got {size}")
        self.size = size
        self._waiting: OrderedDict[Hashable, tuple[FrameSource, asyncio.StreamWriter]] = (
            OrderedDict()
        )

    def admit(self, key: Hashable, reader: FrameSource, writer: asyncio.StreamWriter) -> bool:
        """Take a new connection in (``key``: its handler); whether another was closed for it."""
        waiting = self._waiting
        dropped = len(waiting) >= self.size
        if dropped:
            victim = next((k for k, (r, w) in waiting.items() if not whole_hello(r, w)), None)
            if victim is None:
                victim = next(iter(waiting))
            waiting.pop(victim)[1].transport.abort()
        waiting[key] = (reader, writer)
        return dropped

    def settled(self, key: Hashable) -> None:
        """The connection's Hello is in, or it ended: out of the pool."""
        self._waiting.pop(key, None)

    def __contains__(self, key: object) -> bool:
        return key in self._waiting

    def __len__(self) -> int:
        return len(self._waiting)


def whole_hello(reader: FrameSource, writer: asyncio.StreamWriter) -> bool:
    """Whether a whole Hello frame has come from the peer and waits to be read (taken from the
    socket, in the kernel, or both): a peer that sent one is about to be served or refused,
    where a peer that sent part of one, or anything else, is not."""
    taken = reader.buffered() if isinstance(reader, BoundedReader) else b""
    fd = getattr(writer.get_extra_info("socket"), "fileno", lambda: -1)()
    try:
        waiting = int.from_bytes(fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"), sys.byteorder)
    except (OSError, ValueError):  # no socket (closed, or none): what was taken alone
        waiting = 0
    head = taken
    if len(head) < HEADER_SIZE and waiting:
        try:
            with socket.socket(fileno=os.dup(fd)) as peer:  # a duplicate: closing it is harmless
                head += peer.recv(HEADER_SIZE - len(head), socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except OSError:
            return False
    if len(head) < HEADER_SIZE:
        return False
    try:
        mtype, length = decode_header(head[:HEADER_SIZE])
    except (ValueError, ProtocolError, VersionMismatch):
        return False
    return mtype is MsgType.HELLO and len(taken) + waiting >= HEADER_SIZE + length
