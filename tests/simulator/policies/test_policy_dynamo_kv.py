"""dynamo_kv (Dynamo's KV router): cost = scale x prefill blocks + decode blocks, lowest wins;
prefill blocks = (in-flight prefill tokens + the request's uncached tokens) / block size, decode
blocks = the node's distinct active blocks + the request's blocks not active there."""

from __future__ import annotations

from collections.abc import Callable

from kvcast.simulator.policies.base import NodeSnapshot, RoutingContext
from kvcast.simulator.policies.dynamo_kv import DynamoKv, DynamoKvParams

MakeCtx = Callable[..., RoutingContext]


def _policy(seed: int = 0, **params: object) -> DynamoKv:
    return DynamoKv(DynamoKvParams(**params), num_nodes=4, seed=seed)


def _node(i: int, prefill: int = 0, decode: int = 0, active: tuple[int, ...] = ()) -> NodeSnapshot:
    """``prefill`` blocks' worth of in-flight prefill tokens; ``decode`` active blocks of other
    chains than the tests' requests' (hashes from 1,000), and ``active`` blocks besides."""
    blocks = frozenset(range(1_000, 1_000 + decode)) | frozenset(active)
    return NodeSnapshot(node_id=i, inflight_prefill_tokens=512 * prefill, active_blocks=blocks)


def test_defaults_are_dynamos_overlap_weight_1_and_temperature_0() -> None:
    assert DynamoKvParams() == DynamoKvParams(prefill_load_scale=1.0, router_temperature=0.0)


def test_cost_is_the_anchor_formula(make_ctx: MakeCtx) -> None:
    # the request: blocks 100..107, 8 x 512 tokens less 100 (its last block partial)
    nodes = [_node(0, prefill=10, decode=20, active=(100, 101, 102)), _node(1, decode=3)]
    ctx = make_ctx(nodes, match=[6, 0], num_blocks=8, input_tokens=8 * 512 - 100)
    prefill = [10 + (8 * 512 - 100 - 6 * 512) / 512, (8 * 512 - 100) / 512]
    decode = [(20 + 3) + (8 - 3), 3 + 8]  # active, then the request's blocks not active
    assert _policy(prefill_load_scale=2.0).costs(ctx) == [
        2.0 * p + d for p, d in zip(prefill, decode, strict=True)
    ]


def test_blocks_several_requests_hold_count_once_in_the_decode_term(make_ctx: MakeCtx) -> None:
    # node 0's requests hold the request's first 5 blocks: it adds only 3 active blocks there
    nodes = [_node(0, active=tuple(range(100, 105))), _node(1, decode=5)]
    ctx = make_ctx(nodes, match=[0, 0], num_blocks=8)
    assert _policy(prefill_load_scale=0.0).costs(ctx) == [5 + 3, 5 + 8]


def test_overlap_reduces_cost_so_the_cached_node_wins_at_equal_load(make_ctx: MakeCtx) -> None:
    nodes = [_node(i, prefill=4, decode=4) for i in range(4)]
    assert _policy().route(make_ctx(nodes, match=[0, 0, 6, 2])).node == 2


def test_decode_load_can_outweigh_overlap(make_ctx: MakeCtx) -> None:
    nodes = [_node(0, decode=100), _node(1, decode=0)]
    # node 0: 0 + 100; node 1: 8 + 0
    assert _policy().route(make_ctx(nodes, match=[8, 0])).node == 1


def test_a_cached_prefix_longer_than_the_prompt_prefills_nothing(make_ctx: MakeCtx) -> None:
    nodes = [_node(0, prefill=0, decode=5, active=tuple(range(100, 108)))]
    assert _policy().costs(make_ctx(nodes, match=[12], num_blocks=8)) == [13.0]


def test_zero_prefill_scale_is_pure_decode_balancing(make_ctx: MakeCtx) -> None:
    nodes = [_node(0, prefill=0, decode=9), _node(1, prefill=50, decode=1)]
    assert _policy(prefill_load_scale=0.0).route(make_ctx(nodes, match=[8, 0])).node == 1


def test_ties_are_broken_by_the_seeded_rng_deterministically(make_ctx: MakeCtx) -> None:
    nodes = [_node(i) for i in range(4)]
    ctx = make_ctx(nodes)

    def picks(seed: int) -> list[int]:
        policy = _policy(seed=seed)
        return [policy.route(ctx).node for _ in range(40)]

    assert picks(7) == picks(7)
    assert set(picks(7)) == {0, 1, 2, 3}  # uniform among the tied minima
    assert picks(7) != picks(8)


def test_ties_only_among_the_minimum_cost_nodes(make_ctx: MakeCtx) -> None:
    nodes = [_node(0, decode=1), _node(1), _node(2, decode=1), _node(3)]
    policy = _policy(seed=3)
    assert {policy.route(make_ctx(nodes)).node for _ in range(40)} == {1, 3}


def test_positive_temperature_samples_softmax_favouring_low_cost(make_ctx: MakeCtx) -> None:
    nodes = [_node(0, decode=0), _node(1, decode=100)]
    ctx = make_ctx(nodes)
    a, b = _policy(seed=1, router_temperature=0.5), _policy(seed=1, router_temperature=0.5)
    seq = [a.route(ctx).node for _ in range(400)]
    assert seq == [b.route(ctx).node for _ in range(400)]
    # p(node 1) = 1 / (1 + e^2) ~ 0.12
    assert 0.05 < seq.count(1) / 400 < 0.2
