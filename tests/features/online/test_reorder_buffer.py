"""Out-of-order events: within the tolerance reordered, beyond it dropped, always counted."""

from __future__ import annotations

from kvcast.features.counters import BadInputCounters
from kvcast.features.online.reorder import ReorderBuffer


def _buffer(tolerance: float) -> tuple[ReorderBuffer, list[float], BadInputCounters]:
    applied: list[float] = []
    bad = BadInputCounters()
    return ReorderBuffer(applied.append, tolerance, bad), applied, bad


def test_in_order_events_pass_straight_through_with_zero_tolerance() -> None:
    buf, applied, bad = _buffer(0.0)
    for ts in (1.0, 2.0, 2.0, 5.0):
        buf.push(ts, ts)
    assert applied == [1.0, 2.0, 2.0, 5.0] and len(buf) == 0 and bad.total() == 0


def test_late_events_are_dropped_and_counted_with_zero_tolerance() -> None:
    buf, applied, bad = _buffer(0.0)
    for ts in (1.0, 5.0, 3.0, 6.0):
        buf.push(ts, ts)
    assert applied == [1.0, 5.0, 6.0]
    assert bad.counts["out_of_order_dropped"] == 1


def test_events_within_the_tolerance_are_applied_in_time_order() -> None:
    buf, applied, bad = _buffer(10.0)
    for ts in (1.0, 8.0, 4.0, 30.0, 25.0):
        buf.push(ts, ts)
    assert applied == [1.0, 4.0, 8.0]  # 25 and 30 are held until 10 ms pass them
    buf.flush()
    assert applied == [1.0, 4.0, 8.0, 25.0, 30.0]
    assert bad.counts["reordered"] == 2 and bad.counts["out_of_order_dropped"] == 0


def test_events_beyond_the_tolerance_are_dropped() -> None:
    buf, applied, bad = _buffer(10.0)
    for ts in (50.0, 30.0):
        buf.push(ts, ts)
    buf.flush()
    assert applied == [50.0] and bad.counts["out_of_order_dropped"] == 1


def test_equal_times_keep_their_arrival_order() -> None:
    buf, applied, _ = _buffer(10.0)
    for item in ("a", "b", "c"):
        buf.push(1.0, item)
    buf.flush()
    assert applied == ["a", "b", "c"]


def test_commit_applies_held_events_and_refuses_older_ones() -> None:
    buf, applied, bad = _buffer(100.0)
    buf.push(10.0, 10.0)
    buf.commit(20.0)
    assert applied == [10.0]
    buf.push(15.0, 15.0)
    assert bad.counts["out_of_order_dropped"] == 1
