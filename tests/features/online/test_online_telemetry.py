"""Node telemetry: latest values, least-squares slopes per second, reset-aware eviction rate."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np

from kvcast.features.counters import BadInputCounters
from kvcast.features.events import TelemetrySample
from kvcast.features.online.telemetry import NodeTelemetry


def test_queue_slope_is_the_least_squares_slope_per_second(
    make_telemetry: Callable[..., TelemetrySample],
) -> None:
    node, bad = NodeTelemetry((3000.0,), 3000.0), BadInputCounters()
    for ts, q in ((0.0, 1), (1000.0, 3), (2000.0, 4), (3000.0, 8)):
        node.add(make_telemetry(ts, 0, queue=q), bad)
    row = node.row(3000.0)
    expected = np.polyfit([1.0, 2.0, 3.0], [3.0, 4.0, 8.0], 1)[0]  # the 0 ms sample left
    assert math.isclose(row[4], expected)
    assert math.isclose(row[5], 100 * expected)  # queued prefill tokens = 100 x queue


def test_one_sample_gives_no_slope_and_no_samples_give_nan_everywhere(
    make_telemetry: Callable[..., TelemetrySample],
) -> None:
    node, bad = NodeTelemetry((3000.0,), 3000.0), BadInputCounters()
    assert all(math.isnan(v) for v in node.row(0.0))
    node.add(make_telemetry(0.0, 0, queue=2), bad)
    row = node.row(500.0)
    assert row[0] == 2.0 and math.isnan(row[4]) and row[6] == 500.0  # telemetry age


def test_memory_fractions_are_over_capacity(
    make_telemetry: Callable[..., TelemetrySample],
) -> None:
    node, bad = NodeTelemetry((3000.0,), 3000.0), BadInputCounters()
    sample = dataclasses.replace(make_telemetry(0.0, 0), pending_replication_bytes=100)
    node.add(sample, bad)
    used, cached, spec, free = node.row(0.0)[7:11]
    assert (used, cached, spec, free) == (0.5, 0.4, 0.05, (1000 - 500 - 100) / 1000)


def test_an_eviction_counter_reset_is_counted_and_read_as_an_increase(
    make_telemetry: Callable[..., TelemetrySample],
) -> None:
    node, bad = NodeTelemetry((3000.0,), 10000.0), BadInputCounters()
    for ts, total in ((0.0, 10), (1000.0, 30), (2000.0, 5)):
        node.add(make_telemetry(ts, 0, evictions=total), bad)
    assert bad.counts["telemetry_counter_reset"] == 1
    assert math.isclose(node.row(2000.0)[-1], (20 + 5) / 2.0)  # evictions per second
