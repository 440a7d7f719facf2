"""The ingestion queue is bounded in events: when full, the oldest events are dropped and
counted (a batch may be cut at its head), never memory growth; the sidecar reports the drops."""

from __future__ import annotations

from sidecar_harness import open_sidecar, sidecar_config

from kvcast.features.events import AllBlocksCleared, BlockRemoved, BlockStored, Event
from kvcast.features.online.state import FeatureState
from kvcast.serving.sidecar.event_queue import EventQueue


def _events(start: int, n: int) -> list[BlockStored]:
    return [BlockStored(float(start + i), 0, (start + i,), None, 16) for i in range(n)]


def _times(batches: list[list[Event]]) -> list[int]:
    return [int(e.ts_ms) for b in batches for e in b]


def test_a_full_queue_drops_the_oldest_events_and_counts_them() -> None:
    q = EventQueue(capacity_events=10)
    assert q.put(_events(0, 4), "zmq") == 0
    assert q.put(_events(4, 4), "http") == 0
    assert q.put(_events(8, 5), "zmq") == 3  # 13 > 10: events 0..2 go, the first batch is cut
    assert len(q) == 10 and q.dropped == 3 and q.peak == 10
    assert q.accepted == {"zmq": 9, "http": 4}
    assert _times(q.get(max_events=100, timeout_s=0)) == list(range(3, 13))
    assert len(q) == 0


def test_a_batch_larger_than_the_queue_keeps_its_newest_events() -> None:
    q = EventQueue(capacity_events=5)
    q.put(_events(0, 2), "zmq")
    assert q.put(_events(100, 8), "zmq") == 2 + 3
    assert _times(q.get(100, 0)) == [103, 104, 105, 106, 107]


def test_the_removals_among_dropped_events_still_reach_the_consumer_first() -> None:
    q = EventQueue(capacity_events=4)
    q.put([BlockStored(0.0, 0, (1, 2, 3), None, 16), BlockStored(0.0, 1, (9,), None, 16)], "a")
    q.put([BlockRemoved(1.0, 0, (1,)), BlockRemoved(2.0, 0, (2,), "CPU")], "a")
    q.put([AllBlocksCleared(3.0, 1), BlockRemoved(4.0, 1, (9,))], "a")
    q.put(_events(10, 4), "b")  # every earlier event is dropped
    assert q.dropped == 6 and q.salvage.salvaged == 4
    salvaged, *rest = q.get(100, 0)
    assert salvaged == [
        AllBlocksCleared(3.0, 1),
        BlockRemoved(2.0, 0, (1,), "GPU"),
        BlockRemoved(2.0, 0, (2,), "CPU"),
        BlockRemoved(4.0, 1, (9,), "GPU"),
    ]
    assert _times(rest) == [10, 11, 12, 13] and q.get(100, 0) == []


def test_lost_removals_no_longer_leave_blocks_resident_for_ever() -> None:
    """An engine holding 8 blocks, its events through a queue that overflows again and again:
    the feature state's residency stays within what the engine holds."""
    q, state = EventQueue(capacity_events=16), FeatureState()
    held: list[int] = []
    for burst in range(50):
        for i in range(40):  # 40 new blocks per burst, the engine keeps the newest 8
            h = burst * 1000 + i
            events: list[Event] = [BlockStored(float(h), 0, (h,), None, 16)]
            held.append(h)
            if len(held) > 8:
                events.append(BlockRemoved(float(h), 0, (held.pop(0),)))
            q.put(events, "zmq")
        for batch in q.get(10**6, 0):
            state.update_many(batch)
    assert q.dropped > 0
    assert len(state.residency) <= 8


def test_removals_kept_past_their_bound_become_a_clear_of_their_node() -> None:
    q = EventQueue(capacity_events=2)
    q.put([BlockRemoved(0.0, 0, (1, 2, 3)), BlockRemoved(0.0, 1, (7,))], "a")
    q.put(_events(10, 2), "b")
    assert q.salvage.cleared_for_space == 1
    assert q.get(100, 0)[0] == [AllBlocksCleared(0.0, 0), BlockRemoved(0.0, 1, (7,))]


def test_get_takes_whole_batches_up_to_about_max_events_in_order() -> None:
    q = EventQueue(capacity_events=100)
    for i in range(5):
        q.put(_events(10 * i, 3), "zmq")
    first = q.get(max_events=4, timeout_s=0)
    assert _times(first) == [0, 1, 2, 10, 11, 12]  # whole batches, stops once >= 4
    assert _times(q.get(100, 0)) == [20, 21, 22, 30, 31, 32, 40, 41, 42]
    assert q.get(100, timeout_s=0.01) == []


def test_posting_into_a_full_sidecar_queue_reports_and_counts_the_drops(tmp_path, run) -> None:
    async def main() -> None:
        async with open_sidecar(sidecar_config(tmp_path, queue_events=4)) as (sc, client):
            sc.keeper.stop()  # nobody drains: the queue fills up
            kv = {"node": 0, "events": [{"type": "AllBlocksCleared"}] * 3}
            assert (await client.post("/v1/kv-events", json=kv)).json()["dropped"] == 0
            body = (await client.post("/v1/kv-events", json=kv)).json()
            assert body == {"accepted": 3, "dropped": 2, "queue_depth": 4, "duplicates": 0}
            text = (await client.get("/metrics")).text
            assert 'kvcast_sidecar_events_dropped_total{reason="queue_full"} 2.0' in text
            assert 'kvcast_sidecar_events_in_total{source="http"} 6.0' in text
            assert "kvcast_sidecar_queue_peak_events 4.0" in text

    run(main())


def test_the_queue_counts_each_owners_queued_events_however_they_leave() -> None:
    """``held(owner)``: what a tenant token's share is measured by; events leave it when the
    consumer takes them and when the queue drops them for room (a cut batch in part)."""
    q = EventQueue(capacity_events=10)
    q.put(_events(0, 4), "http", owner=0)
    q.put(_events(4, 3), "http", owner=1)
    q.put(_events(7, 2), "zmq")  # no owner: engines, the shared token
    assert (q.held(0), q.held(1), q.held(None)) == (4, 3, 0)
    q.put(_events(9, 3), "zmq")  # 12 > 10: owner 0's first two events are dropped
    assert (q.held(0), q.held(1)) == (2, 3)
    q.put(_events(12, 4), "http", owner=1)  # 14 > 10: owner 0's last two, owner 1's first two
    assert (q.held(0), q.held(1)) == (0, 5)
    taken = q.get(max_events=3, timeout_s=0)  # owner 1's cut batch (1 left), then the zmq one
    assert _times(taken) == [6, 7, 8]
    assert q.held(1) == 4
    q.get(max_events=100, timeout_s=0)
    assert q.held(1) == 0 and len(q) == 0
