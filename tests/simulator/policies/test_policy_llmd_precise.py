"""llmd_precise: 2.0 x prefix + 1.0 x (1 - kv_usage) + 1.0 x min-max queue score, argmax."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kvcast.simulator.policies.base import NodeSnapshot, RoutingContext
from kvcast.simulator.policies.llmd_precise import LlmdPrecise, LlmdPreciseParams

MakeCtx = Callable[..., RoutingContext]


def _policy(**params: object) -> LlmdPrecise:
    return LlmdPrecise(LlmdPreciseParams(**params), num_nodes=3, seed=0)


def _node(i: int, q: int = 0, kv: float = 0.0) -> NodeSnapshot:
    return NodeSnapshot(node_id=i, queue_len=q, kv_usage=kv)


def test_defaults_are_the_llm_d_guide_weights() -> None:
    p = LlmdPreciseParams()
    assert (p.prefix_weight, p.kv_utilization_weight, p.queue_weight) == (2.0, 1.0, 1.0)


def test_score_is_the_weighted_sum_of_the_three_scorers(make_ctx: MakeCtx) -> None:
    nodes = [_node(0, q=10, kv=0.5), _node(1, q=0, kv=0.0), _node(2, q=5, kv=0.25)]
    ctx = make_ctx(nodes, match=[8, 0, 2], num_blocks=8)
    expected = [2 * 1.0 + 0.5 + 0.0, 0.0 + 1.0 + 1.0, 2 * 0.25 + 0.75 + 0.5]
    assert _policy().scores(ctx) == pytest.approx(expected)


def test_prefix_weight_2_lets_a_full_match_beat_an_idle_empty_node(make_ctx: MakeCtx) -> None:
    nodes = [_node(0, q=10, kv=0.5), _node(1, q=0, kv=0.0)]
    ctx = make_ctx(nodes, match=[8, 0])
    assert _policy().route(ctx).node == 0  # 2.5 vs 2.0
    assert _policy(prefix_weight=1.0).route(ctx).node == 1  # 1.5 vs 2.0


def test_lower_kv_usage_wins_when_prefix_and_queue_are_equal(make_ctx: MakeCtx) -> None:
    nodes = [_node(0, kv=0.9), _node(1, kv=0.2), _node(2, kv=0.5)]
    assert _policy().route(make_ctx(nodes)).node == 1


def test_queue_score_is_one_for_all_when_queues_are_equal(make_ctx: MakeCtx) -> None:
    nodes = [_node(i, q=7) for i in range(3)]
    assert _policy(prefix_weight=0.0, kv_utilization_weight=0.0).scores(make_ctx(nodes)) == [
        1.0,
        1.0,
        1.0,
    ]


def test_queue_score_is_min_max_normalised(make_ctx: MakeCtx) -> None:
    nodes = [_node(0, q=4), _node(1, q=8), _node(2, q=6)]
    scores = _policy(prefix_weight=0.0, kv_utilization_weight=0.0).scores(make_ctx(nodes))
    assert scores == [1.0, 0.0, 0.5]


def test_ties_are_shuffled_by_the_seeded_rng_as_the_anchors_picker_does(
    make_ctx: MakeCtx,
) -> None:
    nodes = [_node(2), _node(0), _node(1), _node(3, q=1)]  # node 3: a lower queue score
    ctx = make_ctx(nodes)

    def picks(seed: int) -> list[int]:
        policy = LlmdPrecise(LlmdPreciseParams(), num_nodes=4, seed=seed)
        return [policy.route(ctx).node for _ in range(40)]

    assert set(picks(5)) == {0, 1, 2}  # every tied node, never the lower score
    assert picks(5) == picks(5) and picks(5) != picks(6)


def test_minmax_prefix_normalisation_matches_the_scorer(make_ctx: MakeCtx) -> None:
    policy = _policy(prefix_normalization="minmax")
    assert policy.prefix_scores(make_ctx([_node(i) for i in range(3)], match=[2, 6, 0])) == [
        0.0,
        1.0,
        0.0,
    ]
    assert policy.prefix_scores(make_ctx([_node(i) for i in range(3)], match=[3, 3, 0])) == [
        1.0,
        1.0,
        0.0,
    ]
