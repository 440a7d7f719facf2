"""Hand-made cluster states for the routing-policy tests."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from kvcast.simulator.policies.base import NodeSnapshot, RoutingContext


def _make_ctx(
    nodes: Sequence[NodeSnapshot],
    match: Sequence[int] | None = None,
    *,
    num_blocks: int = 8,
    block_tokens: int = 512,
    input_tokens: int | None = None,
    prefill_ms: Callable[[int], float] = lambda n: n / 10.0,
    transfer_ms: Callable[[int, int, int], float] = lambda src, dst, n: 5.0 * n,
    session: str | None = None,
    slo_ms: float = float("inf"),
    block_hashes: Sequence[int] | None = None,
) -> RoutingContext:
    """A request of ``num_blocks`` full blocks (unless overridden) on the given nodes."""
    hashes = list(block_hashes) if block_hashes is not None else list(range(100, 100 + num_blocks))
    return RoutingContext(
        now_ms=0.0,
        input_tokens=input_tokens if input_tokens is not None else len(hashes) * block_tokens,
        block_hashes=hashes,
        block_tokens=block_tokens,
        match_blocks=list(match) if match is not None else [0] * len(nodes),
        nodes=list(nodes),
        prefill_ms=prefill_ms,
        transfer_ms=transfer_ms,
        session=session,
        slo_ms=slo_ms,
    )


def _loads(*outstanding: int) -> list[NodeSnapshot]:
    """Nodes 0..n-1 with the given outstanding request counts."""
    return [NodeSnapshot(node_id=i, outstanding=o) for i, o in enumerate(outstanding)]


@pytest.fixture
def make_ctx() -> Callable[..., RoutingContext]:
    """Build a :class:`RoutingContext` from nodes, per-node matches and simple cost models."""
    return _make_ctx


@pytest.fixture
def loads() -> Callable[..., list[NodeSnapshot]]:
    """Nodes 0..n-1 with the given outstanding request counts."""
    return _loads
