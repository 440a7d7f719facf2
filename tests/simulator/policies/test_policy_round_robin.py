"""round_robin: the textbook rotation."""

from __future__ import annotations

from collections.abc import Callable

from kvcast.simulator.policies.base import NodeSnapshot, RoutingContext
from kvcast.simulator.policies.round_robin import RoundRobin, RoundRobinParams

MakeCtx = Callable[..., RoutingContext]


def test_round_robin_cycles_through_nodes_in_order_ignoring_load_and_cache(
    make_ctx: MakeCtx, loads: Callable[..., list[NodeSnapshot]]
) -> None:
    policy = RoundRobin(RoundRobinParams(), num_nodes=3, seed=0)
    ctx = make_ctx(loads(0, 100, 5), match=[8, 0, 0])
    assert [policy.route(ctx).node for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]


def test_round_robin_never_pulls_or_rejects(
    make_ctx: MakeCtx, loads: Callable[..., list[NodeSnapshot]]
) -> None:
    policy = RoundRobin(RoundRobinParams(), num_nodes=2, seed=0)
    d = policy.route(make_ctx(loads(0, 0), slo_ms=0.0))
    assert d.pull_from is None and d.pull_blocks == 0 and not d.reject
