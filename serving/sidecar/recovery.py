"""Recovery at start: where every block lives, rebuilt from the agents' inventories.

A sidecar that restarts has lost its feature state. Before its first tick it reads every
agent's ``GET /v1/inventory`` (with the token): each block an agent holds enters the event
stream as a ``BlockStored`` on that node (speculative replicas flagged), so the residency that
the decider reads as ``hbm`` and ``GET /v1/blocks`` answers knows every copy, and the decider
does not send a chain again to a node that already holds it; each speculative replica is
placed again in the :class:`ReplicaTracker` with its remaining TTL, so that its hit or waste is
still counted and TTL evictions still find its tenant, and the holds its agent keeps on it for
routed requests (``claims``, by request id, with the seconds each has left) are claims of the
tracker again: the sweep keeps the replica until they end, and the engine's ``BlockStored``
releases them on the agent as before the restart. The decider starts from an empty ledger
and gets neither: it placed none of these replicas, so it orders no eviction of them. The
engines' replay sockets give the rest (the KV subscriber's catch-up). An agent that does not
answer is logged and skipped: the telemetry poller marks it down, and its blocks are learnt
again from its engine's events.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx
from pydantic import ValidationError

from kvcast.features.events import BlockStored
from kvcast.serving.agent.api_models import Inventory
from kvcast.serving.sidecar.event_queue import EventQueue
from kvcast.serving.sidecar.replicas import ReplicaTracker
from kvcast.serving.sidecar.translate import u64

log = logging.getLogger("kvcast.serving.sidecar")
SOURCE = "recovery"
MIN_TTL_S = 1e-3


@dataclass(slots=True)
class RecoveryReport:
    agents_read: int = 0
    agents_failed: dict[int, str] = field(default_factory=dict)  # node -> why
    blocks: int = 0  # (node, block) locations learnt
    replicas: int = 0  # of which speculative replicas
    claimed: int = 0  # of which held by their agents for routed requests: claimed again
    seconds: float = 0.0


async def read_inventory(
    client: httpx.AsyncClient, url: str, token: str | None, timeout_s: float
) -> Inventory:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    resp = await client.get(f"{url}/v1/inventory", headers=headers, timeout=timeout_s)
    return Inventory.model_validate_json(resp.raise_for_status().content)


async def recover_locations(
    agents: list[str | None], client: httpx.AsyncClient, token: str | None, *,
    queue: EventQueue, replicas: ReplicaTracker, block_tokens: int, timeout_s: float,
    clock_ms: Callable[[], float],
) -> RecoveryReport:  # fmt: skip
    """Read every agent's inventory; queue what each holds and re-place its replicas."""
    t0, report = time.perf_counter(), RecoveryReport()
    nodes = [i for i, url in enumerate(agents) if url is not None]
    answers = await asyncio.gather(
        *(read_inventory(client, agents[i] or "", token, timeout_s) for i in nodes),
        return_exceptions=True,
    )
    for node, inv in zip(nodes, answers, strict=True):
        if isinstance(inv, BaseException):
            if not isinstance(inv, httpx.HTTPError | ValidationError):
                raise inv
            report.agents_failed[node] = f"{type(inv).__name__}: {inv}"
            log.warning("recovery: no inventory from node %d (%s): %s", node, agents[node], inv)
            continue
        report.agents_read += 1
        # blocks an engine stored under bytes hashes (vLLM's sha256) are known by their u64
        # id, as the KV-event path names them
        held = [u64(b.block_hash) for b in inv.blocks if b.state != "speculative"]
        spec = [b for b in inv.blocks if b.state == "speculative"]
        now = clock_ms()
        events = []
        if held:
            events.append(BlockStored(now, node, tuple(held), None, block_tokens))
        if spec:
            hashes = tuple(u64(b.block_hash) for b in spec)
            events.append(BlockStored(now, node, hashes, None, block_tokens, speculative=True))
        for b in spec:
            ttl = b.ttl_remaining_s if b.ttl_remaining_s is not None else float("inf")
            h = u64(b.block_hash)
            replicas.place(node, [h], b.tenant, b.nbytes, max(ttl, MIN_TTL_S))
            if b.claims:  # held for routed requests: claimed again, until their holds end
                claims = [(c.claim_id, c.seconds_left) for c in b.claims]
                report.claimed += int(replicas.restore_claims(node, b.tenant, h, claims) > 0)
        queue.put(events, SOURCE)
        report.blocks += len(held) + len(spec)
        report.replicas += len(spec)
    report.seconds = time.perf_counter() - t0
    return report
