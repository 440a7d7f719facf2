"""A subscriber that joins a running engine (``catch_up=True``) first gets the engine's
buffered history from the replay socket, in order and once: a live batch that the catch-up
already delivered is skipped, later ones follow in sequence; without ``catch_up`` the
history stays unknown."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("zmq")

from kvcast.features.events import BlockStored


def stored(h: int) -> list[BlockStored]:
    return [BlockStored(0.0, 0, (h,), None, 16)]


def hashes(batches) -> list[int]:
    return [h for b in batches for ev in b.events for h in getattr(ev, "block_hashes", ())]


def test_a_late_subscriber_catches_up_on_the_engine_history_once_and_in_order(kv_zmq):
    pub = kv_zmq.publisher()
    for h in (10, 11, 12):  # before anyone listens: only the replay ring has them
        pub.publish_events(stored(h), ts_ms=100.0 + h)
    assert pub.flush()
    sub = kv_zmq.subscriber(pub, catch_up=True)
    plain = kv_zmq.subscriber(pub)  # the same engine, no catch-up
    time.sleep(0.5)  # both connected (no poll yet): the next batches reach them live
    for h in (13, 14):
        pub.publish_events(stored(h), ts_ms=100.0 + h)
    assert pub.flush()
    time.sleep(0.2)
    got = sub.poll(1000)  # the catch-up (10..14), then the live 13 and 14, already delivered
    assert hashes(got) == [10, 11, 12, 13, 14]
    assert (sub.counters.caught_up, sub.counters.received) == (5, 2)
    pub.publish_events(stored(15), ts_ms=115.0)
    got += kv_zmq.collect(sub, 1)
    later = kv_zmq.collect(plain, 3)
    assert hashes(got) == [10, 11, 12, 13, 14, 15]  # each once, in order
    assert hashes(later) == [13, 14, 15]  # without catch-up the history is not known
    c = sub.counters
    assert (c.gaps, c.restarts, c.missed_batches, c.replay_failures) == (0, 0, 0, 0)
