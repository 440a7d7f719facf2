from __future__ import annotations

import random

from kvcast.predictor.chains import prefix_lengths
from kvcast.simulator.block_pool import BlockPool


def pool(capacity: int = 4, **kw: int) -> BlockPool:
    return BlockPool(0, capacity, {}, **kw)


def fill_cached(p: BlockPool, blocks: list[int]) -> None:
    assert p.make_room(len(blocks), 0.0)
    p.add_active(blocks)
    p.release(blocks)


def test_lru_evicts_least_recently_released_first() -> None:
    p = pool(3)
    fill_cached(p, [1, 2, 3])
    p.pin([1], 0.0)
    p.release([1])  # 1 is now most recently used
    assert p.make_room(1, 0.0)
    assert not p.in_hbm(2) and p.in_hbm(1) and p.in_hbm(3)


def test_active_blocks_are_never_evicted_and_make_room_fails_instead() -> None:
    p = pool(2)
    p.make_room(2, 0.0)
    p.add_active([1, 2])
    assert not p.make_room(1, 0.0)
    assert p.in_hbm(1) and p.in_hbm(2)


def test_speculative_replicas_are_evicted_before_cached_blocks() -> None:
    p = pool(3, spec_quota=2)
    fill_cached(p, [1, 2])
    assert p.add_speculative([9], now=0.0, ttl_ms=1e9) == [9]
    assert p.make_room(1, 0.0)
    assert not p.in_hbm(9) and p.in_hbm(1) and p.in_hbm(2)
    assert p.spec_wasted == 1


def test_speculative_placement_stops_at_quota_and_never_displaces_active() -> None:
    p = pool(3, spec_quota=5)
    p.make_room(3, 0.0)
    p.add_active([1, 2, 3])
    assert p.add_speculative([7, 8], now=0.0, ttl_ms=1e9) == []
    q = pool(10, spec_quota=2)
    assert len(q.add_speculative([7, 8, 9], now=0.0, ttl_ms=1e9)) == 2
    assert len(q.spec) == 2


def test_capacity_is_never_exceeded_by_speculative_placement() -> None:
    p = pool(4, spec_quota=4)
    fill_cached(p, [1, 2, 3])
    p.add_speculative([10, 11, 12], now=0.0, ttl_ms=1e9)
    assert p.used <= p.capacity


def test_expired_replicas_are_reclaimed_and_counted_wasted() -> None:
    p = pool(4, spec_quota=4)
    p.add_speculative([5, 6], now=0.0, ttl_ms=100.0)
    assert p.expire(50.0) == 0
    assert p.expire(100.0) == 2
    assert p.used == 0 and p.spec_wasted == 2


def test_a_pinned_replica_counts_as_a_hit_with_its_lead_time() -> None:
    p = pool(4, spec_quota=4)
    p.add_speculative([5], now=10.0, ttl_ms=1e9)
    p.pin([5], 250.0)
    assert p.spec_hits == 1 and p.spec_lead_ms == 240.0
    assert p.active[5] == 1 and 5 not in p.spec


def test_holders_index_tracks_hbm_residency_across_pools() -> None:
    holders: dict[int, int] = {}
    a, b = BlockPool(0, 2, holders), BlockPool(1, 2, holders)
    fill_cached(a, [1])
    fill_cached(b, [1, 2])
    assert holders[1] == 0b11 and holders[2] == 0b10
    fill_cached(a, [3, 4])  # evicts 1 from node 0
    assert holders[1] == 0b10


def test_hbm_eviction_demotes_to_dram_then_nvme() -> None:
    p = pool(1, dram_capacity=1, nvme_capacity=1)
    moves: list[tuple[int, str, str]] = []
    p.on_move = lambda b, f, t: moves.append((b, f, t))
    fill_cached(p, [1])
    fill_cached(p, [2])  # 1 -> DRAM
    fill_cached(p, [3])  # 2 -> DRAM, 1 -> NVMe
    assert 3 in p.cached and 2 in p.dram and 1 in p.nvme
    assert (1, "GPU", "CPU") in moves and (1, "CPU", "DISK") in moves
    fill_cached(p, [4])  # 1 dropped from NVMe
    assert (1, "DISK", "") in moves and 1 not in p.nvme


def test_lower_prefix_counts_dram_run_then_nvme_run() -> None:
    p = pool(8, dram_capacity=8, nvme_capacity=8)
    p.dram.update({1: None, 2: None})
    p.nvme.update({3: None})
    assert p.lower_prefix([1, 2, 3, 4], 0) == (2, 1, 0)
    assert p.lower_prefix([9, 1], 0) == (0, 0, 0)


def test_shared_pool_receives_what_falls_out_of_local_tiers_and_serves_every_node() -> None:
    from collections import OrderedDict

    holders: dict[int, int] = {}
    shared: OrderedDict[int, None] = OrderedDict()
    a = BlockPool(0, 1, holders, shared=shared, shared_capacity=2)
    b = BlockPool(1, 1, holders, shared=shared, shared_capacity=2)
    fill_cached(a, [1])
    fill_cached(a, [2])  # 1 falls out of node 0 (no local tiers) into the shared pool
    assert 1 in shared
    assert b.lower_prefix([1, 5], 0) == (0, 0, 1)  # node 1 can load it
    b.take_lower([1])
    assert 1 in shared  # the shared pool keeps its copy
    fill_cached(a, [3])
    fill_cached(a, [4])  # shared holds at most 2: the oldest goes
    assert len(shared) == 2 and 1 not in shared


def test_a_held_replica_outlives_every_cached_block() -> None:
    p = pool(4, spec_quota=2)
    fill_cached(p, [1, 2, 3])
    assert p.add_speculative([9], now=0.0, ttl_ms=1e9, hold_until=500.0) == [9]
    assert p.make_room(2, 100.0)  # a request needs two blocks before the replica's use
    assert p.in_hbm(9) and not p.in_hbm(1) and not p.in_hbm(2)


def test_a_replica_past_its_hold_is_evicted_before_any_cached_block() -> None:
    p = pool(4, spec_quota=2)
    fill_cached(p, [1, 2, 3])
    p.add_speculative([9], now=0.0, ttl_ms=1e9, hold_until=500.0)
    assert p.make_room(1, 500.0)
    assert not p.in_hbm(9) and p.in_hbm(1) and p.in_hbm(2)
    assert p.spec_wasted == 1


def test_a_request_wins_over_a_held_replica_when_nothing_else_is_left() -> None:
    p = pool(3, spec_quota=2)
    p.add_speculative([8, 9], now=0.0, ttl_ms=1e9, hold_until=1e6)
    assert p.make_room(3, 10.0)
    assert not p.spec and p.free == 3


def test_a_hold_never_outlasts_the_replicas_ttl() -> None:
    p = pool(4, spec_quota=2)
    p.add_speculative([9], now=0.0, ttl_ms=100.0, hold_until=1e6)
    assert p.spec[9][2] == 100.0
    assert p.expire(100.0) == 1 and p.used == 0


def test_a_replica_its_request_recomputes_is_counted_wasted() -> None:
    p = BlockPool(0, capacity=8, holders={}, spec_quota=4)
    assert p.add_speculative([7], now=0.0, ttl_ms=1_000.0) == [7]
    p.add_active([7])  # a request computed block 7 itself while the replica sat there
    assert 7 in p.active and 7 not in p.spec
    assert (p.spec_hits, p.spec_wasted) == (0, 1)


def test_a_replica_read_as_a_transfer_source_stays_speculative_and_is_not_evicted() -> None:
    p = BlockPool(0, capacity=2, holders={}, spec_quota=2)
    p.add_speculative([7], now=0.0, ttl_ms=100.0)
    p.pin_source([7])
    assert 7 in p.spec and p.spec_hits == 0  # read, not used
    assert p.expire(200.0) == 0  # past its TTL, but the transfer still reads it
    p.drop_speculative([7])  # evicted by command meanwhile: dropped once the read ends
    assert not p.make_room(2, 200.0)  # nothing else to evict, and the replica is being read
    assert 7 in p.spec
    p.release_source([7])
    assert 7 not in p.spec and p.spec_wasted == 1


def test_a_cached_block_read_as_a_source_comes_back_cached() -> None:
    p = BlockPool(0, capacity=4, holders={})
    p.add_active([1])
    p.release([1])
    p.pin_source([1])
    assert 1 in p.active and not p.make_room(4, 0.0)
    p.release_source([1])
    assert 1 in p.cached and p.spec_hits == 0


def test_decode_room_takes_a_replica_past_its_hold_before_a_cached_block() -> None:
    from simtraces import config

    from kvcast.simulator.node import LiveRequest, Node

    pool = BlockPool(0, capacity=3, holders={}, spec_quota=2)
    pool.add_active([1])
    pool.release([1])  # cached
    pool.add_active([2])  # active
    now = 10_000.0
    pool.add_speculative([3], now=now, ttl_ms=60_000.0)  # not held: its hold is now
    node = Node(0, config(nodes=1).node, pool, block_tokens=512, block_bytes=1)
    req = LiveRequest(0, [], 512, 1, 10, 1)
    node.start_decode(req, now)
    assert req.out_blocks == 1
    assert 1 in pool.cached and 3 not in pool.spec


def test_replicas_evicted_for_room_are_listed_for_the_replicator_and_no_others() -> None:
    p = pool(4, spec_quota=3)
    fill_cached(p, [1])
    p.add_speculative([7], now=0.0, ttl_ms=1e9)  # no hold: first to go
    p.add_speculative([8], now=0.0, ttl_ms=1e9, hold_until=1e6)
    p.add_speculative([9], now=0.0, ttl_ms=50.0)
    assert p.expire(50.0) == 1  # 9 expired: the ledger expires it too
    assert p.make_room(2, 60.0)  # 7, past its hold
    assert p.make_room(4, 60.0)  # 1 (cached), then 8 although held: a request wins
    assert p.spec_evicted == [7, 8]
    p.add_speculative([5], now=70.0, ttl_ms=1e9)
    p.drop_speculative([5])  # on command: the decider ordered it
    assert p.spec_evicted == [7, 8]


def test_a_claimed_replica_outlives_its_ttl_and_an_evict_command_until_released() -> None:
    p = pool(4, spec_quota=2)
    p.add_speculative([9], now=0.0, ttl_ms=100.0)
    assert p.claim([9]) == [9]
    assert p.expire(200.0) == 0 and 9 in p.spec  # past its TTL, but a request claims it
    assert p.drop_speculative([9]) == 0 and 9 in p.spec  # the claim wins over the command
    p.unclaim([9])
    assert p.expire(200.0) == 1 and 9 not in p.spec and p.spec_wasted == 1


def test_claims_are_counted_and_the_replica_is_held_until_the_last_is_released() -> None:
    p = pool(4, spec_quota=2)
    p.add_speculative([9], now=0.0, ttl_ms=100.0)
    assert p.claim([9]) == [9] and p.claim([9]) == [9]
    assert p.claimed == {9: 2}
    p.unclaim([9])
    assert p.expire(200.0) == 0 and p.claimed == {9: 1}
    p.unclaim([9])
    assert p.claimed == {} and p.expire(200.0) == 1


def test_only_speculative_replicas_are_claimed() -> None:
    p = pool(6, spec_quota=2)
    fill_cached(p, [1])
    p.make_room(1, 0.0)
    p.add_active([2])
    p.add_speculative([3], now=0.0, ttl_ms=100.0)
    assert p.claim([1, 2, 3, 4]) == [3] and p.claimed == {3: 1}


def test_a_claimed_replica_is_evicted_for_room_after_cached_and_held_ones() -> None:
    p = pool(4, spec_quota=3)
    fill_cached(p, [1])
    p.add_speculative([7], now=0.0, ttl_ms=1e9, hold_until=1e6)  # held
    p.add_speculative([8], now=0.0, ttl_ms=1e9)  # claimed, past its hold
    p.add_speculative([9], now=0.0, ttl_ms=1e9)  # past its hold
    p.claim([8])
    assert p.make_room(2, 10.0)  # 9 (past its hold), then 1 (cached)
    assert p.spec_evicted == [9] and 1 not in p.cached and 8 in p.spec
    assert p.make_room(3, 10.0)  # then 7 although held, before the claimed one
    assert p.spec_evicted == [9, 7] and 8 in p.spec
    assert p.make_room(4, 10.0)  # a request being served wins over a claim, as last resort
    assert p.spec_evicted == [9, 7, 8] and p.spec_claimed_evicted == 1
    assert p.spec_active_evictions == 0


def test_the_shared_index_gives_each_pools_longest_prefix() -> None:
    """The simulator matches a chain against every node at once through the ``holders`` dict
    the pools keep (bit k: pool k): the prefix read there is each pool's own."""
    rng = random.Random(0)
    holders: dict[int, int] = {}
    pools = [BlockPool(k, 64, holders) for k in range(5)]
    for p in pools:
        fill_cached(p, [b for b in range(40) if rng.random() < 0.8])
    for _ in range(50):
        chain = rng.sample(range(40), rng.randint(0, 12))
        expected = []
        for p in pools:
            n = 0
            while n < len(chain) and p.in_hbm(chain[n]):
                n += 1
            expected.append(n)
        assert prefix_lengths(chain, len(pools), holders, None) == expected
