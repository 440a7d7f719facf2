"""A peer that holds a connection open (silent, or sending a byte at a time): how long until
the server under test closes it."""

from __future__ import annotations

import socket
import time


def closed_after(
    sock: socket.socket, started: float, drip: bytes = b"", every_s: float = 0.1,
    limit_s: float = 8.0,
) -> float:  # fmt: skip
    """Seconds from ``started`` until the server closes ``sock``, sending ``drip`` a byte every
    ``every_s`` seconds meanwhile; an AssertionError if it is still open after ``limit_s`` or
    answers anything."""
    sock.settimeout(every_s)
    pending = iter(drip)
    while time.monotonic() - started < limit_s:
        try:
            if (byte := next(pending, None)) is not None:
                sock.sendall(bytes([byte]))
            data = sock.recv(4096)
        except TimeoutError:
            continue
        except (ConnectionResetError, BrokenPipeError):
            return time.monotonic() - started
        assert data == b"", f"the server answered: {data[:80]!r}"
        return time.monotonic() - started
    raise AssertionError(f"the connection is still open after {limit_s:g} s")
