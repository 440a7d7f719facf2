"""The router's own index: per node, the longest prefix of a request among the blocks it
routed there, the least recently routed forgotten beyond its bound."""

from __future__ import annotations

import pytest

from kvcast.simulator.policies.base import NodeSnapshot, RoutingContext
from kvcast.simulator.routed_index import RoutedIndex


def test_a_nodes_match_is_the_longest_prefix_routed_there() -> None:
    index = RoutedIndex(3)
    index.note(1, [1, 2, 3])
    index.note(2, [1, 5])
    assert index.match([1, 2, 3, 4]) == [0, 3, 1]
    assert index.match([2, 3]) == [0, 2, 0]


def test_beyond_its_bound_a_node_forgets_the_least_recently_routed_blocks() -> None:
    index = RoutedIndex(1, per_node=4)
    index.note(0, [1, 2, 3])
    index.note(0, [1, 7])  # 1 routed again: the newest; 3 (the first chain's tail) the oldest
    index.note(0, [9])
    assert index.match([1, 2, 3]) == [2] and index.match([1, 7]) == [2]
    assert index.match([9]) == [1]
    with pytest.raises(ValueError, match="per_node"):
        RoutedIndex(1, per_node=0)


def test_the_index_is_kept_for_a_router_that_reads_it_and_only_then() -> None:
    """Kept for the views "router" and "both", from the router's own parameters when a
    router object is simulated (not the config's), else from the config (a replicating
    policy's base router is built from it)."""
    from simtraces import config, tiny_trace

    from kvcast.simulator.engine import Simulator
    from kvcast.simulator.policies import create_policy

    def kept(policy: object, routing: dict) -> tuple[object, bool]:
        sim = Simulator(
            tiny_trace([(0.0, 1024, 8, [1, 2])]), config(nodes=2, routing=routing), policy
        )  # type: ignore[arg-type]
        return sim.prefix_view, sim.routed is not None

    engine = {"sglang_cache_aware": {"prefix_view": "engine"}}
    assert kept("sglang_cache_aware", {}) == ("router", True)
    assert kept("aibrix_prefix", {}) == ("router", True)
    assert kept("sglang_cache_aware", engine) == ("engine", False)
    assert kept("dynamo_kv", {}) == (None, False)
    for name in ("sglang_cache_aware", "aibrix_prefix"):
        assert kept(name, {name: {"prefix_view": "both"}}) == ("both", True)
        own = create_policy(name, config(routing={name: {"prefix_view": "both"}}).routing,
                            num_nodes=2, seed=0)  # fmt: skip
        assert kept(own, {name: {"prefix_view": "engine"}}) == ("both", True)


def test_a_view_outside_router_engine_both_is_refused_naming_the_key_and_the_views() -> None:
    from simtraces import config

    from kvcast.config import ConfigError

    for policy in ("sglang_cache_aware", "aibrix_prefix"):
        with pytest.raises(ConfigError, match=rf"routing\.{policy}\.prefix_view") as err:
            config(routing={policy: {"prefix_view": "union"}})
        assert all(f"'{v}'" in str(err.value) for v in ("router", "engine", "both"))


def test_both_reads_per_node_the_longer_of_the_routed_and_the_cached_prefix() -> None:
    """max(routed, match) per node; without a routed index, the engines' view alone; any
    other view is a ValueError (the params refuse it first)."""
    ctx = RoutingContext(
        now_ms=0.0, input_tokens=8 * 512, block_hashes=list(range(8)), block_tokens=512,
        match_blocks=[3, 0, 7, 2], nodes=[NodeSnapshot(node_id=i) for i in range(4)],
        prefill_ms=lambda n: 0.0, transfer_ms=lambda s, d, n: 0.0,
        routed_blocks=[3, 6, 0, 5],
    )  # fmt: skip
    assert list(ctx.prefix_view("both")) == [3, 6, 7, 5]
    assert list(ctx.prefix_view("router")) == [3, 6, 0, 5]
    assert list(ctx.prefix_view("engine")) == [3, 0, 7, 2]
    ctx.routed_blocks = None
    assert list(ctx.prefix_view("both")) == [3, 0, 7, 2]
    with pytest.raises(ValueError, match="unknown prefix_view 'union'"):
        ctx.prefix_view("union")


def test_a_chains_tail_is_forgotten_before_its_head() -> None:
    """As a radix tree drops leaves: what is left of a chain is its prefix, still matched
    (dropping the head first left blocks no request's match could reach)."""
    index = RoutedIndex(1, per_node=4)
    index.note(0, [1, 2, 3, 4])
    index.note(0, [9])
    assert index.match([1, 2, 3, 4]) == [3]
