"""Polls every agent's ``GET /v1/telemetry`` (and ``GET /readyz`` for its transfer address)
on the event loop, every ``telemetry_period_s``.

Each answer updates :class:`NodeLoads` (what the decider's view reads) and enters the event
stream as a ``TelemetrySample`` (what the queue and memory features read): queue length from
the engines' and the router's reports, memory by block state from the agent, evictions from
the KV events. An agent that does not answer is marked down (never a source or a target)
until it answers again.

Each answer also says how many blocks the agent has removed without the sidecar's command
(``removals_next``: evicted to make room, expired, or evicted on a tenant token's command);
when that number grew, the new removals are read (``GET /v1/removals``) and handed to
``on_removed``, so that a replica the agent dropped leaves the sidecar's view now rather than
at its TTL. The first answer from an agent sets where to
start (what it removed before is covered by the recovery's inventory).

An agent that restarted says so by another ``incarnation`` (a random id drawn at each start):
its store is new, so ``on_restarted`` is told (the sidecar forgets the replicas it had placed
there, but for those the new store holds) and its removals are read from the start of its new
life. An agent without that field (an older one) is taken to have restarted when its removal
number went down; one that removed as many blocks in its new life as in the old before the
first poll goes unnoticed then.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping

import httpx
from pydantic import ValidationError

from kvcast.features.events import TelemetrySample
from kvcast.serving.agent.api_models import Readiness, Telemetry
from kvcast.serving.sidecar.agent_client import AgentCallError, AgentClient, ints
from kvcast.serving.sidecar.event_queue import EventQueue
from kvcast.serving.sidecar.node_loads import NodeLoads

log = logging.getLogger("kvcast.serving.sidecar")
SOURCE = "telemetry"


class TelemetryPoller:
    def __init__(
        self, agents: list[str | None], loads: NodeLoads, queue: EventQueue,
        client: httpx.AsyncClient, *, period_s: float, timeout_s: float, bytes_per_token: float,
        removals: Callable[[int], int], pending: Callable[[], Mapping[tuple[int, int], int]],
        clock_ms: Callable[[], float] = lambda: time.time() * 1000.0,
        agent_client: AgentClient | None = None,
        on_removed: Callable[[int, list[tuple[str, int]]], None] | None = None,
        on_restarted: Callable[[int, str], Awaitable[object]] | None = None,
    ) -> None:  # fmt: skip
        self.agents, self.loads, self.queue, self.client = agents, loads, queue, client
        self.period_s, self.timeout_s, self.bytes_per_token = period_s, timeout_s, bytes_per_token
        self.removals, self.pending, self.clock_ms = removals, pending, clock_ms
        self.agent_client, self.on_removed = agent_client, on_removed
        self.on_restarted = on_restarted
        self.incarnation: dict[int, str] = {}  # node -> the agent's life last seen
        self.restarts: Counter[int] = Counter()  # by node
        self.polls = 0
        self.failures: Counter[int] = Counter()  # by node
        self.cursor: dict[int, int] = {}  # node -> the next agent removal to read
        self.removals_read = 0  # removals the agents reported
        self.removals_missed = 0  # removals an agent no longer held when asked
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            try:
                await self.poll_once()
            except Exception:  # a bug in one poll must not stop the polling
                log.exception("telemetry poll failed")
            await asyncio.sleep(self.period_s)

    async def poll_once(self) -> None:
        nodes = [i for i, url in enumerate(self.agents) if url is not None]
        await asyncio.gather(*(self._poll(i) for i in nodes))
        self.polls += 1

    async def _poll(self, node: int) -> None:
        url = self.agents[node]
        try:
            tel = await self.client.get(f"{url}/v1/telemetry", timeout=self.timeout_s)
            ready = await self.client.get(f"{url}/readyz", timeout=self.timeout_s)
            telemetry = Telemetry.model_validate_json(tel.raise_for_status().content)
            readiness = Readiness.model_validate_json(ready.content)
        except (httpx.HTTPError, ValidationError) as err:
            self.failures[node] += 1
            if self.loads.agent_up[node]:
                log.warning("agent of node %d (%s) is down: %s", node, url, err)
            self.loads.note_agent_down(node)
            return
        if readiness.transfer_address:
            self.loads.transfer[node] = readiness.transfer_address
        self.loads.note_telemetry(node, telemetry)
        if not readiness.ready:
            self.loads.note_agent_down(node)
        self.queue.put([self.sample(node, telemetry)], SOURCE)
        if await self.note_incarnation(node, url, telemetry.incarnation):
            self.cursor[node] = 0  # its removal numbers start again
        await self.follow_removals(node, url, telemetry.removals_next)

    async def note_incarnation(self, node: int, url: str, incarnation: str) -> bool:
        """Whether the agent of ``node`` restarted since the last answer (another
        incarnation); if so ``on_restarted`` has been told."""
        before = self.incarnation.get(node)
        if incarnation:
            self.incarnation[node] = incarnation
        if not incarnation or before is None or before == incarnation:
            return False
        self.restarts[node] += 1
        log.warning("agent of node %d (%s) restarted: its store is new", node, url)
        if self.on_restarted is not None:
            await self.on_restarted(node, url)
        return True

    async def follow_removals(self, node: int, url: str, upto: int) -> None:
        """Read what the agent of ``node`` removed without the sidecar's command (on its own, or
        on a tenant token's) since the last poll (up to its removal number ``upto``) and hand it
        on."""
        cur = self.cursor.get(node)
        if cur is None or self.agent_client is None or self.on_removed is None:
            self.cursor[node] = upto  # first answer: start here
            return
        if upto < cur:  # the agent restarted: its numbers start again
            cur = 0
        while cur < upto:
            ans = await self.agent_client.removals(url, cur)
            if isinstance(ans, AgentCallError):
                log.warning("removals of node %d (%s) unread: %s", node, url, ans.detail)
                break  # the next poll tries again from the same number
            self.removals_missed += ans.missed
            if ans.missed:
                log.warning("node %d's agent no longer holds %d removals", node, ans.missed)
            refs = [(b.tenant, h) for b in ans.blocks for h in ints(b.block_hash)]
            self.removals_read += len(ans.blocks)
            if refs:
                self.on_removed(node, refs)
            if ans.next <= cur:
                break
            cur = ans.next
        self.cursor[node] = cur

    def sample(self, node: int, t: Telemetry) -> TelemetrySample:
        depth = self.loads.queue_depth(node)
        pending = sum(b for (_, dst), b in self.pending().items() if dst == node)
        running = sum(e.running or 0 for e in t.engines)
        return TelemetrySample(
            ts_ms=self.clock_ms(),
            node=node,
            queue_len=depth,
            queued_prefill_tokens=int(depth * self.loads.mean_tokens[node]),
            running_decodes=running,
            active_tokens=int(t.bytes.active / self.bytes_per_token),
            capacity_bytes=t.capacity_bytes,
            used_bytes=t.used_bytes,
            cached_bytes=t.bytes.cached,
            speculative_bytes=t.bytes.speculative,
            evictions_total=self.removals(node),
            est_queue_ms=self.loads.queue_ms(node),
            transfers_in_flight=t.replications_in_flight,
            pending_replication_bytes=pending,
        )
