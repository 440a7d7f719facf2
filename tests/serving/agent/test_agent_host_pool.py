"""The preallocated host pool: slots are reused, never while any view of them is alive."""

from __future__ import annotations

import gc
import time

from kvcast.serving.agent import Agent, HostBlockPool


def test_slot_returns_to_the_pool_only_when_the_last_view_is_gone() -> None:
    pool = HostBlockPool(slot_bytes=1024, slots=2)
    buf = pool.allocate(100)
    view = buf.view()
    view[:3] = b"abc"
    del buf
    gc.collect()
    assert pool.free_slots == 1  # the memoryview still holds the slot
    assert bytes(view[:3]) == b"abc"
    del view
    gc.collect()
    assert pool.free_slots == 2


def test_oversized_or_excess_requests_fall_back_to_fresh_memory() -> None:
    pool = HostBlockPool(slot_bytes=1024, slots=1)
    held = pool.allocate(1024)
    extra, big = pool.allocate(10), pool.allocate(4096)
    assert pool.fallbacks == 2 and extra.nbytes == 10 and big.nbytes == 4096
    assert held.nbytes == 1024


def test_pooled_agent_receives_into_slots_and_frees_them_on_eviction(
    run, config, fill_agent
) -> None:
    async def scenario() -> None:
        pooled = config(
            capacity_bytes=1 << 20, speculative_quota_bytes=1 << 20, pool_slot_bytes=64 << 10
        )
        async with Agent(config()) as src, Agent(pooled) as dst:
            source = fill_agent(src, "t", {h: 64 << 10 for h in range(4)})
            result = await dst.pull(src.address, range(4), "t", time.monotonic() + 3)
            assert result.ok
            pool = dst.client.allocator
            assert isinstance(pool, HostBlockPool) and pool.free_slots == 16 - 4
            assert all(bytes(dst.store.peek("t", h).buffer.view()) == source[h] for h in range(4))
            for h in range(4):
                dst.store.evict("t", h)
            gc.collect()
            assert pool.free_slots == 16 and pool.fallbacks == 0

    run(scenario())
