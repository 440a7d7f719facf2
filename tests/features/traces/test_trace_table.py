"""The canonical table and Trace: columns, window, time scaling, sorting."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from kvcast.features.traces.table import (
    COLUMNS,
    LoadReport,
    Trace,
    empty_table,
    make_table,
    sort_by_arrival,
)


def trace(arrivals: list[float]) -> Trace:
    n = len(arrivals)
    table = make_table(
        arrival_ms=arrivals,
        input_tokens=list(range(n)),
        output_tokens=[1] * n,
        block_hashes=[[i] for i in range(n)],
        request_id=[f"q{i}" for i in range(n)],
    )
    return Trace(table, name="t", block_size=512, source="s", report=LoadReport(lines=n))


def test_make_table_has_the_canonical_columns_and_dtypes() -> None:
    for df in (trace([0.0, 1.0]).requests, empty_table()):
        assert tuple(df.columns) == COLUMNS
        dtypes = {c: str(t) for c, t in df.dtypes.items()}
        assert dtypes["arrival_ms"] == "float64" and dtypes["input_tokens"] == "int64"
        assert dtypes["request_id"] == "string" and dtypes["chat_id"] == "Int64"
        assert dtypes["block_hashes"] == "object"


def test_window_keeps_start_inclusive_end_exclusive_and_rebases_to_start() -> None:
    out = trace([0.0, 100.0, 200.0, 300.0]).window(100.0, 300.0)
    assert out.requests["request_id"].tolist() == ["q1", "q2"]
    assert out.requests["arrival_ms"].tolist() == [0.0, 100.0]
    assert out.requests.index.tolist() == [0, 1]


def test_window_with_open_start_keeps_arrivals_unchanged() -> None:
    out = trace([50.0, 100.0, 200.0]).window(end_ms=150.0)
    assert out.requests["arrival_ms"].tolist() == [50.0, 100.0]


def test_window_keeps_name_block_size_and_leaves_the_original_alone() -> None:
    original = trace([0.0, 100.0, 200.0])
    out = original.window(100.0)
    assert (out.name, out.block_size, out.source) == ("t", 512, "s")
    assert original.requests["arrival_ms"].tolist() == [0.0, 100.0, 200.0]


def test_window_rejects_an_end_before_the_start_and_nan_bounds() -> None:
    with pytest.raises(ValueError, match="before its start"):
        trace([0.0]).window(10.0, 5.0)
    with pytest.raises(ValueError, match="nan"):
        trace([0.0]).window(math.nan)


def test_time_scaled_divides_arrivals_and_keeps_everything_else() -> None:
    original = trace([0.0, 100.0, 300.0])
    out = original.time_scaled(2.0)
    assert out.requests["arrival_ms"].tolist() == [0.0, 50.0, 150.0]
    assert out.duration_ms == 150.0
    rest = [c for c in COLUMNS if c != "arrival_ms"]
    pd.testing.assert_frame_equal(out.requests[rest], original.requests[rest])
    assert original.requests["arrival_ms"].tolist() == [0.0, 100.0, 300.0]


@pytest.mark.parametrize("factor", [0.0, -1.0, math.nan, math.inf])
def test_bad_time_scale_raises_value_error(factor: float) -> None:
    with pytest.raises(ValueError, match="time-scale must be a positive finite number"):
        trace([0.0]).time_scaled(factor)


@pytest.mark.parametrize("block_size", [0, -512, 1.5, True])
def test_trace_rejects_a_block_size_that_is_not_a_positive_integer(block_size: object) -> None:
    with pytest.raises(ValueError, match="block_size"):
        Trace(empty_table(), name="t", block_size=block_size)  # type: ignore[arg-type]


def test_trace_equality_is_identity_not_an_ambiguous_dataframe_compare() -> None:
    a = trace([0.0])
    assert a == a
    assert a != trace([0.0])


def test_sort_by_arrival_is_stable_and_says_whether_it_reordered() -> None:
    df = trace([5.0, 1.0, 1.0, 3.0]).requests
    out, reordered = sort_by_arrival(df)
    assert reordered and out["request_id"].tolist() == ["q1", "q2", "q3", "q0"]
    same, again = sort_by_arrival(out)
    assert not again and same is out


def test_duration_and_has_blocks_describe_the_trace() -> None:
    assert trace([10.0, 40.0]).duration_ms == 30.0
    assert trace([10.0]).has_blocks
    empty = Trace(empty_table(), name="e", block_size=16)
    assert empty.duration_ms == 0.0 and not empty.has_blocks and len(empty) == 0
    assert np.isclose(trace([0.0, 1.0]).time_scaled(0.5).duration_ms, 2.0)


def test_load_report_summary_names_counts_and_reordering() -> None:
    assert LoadReport(lines=3).summary() == "3 lines"
    text = LoadReport(lines=3, skipped_bad=1, reordered=True).summary()
    assert "1 bad line skipped" in text and "sorted" in text
