"""An engine's part of a replay, for one node: its KV bytes into the node's agent, its KV
events to the sidecar, its queue depth to the agent.

For each request routed to the node (in routing order, see :class:`EnginePlayer`): blocks
the LRU dropped are evicted from the agent (``POST /v1/evict``), blocks new to the node are
stored into it (``PUT /v1/blocks``, raw bytes with their checksum), then one KV-event batch
announces both (``BlockRemoved``, then ``BlockStored`` per contiguous run of the chain, with
its parent). A block is announced only once its bytes are in the agent, so a pull the
sidecar orders from this node finds them. The queue depth, when it changed, goes to
``POST /v1/engine-stats`` in the background. Stores and evictions carry the shared token;
the queue-depth reports carry the report headers (the ingest token's, when the cluster has
one: an engine's reports need no right to move or delete data).
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import time
from collections import defaultdict
from collections.abc import Coroutine
from dataclasses import dataclass, replace
from typing import Any

from kvcast.features.events import BlockRemoved, BlockStored
from kvcast.serving.agent.transfer import MAX_HASHES_PER_PULL
from kvcast.serving.cluster.blocks import BlockMaker
from kvcast.serving.cluster.engine_http import EngineHttp, EngineHttpError
from kvcast.serving.cluster.event_sinks import EventSink
from kvcast.serving.cluster.node_model import Admission
from kvcast.serving.http.block_hash import hash_to_header
from kvcast.serving.kv_events.decode import KvEvent


@dataclass(slots=True)
class EngineStats:
    blocks_put: int = 0
    bytes_put: int = 0
    put_failures: int = 0
    blocks_evicted: int = 0
    evict_failures: int = 0
    stats_failures: int = 0
    dropped: int = 0  # requests not finished when the replay ended


async def _after(task: asyncio.Task[None] | None) -> None:
    """Wait for ``task`` to end, whatever its outcome (its failure is its own)."""
    if task is not None and not task.done():
        await asyncio.wait({task})


def kv_events(adm: Admission, node: int, block_tokens: int, ts_ms: float) -> list[KvEvent]:
    """The batch announcing ``adm``: removals first, then one ``BlockStored`` per run of
    consecutive chain blocks (a run's first block names its parent)."""
    out: list[KvEvent] = []
    if adm.evicted:
        out.append(BlockRemoved(ts_ms, node, tuple(h for _, h in adm.evicted)))
    run: list[int] = []
    parent: int | None = None
    for h, p in zip(adm.stored, adm.parents, strict=True):
        if run and p != run[-1]:
            out.append(BlockStored(ts_ms, node, tuple(run), parent, block_tokens))
            run = []
        if not run:
            parent = p
        run.append(h)
    if run:
        out.append(BlockStored(ts_ms, node, tuple(run), parent, block_tokens))
    return out


class EnginePlayer:
    """``submit(adm, tenant)`` in routing order; ``close()`` waits for what was submitted.

    Requests overlap: each runs as a task whose PUTs share ``concurrency`` connections, but
    it announces its blocks only after the previous request has (so the events keep the
    routing order), and one whose LRU evicted blocks waits for every earlier request first
    (so a block is never evicted from the agent before its PUT landed). ``headers``: those of
    its stores and evictions (the shared token); ``report_headers``: those of its queue-depth
    reports (the ingest token; None: ``headers``)."""

    def __init__(
        self, node: int, agent: str, headers: dict[str, str], maker: BlockMaker,
        sink: EventSink, block_tokens: int, concurrency: int = 8, timeout_s: float = 10.0,
        ssl_context: ssl.SSLContext | None = None,
        report_headers: dict[str, str] | None = None,
    ) -> None:  # fmt: skip
        self.node, self.agent = node, agent  # ssl_context: mutual TLS to an https:// agent
        self.http = EngineHttp(agent, None, concurrency, timeout_s, ssl_context)
        self.headers = dict(headers)
        self.report_headers = self.headers if report_headers is None else dict(report_headers)
        self.maker, self.sink, self.block_tokens = maker, sink, block_tokens
        self.stats = EngineStats()
        self._slots = asyncio.Semaphore(concurrency)
        self._last: asyncio.Task[None] | None = None  # the latest request's task
        self._tasks: set[asyncio.Task[None]] = set()  # requests and reports not yet done
        self._reports: set[asyncio.Task[None]] = set()  # of which queue-depth reports
        self._reported = -1  # the queue depth last reported
        self._last_report: asyncio.Task[None] | None = None  # reports land one after another

    def submit(self, adm: Admission, tenant: str) -> None:
        self._last = self._spawn(self.apply(adm, tenant, self._last))

    def _spawn(self, coro: Coroutine[Any, Any, None], report: bool = False) -> asyncio.Task[None]:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if report:
            self._reports.add(task)
            task.add_done_callback(self._reports.discard)
        return task

    @property
    def backlog(self) -> int:
        """Requests and reports submitted and not done."""
        return len(self._tasks)

    async def close(self, timeout_s: float = 30.0) -> None:
        """Finish what was submitted, the queue-depth reports its requests start while this
        waits included (what is left after ``timeout_s`` is cancelled; only unfinished
        requests count as dropped)."""
        deadline = time.monotonic() + timeout_s
        late: set[asyncio.Task[None]] = set()
        while self._tasks:
            left = deadline - time.monotonic()
            if left <= 0:
                late = set(self._tasks)
                break
            await asyncio.wait(set(self._tasks), timeout=left)
        for task in late:
            task.cancel()
        if late:
            await asyncio.wait(late)
            self.stats.dropped += len(late - self._reports)
        await self.http.aclose()

    async def apply(
        self, adm: Admission, tenant: str, previous: asyncio.Task[None] | None = None
    ) -> None:
        """Store ``adm``'s blocks and announce them, after ``previous`` announced its own."""
        if adm.evicted:
            await _after(previous)
            await self._evict(adm.evicted)
        landed = await asyncio.gather(*(self._put(tenant, h) for h in adm.stored))
        if not all(landed):  # announce only the blocks whose bytes are in the agent
            kept = [i for i, ok in enumerate(landed) if ok]
            adm = replace(adm, stored=tuple(adm.stored[i] for i in kept),
                                      parents=tuple(adm.parents[i] for i in kept))  # fmt: skip
        await _after(previous)
        ts_ms = time.time() * 1000.0  # the engine's clock when it announces the blocks
        events = kv_events(adm, self.node, self.block_tokens, ts_ms)
        if events:
            await self.sink.send(events, ts_ms)
        if adm.queue_depth != self._reported:
            self._reported = adm.queue_depth
            previous = self._last_report  # the agent keeps the last report it got: in order
            self._last_report = self._spawn(self._report_after(previous, adm.queue_depth), True)

    async def _report_after(self, previous: asyncio.Task[None] | None, queue_depth: int) -> None:
        await _after(previous)
        await self.report(queue_depth)

    async def _put(self, tenant: str, block_hash: int) -> bool:
        """Store one block's bytes in the agent; whether they landed."""
        async with self._slots:  # bytes made only when a connection is about to take them
            data, digest = self.maker.make(tenant, block_hash)
            if tenant.isascii() and tenant.isprintable():  # raw bytes, the fields in headers
                fields = {"Content-Type": "application/octet-stream", "X-Kvcast-Tenant": tenant,
                          "X-Kvcast-Block-Hash": hash_to_header(block_hash),
                          "X-Kvcast-Checksum": str(digest)} | self.headers  # fmt: skip
                call = self.http.request("PUT", "/v1/blocks", data, fields)
            else:  # a tenant name a header cannot carry: JSON, the bytes in base64
                body = {"tenant": tenant, "block_hash": block_hash, "checksum": digest,
                        "data": base64.b64encode(data).decode("ascii")}  # fmt: skip
                fields = {"Content-Type": "application/json"} | self.headers
                call = self.http.request("PUT", "/v1/blocks", json.dumps(body).encode(), fields)
            status = await self._call(call)
        if status == 200:
            self.stats.blocks_put += 1
            self.stats.bytes_put += len(data)
            return True
        self.stats.put_failures += 1
        return False

    @staticmethod
    async def _call(call: Coroutine[Any, Any, tuple[int, bytes]]) -> int:
        """The status of ``call`` (0: no answer)."""
        try:
            return (await call)[0]
        except EngineHttpError:
            return 0

    async def _evict(self, evicted: tuple[tuple[str, int], ...]) -> None:
        by_tenant: defaultdict[str, list[int]] = defaultdict(list)
        for tenant, h in evicted:
            by_tenant[tenant].append(h)
        for tenant, hashes in by_tenant.items():
            for i in range(0, len(hashes), MAX_HASHES_PER_PULL):
                body = {"tenant": tenant, "block_hashes": hashes[i : i + MAX_HASHES_PER_PULL]}
                try:
                    status, answer = await self.http.post_json("/v1/evict", body, self.headers)
                except (EngineHttpError, ValueError):
                    status, answer = 0, None
                if status == 200:
                    self.stats.blocks_evicted += len(answer["evicted"])
                else:
                    self.stats.evict_failures += 1

    async def report(self, queue_depth: int) -> None:
        """Tell the agent the engine's queue depth (the sidecar polls it from there)."""
        body = {"engine_id": "replay-0", "queue_depth": queue_depth}
        try:
            status, _ = await self.http.post_json("/v1/engine-stats", body, self.report_headers)
        except (EngineHttpError, ValueError):
            status = 0
        if status != 204:
            self.stats.stats_failures += 1
