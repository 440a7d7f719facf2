"""The telemetry poller follows each agent's removals: what an agent removed on its own is
handed on once, in order, across pages; the first answer sets where to start; an agent that
restarted is read from the start of its new life. Real agents (their ASGI apps in process)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx

from kvcast.features.config import FeatureConfig
from kvcast.serving.agent import Agent, BlockState, HostBuffer, checksum
from kvcast.serving.agent.api import build_app
from kvcast.serving.agent.config import AgentConfig
from kvcast.serving.agent.control import MAX_REMOVALS_PER_ANSWER, AgentControl
from kvcast.serving.sidecar.agent_client import AgentClient
from kvcast.serving.sidecar.event_queue import EventQueue
from kvcast.serving.sidecar.node_loads import NodeLoads
from kvcast.serving.sidecar.telemetry_poller import TelemetryPoller

URL = "http://agent-0"
TOKEN = "poller-token"


@contextlib.asynccontextmanager
async def agent() -> AsyncIterator[Agent]:
    cfg = AgentConfig(capacity_bytes=64 << 20, speculative_quota_bytes=32 << 20, token=TOKEN)
    async with Agent(cfg) as a:
        yield a


def expire(a: Agent, tenant: str, hashes: range) -> None:
    """Store ``hashes`` as replicas that have already expired, then reclaim them."""
    for h in hashes:
        buf = HostBuffer.from_bytes(b"x" * 16)
        a.store.put(tenant, h, buf, checksum(buf.view()), BlockState.SPECULATIVE, ttl_s=1e-9)
    a.store.sweep()


class Switch:
    """An ASGI app that forwards to whichever agent app is current (an agent restarting)."""

    def __init__(self) -> None:
        self.app: Any = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)


def poller_for(http: httpx.AsyncClient, on_removed: Any, on_restarted: Any = None) -> Any:
    """A poller of the one agent at ``URL`` (with the token), handing removals on."""
    return TelemetryPoller(
        [URL], NodeLoads(1, FeatureConfig().prefill, 60.0), EventQueue(1 << 16), http,
        period_s=1.0, timeout_s=5.0, bytes_per_token=1.0, removals=lambda node: 0,
        pending=dict, agent_client=AgentClient(http, TOKEN, 5.0), on_removed=on_removed,
        on_restarted=on_restarted,
    )  # fmt: skip


def test_poller_hands_on_every_removal_once_from_where_it_started(run) -> None:
    async def scenario() -> None:
        switch, got = Switch(), []
        transport = httpx.ASGITransport(app=switch)
        async with agent() as a, httpx.AsyncClient(transport=transport) as http:
            switch.app = build_app(AgentControl(a), TOKEN)
            poller = poller_for(http, lambda node, refs: got.extend((node, *r) for r in refs))
            expire(a, "old", range(3))  # before the sidecar first saw the agent
            await poller.poll_once()
            assert got == [] and poller.cursor == {0: 3}
            n = MAX_REMOVALS_PER_ANSWER + 5  # more than one answer holds
            expire(a, "acme", range(100, 100 + n))
            await poller.poll_once()
            assert got == [(0, "acme", h) for h in range(100, 100 + n)]
            assert poller.removals_read == n and poller.cursor == {0: 3 + n}
            await poller.poll_once()
            assert len(got) == n  # nothing twice

            async with agent() as b:  # the agent restarted: its numbers start again
                switch.app = build_app(AgentControl(b), TOKEN)
                expire(b, "acme", range(7, 9))
                got.clear()
                await poller.poll_once()
                assert got == [(0, "acme", 7), (0, "acme", 8)] and poller.cursor == {0: 2}

    run(scenario(), timeout=30.0)


def test_removals_unread_for_a_bad_token_are_read_at_the_next_poll(run) -> None:
    async def scenario() -> None:
        got: list[Any] = []
        async with agent() as a:
            app = build_app(AgentControl(a), TOKEN)
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app)) as http:
                client = AgentClient(http, "wrong", 5.0)
                poller = TelemetryPoller(
                    [URL], NodeLoads(1, FeatureConfig().prefill, 60.0), EventQueue(1 << 16),
                    http, period_s=1.0, timeout_s=5.0, bytes_per_token=1.0,
                    removals=lambda node: 0, pending=dict, agent_client=client,
                    on_removed=lambda node, refs: got.extend(refs),
                )  # fmt: skip
                await poller.poll_once()
                expire(a, "acme", range(2))
                await poller.poll_once()  # 401: nothing handed on, nothing skipped
                assert got == [] and poller.cursor == {0: 0}
                poller.agent_client = AgentClient(http, TOKEN, 5.0)
                await poller.poll_once()
                assert got == [("acme", 0), ("acme", 1)]

    run(scenario(), timeout=30.0)


def test_a_restart_is_seen_by_its_new_incarnation_even_with_as_many_removals(run) -> None:
    """The new life removed as many blocks as the old one before the first poll: the removal
    number alone cannot tell, the agent's incarnation does. The sidecar is told once, and the
    new life's removals are read from its start."""

    async def scenario() -> None:
        switch, got, restarted = Switch(), [], []

        async def on_restarted(node: int, url: str) -> None:
            restarted.append((node, url))

        transport = httpx.ASGITransport(app=switch)
        async with agent() as a, httpx.AsyncClient(transport=transport) as http:
            switch.app = build_app(AgentControl(a), TOKEN)
            poller = poller_for(http, lambda node, refs: got.extend(refs), on_restarted)
            await poller.poll_once()
            expire(a, "acme", range(2))
            await poller.poll_once()
            assert got == [("acme", 0), ("acme", 1)] and poller.cursor == {0: 2}
            await poller.poll_once()
            assert restarted == []
            async with agent() as b:
                assert b.incarnation != a.incarnation
                switch.app = build_app(AgentControl(b), TOKEN)
                expire(b, "acme", range(50, 52))  # as many as before: removals_next is 2 again
                got.clear()
                await poller.poll_once()
                assert restarted == [(0, URL)] and poller.restarts[0] == 1
                assert got == [("acme", 50), ("acme", 51)] and poller.cursor == {0: 2}
                await poller.poll_once()
                assert restarted == [(0, URL)] and len(got) == 2

    run(scenario(), timeout=30.0)
