"""Client side of vLLM's KV-event replay socket (a ROUTER on the engine).

Request ``[b"", start_seq]`` over a DEALER (the empty frame is the delimiter a REQ socket would
add; a REQ cannot take the several replies one request gets). Replies are ``[b"", seq, payload]``
for every buffered batch with ``seq >= start_seq``, then ``[b"", -1, b""]``. A reply that does not
come within the idle timeout fails the request; the socket is then rebuilt so that stale replies
can never be mistaken for the answer to the next request (the "lazy pirate" pattern).
"""

from __future__ import annotations

import zmq

from .wire import END_SEQ, pack_seq, unpack_seq


class ReplayClient:
    """Fetches ``(seq, payload)`` pairs for a range of sequence numbers."""

    def __init__(self, endpoint: str, *, context: zmq.Context, timeout_ms: int = 500) -> None:
        self.endpoint = endpoint
        self.timeout_ms = timeout_ms
        self._ctx = context
        self._sock: zmq.Socket | None = None

    def fetch(self, start: int, stop: int) -> list[tuple[int, bytes]] | None:
        """Batches with ``start <= seq < stop`` that the publisher still buffers, ascending.

        None when the publisher did not finish answering in time (nothing is lost by the
        caller: a partial answer is discarded, since its end was never confirmed).
        """
        sock = self._socket()
        try:
            sock.send_multipart([b"", pack_seq(start)], zmq.NOBLOCK)
        except zmq.ZMQError:
            self._reset()
            return None
        out: list[tuple[int, bytes]] = []
        while True:
            if not sock.poll(self.timeout_ms, zmq.POLLIN):
                self._reset()
                return None
            frames = sock.recv_multipart()
            if len(frames) != 3 or frames[0] != b"":
                continue  # not a replay reply: ignore it, wait for the rest
            seq = unpack_seq(frames[1], signed=True)
            if seq == END_SEQ:
                return out
            if seq is not None and start <= seq < stop and (not out or seq > out[-1][0]):
                out.append((seq, frames[2]))

    def close(self) -> None:
        self._reset()

    def _socket(self) -> zmq.Socket:
        if self._sock is None:
            self._sock = self._ctx.socket(zmq.DEALER)
            self._sock.setsockopt(zmq.LINGER, 0)
            self._sock.connect(self.endpoint)
        return self._sock

    def _reset(self) -> None:
        if self._sock is not None:
            self._sock.close(linger=0)
            self._sock = None
