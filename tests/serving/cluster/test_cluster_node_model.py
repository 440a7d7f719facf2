"""The replay's engine model: an LRU prefix cache (stored, refreshed, evicted blocks) and a
FIFO prefill queue (depth, snapshot); pure logic in trace time."""

from __future__ import annotations

import pytest

from kvcast.prefill import PrefillModel
from kvcast.serving.cluster.node_model import NodeModel

FLAT = PrefillModel(a_ms=100.0, b_ms_per_token=0.0, c_ms_per_token2=0.0)  # 100 ms per request


def test_new_blocks_are_stored_in_chain_order_with_their_parents() -> None:
    node = NodeModel(0, capacity_blocks=10, block_tokens=16)
    first = node.admit(0.0, "acme", (1, 2, 3), 48, 0)
    assert first.stored == (1, 2, 3) and first.parents == (None, 1, 2) and first.matched == 0
    second = node.admit(1.0, "acme", (1, 2, 4, 5), 64, 0)
    assert second.matched == 2 and second.stored == (4, 5) and second.parents == (2, 4)
    assert node.match((1, 2, 4, 9)) == 3 and node.match((9, 1)) == 0


def test_the_least_recently_used_blocks_are_evicted_never_the_current_chain() -> None:
    node = NodeModel(0, capacity_blocks=4, block_tokens=16)
    node.admit(0.0, "a", (1, 2), 32, 0)
    node.admit(1.0, "b", (3, 4), 32, 0)
    node.admit(2.0, "a", (1,), 16, 0)  # 1 is refreshed: 2 is now the oldest
    adm = node.admit(3.0, "b", (3, 5, 6), 48, 0)
    assert adm.stored == (5, 6) and adm.evicted == (("a", 2), ("b", 4))
    assert list(node.cache) == [1, 3, 5, 6] and node.evicted_blocks == 2


def test_a_chain_longer_than_the_cache_keeps_its_leading_blocks() -> None:
    node = NodeModel(0, capacity_blocks=3, block_tokens=16)
    adm = node.admit(0.0, "a", (1, 2, 3, 4, 5), 80, 0)
    assert adm.stored == (1, 2, 3) and adm.evicted == () and list(node.cache) == [1, 2, 3]


def test_the_queue_is_fifo_and_its_depth_and_snapshot_follow_time() -> None:
    node = NodeModel(2, capacity_blocks=8, block_tokens=16, prefill=FLAT, decode_ms_per_token=1.0)
    depths = [node.admit(0.0, "a", (i,), 16, 50).queue_depth for i in range(3)]
    assert depths == [0, 0, 1]  # the first runs at once, the second waits behind it
    snap = node.snapshot(50.0)
    assert (snap.node_id, snap.outstanding, snap.queue_len) == (2, 3, 3)
    assert snap.est_queue_ms == pytest.approx(250.0) and snap.kv_usage == pytest.approx(3 / 8)
    assert (snap.inflight_prefill_tokens, snap.active_blocks) == (3 * 16, {0, 1, 2})  # none done
    assert node.queue_depth(150.0) == 1  # request 2 started at 100, request 3 waits until 200
    later = node.snapshot(320.0)  # prefills ended at 100, 200, 300; decodes last 50 ms
    assert (later.outstanding, later.queue_len, later.inflight_prefill_tokens) == (1, 0, 0)
    assert later.active_blocks == {2}  # the one still decoding
    assert node.snapshot(1000.0).outstanding == 0


def test_cached_prefix_tokens_are_not_prefilled_again() -> None:
    linear = PrefillModel(a_ms=0.0, b_ms_per_token=1.0, c_ms_per_token2=0.0)
    node = NodeModel(0, capacity_blocks=8, block_tokens=16, prefill=linear)
    node.admit(0.0, "a", (1, 2), 40, 0)
    assert node.free_at_ms == pytest.approx(40.0)
    node.admit(100.0, "a", (1, 2, 3), 50, 0)  # 32 tokens cached: 18 left
    assert node.free_at_ms == pytest.approx(118.0)


def test_a_cache_needs_room_for_one_block() -> None:
    with pytest.raises(ValueError, match="at least one block"):
        NodeModel(0, capacity_blocks=0, block_tokens=16)
