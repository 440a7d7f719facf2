"""The replay's router: a baseline rule on the engines' modelled state picks the node, the
arrival goes to the sidecar in the shape its API validates; the trace window it plays."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from kvcast.cli.common import open_trace
from kvcast.serving.cluster.node_model import NodeModel
from kvcast.serving.cluster.replay import ReplaySpec, trace_requests
from kvcast.serving.cluster.router_player import RouterPlayer, TraceRequest, arrival_body
from kvcast.serving.sidecar.api_models import ArrivalBatch


def _req(i: int, chain: tuple[int, ...], session: str | None = None) -> TraceRequest:
    return TraceRequest(f"r{i}", float(i), "acme", session, 16 * len(chain), 8, chain)


def _nodes(n: int = 3) -> list[NodeModel]:
    return [NodeModel(i, capacity_blocks=64, block_tokens=16) for i in range(n)]


def test_prefix_sticky_sends_a_shared_prefix_to_one_node() -> None:
    router = RouterPlayer("prefix_sticky", _nodes(), block_tokens=16, block_bytes=4096)
    picks = {router.route(float(i), _req(i, (7, 8, 100 + i))) for i in range(10)}
    assert len(picks) == 1 and sum(router.routed) == 10


def test_least_loaded_avoids_the_node_with_outstanding_requests() -> None:
    nodes = _nodes(2)
    nodes[0].admit(0.0, "acme", (1,), 16, 100)  # node 0 is busy prefilling, then decoding
    router = RouterPlayer("least_loaded", nodes, block_tokens=16, block_bytes=4096)
    assert router.route(1.0, _req(1, (2,))) == 1


def test_an_unknown_router_is_refused_with_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="prefix_sticky, least_loaded"):
        RouterPlayer("mooncake_conductor", _nodes(), block_tokens=16, block_bytes=4096)
    with pytest.raises(ValueError, match="--router"):
        ReplaySpec(router="nope")
    with pytest.raises(ValueError, match="--speed must be > 0"):
        ReplaySpec(speed=0.0)


def test_the_arrival_is_what_the_sidecar_api_accepts() -> None:
    body = arrival_body(_req(3, (1, 2), session="s-1"), node=2, queue_depth=4, ts_ms=1e12)
    arrival = ArrivalBatch.model_validate({"requests": [body]}).requests[0]
    assert (arrival.node, arrival.queue_depth, arrival.session) == (2, 4, "s-1")
    assert "session" not in arrival_body(_req(3, (1,)), node=0, queue_depth=0, ts_ms=0.0)


def test_posts_are_counted_and_refusals_are_failures_not_errors() -> None:
    seen: list[httpx.Request] = []

    def sidecar(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        ok = request.headers.get("authorization") == "Bearer t"
        return httpx.Response(202 if ok else 401, json={})

    async def main() -> RouterPlayer:
        router = RouterPlayer("round_robin", _nodes(), block_tokens=16, block_bytes=4096)
        async with httpx.AsyncClient(transport=httpx.MockTransport(sidecar)) as http:
            item = arrival_body(_req(1, (1,)), 0, 0, 0.0)
            assert await router.post(http, "http://127.0.0.1:1", {"Authorization": "Bearer t"},
                                     [item, item])  # fmt: skip
            assert not await router.post(http, "http://127.0.0.1:1", {}, [item])
        return router

    router = asyncio.run(main())
    assert (router.posted, router.post_failures) == (2, 1)
    assert seen[0].url.path == "/v1/requests"


def test_the_window_is_cut_time_scaled_and_bounded() -> None:
    trace = open_trace("bundled:conversation")
    two_minutes = trace_requests(trace, ReplaySpec(window_s=120.0))
    assert len(two_minutes) == 339
    assert 0.0 <= two_minutes[0].arrival_ms <= two_minutes[-1].arrival_ms < 123_000.0
    assert all(r.block_hashes and r.session is None for r in two_minutes)
    fast = trace_requests(trace, ReplaySpec(window_s=120.0, time_scale=2.0, max_requests=50))
    assert len(fast) == 50
    assert fast[-1].arrival_ms == pytest.approx(two_minutes[49].arrival_ms / 2.0)
    more = trace_requests(trace, ReplaySpec(window_s=120.0, time_scale=2.0,
                                            load_scaling="sessions"))  # fmt: skip
    assert len(more) == 2 * len(two_minutes)  # every session twice, over the same window
    assert max(r.arrival_ms for r in more) < 123_000.0
    with pytest.raises(ValueError, match="--load-scaling 'users'"):
        ReplaySpec(load_scaling="users")
