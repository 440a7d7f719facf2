"""Each run's holder mirror equals ``Residency.holders`` at every code the block table keeps,
whatever the events (blocks stored before and after their requests, removed, cleared,
replicated; runs split, past the horizon and taken over, swept, shed by the cap; requests
held for reordering), and a tick's rows read through the mirrors are the plain reading's,
residency columns included."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_chain_codes import BASE, HORIZON, _assert_same, _cfg, _request

from kvcast.features.events import AllBlocksCleared, BlockRemoved, BlockStored, ReplicationDone
from kvcast.features.online.blocks import HELD, BlockTable
from kvcast.features.online.codes import MASK, SHIFT
from kvcast.features.online.residency import Residency
from kvcast.features.online.state import FeatureState

# BASE's blocks (1..12), the requests' tails (101, 102) and one never requested (103)
BLOCKS = st.lists(
    st.integers(1, 15).map(lambda b: 88 + b if b > 12 else b), min_size=1, max_size=5
).map(tuple)
MEDIUM = st.sampled_from(["GPU", "CPU"])
NODE = st.integers(0, 2)
OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("request"),
            st.floats(0, 40),
            st.integers(0, len(BASE) - 1),
            st.integers(1, 6),
            st.integers(0, 2),  # its tail block (0: none)
        ),
        st.tuples(st.just("store"), NODE, MEDIUM, BLOCKS),
        st.tuples(st.just("remove"), NODE, MEDIUM, BLOCKS),
        st.tuples(st.just("clear"), NODE),
        st.tuples(st.just("replicated"), NODE, BLOCKS, st.booleans()),
    ),
    min_size=1,
    max_size=40,
)


def mirrors_agree(state: FeatureState) -> None:
    """For every block the table keeps, its run's mirror at its code is its holders entry."""
    table, holders = state.blocks, state.residency.holders
    for h, code in table.code_of.items():
        run = table.slot_runs[code >> SHIFT]
        assert run is not None
        assert run[table.k + HELD][code & MASK] == holders.get(h, 0), h


def play(
    ops: list[tuple[Any, ...]], cap: int | None, held_back: bool
) -> tuple[FeatureState, float, list[tuple[int, ...]]]:
    state = FeatureState(_cfg(30.0 if held_back else 0.0), max_blocks=cap)
    ts, chains = 0.0, []
    for i, op in enumerate(ops):
        kind = op[0]
        if kind == "request":
            _, gap, base, size, tail = op
            ts += gap
            blocks = BASE[base][:size] + ((100 + tail,) if tail else ())
            state.update(_request(ts, i, blocks))
            chains.append(blocks)
        elif kind == "store":
            state.update(BlockStored(ts, op[1], op[3], None, 16, op[2]))
        elif kind == "remove":
            state.update(BlockRemoved(ts, op[1], op[3], op[2]))
        elif kind == "clear":
            state.update(AllBlocksCleared(ts, op[1]))
        else:
            state.update(ReplicationDone(ts, (op[1] + 1) % 3, op[1], op[2], op[3]))
        if not held_back:
            mirrors_agree(state)
    return state, ts, chains


@settings(max_examples=300, deadline=None)
@given(ops=OPS, cap=st.sampled_from([None, 6, 12]), after=st.floats(0, 120),
       held_back=st.booleans())  # fmt: skip
def test_mirrors_equal_holders_and_rows_read_through_them_are_the_plain_ones(
    ops: list[tuple[Any, ...]], cap: int | None, after: float, held_back: bool
) -> None:
    state, ts, chains = play(ops, cap, held_back)
    now = ts + after if not held_back else max(0.0, ts - after)
    _assert_same(state, now, [*chains[-8:], (1, 2, 3), (113, 2)])
    state.flush()
    mirrors_agree(state)


def test_a_block_stored_before_its_request_is_mirrored_when_its_run_is_made() -> None:
    state = FeatureState(_cfg())
    state.update(BlockStored(0.0, 1, (1, 2), None, 16))
    state.update(_request(1.0, 0, (1, 2, 3)))
    run = state.blocks.slot_runs[state.blocks.code_of[1] >> SHIFT]
    assert run is not None and run[state.blocks.k + HELD] == [0b010, 0b010, 0]
    state.update(BlockRemoved(2.0, 1, (2,)))
    state.update(BlockStored(2.0, 0, (3,), None, 16, "CPU"))  # a lower tier: bit nodes + 0
    assert run[state.blocks.k + HELD] == [0b010, 0, 1 << state.cfg.nodes]


def test_a_residency_follows_only_a_table_sharing_its_holders() -> None:
    with pytest.raises(ValueError, match="share"):
        Residency(3).follow(BlockTable((10.0,), 10.0, 50.0))


def test_blocks_a_new_run_took_over_are_written_to_their_new_run() -> None:
    """(1, 2, 3) goes past the horizon and (2, 3) makes a new run of its blocks (as in
    test_chain_codes): the old run still lists them, so an event naming (1, 2, 3) agrees with
    it, but only 1 is its own; 2 and 3 are written to the new run."""
    state = FeatureState(_cfg())
    state.update(_request(10.0, 0, (1, 2, 3)))
    state.update(_request(HORIZON, 1, (7,)))  # the sweep: (1, 2, 3) still live
    state.update(_request(HORIZON + 11, 2, (2, 3)))
    for event in (BlockStored(HORIZON + 12, 0, (1, 2, 3), None, 16),
                  BlockRemoved(HORIZON + 13, 0, (1, 2, 3))):  # fmt: skip
        state.update(event)
        mirrors_agree(state)
    new = state.blocks.slot_runs[state.blocks.code_of[2] >> SHIFT]
    assert new is not None and new[state.blocks.k + HELD] == [0, 0]


def test_a_run_past_the_horizon_by_rounding_is_not_written_as_live() -> None:
    """15.33 + 50 == 65.33 in floats, so a request at 65.33 finds a run last requested at
    15.33 past the horizon and takes (2, 3) over; 65.33 - 50 is 15.329999999999998, so a
    liveness test written the other way round would still call the old run live (a review's
    counterexample) and write 2 and 3 there."""
    last, horizon = 15.33, HORIZON
    assert last + horizon == 65.33 and 65.33 - horizon < last
    state = FeatureState(_cfg())
    state.update(_request(last, 0, (1, 2, 3)))
    state.update(_request(HORIZON, 1, (7,)))  # the sweep: (1, 2, 3) still live
    state.update(_request(last + horizon, 2, (2, 3)))
    state.update(BlockStored(last + horizon + 1, 0, (1, 2, 3), None, 16))
    mirrors_agree(state)
