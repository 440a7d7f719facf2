"""The router's own index: per node, the longest prefix of a request among the blocks it
routed there, the least recently routed forgotten beyond its bound."""

from __future__ import annotations

import pytest

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
    from simtraces import config

    from kvcast.simulator.policies.registry import reads_routed_index

    assert reads_routed_index("sglang_cache_aware") and reads_routed_index("aibrix_prefix")
    engine = config(routing={"sglang_cache_aware": {"prefix_view": "engine"}}).routing
    assert not reads_routed_index("sglang_cache_aware", engine)
    assert not reads_routed_index("dynamo_kv") and not reads_routed_index("no_such_router")


def test_a_chains_tail_is_forgotten_before_its_head() -> None:
    """As a radix tree drops leaves: what is left of a chain is its prefix, still matched
    (dropping the head first left blocks no request's match could reach)."""
    index = RoutedIndex(1, per_node=4)
    index.note(0, [1, 2, 3, 4])
    index.note(0, [9])
    assert index.match([1, 2, 3, 4]) == [3]
