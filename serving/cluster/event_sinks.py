"""Where a replayed engine's KV events go: its own vLLM-format ZMQ publisher (what the
sidecar subscribes to), or the sidecar's ``POST /v1/kv-events`` when no endpoint is known.

ZMQ PUB drops what it sends before a subscriber has joined, so a publisher is not used until
the sidecar has received from it: :func:`await_subscribers` sends empty batches until the
sidecar's ``kvcast_sidecar_kv_received_total{node}`` moves. Batches lost later (high-water
mark) are recovered by the sidecar through the replay socket each publisher also binds.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import httpx

from kvcast.features.events import BlockRemoved, BlockStored
from kvcast.serving.kv_events.decode import KvEvent


class EventSink(Protocol):
    events: int  # events sent
    batches: int  # batches sent

    async def send(self, events: Sequence[KvEvent], ts_ms: float) -> None: ...

    def close(self) -> None: ...


class ZmqSink:
    """One engine's :class:`KvEventPublisher` bound on ``endpoint`` (and ``replay``)."""

    def __init__(self, name: str, endpoint: str, replay: str | None = None) -> None:
        from kvcast.serving.kv_events.publisher import KvEventPublisher

        self.name, self.endpoint = name, endpoint
        try:
            self.publisher = KvEventPublisher(endpoint, replay)
        except Exception as err:  # zmq.ZMQError: the port is taken, the address is bad
            raise ValueError(f"engine of {name}: cannot bind {endpoint}: {err}") from None
        self.events = self.batches = 0

    async def send(self, events: Sequence[KvEvent], ts_ms: float) -> None:
        self.publisher.publish_events(events, ts_ms=ts_ms)  # queued: the publisher thread sends
        self.events += len(events)
        self.batches += 1

    def heartbeat(self) -> None:
        self.publisher.publish_events([], ts_ms=time.time() * 1000.0)

    def close(self) -> None:
        self.publisher.flush(5.0)
        self.publisher.close()


def _wire(event: KvEvent) -> dict[str, Any]:
    """An event as ``POST /v1/kv-events`` takes it (vLLM's field names)."""
    if isinstance(event, BlockStored):
        return {"type": "BlockStored", "block_hashes": list(event.block_hashes),
                "parent_block_hash": event.parent_block_hash, "block_size": event.block_size,
                "medium": event.medium}  # fmt: skip
    if isinstance(event, BlockRemoved):
        return {"type": "BlockRemoved", "block_hashes": list(event.block_hashes),
                "medium": event.medium}  # fmt: skip
    return {"type": "AllBlocksCleared"}


class HttpSink:
    """Node ``node``'s events posted to the sidecar, one batch per call."""

    def __init__(
        self, node: int, http: httpx.AsyncClient, sidecar: str, headers: dict[str, str]
    ) -> None:
        self.node, self.http, self.headers = node, http, headers
        self.url = f"{sidecar}/v1/kv-events"
        self.events = self.batches = self.failures = 0

    async def send(self, events: Sequence[KvEvent], ts_ms: float) -> None:
        if not events:
            return
        body = {"node": self.node, "ts_ms": ts_ms, "events": [_wire(e) for e in events]}
        try:
            r = await self.http.post(self.url, json=body, headers=self.headers)
            ok = r.status_code == 202
        except httpx.HTTPError:
            ok = False
        if ok:
            self.events += len(events)
            self.batches += 1
        else:
            self.failures += 1

    def close(self) -> None:
        pass


async def await_subscribers(
    sinks: Sequence[ZmqSink],
    received: Callable[[], Awaitable[dict[str, float]]],
    timeout_s: float = 15.0,
) -> None:
    """Send heartbeats until the sidecar counts a batch received from every sink (by name);
    a ValueError naming the silent ones after ``timeout_s``."""
    before = await received()
    waiting = {s.name: s for s in sinks}
    deadline = time.monotonic() + timeout_s
    while waiting:
        for sink in waiting.values():
            sink.heartbeat()
        await asyncio.sleep(0.1)
        now = await received()
        waiting = {n: s for n, s in waiting.items() if now.get(n, 0.0) <= before.get(n, 0.0)}
        if waiting and time.monotonic() > deadline:
            where = ", ".join(f"{n} ({s.endpoint})" for n, s in waiting.items())
            raise ValueError(
                f"the sidecar receives no KV events from {where} within {timeout_s:g} s; "
                "are these its configured engine endpoints?"
            )
