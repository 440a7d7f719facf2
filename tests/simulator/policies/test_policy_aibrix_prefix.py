"""aibrix_prefix: >16 spread -> least running; else best match within mean + 2 sigma."""

from __future__ import annotations

from collections.abc import Callable

from kvcast.simulator.policies.aibrix_prefix import AibrixPrefix, AibrixPrefixParams
from kvcast.simulator.policies.base import NodeSnapshot, RoutingContext

MakeCtx = Callable[..., RoutingContext]
Loads = Callable[..., list[NodeSnapshot]]


def _policy(**params: object) -> AibrixPrefix:
    return AibrixPrefix(AibrixPrefixParams(**params), num_nodes=8, seed=0)


def test_defaults_are_the_aibrix_helm_chart_values() -> None:
    assert AibrixPrefixParams() == AibrixPrefixParams(imbalance_abs_count=16, stddev_factor=2.0)


def test_spread_above_16_goes_to_least_running_despite_full_match(
    make_ctx: MakeCtx, loads: Loads
) -> None:
    assert _policy().route(make_ctx(loads(20, 3, 5), match=[8, 0, 0])).node == 1


def test_spread_of_exactly_16_is_not_imbalanced(make_ctx: MakeCtx, loads: Loads) -> None:
    assert _policy().route(make_ctx(loads(19, 3, 5), match=[8, 0, 0])).node == 0


def test_matched_nodes_sorted_by_match_desc_then_running_asc(
    make_ctx: MakeCtx, loads: Loads
) -> None:
    assert _policy().route(make_ctx(loads(3, 1, 0, 0), match=[4, 4, 2, 0])).node == 1


def test_node_above_mean_plus_two_sigma_is_skipped_for_next_best_match(
    make_ctx: MakeCtx, loads: Loads
) -> None:
    # running [16, 0 x 7]: mean 2, sample sigma sqrt(32) ~ 5.66, limit ~ 13.3 < 16
    ctx = make_ctx(loads(16, 0, 0, 0, 0, 0, 0, 0), match=[8, 0, 0, 2, 0, 1, 0, 0])
    assert _policy().route(ctx).node == 3
    # with a looser factor node 0 is within the limit and its longer match wins
    assert _policy(stddev_factor=3.0).route(ctx).node == 0


def test_no_eligible_matched_node_falls_back_to_least_running(
    make_ctx: MakeCtx, loads: Loads
) -> None:
    ctx = make_ctx(loads(16, 1, 0, 0, 0, 0, 0, 0), match=[8, 0, 0, 0, 0, 0, 0, 0])
    assert _policy().route(ctx).node == 2


def test_no_match_anywhere_goes_to_least_running(make_ctx: MakeCtx, loads: Loads) -> None:
    assert _policy().route(make_ctx(loads(4, 2, 2, 9))).node == 1


def test_the_router_reads_its_own_index_of_routed_prefixes_unless_told_the_engines(
    make_ctx: MakeCtx, loads: Loads
) -> None:
    """The anchor matches against its prefix table of routed requests (routed_blocks), not
    the engines' caches (match_blocks)."""
    ctx = make_ctx(loads(3, 3, 3, 3), match=[8, 0, 0, 0])
    ctx.routed_blocks = [0, 0, 0, 6]
    assert _policy().route(ctx).node == 3
    assert _policy(prefix_view="engine").route(ctx).node == 0


def test_both_views_pick_a_longer_in_flight_routed_prefix_over_the_cached_shared_root(
    make_ctx: MakeCtx, loads: Loads
) -> None:
    """Node 0 caches the shared root (3 blocks); node 1 was sent 6 blocks, still prefilling
    (in the gateway's table, not yet in its cache): ``both`` follows them, ``engine`` not."""
    ctx = make_ctx(loads(3, 3, 3, 3), match=[3, 0, 0, 0])
    ctx.routed_blocks = [3, 6, 0, 0]
    assert _policy(prefix_view="engine").route(ctx).node == 0
    assert _policy(prefix_view="both").route(ctx).node == 1


def test_both_views_pick_a_replica_the_gateway_never_routed_to(
    make_ctx: MakeCtx, loads: Loads
) -> None:
    """Node 3 holds a 7-block replica the gateway never sent a request to (KV events
    report it): ``both`` sees it, ``router`` not."""
    ctx = make_ctx(loads(3, 3, 3, 3), match=[3, 0, 0, 7])
    ctx.routed_blocks = [3, 6, 0, 0]
    assert _policy(prefix_view="both").route(ctx).node == 3
    assert _policy(prefix_view="router").route(ctx).node == 1
