"""least_loaded: fewest outstanding requests, ties to the lowest node id."""

from __future__ import annotations

from collections.abc import Callable

from kvcast.simulator.policies.base import NodeSnapshot, RoutingContext
from kvcast.simulator.policies.least_loaded import (
    LeastLoaded,
    LeastLoadedParams,
    least_outstanding,
)

MakeCtx = Callable[..., RoutingContext]


def test_least_loaded_picks_fewest_outstanding_regardless_of_cache(
    make_ctx: MakeCtx, loads: Callable[..., list[NodeSnapshot]]
) -> None:
    policy = LeastLoaded(LeastLoadedParams(), num_nodes=4, seed=0)
    assert policy.route(make_ctx(loads(7, 3, 9, 4), match=[8, 0, 0, 0])).node == 1


def test_least_loaded_ties_go_to_lowest_node_id_even_out_of_order() -> None:
    nodes = [NodeSnapshot(node_id=3, outstanding=2), NodeSnapshot(node_id=1, outstanding=2)]
    nodes.append(NodeSnapshot(node_id=2, outstanding=5))
    assert least_outstanding(nodes) == 1


def test_least_loaded_uses_outstanding_not_queue_len() -> None:
    nodes = [
        NodeSnapshot(node_id=0, outstanding=10, queue_len=0),
        NodeSnapshot(node_id=1, outstanding=2, queue_len=2),
    ]
    assert least_outstanding(nodes) == 1
