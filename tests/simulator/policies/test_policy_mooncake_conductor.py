"""mooncake_conductor: min TTFT = transfer + queue + prefill, pulling from the best holder."""

from __future__ import annotations

from collections.abc import Callable

from kvcast.simulator.policies.base import NodeSnapshot, RoutingContext, RoutingDecision
from kvcast.simulator.policies.mooncake_conductor import (
    MooncakeConductor,
    MooncakeConductorParams,
)

MakeCtx = Callable[..., RoutingContext]

PREFILL = 0.1  # ms per uncached token
FAST = 1.0  # ms per pulled block
SLOW = 100.0


def _policy(**params: object) -> MooncakeConductor:
    return MooncakeConductor(MooncakeConductorParams(**params), num_nodes=3, seed=0)


def _node(i: int, queue_ms: float = 0.0) -> NodeSnapshot:
    return NodeSnapshot(node_id=i, est_queue_ms=queue_ms)


def _ctx(
    make_ctx: MakeCtx, nodes: list[NodeSnapshot], match: list[int], per_block: float, **kw: object
) -> RoutingContext:
    return make_ctx(
        nodes,
        match,
        prefill_ms=lambda n: PREFILL * n,
        transfer_ms=lambda src, dst, n: per_block * n,
        **kw,
    )


def test_pull_from_holder_when_gap_exceeds_threshold_and_transfer_is_cheap(
    make_ctx: MakeCtx,
) -> None:
    # holder 0 queued 300 ms: 300 + 0.1 x 512 = 351.2; node 1 pulls 8 blocks: 8 + 51.2
    nodes = [_node(0, 300.0), _node(1), _node(2, 50.0)]
    d = _policy().route(_ctx(make_ctx, nodes, [8, 0, 0], FAST))
    assert (d.node, d.pull_from, d.pull_blocks, d.reject) == (1, 0, 8, False)


def test_no_pull_when_transfer_is_slow_so_the_holder_wins(make_ctx: MakeCtx) -> None:
    # node 1 would pay 8 x 100 ms of transfer: 851.2 > 351.2
    nodes = [_node(0, 300.0), _node(1), _node(2, 50.0)]
    d = _policy().route(_ctx(make_ctx, nodes, [8, 0, 0], SLOW))
    assert (d.node, d.pull_from, d.pull_blocks) == (0, None, 0)


def test_gap_within_threshold_recomputes_instead_of_pulling(make_ctx: MakeCtx) -> None:
    nodes = [_node(0, 300.0), _node(1), _node(2, 300.0)]
    ctx = _ctx(make_ctx, nodes, [6, 5, 0], FAST)
    # gap 1 <= 1 block: node 1 prefills 8 - 5 = 3 blocks locally
    assert _policy().route(ctx) == RoutingDecision(node=1)
    # gap 1 > 0 blocks: node 1 pulls block 5 from node 0
    d = _policy(balancing_threshold=0.0).route(ctx)
    assert (d.node, d.pull_from, d.pull_blocks) == (1, 0, 6)


def test_ratio_form_pulls_when_best_over_local_reaches_threshold(make_ctx: MakeCtx) -> None:
    nodes = [_node(0, 300.0), _node(1), _node(2, 300.0)]
    ctx = _ctx(make_ctx, nodes, [6, 4, 0], FAST)  # ratio 1.5
    assert _policy(threshold_kind="ratio", balancing_threshold=2.0).route(ctx).pull_from is None
    assert _policy(threshold_kind="ratio", balancing_threshold=1.5).route(ctx).pull_from == 0


def test_queue_time_is_part_of_ttft(make_ctx: MakeCtx) -> None:
    nodes = [_node(0, 40.0), _node(1, 10.0), _node(2, 30.0)]
    assert _policy().route(_ctx(make_ctx, nodes, [0, 0, 0], FAST)).node == 1


def test_last_block_is_always_recomputed_and_tokens_never_negative(make_ctx: MakeCtx) -> None:
    seen: list[int] = []

    def prefill(n: int) -> float:
        seen.append(n)
        return float(n)

    nodes = [_node(0), _node(1), _node(2)]
    make = make_ctx(nodes, [8, 8, 8], prefill_ms=prefill)
    # full hit everywhere: ties go to the lowest id
    assert _policy().route(make) == RoutingDecision(node=0)
    assert seen == [512, 512, 512]
    seen.clear()
    short = make_ctx(nodes, [8, 8, 8], prefill_ms=prefill, input_tokens=1000)
    _policy().route(short)
    assert seen == [0, 0, 0]


def test_reject_when_best_ttft_exceeds_slo_only_if_enabled(make_ctx: MakeCtx) -> None:
    nodes = [_node(0, 300.0), _node(1, 300.0), _node(2, 300.0)]
    ctx = _ctx(make_ctx, nodes, [0, 0, 0], FAST, slo_ms=100.0)
    assert not _policy().route(ctx).reject
    d = _policy(reject_over_slo=True).route(ctx)
    assert d.reject and d.node == 0
    ok = _ctx(make_ctx, nodes, [0, 0, 0], FAST, slo_ms=10_000.0)
    assert not _policy(reject_over_slo=True).route(ok).reject
