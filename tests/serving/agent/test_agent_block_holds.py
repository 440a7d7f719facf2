"""A replica held for a request routed to its node (the sidecar's claim) waits for it: no
expiry, no eviction on command, evicted for room only after every cached block, until each
holding request releases it or its hold runs out; then its TTL applies again."""

from __future__ import annotations

import pytest
from test_agent_block_store import ACTIVE, CACHED, SPEC, put, store

from kvcast.serving.agent import BlockState
from kvcast.serving.agent.blocks import BlockHeld


def test_a_held_replica_outlives_its_ttl_until_released_then_expires(make_block) -> None:
    s = store(ttl=10.0)
    put(s, make_block, 1, SPEC)
    assert s.hold("t", 1, "r-1", hold_s=60.0)
    s._clock.now += 20.0  # past its TTL, within the hold
    assert s.sweep() == 0 and s.info("t", 1).state is SPEC and s.info("t", 1).holds == 1
    assert s.release("t", 1, "r-1")
    assert s.info("t", 1) is None and s.stats.expired == 1  # its TTL had passed


def test_holds_are_counted_per_request_and_the_last_release_ends_them(make_block) -> None:
    s = store(ttl=10.0)
    put(s, make_block, 1, SPEC)
    assert s.hold("t", 1, "r-1", 60.0) and s.hold("t", 1, "r-2", 60.0)
    assert s.hold("t", 1, "r-1", 60.0)  # again: renewed, not counted twice
    assert s.info("t", 1).holds == 2 and s.stats.holds == 2
    s._clock.now += 20.0
    assert s.release("t", 1, "r-1") and not s.release("t", 1, "r-1")
    assert s.sweep() == 0  # r-2 still holds it
    assert s.release("t", 1, "r-2") and s.sweep() == 1


def test_a_hold_runs_out_at_its_maximum(make_block) -> None:
    s = store(ttl=10.0)
    put(s, make_block, 1, SPEC)
    s.hold("t", 1, "r-1", hold_s=30.0)
    s._clock.now += 29.0
    assert s.sweep() == 0
    s._clock.now += 1.0  # the request's engine never said it read the block
    assert s.sweep() == 1 and s.info("t", 1) is None


def test_only_a_speculative_replica_of_the_tenant_is_held(make_block) -> None:
    s = store(capacity_kib=8)
    put(s, make_block, 1, CACHED)
    put(s, make_block, 2, ACTIVE)
    put(s, make_block, 3, SPEC)
    assert [s.hold("t", h, "r", 5.0) for h in (1, 2, 3, 4)] == [False, False, True, False]
    assert not s.hold("other", 3, "r", 5.0)  # the same hash of another tenant: absent


def test_a_held_replica_is_not_evicted_on_command(make_block) -> None:
    s = store()
    put(s, make_block, 1, SPEC)
    s.hold("t", 1, "r-1", 60.0)
    with pytest.raises(BlockHeld):
        s.evict("t", 1)
    s.release("t", 1, "r-1")
    assert s.evict("t", 1)


def test_a_held_replica_is_evicted_for_room_only_after_every_cached_block(make_block) -> None:
    s = store(capacity_kib=4, quota_kib=2)
    put(s, make_block, 1, SPEC)
    put(s, make_block, 2, SPEC)
    s.hold("t", 1, "r-1", 60.0)
    put(s, make_block, 3, CACHED)
    put(s, make_block, 4, CACHED)
    put(s, make_block, 5, CACHED)  # the unheld replica goes first
    assert s.info("t", 2) is None and s.info("t", 1) is not None
    put(s, make_block, 6, CACHED)  # then the oldest cached block, not the held replica
    assert s.info("t", 3) is None and s.info("t", 1) is not None
    for h in (7, 8, 9):
        put(s, make_block, h, ACTIVE)  # the cached blocks go
    assert s.info("t", 1) is not None and s.stats.held_evicted == 0
    put(s, make_block, 10, ACTIVE)  # nothing but the held replica left: a request wins
    assert s.info("t", 1) is None and s.stats.held_evicted == 1


def test_a_new_replica_never_displaces_a_held_one(make_block) -> None:
    s = store(capacity_kib=8, quota_kib=2)
    put(s, make_block, 1, SPEC)
    put(s, make_block, 2, SPEC)
    s.hold("t", 1, "r-1", 60.0)
    s.hold("t", 2, "r-1", 60.0)
    with pytest.raises(Exception, match="quota"):
        put(s, make_block, 3, SPEC)
    assert s.info("t", 1).holds == 1 and s.info("t", 2).holds == 1


def test_pinning_a_held_replica_makes_it_active_and_ends_its_holds(make_block) -> None:
    s = store()
    put(s, make_block, 1, SPEC)
    s.hold("t", 1, "r-1", 60.0)
    info = s.pin("t", 1)
    assert info.state is BlockState.ACTIVE and info.holds == 0
    assert s.stats.speculative_used == 1
    assert not s.release("t", 1, "r-1")  # nothing held any more


def test_the_inventory_names_each_live_hold_and_when_it_ends(make_block) -> None:
    s = store(ttl=10.0)
    put(s, make_block, 1, SPEC)
    t0 = s._clock.now
    s.hold("t", 1, "r-1", hold_s=30.0)
    s.hold("t", 1, "r-2", hold_s=5.0)
    [info] = s.inventory()
    assert info.holds == 2 and sorted(info.claims) == [("r-1", t0 + 30.0), ("r-2", t0 + 5.0)]
    s._clock.now += 6.0  # r-2's hold ran out: no longer listed
    assert s.info("t", 1).claims == (("r-1", t0 + 30.0),) and s.info("t", 1).holds == 1
    s.release("t", 1, "r-1")
    assert s.info("t", 1).claims == ()
