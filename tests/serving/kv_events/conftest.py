"""Real-ZMQ harness for the KV-event tests: a private context, loopback endpoints, and a join
step that beats ZMQ's slow-joiner problem (a SUB misses whatever a PUB sent before the
connection finished) by publishing probe batches until the subscriber sees one."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from kvcast.serving.kv_events import DecodedBatch, KvEventPublisher, KvEventSubscriber

PROBE_TS_MS = 1.0  # probes are empty batches stamped with this time
LOOPBACK = "tcp://127.0.0.1:*"


class KvZmqHarness:
    def __init__(self, context: Any) -> None:
        from kvcast.serving.kv_events import KvEventPublisher, KvEventSubscriber, encode_batch

        self.context = context
        self._publisher_cls, self._subscriber_cls = KvEventPublisher, KvEventSubscriber
        self._encode = encode_batch
        self._closers: list[object] = []

    def publisher(self, endpoint: str = LOOPBACK, *, replay: str | None = LOOPBACK, **kw: object):
        pub = self._publisher_cls(endpoint, replay, context=self.context, **kw)
        self._closers.append(pub)
        return pub

    def subscriber(self, pub: KvEventPublisher, *, replay: bool = True, **kw: object):
        kw.setdefault("replay_endpoint", pub.replay_endpoint if replay else None)
        sub = self._subscriber_cls(pub.endpoint, node=3, context=self.context, **kw)
        self._closers.append(sub)
        return sub

    def join(self, pub: KvEventPublisher, sub: KvEventSubscriber, timeout_s: float = 5.0):
        """Publish probes until ``sub`` receives one; return everything it received."""
        got: list[DecodedBatch] = []
        deadline = time.monotonic() + timeout_s
        while not got:
            assert time.monotonic() < deadline, "subscriber never received a probe"
            pub.publish(self._encode([], ts_ms=PROBE_TS_MS))
            got = sub.poll(20)
        assert pub.flush()
        while batch := sub.poll(100):  # probes still on the wire
            got.extend(batch)
        return got

    @staticmethod
    def collect(sub: KvEventSubscriber, n: int, timeout_s: float = 5.0) -> list[DecodedBatch]:
        """The next ``n`` non-probe batches (fewer if the timeout passes first)."""
        out: list[DecodedBatch] = []
        deadline = time.monotonic() + timeout_s
        while len(out) < n and time.monotonic() < deadline:
            out.extend(b for b in sub.poll(50) if b.ts_ms != PROBE_TS_MS)
        return out

    def close(self) -> None:
        for obj in reversed(self._closers):
            obj.close()  # type: ignore[attr-defined]


@pytest.fixture
def kv_zmq() -> Iterator[KvZmqHarness]:
    zmq = pytest.importorskip("zmq")
    pytest.importorskip("msgspec")
    ctx = zmq.Context()
    harness = KvZmqHarness(ctx)
    try:
        yield harness
    finally:
        harness.close()
        ctx.destroy(linger=0)
