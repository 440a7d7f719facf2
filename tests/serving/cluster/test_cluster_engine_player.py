"""The replay's engine, against a real agent on loopback (in this process): new blocks are
stored with the bytes their checksum promises, evicted ones leave the agent, each request's
KV events go out in routing order (removals, then one ``BlockStored`` per run of the chain
with its parent), the queue depth reaches the agent's telemetry; over ZMQ the events are
vLLM's wire format (over HTTP, the sidecar's ``/v1/kv-events`` body), and a sidecar that
receives nothing is named."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Sequence

import httpx
import pytest
import zmq

from kvcast.features.events import BlockRemoved, BlockStored
from kvcast.serving.agent.config import AgentConfig
from kvcast.serving.agent.service import AgentService
from kvcast.serving.cluster.blocks import BlockMaker
from kvcast.serving.cluster.engine_player import EnginePlayer, kv_events
from kvcast.serving.cluster.event_sinks import HttpSink, ZmqSink, await_subscribers
from kvcast.serving.cluster.node_model import Admission, NodeModel
from kvcast.serving.cluster.ports import free_ports, tcp_endpoint
from kvcast.serving.kv_events.decode import KvEvent
from kvcast.serving.kv_events.subscriber import KvEventSubscriber
from kvcast.serving.sidecar.api_models import KvEventBatch

TOKEN = "engine-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
BLOCK = 4096


@contextlib.asynccontextmanager
async def agent_at() -> AsyncIterator[str]:
    """A real agent on loopback (in this process) for the engine to fill; its base URL."""
    cfg = AgentConfig(node_id="gpu-node-0", capacity_bytes=1 << 20,
                      speculative_quota_bytes=1 << 18, token=TOKEN)  # fmt: skip
    service = AgentService(cfg)
    http_address, _ = await service.start()
    try:
        yield f"http://{http_address}"
    finally:
        await service.stop()


class Recorder:
    """An event sink that keeps the batches."""

    def __init__(self) -> None:
        self.sent: list[list[KvEvent]] = []
        self.events = self.batches = 0

    async def send(self, events: Sequence[KvEvent], ts_ms: float) -> None:
        self.sent.append(list(events))
        self.events += len(events)
        self.batches += 1

    def close(self) -> None:
        pass


def test_batches_announce_removals_then_each_run_of_the_chain_with_its_parent() -> None:
    adm = Admission(1, 1, stored=(2, 4, 5), parents=(1, 3, 4), evicted=(("a", 9),), queue_depth=0)
    removed, first, second = kv_events(adm, node=1, block_tokens=16, ts_ms=5.0)
    assert removed == BlockRemoved(5.0, 1, (9,))
    assert (first.block_hashes, first.parent_block_hash) == ((2,), 1)
    assert (second.block_hashes, second.parent_block_hash, second.block_size) == ((4, 5), 3, 16)
    assert isinstance(second, BlockStored)
    assert kv_events(Admission(0, 0, (), (), (), 0), node=0, block_tokens=16, ts_ms=0.0) == []


def test_the_engine_stores_verified_bytes_evicts_and_reports_in_order(run_async) -> None:
    async def main() -> None:
        async with agent_at() as base:
            sink, maker = Recorder(), BlockMaker(BLOCK, seed=3)
            engine = EnginePlayer(0, base, AUTH, maker, sink, block_tokens=16, concurrency=4)
            node = NodeModel(0, capacity_blocks=4, block_tokens=16)
            for t, chain in enumerate(((1, 2, 3), (1, 2, 4, 5), (6,))):
                engine.submit(node.admit(float(t), "acme", chain, 16 * len(chain), 0), "acme")
            engine.submit(Admission(0, 0, (), (), (), queue_depth=7), "acme")
            await engine.close(10.0)
            async with httpx.AsyncClient() as http:
                held = (await http.get(f"{base}/v1/inventory", headers=AUTH)).json()["blocks"]
                telemetry = (await http.get(f"{base}/v1/telemetry")).json()
        assert {b["block_hash"]: b["checksum"] for b in held} == {
            h: maker.checksum("acme", h) for h in node.cache
        }
        assert sorted(node.cache) == [2, 4, 5, 6]  # 1 and 3 were the least recently used
        assert engine.stats.blocks_put == 6 and engine.stats.put_failures == 0
        assert engine.stats.blocks_evicted == 2 and engine.stats.dropped == 0
        stored = [e.block_hashes for b in sink.sent for e in b if isinstance(e, BlockStored)]
        assert stored == [(1, 2, 3), (4, 5), (6,)]  # routing order
        removed = [e.block_hashes for b in sink.sent for e in b if isinstance(e, BlockRemoved)]
        assert removed == [(3,), (1,)]  # each in the batch of the request that evicted it
        assert [type(e) for e in sink.sent[1]] == [BlockRemoved, BlockStored]
        assert telemetry["queue_depth"] == 7

    run_async(main())


def test_a_wrong_token_stores_nothing_and_is_counted(run_async) -> None:
    async def main() -> None:
        cfg = AgentConfig(capacity_bytes=1 << 20, speculative_quota_bytes=0, token=TOKEN)
        service = AgentService(cfg)
        http_address, _ = await service.start()
        try:
            engine = EnginePlayer(0, f"http://{http_address}", {"Authorization": "Bearer no"},
                                  BlockMaker(BLOCK), Recorder(), block_tokens=16)  # fmt: skip
            await engine.apply(Admission(0, 0, (1, 2), (None, 1), (), queue_depth=1), "acme")
            await engine.close()
            assert len(service.agent.store) == 0
        finally:
            await service.stop()
        assert (engine.stats.blocks_put, engine.stats.put_failures) == (0, 2)
        assert engine.stats.stats_failures == 1

    run_async(main())


def test_zmq_events_are_vllm_batches_a_subscriber_decodes(run_async) -> None:
    pub, replay = (tcp_endpoint(p) for p in free_ports(2))
    sink = ZmqSink("gpu-node-0", pub, replay)
    sub = KvEventSubscriber(pub, node=0, replay_endpoint=replay, context=zmq.Context.instance())
    got: list[KvEvent] = []

    async def received() -> dict[str, float]:
        got.extend(e for b in sub.poll(50) for e in b.events)
        return {"gpu-node-0": float(sub.counters.received)}

    async def main() -> None:
        await await_subscribers([sink], received, timeout_s=10.0)
        adm = Admission(0, 0, stored=(11, 12), parents=(None, 11), evicted=(), queue_depth=0)
        await sink.send(kv_events(adm, node=0, block_tokens=16, ts_ms=1.0), 1.0)
        for _ in range(100):
            await received()
            if got:
                return
            await asyncio.sleep(0.02)

    try:
        run_async(main())
    finally:
        sink.close()
        sub.close()
    assert [(e.block_hashes, e.parent_block_hash) for e in got] == [((11, 12), None)]
    assert sink.events == 1 and sub.counters.decode_errors == 0


def test_a_sidecar_that_receives_nothing_is_named(run_async) -> None:
    (port,) = free_ports(1)
    sink = ZmqSink("gpu-node-9", tcp_endpoint(port))

    async def nothing() -> dict[str, float]:
        return {}

    try:
        with pytest.raises(ValueError, match=r"gpu-node-9 \(tcp://127.0.0.1:\d+\)"):
            run_async(await_subscribers([sink], nothing, timeout_s=0.3))
    finally:
        sink.close()


def test_a_taken_port_is_a_one_line_error() -> None:
    taken = ZmqSink("gpu-node-0", tcp_endpoint(free_ports(1)[0]))
    try:
        with pytest.raises(ValueError, match="engine of gpu-node-1: cannot bind"):
            ZmqSink("gpu-node-1", taken.endpoint)
    finally:
        taken.close()


def test_without_zmq_the_events_are_posted_in_the_sidecars_http_shape(run_async) -> None:
    bodies: list[dict] = []

    def sidecar(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(202 if request.headers.get("authorization") else 401, json={})

    async def main() -> HttpSink:
        async with httpx.AsyncClient(transport=httpx.MockTransport(sidecar)) as http:
            sink = HttpSink(2, http, "http://127.0.0.1:1", AUTH)
            adm = Admission(2, 0, stored=(5, 6), parents=(4, 5), evicted=(("a", 1),),
                            queue_depth=0)  # fmt: skip
            await sink.send(kv_events(adm, node=2, block_tokens=16, ts_ms=7.0), 7.0)
            await sink.send([], 8.0)  # nothing to say: nothing sent
            sink.headers = {}
            await sink.send(kv_events(adm, node=2, block_tokens=16, ts_ms=9.0), 9.0)
        return sink

    sink = run_async(main())
    batch = KvEventBatch.model_validate(bodies[0])
    assert batch.node == 2 and [e.type for e in batch.events] == ["BlockRemoved", "BlockStored"]
    assert batch.events[1].parent_block_hash == 4 and batch.events[1].block_hashes == [5, 6]
    assert (sink.events, sink.batches, sink.failures, len(bodies)) == (2, 1, 1, 2)


def test_blocks_whose_put_failed_are_not_announced_and_close_waits_for_the_report(
    run_async,
) -> None:
    async def main() -> None:
        # the agent takes no block this large: every PUT is refused by the real agent
        cfg = AgentConfig(node_id="small", capacity_bytes=1 << 20, speculative_quota_bytes=0,
                          max_block_bytes=BLOCK // 2, token=TOKEN)  # fmt: skip
        service = AgentService(cfg)
        http_address, _ = await service.start()
        base = f"http://{http_address}"
        try:
            sink = Recorder()
            engine = EnginePlayer(0, base, AUTH, BlockMaker(BLOCK, seed=1), sink, block_tokens=16)
            engine.submit(Admission(0, 0, (1, 2), (None, 1), (), queue_depth=3), "acme")
            await engine.close(10.0)
            assert engine.backlog == 0  # the queue-depth report it started was waited for
            async with httpx.AsyncClient() as http:
                telemetry = (await http.get(f"{base}/v1/telemetry")).json()
        finally:
            await service.stop()
        assert (engine.stats.blocks_put, engine.stats.put_failures) == (0, 2)
        announced = [h for batch in sink.sent for e in batch if isinstance(e, BlockStored)
                     for h in e.block_hashes]  # fmt: skip
        assert announced == []  # the agent holds none of them: the sidecar must not think so
        assert telemetry["queue_depth"] == 3 and engine.stats.dropped == 0

    run_async(main())


def test_queue_depth_reports_reach_the_agent_in_order(run_async) -> None:
    """The agent keeps the last report it got: a report slowed on the wire (a fresh connection,
    a retry) must not land after, and overwrite, the newer one."""

    async def main() -> int:
        async with agent_at() as base:
            engine = EnginePlayer(0, base, AUTH, BlockMaker(BLOCK, seed=3), Recorder(),
                                  block_tokens=16, concurrency=4)  # fmt: skip
            real, slowed = engine.http.request, []

            async def request(method: str, path: str, body: bytes = b"", headers=None):
                if path == "/v1/engine-stats" and not slowed:
                    slowed.append(path)
                    await asyncio.sleep(0.05)  # the first report only
                return await real(method, path, body, headers)

            engine.http.request = request
            engine.submit(Admission(0, 0, (), (), (), queue_depth=3), "acme")
            engine.submit(Admission(0, 0, (), (), (), queue_depth=5), "acme")
            await engine.close(10.0)
            async with httpx.AsyncClient() as http:
                return (await http.get(f"{base}/v1/telemetry")).json()["queue_depth"]

    assert run_async(main()) == 5
