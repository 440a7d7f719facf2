"""sglang_cache_aware: shortest queue when imbalanced, else cache affinity above 0.3."""

from __future__ import annotations

from collections.abc import Callable

from kvcast.simulator.policies.base import NodeSnapshot, RoutingContext
from kvcast.simulator.policies.sglang_cache_aware import SglangCacheAware, SglangCacheAwareParams

MakeCtx = Callable[..., RoutingContext]
Loads = Callable[..., list[NodeSnapshot]]


def _policy(**params: object) -> SglangCacheAware:
    return SglangCacheAware(SglangCacheAwareParams(**params), num_nodes=3, seed=0)


def test_defaults_are_the_sgl_router_cli_defaults() -> None:
    p = SglangCacheAwareParams()
    assert (p.cache_threshold, p.balance_abs_threshold, p.balance_rel_threshold) == (0.3, 64, 1.5)


def test_imbalanced_by_both_abs_and_rel_goes_to_shortest_queue_despite_full_match(
    make_ctx: MakeCtx, loads: Loads
) -> None:
    # 100 - 10 > 64 and 100 > 1.5 x 10
    assert _policy().route(make_ctx(loads(100, 10, 50), match=[8, 0, 0])).node == 1


def test_abs_difference_within_64_is_balanced_even_if_ratio_is_huge(
    make_ctx: MakeCtx, loads: Loads
) -> None:
    # 60 - 0 <= 64 (abs fails) although 60 > 1.5 x 0: cache affinity decides
    assert _policy().route(make_ctx(loads(60, 0, 30), match=[8, 0, 0])).node == 0


def test_ratio_within_1_5_is_balanced_even_if_abs_difference_exceeds_64(
    make_ctx: MakeCtx, loads: Loads
) -> None:
    # 300 - 220 > 64 but 300 <= 1.5 x 220 (rel fails): cache affinity decides
    assert _policy().route(make_ctx(loads(300, 220, 250), match=[8, 0, 0])).node == 0


def test_match_rate_above_threshold_picks_best_match_even_if_more_loaded(
    make_ctx: MakeCtx, loads: Loads
) -> None:
    # best match rate 4 x 512 / 4096 = 0.5 > 0.3
    assert _policy().route(make_ctx(loads(5, 0, 1), match=[1, 4, 0])).node == 1


def test_match_rate_equal_to_threshold_is_not_a_hit_and_goes_least_loaded(
    make_ctx: MakeCtx, loads: Loads
) -> None:
    # 3 x 512 / 5120 = 0.3, not > 0.3
    ctx = make_ctx(loads(5, 9, 2), match=[3, 0, 0], num_blocks=10)
    assert _policy().route(ctx).node == 2


def test_low_match_rate_goes_to_least_loaded(make_ctx: MakeCtx, loads: Loads) -> None:
    # 1 x 512 / 4096 = 0.125 <= 0.3
    assert _policy().route(make_ctx(loads(3, 2, 4), match=[1, 0, 0])).node == 1


def test_match_rate_is_relative_to_input_tokens_and_capped_at_one(
    make_ctx: MakeCtx, loads: Loads
) -> None:
    # 1 block of 512 tokens over a 1000-token prompt: 0.512 > 0.3 -> best match
    ctx = make_ctx(loads(3, 0, 0), match=[1, 0, 0], num_blocks=2, input_tokens=1000)
    assert _policy().route(ctx).node == 0
    # a higher threshold than any rate, even a capped 1.0, never hits
    ctx = make_ctx(loads(3, 0, 0), match=[4, 0, 0], num_blocks=4, input_tokens=100)
    assert _policy(cache_threshold=1.0).route(ctx).node == 1


def test_best_match_ties_go_to_the_less_loaded_node(make_ctx: MakeCtx, loads: Loads) -> None:
    assert _policy().route(make_ctx(loads(9, 4, 0), match=[6, 6, 0])).node == 1


def test_thresholds_are_configurable(make_ctx: MakeCtx, loads: Loads) -> None:
    ctx = make_ctx(loads(100, 10, 50), match=[8, 0, 0])
    assert _policy(balance_abs_threshold=200).route(ctx).node == 0


def test_the_router_reads_its_own_index_of_routed_prefixes_unless_told_the_engines(
    make_ctx: MakeCtx, loads: Loads
) -> None:
    """The anchor matches against the prefixes it routed (routed_blocks), not the engines'
    caches (match_blocks): node 2 was sent the prefix, node 0 holds it now."""
    ctx = make_ctx(loads(3, 3, 3), match=[8, 0, 0])
    ctx.routed_blocks = [0, 0, 8]
    assert _policy().route(ctx).node == 2
    assert _policy(prefix_view="engine").route(ctx).node == 0


def test_both_views_pick_a_longer_in_flight_routed_prefix_over_the_cached_shared_root(
    make_ctx: MakeCtx, loads: Loads
) -> None:
    """A follow-up call while its predecessor's prefill still runs on node 1: node 0 caches
    the shared root (3 blocks), node 1 was sent 6 blocks not yet cached. The engines' view
    sees only the root and keeps the call on node 0, which would recompute the other 3;
    ``both`` reads the router's index there and follows the predecessor."""
    ctx = make_ctx(loads(2, 4, 3), match=[3, 0, 0])
    ctx.routed_blocks = [3, 6, 0]
    assert _policy(prefix_view="engine").route(ctx).node == 0
    assert _policy(prefix_view="both").route(ctx).node == 1
    assert _policy(prefix_view="router").route(ctx).node == 1


def test_both_views_pick_a_replica_the_router_never_routed_to(
    make_ctx: MakeCtx, loads: Loads
) -> None:
    """Node 2 holds a replica of 7 blocks another component placed (the engines' KV events
    report it; the router never sent a request there): ``both`` sees it, ``router`` not."""
    ctx = make_ctx(loads(2, 4, 3), match=[3, 0, 7])
    ctx.routed_blocks = [3, 6, 0]
    assert _policy(prefix_view="both").route(ctx).node == 2
    assert _policy(prefix_view="router").route(ctx).node == 1
