"""A real ZMQ endpoint that publishes KV-event batches the way vLLM's ``ZmqEventPublisher`` does.

PUB socket: three frames ``(topic, seq 8-byte big-endian, payload)``, ``seq`` counting from 0.
Optional ROUTER replay socket answering ``[b"", start_seq]`` from a bounded ring of recent
``(seq, payload)`` (see ``wire``). As in vLLM, one background thread owns both sockets; callers
only enqueue. Used by tests and by tools that play engines; ``deliver=False`` keeps a batch in
the ring without sending it (a drop the subscriber must recover), and :meth:`restart` starts the
numbering over like a new engine process.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections import deque
from collections.abc import Iterable
from typing import Any

import zmq

from .decode import KvEvent
from .encode import encode_batch
from .wire import END_SEQ_FRAME, pack_seq

_STOP = object()
_RESET = object()


class KvEventPublisher:
    """Bind ``endpoint`` (PUB) and optionally ``replay_endpoint`` (ROUTER); ports may be ``*``."""

    def __init__(
        self,
        endpoint: str = "tcp://*:5557",
        replay_endpoint: str | None = None,
        *,
        topic: str = "",
        buffer_steps: int = 10_000,
        hwm: int = 100_000,
        context: zmq.Context | None = None,
    ) -> None:
        self._ctx = context or zmq.Context.instance()
        self._topic = topic.encode("utf-8")
        self._ring: deque[tuple[int, bytes]] = deque(maxlen=buffer_steps)
        self._pub = self._ctx.socket(zmq.PUB)
        self._replay: zmq.Socket | None = None
        self.replay_endpoint: str | None = None
        try:  # a failed bind (port in use) must not leave the other socket bound
            self._pub.set_hwm(hwm)
            self._pub.bind(endpoint)
            self.endpoint: str = self._pub.getsockopt_string(zmq.LAST_ENDPOINT)
            if replay_endpoint is not None:
                self._replay = self._ctx.socket(zmq.ROUTER)
                self._replay.set_hwm(hwm)
                self._replay.bind(replay_endpoint)
                self.replay_endpoint = self._replay.getsockopt_string(zmq.LAST_ENDPOINT)
        except zmq.ZMQError:
            self._close_sockets()
            raise
        self._queue: queue.Queue[Any] = queue.Queue()
        self._lock = threading.Lock()
        self._done = threading.Condition(self._lock)
        self._next_seq = 0
        self._pending = 0
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="kv-event-publisher", daemon=True)
        self._thread.start()

    def publish(self, payload: bytes, *, deliver: bool = True) -> int:
        """Queue one payload; returns its sequence number."""
        with self._lock:
            if self._closed:
                raise RuntimeError("publisher is closed")
            seq = self._next_seq
            self._next_seq += 1
            self._pending += 1
            self._queue.put((seq, bytes(payload), deliver))
        return seq

    def publish_events(
        self, events: Iterable[KvEvent], *, ts_ms: float, deliver: bool = True, **encode: Any
    ) -> int:
        """Encode ``events`` (keyword options as :func:`encode.encode_batch`) and publish."""
        return self.publish(encode_batch(events, ts_ms=ts_ms, **encode), deliver=deliver)

    @property
    def next_seq(self) -> int:
        """The sequence number the next :meth:`publish` will get."""
        with self._lock:
            return self._next_seq

    def restart(self) -> None:
        """Behave like a fresh engine process: numbering back to 0, replay ring emptied."""
        with self._lock:
            self._next_seq = 0
            self._pending += 1
            self._queue.put(_RESET)

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Wait until everything queued went out; False on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._done:
            while self._pending:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._done.wait(remaining):
                    return not self._pending
        return True

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._queue.put(_STOP)
        self._thread.join(timeout=5.0)
        self._close_sockets()

    def _close_sockets(self) -> None:
        self._pub.close(linger=0)
        if self._replay is not None:
            self._replay.close(linger=0)

    def __enter__(self) -> KvEventPublisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- publisher thread: the only user of both sockets -----------------------------------

    def _run(self) -> None:
        while True:
            try:
                item = self._queue.get(timeout=0.005 if self._replay is not None else 0.05)
            except queue.Empty:
                item = None
            if item is _STOP:
                return
            if item is not None:
                self._handle(item)
            if self._replay is not None:
                with contextlib.suppress(zmq.ZMQError):  # replay is best effort, as in vLLM
                    while self._replay.poll(0, zmq.POLLIN):
                        self._serve_replay()

    def _handle(self, item: Any) -> None:
        if item is _RESET:
            self._ring.clear()
        else:
            seq, payload, deliver = item
            self._ring.append((seq, payload))
            if deliver:
                # over the high-water mark PUB drops, as in vLLM; the replay ring still has it
                with contextlib.suppress(zmq.Again):
                    self._pub.send_multipart((self._topic, pack_seq(seq), payload), zmq.NOBLOCK)
        with self._done:
            self._pending -= 1
            self._done.notify_all()

    def _serve_replay(self) -> None:
        assert self._replay is not None
        frames = self._replay.recv_multipart()
        if len(frames) != 3:
            return  # vLLM logs and ignores anything but [identity, b"", start_seq]
        identity, _, start_frame = frames
        start = int.from_bytes(start_frame, "big")
        for seq, payload in self._ring:
            if seq >= start:
                self._replay.send_multipart((identity, b"", pack_seq(seq), payload))
        self._replay.send_multipart((identity, b"", END_SEQ_FRAME, b""))
