"""Block store rules: what may be evicted, when, and what is ever visible."""

from __future__ import annotations

import pytest

from kvcast.serving.agent import (
    BlockNotFound,
    BlockPinned,
    BlockState,
    BlockStore,
    ChecksumMismatch,
    HostBuffer,
    QuotaExceeded,
    StoreFull,
    checksum,
)

ACTIVE, CACHED, SPEC = BlockState.ACTIVE, BlockState.CACHED, BlockState.SPECULATIVE
K = 1024


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def store(capacity_kib: int = 4, quota_kib: int = 2, ttl: float = 10.0) -> BlockStore:
    return BlockStore(capacity_kib * K, quota_kib * K, ttl, clock=Clock())


def put(s: BlockStore, make_block, h: int, state=CACHED, tenant="t", seed=None, ttl=None):
    buf, crc = make_block(h if seed is None else seed, K)
    return s.put(tenant, h, buf, crc, state, ttl)


def test_active_block_is_never_evicted_to_make_room(make_block) -> None:
    s = store()
    put(s, make_block, 1, ACTIVE)
    for h in range(2, 10):
        put(s, make_block, h)
    assert s.info("t", 1).state is ACTIVE
    assert s.used_bytes <= s.capacity_bytes
    assert s.stats.evicted_cached == 5


def test_store_full_of_active_blocks_refuses_new_ones_and_keeps_them(make_block) -> None:
    s = store()
    for h in range(4):
        put(s, make_block, h, ACTIVE)
    with pytest.raises(StoreFull):
        put(s, make_block, 9)
    assert all(s.info("t", h).state is ACTIVE for h in range(4))
    assert s.info("t", 9) is None and s.stats.rejected_capacity == 1


def test_speculative_replicas_are_evicted_before_cached_blocks(make_block) -> None:
    s = store()
    put(s, make_block, 1)  # cached, least recently used of all
    put(s, make_block, 2, SPEC)
    put(s, make_block, 3, SPEC)
    put(s, make_block, 4)
    put(s, make_block, 5)  # full: evicts the oldest speculative (2), not cached 1
    assert s.info("t", 2) is None
    assert s.info("t", 1) is not None and s.info("t", 3) is not None
    assert s.stats.evicted_speculative == 1 and s.stats.evicted_cached == 0


def test_cached_blocks_are_evicted_least_recently_used_first(make_block) -> None:
    s = store()
    for h in range(4):
        put(s, make_block, h)
    s.get("t", 0)  # 0 becomes most recent; 1 is now the LRU
    put(s, make_block, 9)
    assert s.info("t", 1) is None and s.info("t", 0) is not None


def test_speculative_replica_never_displaces_cached_or_active_data(make_block) -> None:
    s = store(capacity_kib=4, quota_kib=4)
    put(s, make_block, 1, ACTIVE)
    for h in (2, 3, 4):
        put(s, make_block, h)
    with pytest.raises(StoreFull):
        put(s, make_block, 5, SPEC)
    assert len(s) == 4 and s.speculative_bytes == 0


def test_speculative_bytes_never_exceed_the_quota(make_block) -> None:
    s = store(capacity_kib=8, quota_kib=2)
    for h in range(5):
        put(s, make_block, h, SPEC)
        assert s.speculative_bytes <= s.speculative_quota_bytes
    assert [i.block_hash for i in s.inventory()] == [3, 4]  # the two newest replicas
    with pytest.raises(QuotaExceeded):
        big = HostBuffer.from_bytes(bytes(3 * K))
        s.put("t", 99, big, checksum(big.view()), SPEC)
    assert s.stats.rejected_quota == 1 and s.stats.peak_speculative_bytes == 2 * K


def test_expired_replica_is_reclaimed_on_access(make_block) -> None:
    s = store(ttl=10.0)
    put(s, make_block, 1, SPEC)
    s._clock.now += 9.9
    assert s.get("t", 1) is not None
    s._clock.now += 0.2
    assert s.get("t", 1) is None and s.info("t", 1) is None
    assert s.speculative_bytes == 0 and s.stats.expired == 1


def test_expired_replicas_are_reclaimed_by_sweep_and_inventory(make_block) -> None:
    s = store(capacity_kib=8, quota_kib=4, ttl=10.0)
    put(s, make_block, 1, SPEC, ttl=1.0)
    put(s, make_block, 2, SPEC, ttl=5.0)
    put(s, make_block, 3)
    s._clock.now += 2.0
    assert s.sweep() == 1
    s._clock.now += 4.0
    assert [i.block_hash for i in s.inventory()] == [3]
    assert s.stats.expired == 2 and s.used_bytes == K


def test_same_hash_of_two_tenants_never_shares_data(make_block) -> None:
    s = store()
    put(s, make_block, 7, tenant="alice", seed=1)
    assert s.get("bob", 7) is None
    put(s, make_block, 7, tenant="bob", seed=2)
    alice, bob = s.get("alice", 7), s.get("bob", 7)
    assert alice.buffer.tobytes() != bob.buffer.tobytes()
    assert alice.buffer.tobytes() == make_block(1, K)[0].tobytes()
    s.evict("alice", 7)
    assert s.get("bob", 7).buffer.tobytes() == make_block(2, K)[0].tobytes()


def test_block_with_bad_checksum_is_never_visible(make_block) -> None:
    s = store()
    buf, crc = make_block(1, K)
    with pytest.raises(ChecksumMismatch):
        s.put("t", 1, buf, crc ^ 1)
    assert s.info("t", 1) is None and len(s) == 0 and s.used_bytes == 0
    assert s.inventory() == [] and s.stats.rejected_checksum == 1


def test_stored_block_is_never_overwritten(make_block) -> None:
    s = store()
    put(s, make_block, 1, seed=1)
    put(s, make_block, 1, SPEC, seed=2)  # same key, other (self-consistent) bytes
    assert s.get("t", 1).buffer.tobytes() == make_block(1, K)[0].tobytes()
    assert s.info("t", 1).state is CACHED and s.stats.duplicate_puts == 1


def test_pinning_a_replica_makes_it_active_and_frees_quota(make_block) -> None:
    s = store()
    put(s, make_block, 1, SPEC)
    info = s.pin("t", 1)
    assert info.state is ACTIVE and info.expires_at is None
    assert s.speculative_bytes == 0 and s.active_bytes == K and s.stats.speculative_used == 1
    s.pin("t", 1)
    assert s.unpin("t", 1).state is ACTIVE
    assert s.unpin("t", 1).state is CACHED


def test_evicting_an_active_block_is_refused(make_block) -> None:
    s = store()
    put(s, make_block, 1, ACTIVE)
    with pytest.raises(BlockPinned):
        s.evict("t", 1)
    assert s.evict("t", 2) is False
    with pytest.raises(BlockNotFound):
        s.pin("t", 2)


def test_put_of_a_block_larger_than_capacity_is_refused(make_block) -> None:
    s = store(capacity_kib=1, quota_kib=1)
    buf = HostBuffer.from_bytes(bytes(2 * K))
    with pytest.raises(StoreFull):
        s.put("t", 1, buf, checksum(buf.view()))


def test_store_rejects_a_quota_above_capacity() -> None:
    with pytest.raises(ValueError):
        BlockStore(K, 2 * K)
