"""Runs of blocks always requested together: split on partial use, equal to per-block state."""

from __future__ import annotations

import math

from kvcast.features.online.blocks import HASHES, LAST, POS0, BlockTable

H = (1000.0, 10000.0)


def _table() -> BlockTable:
    return BlockTable(H, window_ms=20000.0, horizon_ms=60000.0)


def _request(table: BlockTable, ts: float, hashes: tuple[int, ...]) -> None:
    cover = table.cover(ts, hashes)
    table.touch(ts, cover, hashes, (ts, 0, None, 0, 0, 0.0, 0.0), None, 0.0)


def _heat(table: BlockTable, h: int, now: float, half_life: float) -> float:
    run = table.run_of[h]
    i = H.index(half_life)
    return run[i] * 2.0 ** (-(now - table.t0) / half_life)


def test_a_new_chain_is_one_run_and_repeating_it_keeps_one_run() -> None:
    table = _table()
    _request(table, 0.0, (1, 2, 3))
    _request(table, 10.0, (1, 2, 3))
    assert len(table.runs) == 1 and len(table) == 3


def test_a_request_covering_part_of_a_run_splits_it_and_heat_stays_per_block() -> None:
    table = _table()
    _request(table, 0.0, (1, 2, 3, 4))
    _request(table, 500.0, (1, 2, 9))
    assert table.run_of[1] is table.run_of[2] is not table.run_of[3]
    assert table.run_of[3] is table.run_of[4] and table.run_of[9] is not table.run_of[1]
    assert math.isclose(_heat(table, 1, 500.0, 1000.0), 1.0 + 2**-0.5)
    assert math.isclose(_heat(table, 3, 500.0, 1000.0), 2**-0.5)
    assert table.run_of[3][2 + POS0] == 2  # depth of block 3 is kept


def test_chains_out_of_prefix_order_still_cover_every_block_once() -> None:
    table = _table()
    _request(table, 0.0, (1, 2, 3, 4, 5))
    cover = table.cover(1.0, (4, 2, 3, 7))
    got = [h for run, _, _ in cover for h in run[2 + HASHES]]
    assert got == [4, 2, 3, 7]


def test_a_run_unseen_for_the_horizon_starts_afresh() -> None:
    table = _table()
    _request(table, 0.0, (1, 2))
    _request(table, 60000.0, (1, 2))
    run = table.run_of[1]
    assert math.isclose(_heat(table, 1, 60000.0, 10000.0), 1.0)
    assert run[2] == 60000.0  # first access of the new epoch


def test_sweep_drops_dead_runs_and_rebases_without_changing_heat() -> None:
    table = _table()
    _request(table, 0.0, (1, 2))
    _request(table, 50000.0, (3,))
    before = _heat(table, 3, 70000.0, 10000.0)
    table.sweep(70000.0)
    assert 1 not in table.run_of and 3 in table.run_of
    assert math.isclose(_heat(table, 3, 70000.0, 10000.0), before)
    assert table.run_of[3][2 + LAST] == 50000.0
