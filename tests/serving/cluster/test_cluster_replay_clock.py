"""The replay's clock: ``max_lag_s`` is how far behind its schedule (``t0_unix_ms`` plus the
scaled arrival over ``--speed``, the clock ``--played`` writes) the replay posted an arrival,
whatever made it late: a backlog of arrivals due at once, or a wait that woke up late."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import httpx
import pytest

from kvcast.serving.cluster import replay
from kvcast.serving.cluster.engine_player import EngineStats
from kvcast.serving.cluster.layout import ReplayTargets
from kvcast.serving.cluster.node_model import NodeModel
from kvcast.serving.cluster.replay import ReplaySpec
from kvcast.serving.cluster.router_player import RouterPlayer, TraceRequest

LATE_S = 0.15  # how late each wait before an arrival wakes up


class Engine:
    """An engine player that takes every admission and has nothing to drain."""

    def __init__(self) -> None:
        self.stats, self.sink = EngineStats(), SimpleNamespace(events=0, batches=0)

    def submit(self, admission: object, tenant: str) -> None:
        pass

    async def close(self, drain_s: float) -> None:
        pass


def test_max_lag_bounds_how_late_each_arrival_was_posted(monkeypatch: pytest.MonkeyPatch) -> None:
    posted: list[dict] = []

    def sidecar(request: httpx.Request) -> httpx.Response:
        posted.extend(json.loads(request.content)["requests"])
        return httpx.Response(202)

    async def late_sleep(delay: float, result: object = None) -> object:
        return await asyncio.sleep(delay + LATE_S, result)

    monkeypatch.setattr(replay, "asyncio", SimpleNamespace(**vars(asyncio) | {"sleep": late_sleep}))
    spec = ReplaySpec(speed=2.0)
    requests = [TraceRequest(f"r{i}", 400.0 * i, "acme", None, 32, 8, (i, 100 + i))
                for i in range(5)]  # fmt: skip
    nodes = [NodeModel(0, capacity_blocks=64, block_tokens=16)]
    router = RouterPlayer("least_loaded", nodes, block_tokens=16, block_bytes=4096)
    targets = ReplayTargets("http://127.0.0.1:1", ("http://127.0.0.1:2",), ("n0",))

    async def main() -> dict:
        async with httpx.AsyncClient(transport=httpx.MockTransport(sidecar)) as http:
            return await replay._play(
                requests, targets, spec, http, {}, router, nodes, [Engine()], ("n0",), None
            )

    stats = asyncio.run(main())
    assert stats["requests"] == len(posted) == len(requests)
    assert stats["max_lag_s"] >= LATE_S
    due = {r.request_id: stats["t0_unix_ms"] + r.arrival_ms / spec.speed for r in requests}
    for body in posted:
        late_ms = body["ts_ms"] - due[body["request_id"]]
        assert late_ms <= stats["max_lag_s"] * 1000.0 + 20.0, (body["request_id"], late_ms)
