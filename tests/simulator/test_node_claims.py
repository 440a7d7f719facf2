"""A request releases the replicas it claimed when its prefill starts, not before."""

from __future__ import annotations

from simtraces import config

from kvcast.simulator.block_pool import BlockPool
from kvcast.simulator.node import LiveRequest, Node


def node(capacity: int) -> Node:
    pool = BlockPool(0, capacity=capacity, holders={}, spec_quota=4)
    return Node(0, config(nodes=1).node, pool, block_tokens=512, block_bytes=1)


def test_a_claim_released_without_a_read_lets_the_replica_expire_by_its_ttl() -> None:
    n = node(16)
    pool = n.pool
    pool.add_speculative([1, 3], now=0.0, ttl_ms=100.0)  # block 2 is missing: a gap
    req = LiveRequest(0, [1, 2, 3, 4], 4 * 512, 1, 1, 1)
    req.claimed = pool.claim([1, 3])
    assert pool.expire(500.0) == 0  # both held while the request waits
    assert n._start(req, 500.0) is not None
    assert req.hit == 1 and 1 in pool.active  # read
    assert 3 in pool.spec and pool.claimed == {} and req.claimed == []  # passed over
    assert pool.expire(500.0) == 1 and 3 not in pool.spec  # its TTL applies again


def test_a_start_that_finds_no_room_keeps_the_claims_for_the_retry() -> None:
    n = node(3)
    pool = n.pool
    pool.add_speculative([1], now=0.0, ttl_ms=100.0)
    pool.make_room(2, 0.0)
    pool.add_active([50, 51])  # another request's blocks fill the rest
    req = LiveRequest(0, [1, 2, 3], 3 * 512, 1, 1, 1)
    req.claimed = pool.claim([1])
    assert n._start(req, 500.0) is None  # two new blocks do not fit: it retries later
    assert pool.claimed == {1: 1} and req.claimed == [1]
    pool.release([50, 51])
    assert n._start(req, 600.0) is not None
    assert pool.claimed == {} and req.hit == 1 and pool.spec_hits == 1
