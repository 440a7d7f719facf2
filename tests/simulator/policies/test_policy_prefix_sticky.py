"""prefix_sticky: consistent hash of the session, else of the first n block hashes."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from kvcast.simulator.policies.base import NodeSnapshot, RoutingContext
from kvcast.simulator.policies.prefix_sticky import (
    HashRing,
    PrefixSticky,
    PrefixStickyParams,
    stable_hash,
)

MakeCtx = Callable[..., RoutingContext]
Loads = Callable[..., list[NodeSnapshot]]


def _policy(num_nodes: int = 8, **params: object) -> PrefixSticky:
    return PrefixSticky(PrefixStickyParams(**params), num_nodes=num_nodes, seed=0)


def test_same_session_goes_to_same_node_whatever_its_blocks_and_load(
    make_ctx: MakeCtx, loads: Loads
) -> None:
    policy = _policy()
    first = policy.route(make_ctx(loads(*[0] * 8), session="chat-42", block_hashes=[1, 2, 3]))
    for hashes in ([9, 8], [1, 2, 3, 4, 5], [77]):
        ctx = make_ctx(loads(*range(8)), session="chat-42", block_hashes=hashes)
        assert policy.route(ctx).node == first.node


def test_without_session_key_is_first_two_blocks_so_later_blocks_do_not_matter(
    make_ctx: MakeCtx, loads: Loads
) -> None:
    policy = _policy()
    a = policy.route(make_ctx(loads(*[0] * 8), block_hashes=[5, 6, 7, 8]))
    b = policy.route(make_ctx(loads(*[0] * 8), block_hashes=[5, 6, 1000, 2000, 3000]))
    assert a.node == b.node


def test_shared_system_prompt_block_zero_still_spreads_over_nodes(
    make_ctx: MakeCtx, loads: Loads
) -> None:
    policy = _policy()
    nodes = {
        policy.route(make_ctx(loads(*[0] * 8), block_hashes=[0, k, k + 1])).node
        for k in range(1, 200)
    }
    assert len(nodes) == 8


def test_different_first_blocks_spread_roughly_evenly_across_nodes(
    make_ctx: MakeCtx, loads: Loads
) -> None:
    policy = _policy()
    counts = Counter(
        policy.route(make_ctx(loads(*[0] * 8), block_hashes=[k, k])).node for k in range(800)
    )
    assert set(counts) == set(range(8))
    assert max(counts.values()) < 2 * 800 / 8


def test_consistent_hashing_moves_few_keys_and_only_to_the_new_node() -> None:
    keys = [stable_hash(f"key-{k}".encode()) for k in range(2000)]
    before = HashRing(range(8), 160)
    after = HashRing(range(9), 160)
    moved = [k for k in keys if before.lookup(k) != after.lookup(k)]
    assert len(moved) / len(keys) < 0.2  # ideal: 1/9 of the keys
    assert all(after.lookup(k) == 8 for k in moved)


def test_ring_is_rebuilt_when_the_cluster_changes_size(make_ctx: MakeCtx, loads: Loads) -> None:
    policy = _policy(num_nodes=2)
    seen = {policy.route(make_ctx(loads(*[0] * 4), session=f"s{k}")).node for k in range(100)}
    assert seen == {0, 1, 2, 3}


def test_hash_is_a_fixed_blake2b_value_not_pythons_salted_hash() -> None:
    # BLAKE2b-64 of b"kvcast": identical in every process, whatever PYTHONHASHSEED is.
    assert stable_hash(b"kvcast") == 0x531006E8C0950C13
