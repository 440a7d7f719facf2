"""The agent's control operations, as the HTTP API invokes them (no HTTP in here).

Every operation names its tenant and touches only that tenant's blocks: the store is keyed by
(tenant, hash), so a hash of tenant A is simply absent for tenant B. Command ids are remembered
per *scope* (:func:`~.tenant_scope.command_scope`): the shared token's in one log, each tenant
token's in a small log of its own (:data:`SCOPED_COMMANDS` outcomes), so that a tenant token
can neither replay, block nor push out a command of the sidecar's.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable, Collection, Iterable
from typing import Any, TypeVar

from kvcast.serving.agent.agent import Agent
from kvcast.serving.agent.api_models import (
    BlockEntry,
    BlockRefs,
    EngineReport,
    EngineStats,
    EvictResult,
    HeldFor,
    HoldRequest,
    HoldResult,
    Inventory,
    PinResult,
    ReleaseRequest,
    ReleaseResult,
    Removals,
    RemovedBlock,
    ReplicateRequest,
    ReplicateResult,
    StateTotals,
    Telemetry,
)
from kvcast.serving.agent.blocks import (
    BlockHeld,
    BlockInfo,
    BlockNotFound,
    BlockPinned,
    BlockState,
    StoreError,
)
from kvcast.serving.agent.checksum import ALGORITHM
from kvcast.serving.agent.command_log import CommandLog
from kvcast.serving.http.connection_cuts import ConnectionCuts
from kvcast.serving.messages import BlockHash

R = TypeVar("R")
MAX_ENGINES = 64  # engine reports kept (most recent); more engines on one node is a mistake
MAX_REMOVALS_PER_ANSWER = 4096  # one ``GET /v1/removals`` answer; ``next`` says where to go on
SCOPED_COMMANDS = 64  # outcomes kept per tenant token (each up to a body's 8192 hashes)


class CommandConflict(ValueError):
    """A command id reused for a different command."""


class AgentControl:
    """Control operations on ``agent`` and the counters of the control plane."""

    def __init__(self, agent: Agent, clock: Callable[[], float] = time.monotonic) -> None:
        self.agent, self.node_id, self._clock = agent, agent.config.node_id, clock
        self.requests: Counter[tuple[str, int]] = Counter()  # (path, HTTP status)
        self.failed: Counter[tuple[str, str]] = Counter()  # (command, outcome)
        self.http_auth_failures = 0
        self.http_rate_limited = 0  # tenant tokens' requests over their rate (429)
        # tenant tokens' requests refused with 403, by reason: route (one it may not use),
        # tenant, state (see tenant_scope.TenantRefused)
        self.tenant_refusals: Counter[str] = Counter()
        self.ingest_refusals = 0  # the ingest token on a route other than engine-stats (403)
        self.http_cuts = ConnectionCuts()  # connections the API server cut (counted there)
        self.replications_in_flight = 0
        self.accepting = True  # False once shutting down: /readyz answers 503
        self._engines: OrderedDict[str, tuple[EngineStats, float]] = OrderedDict()
        self._commands: CommandLog[Any] = CommandLog()  # evict/pin/unpin outcomes
        # per log of outcomes (replicate: the transfer client's; the rest: ours), id -> digest
        # of the command; each kept at least as long as its log keeps the outcome
        self._fingerprints: dict[bool, OrderedDict[str, bytes]] = {
            True: OrderedDict(),
            False: OrderedDict(),
        }
        # per tenant token's scope: its own outcomes and fingerprints (evict)
        self._scoped: dict[str, tuple[CommandLog[Any], OrderedDict[str, bytes]]] = {}

    def note_auth_failure(self, path: str) -> None:
        self.http_auth_failures += 1

    def note_rate_limited(self, path: str) -> None:
        self.http_rate_limited += 1

    def note_forbidden(self, path: str) -> None:
        """A tenant token on a route only the shared token may use (403)."""
        self.tenant_refusals["route"] += 1

    def note_ingest_forbidden(self, path: str) -> None:
        """The ingest token on a route it may not use (403)."""
        self.ingest_refusals += 1

    @property
    def transfer_address(self) -> str | None:
        try:
            return self.agent.address
        except RuntimeError:  # not listening
            return None

    async def replicate(self, req: ReplicateRequest) -> ReplicateResult:
        """Pull the blocks from ``req.source``; idempotent by command id (a retry may carry a
        new deadline; anything else changed is a :class:`CommandConflict`)."""
        self._claim("replicate", req.command_id, req.model_dump_json(exclude={"deadline_s"}))
        duplicate = req.command_id in self.agent.client.commands
        deadline = time.monotonic() + req.deadline_s
        self.replications_in_flight += 1
        try:
            r = await self.agent.pull(
                req.source, req.block_hashes, req.tenant, deadline,
                command_id=req.command_id, state=BlockState(req.state), ttl_s=req.ttl_s,
            )  # fmt: skip
        finally:
            self.replications_in_flight -= 1
        if not r.ok and not duplicate:
            self.failed[("replicate", r.status.value)] += 1
        return ReplicateResult(
            node_id=self.node_id, command_id=r.command_id, duplicate=duplicate, source=r.peer,
            tenant=r.tenant, status=r.status, committed=list(r.committed),
            already_present=list(r.already_present), missing=list(r.missing),
            incomplete=list(r.incomplete), corrupt=list(r.corrupt), rejected=list(r.rejected),
            bytes_committed=r.bytes_committed, attempts=r.attempts, elapsed_s=r.elapsed_s,
            error=r.error,
        )  # fmt: skip

    async def evict(self, req: BlockRefs, scope: str = "") -> EvictResult:
        """Remove the tenant's blocks; active (pinned) ones are refused and listed. ``scope``:
        the namespace of the caller's command ids (:func:`~.tenant_scope.command_scope`)."""

        async def run() -> EvictResult:
            out = EvictResult(evicted=[], absent=[], pinned=[])
            for h in _unique(req.block_hashes):
                try:
                    gone = self.agent.store.evict(req.tenant, h, logged=bool(scope))
                    (out.evicted if gone else out.absent).append(h)
                except BlockPinned:
                    out.pinned.append(h)
                except BlockHeld:
                    out.held.append(h)
            return out

        return await self._once("evict", req, run, scope)

    def hold(self, req: HoldRequest) -> HoldResult:
        """Hold the tenant's speculative replicas for a routed request (idempotent by claim
        id: holding again renews the hold)."""
        out, store = HoldResult(held=[], not_speculative=[]), self.agent.store
        for h in _unique(req.block_hashes):
            ok = store.hold(req.tenant, h, req.claim_id, req.hold_s)
            (out.held if ok else out.not_speculative).append(h)
        return out

    def release(self, req: ReleaseRequest) -> ReleaseResult:
        """End a routed request's holds on the tenant's blocks."""
        out, store = ReleaseResult(released=[], not_held=[]), self.agent.store
        for h in _unique(req.block_hashes):
            (out.released if store.release(req.tenant, h, req.claim_id) else out.not_held).append(h)
        return out

    async def pin(self, req: BlockRefs, pin: bool = True) -> PinResult:
        """Pin (mark active) or unpin the tenant's blocks, one pin per block per command."""

        async def run() -> PinResult:
            out, store = PinResult(blocks=[], absent=[]), self.agent.store
            for h in _unique(req.block_hashes):
                try:
                    info = store.pin(req.tenant, h) if pin else store.unpin(req.tenant, h)
                except BlockNotFound:
                    out.absent.append(h)
                except StoreError:  # unpin of a block that is not pinned
                    out.not_pinned.append(h)
                else:
                    out.blocks.append(self.entry(info))
            return out

        return await self._once("pin" if pin else "unpin", req, run)

    def inventory(self, tenants: Collection[str] | None = None) -> Inventory:
        """Every block held, or those of ``tenants``."""
        blocks = [
            self.entry(i)
            for i in self.agent.store.inventory()
            if tenants is None or i.tenant in tenants
        ]
        return Inventory(
            node_id=self.node_id, transfer_address=self.transfer_address or "",
            checksum_algorithm=ALGORITHM, blocks=blocks,
        )  # fmt: skip

    def report_engine(self, stats: EngineStats) -> None:
        self._engines[stats.engine_id] = (stats, self._clock())
        self._engines.move_to_end(stats.engine_id)
        while len(self._engines) > MAX_ENGINES:
            self._engines.popitem(last=False)

    def engines(self) -> list[EngineReport]:
        now = self._clock()
        return [
            EngineReport(**s.model_dump(), age_s=max(0.0, now - at))
            for s, at in self._engines.values()
        ]

    def telemetry(self) -> Telemetry:
        store, totals = self.agent.store, self.agent.store.totals()
        used, engines = store.used_bytes, self.engines()
        return Telemetry(
            node_id=self.node_id, capacity_bytes=store.capacity_bytes, used_bytes=used,
            free_bytes=store.capacity_bytes - used,
            speculative_quota_bytes=store.speculative_quota_bytes,
            speculative_free_bytes=store.speculative_quota_bytes - store.speculative_bytes,
            bytes=StateTotals(**{s.value: totals[s][1] for s in BlockState}),
            blocks=StateTotals(**{s.value: totals[s][0] for s in BlockState}),
            peak_used_bytes=store.stats.peak_used_bytes,
            peak_speculative_bytes=store.stats.peak_speculative_bytes,
            replications_in_flight=self.replications_in_flight,
            queue_depth=sum(e.queue_depth for e in engines) if engines else None,
            engines=engines, removals_next=store.removals.next_seq,
            device=self.agent.config.device, incarnation=self.agent.incarnation,
        )  # fmt: skip

    def removals(self, since: int, limit: int = MAX_REMOVALS_PER_ANSWER) -> Removals:
        """The blocks removed on the agent's own from number ``since`` on (expired replicas
        reclaimed first, so that they are in the answer)."""
        self.agent.store.sweep()
        got, nxt, missed = self.agent.store.removals.since(since, limit)
        blocks = [RemovedBlock(seq=r.seq, tenant=r.tenant, block_hash=r.block_hash,
                               reason=r.reason) for r in got]  # type: ignore[arg-type]  # fmt: skip
        return Removals(node_id=self.node_id, blocks=blocks, next=nxt, missed=missed)

    def entry(self, info: BlockInfo) -> BlockEntry:
        now = self._clock()
        ttl = None if info.expires_at is None else max(0.0, info.expires_at - now)
        claims = [HeldFor(claim_id=c, seconds_left=max(0.0, t - now)) for c, t in info.claims]
        return BlockEntry(
            tenant=info.tenant, block_hash=info.block_hash, state=info.state, nbytes=info.nbytes,
            checksum=info.checksum, pins=info.pins, ttl_remaining_s=ttl, holds=info.holds,
            claims=claims,
        )  # fmt: skip

    def _claim(
        self, kind: str, command_id: str, fingerprint: str,
        logs: tuple[CommandLog[Any], OrderedDict[str, bytes]] | None = None,
    ) -> None:  # fmt: skip
        """Remember what ``command_id`` means; :class:`CommandConflict` if it meant another.
        ``logs``: a tenant token's own log and fingerprints (None: the shared token's)."""
        key, digest = f"{kind}:{command_id}", hashlib.blake2b(fingerprint.encode()).digest()
        pulls = kind == "replicate"
        if logs is None:
            prints = self._fingerprints[pulls]
            log = self.agent.client.commands if pulls else self._commands
        else:
            log, prints = logs
        if prints.setdefault(key, digest) != digest:
            raise CommandConflict(f"command_id {command_id!r} was used for another command")
        prints.move_to_end(key)
        while len(prints) > 2 * log.capacity:
            prints.popitem(last=False)

    async def _once(
        self, kind: str, req: BlockRefs, run: Callable[[], Awaitable[R]], scope: str = ""
    ) -> R:
        if req.command_id is None:
            return await run()
        logs = None
        if scope:  # a tenant token: its own log, never the shared token's
            logs = self._scoped.get(scope)
            if logs is None:
                logs = self._scoped[scope] = (CommandLog(SCOPED_COMMANDS), OrderedDict())
        self._claim(kind, req.command_id, req.model_dump_json(), logs)
        log = self._commands if logs is None else logs[0]
        return await log.run_once(f"{kind}:{req.command_id}", run)


def _unique(hashes: Iterable[BlockHash]) -> list[BlockHash]:
    return list(dict.fromkeys(hashes))
