"""The reuse hazard: next uses found by prefix continuation, hazards counted without censored
windows."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from kvcast.features.traces.reuse import next_use_ms, reuse_hazard


def table(rows: list[tuple[float, list[int]]]) -> pd.DataFrame:
    return pd.DataFrame(
        {"arrival_ms": [float(t) for t, _ in rows], "block_hashes": [h for _, h in rows]}
    )


def test_a_request_is_used_by_the_first_later_request_continuing_its_own_prefix() -> None:
    df = table([
        (0, [0, 1, 2]),  # conversation A, turn 1
        (10, [0, 5, 6]),  # conversation B: shares only the system block 0
        (20, [0, 1, 2, 3]),  # A, turn 2: continues request 0
        (30, [0, 1, 2, 3, 4]),  # A, turn 3: continues request 2, not request 0 again
        (40, [0, 1, 9]),  # a branch off A's first block: last used by request 3
    ])  # fmt: skip
    got = next_use_ms(df, min_blocks=2)
    assert got.tolist() == [20.0, math.inf, 30.0, 40.0, math.inf]
    # with min_blocks=1 the shared system block counts: B follows A's first turn
    assert next_use_ms(df, min_blocks=1)[0] == 10.0


def test_hazard_is_the_share_used_within_the_window_among_those_still_waiting() -> None:
    # requests at 0, 100, ..., each continued (or not) after a known gap; one trailer at 10 s
    gaps = [5.0, 25.0, 25.0, 45.0, math.inf, 5.0]
    rows, t = [], 0.0
    for i, g in enumerate(gaps):
        rows.append((t, [1000 + i, 2000 + i]))
        if math.isfinite(g):
            rows.append((t + g, [1000 + i, 2000 + i, 3000 + i]))
        t += 100.0
    rows.append((10_000.0, [7, 8]))
    df = table(sorted(rows))
    h = reuse_hazard(df, window_ms=20.0, idle_ms=[0.0, 10.0, 30.0])
    at = {r.idle_ms: r for r in h.rows}
    # the 5 continuations are never continued: they wait at every age; the trailer's window
    # runs past the end of the trace, so it is never counted
    assert (at[0.0].waiting, at[0.0].followed) == (11, 2)  # the two 5 ms gaps
    assert (at[10.0].waiting, at[10.0].followed) == (9, 2)  # the two 25 ms gaps
    assert (at[30.0].waiting, at[30.0].followed) == (7, 1)  # the 45 ms gap
    assert at[30.0].p == pytest.approx(1 / 7)
    assert h.best is not None and h.best.idle_ms == 10.0
    assert h.ever_followed == pytest.approx(5 / 11)  # within 30 + 20 ms


def test_a_window_past_the_end_of_the_trace_is_not_counted() -> None:
    df = table([(0, [1, 2]), (50, [1, 2, 3]), (60, [9, 9])])
    h = reuse_hazard(df, window_ms=100.0, idle_ms=[0.0])
    assert h.rows[0].waiting == 0 and math.isnan(h.rows[0].p)
    assert h.best is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"window_ms": 0.0, "idle_ms": [0.0]}, "window must be positive, got 0.0"),
        ({"window_ms": 1.0, "idle_ms": [-1.0]}, "idle ages must be non-negative"),
        ({"window_ms": 1.0, "idle_ms": []}, "at least one"),
        ({"window_ms": 1.0, "idle_ms": [0.0], "min_blocks": 0}, "min_blocks must be at least 1"),
    ],
)
def test_bad_parameters_are_refused_with_the_value(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        reuse_hazard(table([(0, [1])]), **kwargs)


def test_gap_quantiles_are_over_the_requests_that_were_used_again() -> None:
    df = table([(0, [1, 2]), (10, [1, 2, 3]), (100, [5, 6]), (130, [5, 6, 7]), (200, [9])])
    h = reuse_hazard(df, window_ms=1.0, idle_ms=[0.0])
    assert h.gap_quantiles_ms["p50"] == pytest.approx(np.median([10.0, 30.0]))


def test_a_trace_without_block_hashes_is_refused() -> None:
    with pytest.raises(ValueError, match="no block hashes"):
        reuse_hazard(table([(0, []), (10, [])]), window_ms=1.0, idle_ms=[0.0])
