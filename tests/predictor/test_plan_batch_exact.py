"""The plan batch's shortcuts give exactly what their plain definitions give, on random states:
each chain's held prefixes (one numpy pass over every chain) are :func:`prefix_lengths`
of the chain, block by block; its probabilities are its own running minimum; the
candidates' cached lengths and totals are those of the chains; and the tick's predicted
queues read for a subset of the chains are those rows of the queues read for all of them
(the decider reads them once and slices)."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcast.predictor import chains as chains_module
from kvcast.predictor.chains import build_plans, prefix_lengths
from kvcast.predictor.cluster_view import ChainCandidates, ClusterView, Links, PrefillCost
from kvcast.predictor.decider_config import GIB, DeciderConfig
from kvcast.predictor.targets import LoadForecast


@st.composite
def states(draw: st.DrawFn) -> tuple[ChainCandidates, ClusterView, dict[int, int], np.ndarray]:
    """Chains over a small pool of blocks (shared prefixes and repeats), random GPU holders
    and copies on their way (bits beyond the nodes too), and per-block probabilities."""
    n = draw(st.integers(1, 7))
    pool = st.integers(1, 40)
    chains = draw(st.lists(st.lists(pool, min_size=0, max_size=9), min_size=1, max_size=12))
    masks = st.integers(0, (1 << (n + 2)) - 1)
    hbm = draw(st.dictionaries(pool, masks, max_size=40))
    pending = draw(st.dictionaries(pool, masks, max_size=10))
    cands = ChainCandidates.build(chains, first_use_ms=[np.nan] * len(chains))
    total = sum(map(len, chains))
    probs = np.array(draw(st.lists(st.floats(0.0, 1.0), min_size=total, max_size=total)))
    cap = np.full(n, 80.0 * GIB)
    view = ClusterView(
        now_ms=1e6, block_bytes=1 << 20, block_tokens=16, prefill=PrefillCost(5.0, 0.1, 1e-6),
        queue_ms=np.array(draw(st.lists(st.floats(0.0, 500.0), min_size=n, max_size=n))),
        capacity_bytes=cap, pinned_bytes=cap * 0.2, cached_bytes=cap * 0.1,
        spec_bytes=np.zeros(n),
        links=Links(np.full((n, n), 1e7), np.full((n, n), 0.05), np.zeros((n, n)),
                    np.zeros((n, n), dtype=np.int64)),
        hbm=hbm,
    )  # fmt: skip
    return cands, view, pending, probs


LAYOUTS = pytest.mark.parametrize("padded", [0, 10**9], ids=["flat", "padded"])


@LAYOUTS
@settings(max_examples=300, deadline=None)
@given(state=states(), hand_holders=st.booleans())
def test_held_prefixes_at_once_are_prefix_lengths_chain_by_chain(
    state: tuple[ChainCandidates, ClusterView, dict[int, int], np.ndarray],
    hand_holders: bool,
    padded: int,
) -> None:
    """Both layouts: the chains padded to the longest, or read on their flat positions."""
    cands, view, pending, probs = state
    holders = None
    if hand_holders:  # as the sidecar hands them: each block's mask, bits beyond n included
        holders = np.array([view.hbm.get(b, 0) for c in cands.chains for b in c], np.int64)
    with mock.patch.object(chains_module, "PADDED", padded):
        plans = build_plans(cands, probs, view, pending, window_ms=60e3, min_p=0.0,
                            holders=holders)  # fmt: skip
    expected = [
        prefix_lengths(cands.chains[i], view.n, view.hbm, pending) for i in plans.index.tolist()
    ]
    assert plans.held.tolist() == expected


@LAYOUTS
@settings(max_examples=300, deadline=None)
@given(state=states(), min_p=st.sampled_from((0.0, 0.3)))
def test_probabilities_at_once_are_each_chains_running_minimum(
    state: tuple[ChainCandidates, ClusterView, dict[int, int], np.ndarray],
    min_p: float,
    padded: int,
) -> None:
    """Each kept chain's effective P per depth is the running minimum of its own blocks'
    (clipped to [0, 1]), then its last value up to the longest chain; a chain is kept when
    its root's is at least ``min_p`` (both layouts)."""
    cands, view, pending, probs = state
    with mock.patch.object(chains_module, "PADDED", padded):
        plans = build_plans(cands, probs, view, pending, window_ms=60e3, min_p=min_p)
    longest = int(cands.lengths.max(initial=0))
    kept, rows = [], []
    for i, chain in enumerate(cands.chains):
        own = np.clip(probs[cands.offsets[i] : cands.offsets[i + 1]], 0.0, 1.0)
        if len(chain) and not own[0] < min_p:
            kept.append(i)
            run = np.minimum.accumulate(own)
            rows.append(np.concatenate([run, np.full(longest - len(run), run[-1])]))
    assert plans.index.tolist() == kept
    assert plans.p.tobytes() == np.array(rows, dtype=float).reshape(len(kept), longest).tobytes()


@settings(max_examples=200, deadline=None)
@given(chains=st.lists(st.lists(st.integers(0, 9), max_size=6), max_size=8))
def test_cached_lengths_and_totals_are_the_chains(chains: list[list[int]]) -> None:
    cands = ChainCandidates.build(chains)
    lens = [len(c) for c in chains]
    assert cands.lengths.tolist() == lens and cands.lengths.dtype == np.int64
    assert cands.total_blocks == sum(lens)
    assert cands.offsets.tolist() == np.concatenate([[0], np.cumsum(lens)]).tolist()
    with pytest.raises(ValueError):  # shared between readers: read only
        cands.lengths[:] = 0


@settings(max_examples=300, deadline=None)
@given(state=states(), data=st.data())
def test_queues_of_some_chains_are_those_rows_of_every_chains_queues(
    state: tuple[ChainCandidates, ClusterView, dict[int, int], np.ndarray], data: st.DataObject
) -> None:
    cands, view, pending, probs = state
    cfg = DeciderConfig()
    plans = build_plans(cands, probs, view, pending, window_ms=cfg.window_ms, min_p=0.0)
    forecast = LoadForecast(view, plans, cfg.targets, cfg.window_ms)
    order = np.array(data.draw(st.permutations(range(len(plans)))), dtype=np.int64)
    some = sorted(data.draw(st.sets(st.integers(0, max(len(order) - 1, 0)))) if len(order) else [])
    every = forecast.queues_without(order)
    # (repr: NaN equals NaN, -0.0 differs from 0.0)
    assert repr(every[some].tolist()) == repr(forecast.queues_without(order[some]).tolist())
