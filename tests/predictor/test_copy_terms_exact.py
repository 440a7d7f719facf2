"""The copy terms' shortcuts give exactly what their plain definitions give: the cuts weighed
per chain (one linspace over every long chain at once) are, chain by chain, ``lo..depth`` or
``np.unique(np.linspace(lo, depth, max_cuts).round())``; and a chain's terms are the same
whichever chains share its batch."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_decider_properties import Case, cases

from kvcast.predictor.chains import build_plans
from kvcast.predictor.copy_terms import CopyTerms, TickTerms, _cuts
from kvcast.predictor.decider import Decider


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


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases(), data=st.data())
def test_a_chains_terms_in_a_batch_are_its_terms_alone(case: Case, data: st.DataObject) -> None:
    """Whichever chains share a batch, each chain's terms at its own cuts, and what the
    decider reads of them whole (``most``, ``any_ok``, ``cuts``), are those of the chain alone
    (the decider makes a chain's terms alone once a command of the tick moved something)."""
    n = case.cands.total_blocks
    probs = np.array(data.draw(st.lists(st.floats(0.0, 1.0), min_size=n, max_size=n)))
    cfg, view = case.cfg, case.view
    plans = build_plans(case.cands, probs, view, {}, window_ms=cfg.window_ms, min_p=0.0)
    terms, decider = TickTerms.of(view, cfg), Decider(cfg)

    def terms_of(rows: np.ndarray) -> CopyTerms:  # as the decider makes them
        made = decider._copy_terms(plans, rows, plans.plans(rows), view, terms)
        assert made is not None
        return made

    if not len(plans):
        return
    every = terms_of(np.arange(len(plans)))
    for i in range(len(plans)):
        alone = terms_of(np.array([i]))
        k = alone.cuts[0]
        assert (every.most[i], every.any_ok[i], every.cuts[i]) == (
            alone.most[0],
            alone.any_ok[0],
            k,
        )
        for name in ("nblk", "transfer", "gate", "residual", "cost_transfer", "reclaim"):
            mine, own = getattr(every, name)[i, :, :k], getattr(alone, name)[0, :, :k]
            assert repr(mine.tolist()) == repr(own.tolist()), name
