"""The trace's columns as the simulator's loop reads them."""

from __future__ import annotations

from simtraces import tiny_trace

from kvcast.simulator.load import TraceArrays


def test_a_requests_blocks_are_python_ints_and_a_missing_session_is_none() -> None:
    tr = tiny_trace([(0.0, 1024, 3, [7, 8]), (5.0, 512, 1, [9])])
    cols = TraceArrays(tr)
    assert cols.arrivals.tolist() == [0.0, 5.0]
    assert cols.inputs.tolist() == [1024, 512] and cols.outputs.tolist() == [3, 1]
    blocks = cols.blocks(0)
    assert blocks == [7, 8] and all(type(b) is int for b in blocks)
    assert cols.session_col.tolist() == [None, None]
