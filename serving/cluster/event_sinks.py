"""Where a replayed engine's KV events go: its own vLLM-format ZMQ publisher (what the
sidecar subscribes to), or the sidecar's ``POST /v1/kv-events`` when no endpoint is known.

ZMQ PUB drops what it sends before a subscriber has joined, so a publisher is not used until
the sidecar has received from it: :func:`await_subscribers` sends empty batches from each in
turn until the sidecar's ``kvcast_sidecar_kv_received_total{node}`` moves, which also tells
the name the sidecar gives that node. Batches lost later (high-water mark) are recovered by
the sidecar through the replay socket each publisher also binds.
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
) -> list[str]:
    """Send heartbeats from one sink at a time until the sidecar counts a batch received from
    it; the name the sidecar gives each sink's node, in order (its metrics' ``node`` label,
    whatever the sinks are called). A ValueError naming the silent ones after ``timeout_s``
    (every sink, the first included, gets at least a second of its own, even past
    ``timeout_s``: one that is slow to be heard does not leave the next no time, and a silent
    one is named as silent only after it had that second)."""
    deadline = time.monotonic() + timeout_s
    names: list[str] = []
    silent: list[ZmqSink] = []
    for sink in sinks:
        name = await _first_heard(sink, received, set(names), max(deadline, time.monotonic() + 1))
        if name is None:
            silent.append(sink)
        else:
            names.append(name)
    if silent:
        where = ", ".join(f"{s.name} ({s.endpoint})" for s in silent)
        raise ValueError(
            f"the sidecar receives no KV events from {where} within {timeout_s:g} s; "
            "are these its configured engine endpoints?"
        )
    return names


async def _first_heard(
    sink: ZmqSink,
    received: Callable[[], Awaitable[dict[str, float]]],
    taken: set[str],
    deadline: float,
) -> str | None:
    """Heartbeats from ``sink`` alone until a node the sidecar counts (other than ``taken``,
    those of the sinks before it, whose late heartbeats may still land) receives one; that
    node's name (the sink's own when it is among those), or None at ``deadline``."""
    before = await received()
    while True:
        sink.heartbeat()
        await asyncio.sleep(0.1)
        now = await received()
        moved = [n for n, v in now.items() if v > before.get(n, 0.0) and n not in taken]
        if moved:
            return sink.name if sink.name in moved else moved[0]
        if time.monotonic() > deadline:
            return None
