"""The runs' numbers packed as runs change (at a read, or ahead of it by a refresh, their live
older keys counted then and used while the count holds) equal a fresh pack of every run, bit
for bit, at any later read."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcast.features.config import FeatureConfig
from kvcast.features.events import RequestArrived
from kvcast.features.online.run_numbers import RunNumbers
from kvcast.features.online.state import FeatureState

CFG = FeatureConfig(
    nodes=4,
    heat_half_lives_ms=(500.0, 20000.0),
    distinct_window_ms=30000.0,
    horizon_ms=60000.0,
    ticks={"period_ms": 2500.0, "lookback_ms": 45000.0},
)


Step = RequestArrived | float | None


@st.composite
def requests(draw: st.DrawFn) -> list[Step]:
    """Requests over few hashes (splits, new runs, sessions, gaps past the sweep and the
    horizon); None: the runs packed ahead (the sidecar's consumer when idle); a float: a tick
    reads the rows that long after the last request (older keys expiring in between)."""
    out: list[Step] = []
    ts = 0.0
    for _ in range(draw(st.integers(1, 60))):
        step = draw(st.integers(0, 5))
        if step == 0:
            out.append(draw(st.sampled_from([1.0, 1.0, 10000.0, 29999.0, 30000.0, 45000.0])))
            continue
        if step == 1:
            out.append(None)
            continue
        ts += draw(st.sampled_from([0.0, 0.0, 250.0, 1000.0, 4000.0, 30000.0, 90000.0]))
        hashes = tuple(draw(st.lists(st.integers(0, 12), min_size=0, max_size=6)))
        session = draw(st.sampled_from([None, None, "a", "b"]))
        tenant = draw(st.sampled_from(["x", "y", "z"]))
        node, tokens, public = (
            draw(st.integers(0, 3)),
            draw(st.integers(0, 4000)),
            draw(st.integers(0, 3)),
        )
        out.append(RequestArrived(ts, "r", node, tenant, session, tokens, 1, hashes, public))
    return out


@settings(max_examples=200, deadline=None, database=None)
@given(stream=requests())
def test_rows_read_from_kept_numbers_equal_rows_from_every_run_packed_afresh(
    stream: list[Step],
) -> None:
    kept, fresh = FeatureState(CFG), FeatureState(CFG)
    last = 0.0
    for ev in [*stream, 1.0]:
        if isinstance(ev, RequestArrived):
            last = ev.ts_ms
            kept.update(ev)
            fresh.update(ev)
            continue
        if ev is None:
            kept.refresh()
            continue
        blocks = list(range(-1, 14))  # every hash seen, and some never seen
        fresh.blocks.numbers.stale_all()  # every run packed again, as before the table
        want = fresh.rows(last + ev, blocks)
        got = kept.rows(last + ev, blocks)
        assert got.tobytes() == want.tobytes()


def test_a_changed_run_is_packed_again_and_an_unchanged_one_is_not() -> None:
    state = FeatureState(CFG)
    state.update(RequestArrived(0.0, "r", 0, "x", None, 100, 1, (1, 2, 3), 0))
    state.update(RequestArrived(1.0, "r", 1, "x", None, 100, 1, (7, 8), 0))
    state.rows(2.0, [1, 7])
    numbers: RunNumbers = state.blocks.numbers
    packed = numbers.table.copy()
    state.update(RequestArrived(3.0, "r", 2, "y", None, 200, 1, (1, 2), 0))  # splits (1, 2, 3)
    assert numbers.changed  # the touched run's slot, and the split's tail
    state.rows(4.0, [1, 3, 7])
    assert not numbers.changed
    one, seven = (state.blocks.code_of[h] >> 32 for h in (1, 7))
    assert np.array_equal(numbers.table[seven], packed[seven])  # untouched: as packed before
    node = RunNumbers.columns(state.blocks.k)["node"]
    assert numbers.table[one, node] == 2.0  # the new request's node
