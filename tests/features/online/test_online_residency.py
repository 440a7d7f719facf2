"""The per-block holders index equals the per-node sets it sits beside, and the tick's columns
read from it equal their definition over those sets, for few nodes (one int64 holds both
masks) and many (beyond 31, 63: Python ints)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcast.features.counters import BadInputCounters
from kvcast.features.derive import MASK_NODES
from kvcast.features.online.residency import Residency

MEDIA = ("GPU", "CPU", "DISK", "REMOTE")
NODE_COUNTS = (3, 31, 32, 63, 70)


def _ops(nodes: int) -> st.SearchStrategy[list[tuple[Any, ...]]]:
    hashes = st.lists(st.integers(0, 12), min_size=1, max_size=5).map(tuple)
    node = st.integers(0, nodes - 1)
    op = st.one_of(
        st.tuples(st.just("store"), st.sampled_from(MEDIA), node, hashes),
        st.tuples(st.just("remove"), st.sampled_from(MEDIA), node, hashes),
        st.tuples(st.just("clear"), node),
    )
    return st.lists(op, max_size=60)


def _apply(res: Residency, ops: list[tuple[Any, ...]], bad: BadInputCounters) -> int:
    """Apply ``ops``; returns the removals of blocks not held, counted from the sets."""
    missing = 0
    for op in ops:
        if op[0] == "store":
            res.store(op[1], op[2], op[3])
        elif op[0] == "remove":
            missing += len(set(op[3]) - res.tier(op[1])[op[2]])
            res.remove(op[1], op[2], op[3], bad)
        else:
            res.clear(op[1])
    return missing


def _from_sets(res: Residency, h: int) -> tuple[int, int]:
    gpu = sum(1 << n for n, held in enumerate(res.gpu) if h in held)
    lower = sum(1 << n for n, held in enumerate(res.lower) if h in held)
    return gpu, lower


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(NODE_COUNTS).flatmap(lambda n: st.tuples(st.just(n), _ops(n))))
def test_the_holders_index_equals_the_per_node_sets_after_any_updates(
    case: tuple[int, list[tuple[Any, ...]]],
) -> None:
    nodes, ops = case
    res, bad = Residency(nodes), BadInputCounters()
    missing = _apply(res, ops, bad)
    resident = set().union(*res.gpu, *res.lower)
    want = {}
    for h in resident:
        gpu, lower = _from_sets(res, h)
        want[h] = gpu | lower << nodes
    assert res.holders == want  # no entry for a block no node holds
    assert bad.counts["removed_not_resident"] == missing


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(NODE_COUNTS).flatmap(lambda n: st.tuples(st.just(n), _ops(n))),
    st.lists(st.integers(0, 15), max_size=30),  # repeats and never-stored blocks included
    st.randoms(use_true_random=False),
)
def test_columns_and_masks_equal_their_definition_over_the_sets(
    case: tuple[int, list[tuple[Any, ...]]], hashes: list[int], rng: Any
) -> None:
    nodes, ops = case
    res = Residency(nodes)
    _apply(res, ops, BadInputCounters())
    homes = np.array([rng.randrange(-1, nodes) for _ in hashes], dtype=np.intp)
    per_block = [_from_sets(res, h) for h in hashes]
    gpu, lower = res.masks(hashes)
    assert (gpu, lower) == ([g for g, _ in per_block], [low for _, low in per_block])
    want = [
        [g.bit_count() for g, _ in per_block],
        [low.bit_count() for _, low in per_block],
        [g & ((1 << MASK_NODES) - 1) for g, _ in per_block],
        [
            (g >> x) & 1 if x >= 0 else math.nan
            for (g, _), x in zip(per_block, homes.tolist(), strict=True)
        ],
    ]
    cols = res.columns(hashes, homes)
    assert len(cols) == 4
    for got, expected in zip(cols, want, strict=True):
        assert got.dtype == np.float64 and got.shape == (len(hashes),)
        assert np.array_equal(got, np.array(expected, dtype=float), equal_nan=True)


def test_a_cleared_node_leaves_no_bit_and_blocks_nobody_holds_leave_the_index() -> None:
    res, bad = Residency(70), BadInputCounters()
    res.store("GPU", 1, (10, 11))
    res.store("DISK", 1, (11,))
    res.store("GPU", 65, (11, 12))
    res.clear(1)
    assert res.holders == {11: 1 << 65, 12: 1 << 65}
    assert not res.gpu[1] and not res.lower[1]
    res.remove("GPU", 65, (11, 12, 12), bad)
    assert res.holders == {} and len(res) == 0
    assert bad.counts["removed_not_resident"] == 0  # 12 named twice, held once: not missing
    res.remove("CPU", 65, (11,), bad)
    assert bad.counts["removed_not_resident"] == 1
