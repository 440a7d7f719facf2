"""The agent's log of blocks it removed on its own: numbered, bounded, and complete for a
reader that keeps up (what the sidecar follows to forget replicas that are gone)."""

from __future__ import annotations

import pytest

from kvcast.serving.agent import BlockState, BlockStore
from kvcast.serving.agent.removal_log import RemovalLog

SPEC, CACHED = BlockState.SPECULATIVE, BlockState.CACHED
K = 1024


def test_a_reader_that_keeps_up_sees_every_removal_once_in_order() -> None:
    log = RemovalLog(capacity=8)
    seen, since = [], 0
    for i in range(20):
        log.record("t", i, "expired")
        if i % 3 == 0:
            got, since, missed = log.since(since, limit=100)
            assert missed == 0
            seen += [r.block_hash for r in got]
    got, since, missed = log.since(since, limit=100)
    seen += [r.block_hash for r in got]
    assert seen == list(range(20)) and since == log.next_seq == 20
    assert log.since(since, limit=100) == ([], 20, 0)


def test_a_reader_that_fell_behind_is_told_how_many_it_missed() -> None:
    log = RemovalLog(capacity=4)
    for i in range(10):
        log.record("t", i, "evicted_cached")
    got, nxt, missed = log.since(2, limit=100)
    assert [r.seq for r in got] == [6, 7, 8, 9] and nxt == 10 and missed == 4
    assert len(log) == 4


def test_an_answer_is_capped_and_next_says_where_to_go_on() -> None:
    log = RemovalLog()
    for i in range(10):
        log.record("t", i, "expired")
    got, nxt, _ = log.since(3, limit=4)
    assert [r.seq for r in got] == [3, 4, 5, 6] and nxt == 7
    got, nxt, _ = log.since(nxt, limit=4)
    assert [r.seq for r in got] == [7, 8, 9] and nxt == 10


def test_a_number_from_a_previous_life_reads_from_the_start_of_this_one() -> None:
    log = RemovalLog()
    log.record("t", 1, "expired")
    got, nxt, missed = log.since(500, limit=10)
    assert [r.block_hash for r in got] == [1] and nxt == 1 and missed == 0


def test_capacity_below_one_is_refused_with_the_value() -> None:
    with pytest.raises(ValueError, match="got 0"):
        RemovalLog(capacity=0)


def _put(s: BlockStore, make_block, h: int, state: BlockState, tenant: str = "t") -> None:
    buf, crc = make_block(h, K)
    s.put(tenant, h, buf, crc, state)


def test_the_store_logs_evictions_for_room_and_expiries_but_not_removals_on_command(
    make_block,
) -> None:
    now = [100.0]
    s = BlockStore(3 * K, 2 * K, 10.0, clock=lambda: now[0])
    _put(s, make_block, 1, SPEC, "alice")
    _put(s, make_block, 2, SPEC, "bob")
    _put(s, make_block, 3, CACHED)
    _put(s, make_block, 4, CACHED)  # full: the oldest speculative replica goes first
    assert s.evict("t", 3)  # on command: the sidecar knows
    now[0] += 11.0
    assert s.sweep() == 1  # bob's replica expired
    got, nxt, missed = s.removals.since(0, limit=100)
    assert [(r.tenant, r.block_hash, r.reason) for r in got] == [
        ("alice", 1, "evicted_speculative"),
        ("bob", 2, "expired"),
    ]
    assert nxt == s.removals.next_seq == 2 and missed == 0
