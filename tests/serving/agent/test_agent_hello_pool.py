"""The pool of connections waiting for their Hello: a new one always gets a place, and a full
pool closes its oldest connection without a whole Hello waiting to be read, else its oldest."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from kvcast.serving.agent.bounded_reader import BoundedReader
from kvcast.serving.agent.hello_pool import HelloPool, whole_hello
from kvcast.serving.messages import Hello, encode

HELLO = encode(Hello("peer", "token"))


class Transport:
    """What the pool needs of a connection's transport (its socket, and abort)."""

    def __init__(self, sock: socket.socket | None = None) -> None:
        self.sock, self.aborted = sock, False

    def abort(self) -> None:
        self.aborted = True


class Writer:
    def __init__(self, sock: socket.socket | None = None) -> None:
        self.transport = Transport(sock)

    def get_extra_info(self, name: str) -> Any:
        return self.transport.sock if name == "socket" else None


def reader_with(data: bytes) -> BoundedReader:
    """A connection's reader that has taken ``data`` from its socket already."""
    reader = BoundedReader(len(HELLO) + 64)
    view = reader.get_buffer()
    view[: len(data)] = data
    reader.buffer_updated(len(data))
    return reader


def test_a_full_pool_closes_its_oldest_connection_without_a_whole_hello() -> None:
    pool = HelloPool(3)
    first, second, third = Writer(), Writer(), Writer()
    assert not pool.admit("a", reader_with(HELLO), first)  # a whole Hello taken: kept
    assert not pool.admit("b", reader_with(HELLO[:8]), second)  # part of one
    assert not pool.admit("c", reader_with(b""), third)
    assert pool.admit("d", reader_with(b""), Writer())  # full: one goes
    assert second.transport.aborted and not first.transport.aborted
    assert "a" in pool and "b" not in pool and len(pool) == 3
    pool.settled("a")
    assert "a" not in pool and len(pool) == 2


def test_with_a_whole_hello_everywhere_the_oldest_goes() -> None:
    pool = HelloPool(2)
    writers = [Writer() for _ in range(3)]
    for key, writer in zip("abc", writers, strict=True):
        pool.admit(key, reader_with(HELLO), writer)
    assert [w.transport.aborted for w in writers] == [True, False, False]
    with pytest.raises(ValueError, match="at least one"):
        HelloPool(0)


def test_a_hello_still_in_the_kernel_counts_as_whole() -> None:
    """Read with FIONREAD and a peek of its header (the data stays for the reader)."""
    left, right = socket.socketpair()
    with left, right:
        right.sendall(HELLO[:-1])
        assert not whole_hello(reader_with(b""), Writer(left))
        right.sendall(HELLO[-1:])
        assert whole_hello(reader_with(b""), Writer(left))
        assert whole_hello(reader_with(HELLO[:5]), Writer(left)) is False  # (then it is 5 more)
        assert left.recv(len(HELLO)) == HELLO  # nothing was taken
