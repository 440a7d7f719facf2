"""The copy terms' shortcuts give exactly what their plain definitions give: the cuts weighed
per chain (one linspace over every long chain at once) are, chain by chain, ``lo..depth`` or
``np.unique(np.linspace(lo, depth, max_cuts).round())``."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcast.predictor.copy_terms import _cuts


def cuts_one_by_one(lo: np.ndarray, depth: np.ndarray, max_cuts: int) -> list[np.ndarray]:
    """The definition, one chain at a time."""
    rows = []
    for a, b in zip(lo.tolist(), depth.tolist(), strict=True):
        if b - a + 1 > max_cuts:
            rows.append(np.unique(np.linspace(a, b, max_cuts).round().astype(np.int64)))
        else:
            rows.append(np.arange(a, max(b + 1, a), dtype=np.int64))
    return rows


@settings(max_examples=500, deadline=None)
@given(
    spans=st.lists(
        st.tuples(st.integers(1, 300), st.integers(-3, 300) | st.integers(0, 10**6)), max_size=12
    ),
    max_cuts=st.integers(2, 40) | st.integers(2, 5000),
)
def test_cuts_at_once_are_the_grid_chain_by_chain(
    spans: list[tuple[int, int]], max_cuts: int
) -> None:
    """Each chain's cuts and their count are its own grid's; beyond them the row is padding
    (the chain's own depths on, when no chain needs a grid; else 0), as wide as the most."""
    lo = np.array([a for a, _ in spans], dtype=np.int64)
    depth = np.array([a + d for a, d in spans], dtype=np.int64)
    ends, count = _cuts(lo, depth, max_cuts)
    rows = cuts_one_by_one(lo, depth, max_cuts)
    assert count.tolist() == [len(r) for r in rows]
    assert ends.dtype == np.int64
    assert ends.shape == (len(rows), max(map(len, rows), default=0))
    grid = any(len(r) and r[-1] - r[0] + 1 > len(r) for r in rows)  # some chain's is coarse
    for i, r in enumerate(rows):
        assert ends[i, : len(r)].tolist() == r.tolist()
        pad = ends[i, len(r) :].tolist()
        assert pad == (
            [0] * len(pad) if grid else list(range(lo[i] + len(r), lo[i] + len(r) + len(pad)))
        )
