"""A tick's chains read run by run give exactly the plain reading: the distinct blocks (first
seen first), each chain block's index among them, their codes and their rows, whatever the
runs went through (splits, runs past the horizon whose blocks a new run took over, sweeps,
the block cap, requests held for reordering, repeated and unknown blocks)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcast.features.config import FeatureConfig, TickConfig
from kvcast.features.events import RequestArrived
from kvcast.features.online.chain_codes import Cover, chain_blocks, distinct_blocks
from kvcast.features.online.state import FeatureState

HORIZON = 50.0
BASE = ((1, 2, 3, 4, 5, 6), (1, 2, 3, 7, 8), (9, 10, 11), (1, 2), (12, 2, 3, 4))


def _cfg(reorder_tolerance_ms: float = 0.0) -> FeatureConfig:
    return FeatureConfig(horizon_ms=HORIZON, distinct_window_ms=HORIZON / 2,
                         heat_half_lives_ms=(10.0, 100.0), ticks=TickConfig(lookback_ms=HORIZON),
                         reorder_tolerance_ms=reorder_tolerance_ms)  # fmt: skip


def _request(ts: float, i: int, blocks: tuple[int, ...], tokens: int = 0) -> RequestArrived:
    return RequestArrived(ts, f"r{i}", i % 3, "t", f"s{i % 4}", tokens or 512 * len(blocks),
                          8, blocks)  # fmt: skip


def _plain(state: FeatureState, now: float, chains: list[tuple[int, ...]]):  # type: ignore[no-untyped-def]
    blocks, where = distinct_blocks(chains)
    return blocks, where, state.rows(now, blocks)


def _assert_same(
    state: FeatureState,
    now: float,
    chains: list[tuple[int, ...]],
    covers: list[Cover | None] | None = None,
) -> None:
    blocks, where, rows = state.chain_rows(now, chains, covers)
    want_blocks, want_where, want_rows = _plain(state, now, chains)
    assert blocks == want_blocks
    assert where.dtype == np.int64 and where.tolist() == want_where.tolist()
    assert rows.tobytes() == want_rows.tobytes()  # bit for bit, NaNs included
    found = chain_blocks(state.blocks, chains, covers)
    if found is not None:
        codes = [state.blocks.code_of.get(h, 0) for h in want_blocks]
        assert found.codes.tolist() == codes
        assert found.slots.tolist() == sorted({c >> 32 for c in codes})


def _cover(state: FeatureState, blocks: tuple[int, ...]) -> Cover | None:
    """The cover of the request just given, as the sidecar's consumer takes it: only when
    the state applied that request (its own tuple of blocks)."""
    last = state.last_cover
    return last[1] if last is not None and last[0] is blocks else None


@settings(max_examples=200, deadline=None)
@given(
    requests=st.lists(
        st.tuples(
            st.floats(0, 40, allow_nan=False),  # the gap before it
            st.integers(0, len(BASE) - 1),
            st.integers(1, 6),  # how many of its blocks
            st.integers(0, 3),  # its extra tail block (0: none)
            st.booleans(),  # a partial last block
        ),
        min_size=1,
        max_size=30,
    ),
    cap=st.sampled_from([None, 6, 12]),
    after=st.floats(0, 120, allow_nan=False),
    extra=st.lists(st.lists(st.integers(1, 60), max_size=5).map(tuple), max_size=3),
    held_back=st.booleans(),
)
def test_chains_read_run_by_run_equal_the_plain_reading(
    requests: list[tuple[float, int, int, int, bool]],
    cap: int | None,
    after: float,
    extra: list[tuple[int, ...]],
    held_back: bool,
) -> None:
    state = FeatureState(_cfg(30.0 if held_back else 0.0), max_blocks=cap)
    ts, chains, covers = 0.0, [], []
    for i, (gap, base, size, tail, partial) in enumerate(requests):
        ts += gap
        blocks = BASE[base][:size] + ((100 + tail,) if tail else ())
        tokens = 512 * len(blocks) - (100 if partial else 0)
        state.update(_request(ts, i, blocks, tokens))
        if tokens // 512:
            chains.append(blocks[: tokens // 512])
            covers.append(_cover(state, blocks))
    now = ts + after if not held_back else max(0.0, ts - after)  # held ones: not applied yet
    _assert_same(state, now, chains[-8:] + extra)
    # with the covers noted as each request was applied (runs split, dropped by the cap or
    # the sweep, or past the horizon since), and covers of other requests of the same blocks
    _assert_same(state, now, chains[-8:] + extra, covers[-8:] + [None] * len(extra))
    same = {c: cover for c, cover in zip(chains, covers, strict=True) if cover is not None}
    _assert_same(state, now, chains[-8:], [same.get(c) for c in chains[-8:]])


def test_blocks_a_new_run_took_over_are_read_from_their_new_run() -> None:
    # (1, 2, 3) goes past the horizon between two sweeps (one at HORIZON, the next at twice
    # that); (2, 3) then makes a new run of its blocks, so the old run still lists them but
    # no longer names them: read block by block, not as the run
    state = FeatureState(_cfg())
    first = (1, 2, 3)
    state.update(_request(10.0, 0, first))
    cover = _cover(state, first)  # noted as it was applied: a run still whole, but past
    state.update(_request(HORIZON, 1, (7,)))  # the sweep: (1, 2, 3) still live
    state.update(_request(HORIZON + 11, 2, (2, 3)))
    table = state.blocks
    old, new = table.code_of[1] >> 32, table.code_of[2] >> 32
    assert old != new and table.slot_runs[old][table.k + 4] == (1, 2, 3)  # HASHES
    _assert_same(state, HORIZON + 2, [(1, 2, 3), (2, 3)])
    _assert_same(state, HORIZON + 2, [first, (2, 3)], [cover, None])


def test_unknown_and_repeated_blocks_are_deduped_by_hash() -> None:
    state = FeatureState(FeatureConfig())
    state.update(_request(0.0, 0, (1, 2, 3)))
    _assert_same(state, 1.0, [(1, 2, 3), (7, 8, 7), (1, 2, 9, 3), (8,)])


def test_chains_naming_part_of_a_run_are_deduped_within_it() -> None:
    # one run (1, 2, 3, 4): chains naming its first two then all four (as many ranges of
    # codes as new ranges, yet blocks named twice), then more, and blocks without state
    state = FeatureState(_cfg())
    state.update(_request(0.0, 0, (1, 2, 3, 4)))
    for chains, where in (
        ([(1, 2), (1, 2, 3, 4)], [0, 1, 0, 1, 2, 3]),
        ([(1, 2), (1, 2, 3, 4), (1, 2, 3), (5, 6), (5,)], [0, 1, 0, 1, 2, 3, 0, 1, 2, 4, 5, 4]),
        # the whole run first, then parts of it: one range among the distinct blocks each
        ([(1, 2, 3, 4), (1, 2), (5, 1, 2, 3), (5,)], [0, 1, 2, 3, 0, 1, 4, 0, 1, 2, 4]),
        ([(2, 3, 4), (3, 4), (3,)], [0, 1, 2, 1, 2, 1]),  # a run first named from within
    ):
        found = chain_blocks(state.blocks, chains)
        assert found is not None and found.where.tolist() == where
        _assert_same(state, 1.0, chains)


class _CountingCodes(dict[int, int]):
    """``code_of``, counting lookups."""

    lookups = 0

    def get(self, key: int, default: int | None = None) -> int | None:  # type: ignore[override]
        self.lookups += 1
        return super().get(key, default)


def test_a_chain_departing_from_a_run_reads_what_it_agrees_on_as_one_piece() -> None:
    # the next turn of a conversation before it is applied (held for reordering, or refused):
    # its chain agrees with the last turn's run up to that turn's partial block, then departs;
    # or a chain that departs in the middle of the run and comes back to it
    n = 2000
    state = FeatureState(_cfg())
    turn = tuple(range(1000, 1000 + n))
    state.update(_request(0.0, 0, turn, 512 * n - 100))  # its last block partial: one run
    table = state.blocks
    half = turn[: n // 2]
    for chains, lookups in (
        ([(*turn[:-1], 5, 6, 7)], 4),  # the run's first block, then 5, 6 and 7 (no state)
        ([turn, (*half, 5, *turn[n // 2 + 1 :])], 4),  # the run twice, then 5, then the run
    ):
        table.code_of = counting = _CountingCodes(table.code_of)
        found = chain_blocks(table, chains)
        assert found is not None and counting.lookups == lookups  # not one per block
        _assert_same(state, 1.0, chains)


def test_negative_hashes_take_the_plain_reading() -> None:
    state = FeatureState(FeatureConfig())
    state.update(_request(0.0, 0, (1, -2, 3)))
    assert chain_blocks(state.blocks, [(1, -2, 3)]) is None
    _assert_same(state, 1.0, [(1, -2, 3)])


def test_chains_of_applied_requests_are_read_a_run_at_a_time() -> None:
    state = FeatureState(FeatureConfig())
    for i, blocks in enumerate(BASE):
        state.update(_request(float(i), i, blocks))
    chains = list(BASE)
    found = chain_blocks(state.blocks, chains)
    assert found is not None
    runs = {code >> 32 for code in found.codes.tolist()}
    assert found.slots.tolist() == sorted(runs)
    assert len(runs) < len(found.blocks)  # runs shared by several blocks
    _assert_same(state, 10.0, chains)


@settings(max_examples=300, deadline=None)
@given(chains=st.lists(st.lists(st.integers(0, 30), max_size=8), max_size=10))
def test_distinct_blocks_are_first_seen_first_and_map_back_to_every_chain(
    chains: list[list[int]],
) -> None:
    blocks, where = distinct_blocks(chains)
    flat = [b for c in chains for b in c]
    expected: list[int] = []
    for b in flat:
        if b not in expected:
            expected.append(b)
    assert blocks == expected
    assert where.dtype == np.int64 and where.tolist() == [expected.index(b) for b in flat]


def test_chains_given_as_lists_read_as_their_tuples() -> None:
    state = FeatureState(_cfg())
    chain = tuple(range(1, 13))
    for i in range(2):
        state.update(_request(1.0 + i, i, chain))
    as_list = state.chain_rows(5.0, [list(chain), list(chain[:5])])  # type: ignore[list-item]
    as_tuple = state.chain_rows(5.0, [chain, chain[:5]])
    assert as_list[0] == as_tuple[0] and as_list[1].tolist() == as_tuple[1].tolist()
    assert as_list[2].tobytes() == as_tuple[2].tobytes()


def test_a_request_naming_its_blocks_in_a_list_makes_runs_of_tuples() -> None:
    """An event built by hand with a list of hashes (the type says a tuple) reads as its
    tuple: the runs it makes compare with the tick's chains (a list run raised StopIteration
    in the chains' reading)."""
    chain = tuple(range(1, 13))
    state, plain = FeatureState(_cfg()), FeatureState(_cfg())
    for i in range(2):
        state.update(_request(1.0 + i, i, list(chain)))  # type: ignore[arg-type]
        plain.update(_request(1.0 + i, i, chain))
    got, want = state.chain_rows(5.0, [chain]), plain.chain_rows(5.0, [chain])
    assert got[0] == want[0] and got[2].tobytes() == want[2].tobytes()
    _assert_same(state, 5.0, [chain, chain[:4]])


def test_chains_with_their_covers_read_no_block_of_a_run_still_whole() -> None:
    # a conversation's turns, each the last one's full blocks and more, its last block
    # partial: each one's cover, noted as it was applied, names the runs the tick reads its
    # chain by. The next turn cut the run that ends with the partial block (a block of its
    # own): looked up from there on
    state = FeatureState(_cfg())
    turns = [(*range(100, 100 + 40 * (k + 1)), 1000 + k) for k in range(3)]
    covers = []
    for i, turn in enumerate(turns):
        state.update(_request(float(i), i, turn, 512 * len(turn) - 100))
        covers.append(_cover(state, turn))
    chains = [turn[:-1] for turn in turns]  # their full blocks
    table = state.blocks
    table.code_of = counting = _CountingCodes(table.code_of)
    newest = chain_blocks(table, chains[-1:], covers[-1:])
    assert newest is not None and counting.lookups == 0  # not one block read
    assert chain_blocks(table, chains, covers) is not None and counting.lookups > 0
    _assert_same(state, 5.0, chains, covers)
    _assert_same(state, 5.0, chains[::-1], covers[::-1])


def test_a_cover_whose_run_was_dropped_or_replaced_reads_the_blocks_afresh() -> None:
    # the cap drops the run of (1, 2, 3); a new request makes another run of (1, 2) in its
    # slot: the old cover names a run no longer there, so the chain is looked up (and reads
    # the new run's rows)
    state = FeatureState(_cfg(), max_blocks=3)
    first = (1, 2, 3)
    state.update(_request(0.0, 0, first))
    cover = _cover(state, first)
    assert cover is not None
    state.update(_request(1.0, 1, (4, 5, 6)))
    state.update(_request(2.0, 2, (1, 2, 9)))
    assert state.blocks.code_of.get(3) is None  # (1, 2, 3) was dropped
    _assert_same(state, 3.0, [first], [cover])
