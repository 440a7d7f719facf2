"""The columnar event table: same bad-input rules and the same order as FeatureState."""

from __future__ import annotations

from collections.abc import Callable

from kvcast.features.config import FeatureConfig
from kvcast.features.counters import BadInputCounters
from kvcast.features.events import BlockRemoved, BlockStored, Event, RequestArrived
from kvcast.features.offline.ingest import event_table
from kvcast.features.online.reorder import ReorderBuffer


def test_block_events_count_every_hash_named_by_an_accepted_event(
    cfg: FeatureConfig, make_request: Callable[..., RequestArrived]
) -> None:
    events = [
        make_request(0.0, [1, 2, 3]),
        BlockStored(0.0, 0, (1, 2, 3), None, 512),
        BlockRemoved(1.0, 0, (2,)),
        make_request(2.0, [1], node=9),  # dropped
    ]
    table = event_table(events, cfg)
    assert table.block_events == 7 and table.bad.counts["unknown_node"] == 1
    assert list(table.a_hash) == [1, 2, 3] and list(table.s_kind) == [1, 1, 1, -1]


def test_events_are_ordered_and_dropped_exactly_as_the_reorder_buffer_does(
    cfg: FeatureConfig, make_request: Callable[..., RequestArrived]
) -> None:
    cfg = cfg.model_copy(update={"reorder_tolerance_ms": 10.0})
    times = [0.0, 5.0, 3.0, 20.0, 8.0, 14.0, 14.0, 40.0, 31.0, 29.0]
    events: list[Event] = [make_request(t, [int(t)]) for t in times]
    table = event_table(events, cfg)
    applied: list[float] = []
    bad = BadInputCounters()
    buffer = ReorderBuffer(lambda e: applied.append(e.ts_ms), 10.0, bad)
    for e in events:
        buffer.push(e.ts_ms, e)
    buffer.flush()
    assert list(table.r_ts) == applied
    assert table.bad.as_dict() == bad.as_dict()
    assert bad.counts["out_of_order_dropped"] == 2 and bad.counts["reordered"] == 4


def test_negative_python_hashes_wrap_to_uint64(
    cfg: FeatureConfig, make_request: Callable[..., RequestArrived]
) -> None:
    table = event_table([make_request(0.0, [-1, 2**64 - 2])], cfg)
    assert list(table.a_hash) == [2**64 - 1, 2**64 - 2]
