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


def test_an_engine_restarted_before_its_first_live_batch_is_seen_as_a_new_engine(kv_zmq):
    from kvcast.features.events import AllBlocksCleared

    pub = kv_zmq.publisher()
    for h in range(1, 6):  # the old engine's history (nobody subscribed)
        pub.publish_events(stored(h), ts_ms=1_000.0 + h)
    assert pub.flush()
    sub = kv_zmq.subscriber(pub, catch_up=True)
    time.sleep(0.5)
    got = sub.poll(200)  # the catch-up: seqs 0..4
    assert hashes(got) == [1, 2, 3, 4, 5]
    pub.restart()  # a new process numbers from 0 again, its cache empty
    pub.publish_events(stored(100), ts_ms=2_000.0)
    pub.publish_events(stored(101), ts_ms=2_001.0)
    later = kv_zmq.collect(sub, 3)  # the clearing, then the two batches
    assert isinstance(later[0].events[0], AllBlocksCleared)  # the old engine's blocks go
    assert hashes(later) == [100, 101]  # under numbers the catch-up used, but new batches
    assert sub.counters.restarts == 1


def test_a_gap_never_recovers_what_the_catch_up_delivered(kv_zmq):
    pub = kv_zmq.publisher()
    sub = kv_zmq.subscriber(pub, catch_up=True)
    time.sleep(0.5)  # connected: batch 0 reaches it live
    pub.publish_events(stored(100), ts_ms=1_000.0)
    for h in (101, 102):  # into the replay ring only (dropped on the way)
        pub.publish_events(stored(h), ts_ms=1_000.0 + h, deliver=False)
    assert pub.flush()
    time.sleep(0.2)
    got = sub.poll(500)  # the catch-up gives 0..2, the live 0 is skipped
    pub.publish_events(stored(103), ts_ms=1_103.0, deliver=False)
    pub.publish_events(stored(104), ts_ms=1_104.0)  # a gap: [1, 4) from the SUB's view
    assert pub.flush()
    got += kv_zmq.collect(sub, 2)
    assert hashes(got) == [100, 101, 102, 103, 104]  # each once
