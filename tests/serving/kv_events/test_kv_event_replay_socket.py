"""KvEventPublisher speaks vLLM's wire protocol: PUB frames and the ROUTER replay exchange."""

from __future__ import annotations

import pytest

zmq = pytest.importorskip("zmq")

from kvcast.serving.kv_events import encode_batch  # noqa: E402
from kvcast.serving.kv_events.wire import END_SEQ_FRAME  # noqa: E402

TIMEOUT_MS = 3000


def _recv(sock) -> list[bytes]:
    assert sock.poll(TIMEOUT_MS, zmq.POLLIN), "no reply in time"
    return sock.recv_multipart()


def _payload(i: int) -> bytes:
    return encode_batch([], ts_ms=float(i))


def test_dealer_replay_streams_buffered_batches_from_start_then_end_marker(kv_zmq):
    pub = kv_zmq.publisher(buffer_steps=4)
    for i in range(6):  # ring keeps seqs 2..5
        assert pub.publish(_payload(i), deliver=False) == i
    assert pub.flush()
    dealer = kv_zmq.context.socket(zmq.DEALER)
    dealer.connect(pub.replay_endpoint)
    dealer.send_multipart([b"", (3).to_bytes(8, "big")])
    replies = [_recv(dealer) for _ in range(4)]
    assert replies[:3] == [[b"", i.to_bytes(8, "big"), _payload(i)] for i in (3, 4, 5)]
    assert replies[3] == [b"", END_SEQ_FRAME, b""]
    assert END_SEQ_FRAME == b"\xff" * 8
    dealer.send_multipart([b"", (0).to_bytes(8, "big")])  # 0 and 1 fell out of the ring
    firsts = [_recv(dealer)[1] for _ in range(5)]
    assert [int.from_bytes(f, "big", signed=True) for f in firsts] == [2, 3, 4, 5, -1]
    dealer.close(linger=0)


def test_req_socket_as_in_vllm_example_gets_first_reply_and_bad_requests_are_ignored(kv_zmq):
    pub = kv_zmq.publisher()
    pub.publish(_payload(0), deliver=False)
    assert pub.flush()
    dealer = kv_zmq.context.socket(zmq.DEALER)
    dealer.connect(pub.replay_endpoint)
    dealer.send_multipart([(0).to_bytes(8, "big")])  # no delimiter: 2 frames, ignored
    req = kv_zmq.context.socket(zmq.REQ)
    req.connect(pub.replay_endpoint)
    req.send((0).to_bytes(8, "big"))
    assert _recv(req) == [(0).to_bytes(8, "big"), _payload(0)]
    assert not dealer.poll(100, zmq.POLLIN)
    dealer.close(linger=0)
    req.close(linger=0)


def test_pub_frames_are_topic_seq_payload(kv_zmq):
    pub = kv_zmq.publisher(topic="kv-events", replay=None)
    sub = kv_zmq.context.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(pub.endpoint)
    for _ in range(250):  # slow joiner: publish until the first message lands
        seq = pub.publish(_payload(7))
        if sub.poll(20, zmq.POLLIN):
            break
    topic, seq_frame, payload = sub.recv_multipart()
    assert topic == b"kv-events"
    assert len(seq_frame) == 8 and int.from_bytes(seq_frame, "big") <= seq
    assert payload == _payload(7)
    sub.close(linger=0)


def test_publish_after_close_raises_and_close_is_idempotent(kv_zmq):
    pub = kv_zmq.publisher()
    pub.close()
    pub.close()
    with pytest.raises(RuntimeError):
        pub.publish(b"x")
