"""Recovery at start, against a real agent on loopback (in this process) and an address where
nothing listens: what the agent holds is queued as located on its node, its speculative
replicas are tracked again with their remaining TTL, and the silent agent is reported and
skipped, not waited on past the timeout."""

from __future__ import annotations

import asyncio

import httpx
import numpy as np

from kvcast.features.events import BlockStored
from kvcast.serving.agent import AgentConfig, BlockState, HostBuffer, checksum
from kvcast.serving.agent.service import AgentService
from kvcast.serving.sidecar.event_queue import EventQueue
from kvcast.serving.sidecar.recovery import recover_locations
from kvcast.serving.sidecar.replicas import ReplicaTracker

TOKEN = "recovery-token"


def _put(service: AgentService, h: int, state: BlockState, ttl_s: float | None = None) -> None:
    buf = HostBuffer(np.full(4096, h % 251, dtype=np.uint8))
    service.agent.store.put("acme", h, buf, checksum(buf.view()), state, ttl_s)


async def _recover() -> tuple:
    cfg = AgentConfig(capacity_bytes=1 << 20, speculative_quota_bytes=1 << 19, token=TOKEN)
    service = AgentService(cfg)
    http, _ = await service.start()
    try:
        for h in (1, 2):
            _put(service, h, BlockState.CACHED)
        _put(service, 3, BlockState.SPECULATIVE, ttl_s=60.0)
        queue, replicas = EventQueue(100), ReplicaTracker()
        agents = [f"http://{http}", None, "http://127.0.0.1:9"]  # 9: nothing listens
        async with httpx.AsyncClient() as client:
            report = await recover_locations(
                agents, client, TOKEN, queue=queue, replicas=replicas, block_tokens=16,
                timeout_s=2.0, clock_ms=lambda: 5_000.0,
            )  # fmt: skip
        return report, [e for batch in queue.get(100, timeout_s=0.1) for e in batch], replicas
    finally:
        await service.stop()


def test_recovery_locates_held_blocks_tracks_replicas_and_skips_a_silent_agent(run) -> None:
    report, events, replicas = run(_recover(), timeout=15.0)
    assert (report.agents_read, report.blocks, report.replicas) == (1, 3, 1)
    assert list(report.agents_failed) == [2] and "ConnectError" in report.agents_failed[2]
    assert events == [
        BlockStored(5_000.0, 0, (1, 2), None, 16),
        BlockStored(5_000.0, 0, (3,), None, 16, speculative=True),
    ]
    assert replicas.nodes_of(3) == [0] and replicas.tenant(0, 3) == "acme"
    assert replicas.nodes_of(1) == []  # an engine's own block is not a replica


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def _recover_held(clock: Clock) -> tuple:
    """Replicas 3 and 4 held by the agent for routed requests past their TTL, 5 held by none;
    recovered into a tracker on ``clock``."""
    cfg = AgentConfig(capacity_bytes=1 << 20, speculative_quota_bytes=1 << 19, token=TOKEN)
    service = AgentService(cfg)
    http, _ = await service.start()
    try:
        store = service.agent.store
        for h in (3, 4):
            _put(service, h, BlockState.SPECULATIVE, ttl_s=0.2)
        _put(service, 5, BlockState.SPECULATIVE, ttl_s=60.0)
        store.hold("acme", 3, "r-1", hold_s=30.0)
        store.hold("acme", 4, "r-1", hold_s=30.0)
        store.hold("acme", 4, "r-2", hold_s=20.0)
        await asyncio.sleep(0.3)  # their TTL passes: only their holds keep 3 and 4 there
        replicas = ReplicaTracker(clock)
        async with httpx.AsyncClient() as client:
            report = await recover_locations(
                [f"http://{http}"], client, TOKEN, queue=EventQueue(100), replicas=replicas,
                block_tokens=16, timeout_s=2.0, clock_ms=lambda: 5_000.0,
            )  # fmt: skip
        return report, replicas
    finally:
        await service.stop()


def test_recovery_claims_again_the_replicas_their_agent_holds_until_their_holds_end(run) -> None:
    clock = Clock()
    report, replicas = run(_recover_held(clock), timeout=15.0)
    assert (report.blocks, report.replicas, report.claimed) == (3, 3, 2)
    clock.now += 5.0  # past 3's and 4's TTL: held, so kept in view as on the agent
    assert replicas.sweep() == []
    # the engine stores 3: the recovered claim on it is released on the agent, by its id
    assert replicas.on_stored(0, [3]) == [("r-1", "acme", [3])]
    clock.now += 20.0  # r-2's hold on 4 ran out, r-1's has not
    assert replicas.sweep() == []
    clock.now += 5.5  # r-1's ran out too (its engine never stored 4): 4 left with it
    assert replicas.sweep() == [(0, 4)] and replicas.nodes_of(5) == [0]
