"""One thread per engine: its vLLM KV events over ZMQ into the sidecar's event queue.

Each thread owns a :class:`KvEventSubscriber` (ZMQ sockets are not thread-safe: it is created,
polled and closed on that thread), stamped with the engine's node id; gaps are recovered
through the engine's replay socket when configured, which also gives the engine's buffered
history when the feed joins a running engine (a sidecar restart: the subscriber's catch-up);
restarts clear the node's blocks (see the subscriber). Every poll's batches go to the queue as
one put, in order. The subscriber's counters are read from other threads as copies.
"""

from __future__ import annotations

import logging
import threading

import zmq

from kvcast.serving.kv_events.subscriber import KvEventSubscriber, KvSubscriberCounters
from kvcast.serving.sidecar.event_queue import EventQueue

log = logging.getLogger("kvcast.serving.sidecar")
SOURCE = "zmq"
POLL_MS = 50


class EngineFeed:
    """The thread that feeds one engine's events (``start`` / ``stop``)."""

    def __init__(
        self, node: int, name: str, endpoint: str, queue: EventQueue, *,
        replay: str | None = None, topic: str = "", hwm: int = 100_000,
        replay_timeout_ms: int = 500, context: zmq.Context | None = None,
    ) -> None:  # fmt: skip
        self.node, self.name, self.endpoint, self.replay = node, name, endpoint, replay
        self.queue, self.topic, self.hwm = queue, topic, hwm
        self.replay_timeout_ms = replay_timeout_ms
        self._context = context
        self._sub: KvEventSubscriber | None = None
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"kv-events-{name}", daemon=True)
        self.error: str | None = None

    def start(self, timeout_s: float = 5.0) -> None:
        self._thread.start()
        self._ready.wait(timeout_s)
        if self.error is not None:
            raise ValueError(f"node {self.name!r}: cannot subscribe to {self.endpoint}: "
                             f"{self.error}")  # fmt: skip

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread.ident is not None:  # a feed whose start() never ran has no thread
            self._thread.join(timeout_s)

    @property
    def counters(self) -> KvSubscriberCounters:
        sub = self._sub
        return sub.counters if sub is not None else KvSubscriberCounters()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        try:
            sub = KvEventSubscriber(
                self.endpoint, node=self.node, topic=self.topic, replay_endpoint=self.replay,
                replay_timeout_ms=self.replay_timeout_ms, hwm=self.hwm, context=self._context,
                catch_up=True,
            )  # fmt: skip
        except zmq.ZMQError as err:
            self.error = str(err)
            self._ready.set()
            return
        self._sub = sub
        self._ready.set()
        try:
            while not self._stop.is_set():
                batches = sub.poll(POLL_MS)
                if batches:
                    self.queue.put([e for b in batches for e in b.events], SOURCE)
        except Exception:  # keep the cause in the log; the feed shows as dead in /readyz
            log.exception("KV-event feed of node %s failed", self.name)
        finally:
            sub.close()
