"""The vectorised read path equals the per-item definitions it replaced."""

from __future__ import annotations

import dataclasses
import math
import struct
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcast.features.counters import BadInputCounters
from kvcast.features.events import TelemetrySample
from kvcast.features.online.blocks import HASHES, SHIFT, SLOT, BlockTable
from kvcast.features.online.keys import EMPTY, count_keys, count_many, switch
from kvcast.features.online.packing import pack, pack_rows
from kvcast.features.online.residency import Residency
from kvcast.features.online.telemetry import NodeTelemetry, lsq_slope_per_s

WINDOW = 100.0


def _see(s: list[Any], key: Any, ts: float) -> None:
    if s[0] == key:
        s[1] = ts
    else:
        switch(s, 0, key, ts, WINDOW)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 5)), max_size=60)))
def test_count_many_equals_count_keys_per_list(streams: list[list[tuple[int, int]]]) -> None:
    states = []
    for stream in streams:
        s, ts = list(EMPTY), 0.0
        for key, gap in stream:
            ts += 10.0 * gap
            _see(s, key, ts)
        states.append(s)
    for now in (0.0, 150.0, 400.0, 2000.0):
        want = [count_keys(s, 0, now, WINDOW) for s in states]
        assert count_many(states, 0, now, WINDOW).tolist() == want


def test_codes_name_each_blocks_run_and_index_through_splits_and_sweeps() -> None:
    table = BlockTable((1000.0,), window_ms=20000.0, horizon_ms=60000.0)
    requests = ((0.0, (1, 2, 3, 4, 5)), (1.0, (2, 3, 9)), (2.0, (4, 5)), (70000.0, (3, 7)))
    for ts, hashes in requests:
        cover = table.cover(ts, hashes)
        table.touch(ts, cover, hashes, (ts, 0, None, 0, 0, 0.0, 0.0), None, 0.0)
        if ts == 2.0:
            table.sweep(70000.0)  # everything so far is dropped, its slots freed
            assert not table.code_of and len(table._free) == len(table.slot_runs) - 1
    assert table.code_of.keys() == table.run_of.keys() == {3, 7}
    for h, run in table.run_of.items():
        slot, index = table.code_of[h] >> SHIFT, table.code_of[h] & ((1 << SHIFT) - 1)
        assert table.slot_runs[slot] is run and run[1 + SLOT] == slot
        assert run[1 + HASHES].index(h) == index
    assert table.slot_runs[0] is table.dead


def test_residency_columns_equal_the_masks() -> None:
    res, bad = Residency(60), BadInputCounters()
    res.store("GPU", 0, (1, 2, 3))
    res.store("GPU", 55, (2, 3))
    res.store("GPU", 7, (3,))
    res.store("CPU", 7, (1, 4))
    res.remove("GPU", 7, (3,), bad)
    for hashes in ([1, 2, 3, 4, 5], [3, 3, 1]):  # distinct, and with a repeat
        homes = np.array([0, 55, -1, 7, 2][: len(hashes)])
        gpu, lower = res.masks(hashes)
        cols = res.columns(hashes, homes)
        assert cols[0].tolist() == [m.bit_count() for m in gpu]
        assert cols[1].tolist() == [m.bit_count() for m in lower]
        assert cols[2].tolist() == [m & ((1 << 52) - 1) for m in gpu]
        want = [(m >> x) & 1 if x >= 0 else math.nan for m, x in zip(gpu, homes, strict=True)]
        assert np.array_equal(cols[3], np.array(want, dtype=float), equal_nan=True)


def _uncached(node: NodeTelemetry, now: float) -> list[float]:
    """The row from the samples, window by window, without the cache."""
    arr = np.array(node.samples)
    t = arr[:, 0]
    slopes = [lsq_slope_per_s(t[t + w > now], arr[t + w > now, c]) for c in (1, 2)
              for w in node.windows]  # fmt: skip
    return slopes


def test_cached_telemetry_rows_track_samples_entering_and_leaving_windows(
    make_telemetry: Callable[..., TelemetrySample],
) -> None:
    node, bad = NodeTelemetry((2500.0, 6000.0), 4000.0), BadInputCounters()
    queue = [1, 3, 4, 8, 2, 2, 9, 5]
    for i, q in enumerate(queue):
        node.add(make_telemetry(1000.0 * i, 0, queue=q, evictions=3 * i), bad)
        for now in (1000.0 * i, 1000.0 * i + 499.0, 1000.0 * i + 500.0, 1000.0 * i + 2600.0):
            row = node.row(now)
            got = row[4:8]
            assert np.array_equal(got, _uncached(node, now), equal_nan=True)
            assert row[8] == now - 1000.0 * i  # telemetry age
    late = dataclasses.replace(make_telemetry(2500.0, 0, queue=1), evictions_total=21)
    node.add(late, bad)  # out of order: the cache steps aside
    assert np.array_equal(node.row(9000.0)[4:8], _uncached(node, 9000.0), equal_nan=True)


def test_packing_is_exact_and_refuses_what_the_dtype_cannot_hold() -> None:
    floats = [0.1, -2.0, math.inf, 3]
    assert pack(iter(floats), 4).tolist() == [0.1, -2.0, math.inf, 3.0]
    assert pack([2**63 - 1, -5], 2, np.int64).tolist() == [2**63 - 1, -5]
    with pytest.raises(struct.error):
        pack([2**63], 1, np.int64)
    rows = pack_rows([(1, 2.5), [math.nan, 4]], 2, 2)
    assert rows.shape == (2, 2) and rows[0].tolist() == [1.0, 2.5] and math.isnan(rows[1, 0])


def test_run_of_is_a_live_view_of_the_codes() -> None:
    table = BlockTable((1000.0,), window_ms=20000.0, horizon_ms=60000.0)
    cover = table.cover(0.0, (1, 2))
    table.touch(0.0, cover, (1, 2), (0.0, 0, None, 0, 0, 0.0, 0.0), None, 0.0)
    assert table.run_of[1] is table.run_of[2] is cover[0][0]
    assert set(table.run_of) == {1, 2} and len(table.run_of) == 2 and 3 not in table.run_of
    assert table.run_of.get(3) is None
