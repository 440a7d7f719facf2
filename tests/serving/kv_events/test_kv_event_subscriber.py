"""KvEventSubscriber over real loopback ZMQ: decoding, gaps with replay, restarts, bad input."""

from __future__ import annotations

import time

import pytest

zmq = pytest.importorskip("zmq")

from kvcast.features.events import AllBlocksCleared, BlockRemoved, BlockStored  # noqa: E402
from kvcast.serving.kv_events import KvEventPublisher, encode_batch  # noqa: E402


def _ts(i: int) -> float:
    return 1000.0 * (i + 1)  # whole seconds: exact through the wire's ms -> s -> ms


def _stored(i: int) -> BlockStored:
    return BlockStored(_ts(i), 3, (i, i + 1), None, 16)


def _publish(pub: KvEventPublisher, i: int, **kw: object) -> int:
    return pub.publish_events([_stored(i)], ts_ms=_ts(i), **kw)  # type: ignore[arg-type]


def test_batches_in_every_encoding_arrive_decoded_in_order(kv_zmq):
    pub = kv_zmq.publisher(topic="kv-events")
    sub = kv_zmq.subscriber(pub, topic="kv-events")
    kv_zmq.join(pub, sub)
    combos = [
        (e, b, h) for e in ("array", "map") for b in ("array", "map") for h in ("int", "bytes")
    ]
    for i, (enc, benc, hf) in enumerate(combos):
        _publish(pub, i, encoding=enc, batch_encoding=benc, hash_format=hf, data_parallel_rank=i)
    got = kv_zmq.collect(sub, len(combos))
    assert [b.events for b in got] == [(_stored(i),) for i in range(len(combos))]
    assert [b.data_parallel_rank for b in got] == list(range(len(combos)))
    c = sub.counters
    assert (c.gaps, c.restarts, c.decode_errors, c.malformed) == (0, 0, 0, 0)
    assert c.decoded_events == len(combos)


def test_gap_is_detected_and_recovered_through_the_replay_socket(kv_zmq):
    pub = kv_zmq.publisher()
    sub = kv_zmq.subscriber(pub)
    kv_zmq.join(pub, sub)
    _publish(pub, 1)
    _publish(pub, 2, deliver=False)  # in the ring, never sent: the SUB misses them
    _publish(pub, 3, deliver=False)
    _publish(pub, 4)
    got = kv_zmq.collect(sub, 4)
    assert [b.events[0].block_hashes[0] for b in got] == [1, 2, 3, 4]
    c = sub.counters
    assert (c.gaps, c.missed_batches, c.replayed, c.replay_failures) == (1, 2, 2, 0)


def test_gap_without_replay_is_counted_not_recovered(kv_zmq):
    pub = kv_zmq.publisher()
    sub = kv_zmq.subscriber(pub, replay=False)
    kv_zmq.join(pub, sub)
    _publish(pub, 1)
    _publish(pub, 2, deliver=False)
    _publish(pub, 3)
    got = kv_zmq.collect(sub, 2)
    assert [b.events[0].block_hashes[0] for b in got] == [1, 3]
    c = sub.counters
    assert (c.gaps, c.missed_batches, c.replayed) == (1, 1, 0)


def test_unanswered_replay_request_times_out_and_is_counted(kv_zmq, tmp_path):
    pub = kv_zmq.publisher()
    dead = f"ipc://{tmp_path}/nobody-home"
    sub = kv_zmq.subscriber(pub, replay_endpoint=dead, replay_timeout_ms=100)
    kv_zmq.join(pub, sub)
    _publish(pub, 1, deliver=False)
    _publish(pub, 2)
    got = kv_zmq.collect(sub, 1)
    assert [b.events[0].block_hashes[0] for b in got] == [2]
    c = sub.counters
    assert (c.gaps, c.missed_batches, c.replay_failures, c.replayed) == (1, 1, 1, 0)


def test_new_publisher_process_on_same_endpoint_is_a_restart_that_clears_the_node(kv_zmq):
    old = kv_zmq.publisher()
    sub = kv_zmq.subscriber(old)
    kv_zmq.join(old, sub)
    for i in range(200):  # the new process's first seqs must sit below the old ones
        _publish(old, i)
    assert len(kv_zmq.collect(sub, 200)) == 200
    endpoint, replay = old.endpoint, old.replay_endpoint
    old.close()
    new = _rebind(kv_zmq, endpoint, replay)
    got = kv_zmq.join(new, sub)
    c = sub.counters
    assert (c.restarts, c.gaps, c.replay_failures) == (1, 0, 0)
    assert got[0].events == (AllBlocksCleared(_ts(199), 3),)  # at the old process's last time
    assert all(not b.events for b in got[1:])  # then every probe of the new process, since
    assert c.replayed == c.missed_batches  # those sent before the SUB reconnected were replayed
    assert len(got) - 1 == new.next_seq


def _rebind(kv_zmq, endpoint: str, replay: str) -> KvEventPublisher:
    """ZMQ releases a closed listener asynchronously: retry the bind for a bounded time."""
    deadline = time.monotonic() + 5.0
    while True:
        try:
            return kv_zmq.publisher(endpoint, replay=replay)
        except zmq.ZMQError:
            assert time.monotonic() < deadline, "port never freed"
            time.sleep(0.02)


def test_publisher_restart_method_resets_numbering_like_a_new_process(kv_zmq):
    pub = kv_zmq.publisher()
    sub = kv_zmq.subscriber(pub, clear_on_restart=False)
    kv_zmq.join(pub, sub)
    _publish(pub, 1)
    pub.restart()
    assert _publish(pub, 2) == 0
    got = kv_zmq.collect(sub, 2)
    assert [b.events for b in got] == [(_stored(1),), (_stored(2),)]
    assert (sub.counters.restarts, sub.counters.gaps) == (1, 0)


def test_undecodable_payload_is_counted_and_keeps_the_sequence(kv_zmq):
    pub = kv_zmq.publisher()
    sub = kv_zmq.subscriber(pub)
    kv_zmq.join(pub, sub)
    pub.publish(b"\xc1 not msgpack")
    pub.publish(encode_batch([BlockRemoved(5.0, 3, (9,))], ts_ms=5.0))
    got = kv_zmq.collect(sub, 1)
    assert got[0].events == (BlockRemoved(5.0, 3, (9,)),)
    c = sub.counters
    assert (c.decode_errors, c.gaps, c.restarts) == (1, 0, 0)


def test_malformed_multipart_messages_are_counted_not_raised(kv_zmq):
    raw = kv_zmq.context.socket(zmq.PUB)
    port = raw.bind_to_random_port("tcp://127.0.0.1")
    fake = type("P", (), {"endpoint": f"tcp://127.0.0.1:{port}", "replay_endpoint": None})
    sub = kv_zmq.subscriber(fake)
    good = [b"", (0).to_bytes(8, "big"), encode_batch([], ts_ms=1.0)]
    for _ in range(250):  # slow joiner
        raw.send_multipart(good)
        if sub.poll(20):
            break
    raw.send_multipart([b"", encode_batch([], ts_ms=1.0)])  # two frames
    raw.send_multipart([b"", b"\x00\x01", encode_batch([], ts_ms=1.0)])  # 2-byte seq
    raw.send_multipart([*good[:2], b"", b"extra"])  # four frames
    raw.send_multipart([b"", (1_000).to_bytes(8, "big"), encode_batch([], ts_ms=2.0)])
    got = kv_zmq.collect(sub, 1)
    assert [b.ts_ms for b in got] == [2.0]
    assert sub.counters.malformed == 3
    raw.close(linger=0)
