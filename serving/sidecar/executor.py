"""Active mode: the decider's commands carried out by the agents (on the event loop).

- ``replicate``: the target's agent pulls the chain from the source agent (``command_id`` =
  the decision id: a resend moves the data once). Every verified block that lands is a
  speculative replica on the target (tracked for the hit rate) and enters the event stream
  in a ``ReplicationDone``, whatever became of the rest. An attempt that did not land every
  block (the source lacked some, refused, died mid-transfer, stalled past the deadline, or
  the target failed) is counted, its missing blocks are marked absent on the target (a
  ``ReplicationDone`` with ``ok=False``: never a location), and it is retried once from
  another node holding the whole chain; failing that, the decision ends as a partial copy
  (``done``) when some blocks landed, else it is dropped with the reason (logged). A target
  without a reachable agent is dropped at once: another target is the next tick's decision.
- ``evict``: the node's agent evicts the named replicas, per tenant; what is gone (evicted or
  already absent) leaves the event stream's residency through a ``BlockRemoved``.
- ``promote``: no agent executes one (the view offers no lower tiers): ``unsupported``.
- claims (not decisions: the sidecar's answer to a routed request, :meth:`Executor.hold`):
  the agent of the request's node holds the replicas the request counts (those still on their
  way there once they land) until the engine there stores those blocks
  (:meth:`Executor.release`) or ``claim_hold_s`` passes. They do
  not wait for a command slot (a request is waiting on them); beyond the backlog they are
  dropped, counted (the replicas then keep their plain TTL).

At most ``max_in_flight`` commands run at once; beyond four times that waiting, new ones are
dropped (``backlog``). Agent calls go through :mod:`.agent_client`.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import re
import time
from collections import Counter
from collections.abc import Callable

from kvcast.features.events import BlockRemoved, ReplicationDone
from kvcast.serving.agent.api_models import (
    BlockRefs,
    HoldRequest,
    ReleaseRequest,
    ReplicateRequest,
)
from kvcast.serving.agent.transfer import MAX_HASHES_PER_PULL
from kvcast.serving.sidecar.agent_client import AgentCallError, AgentClient, ints
from kvcast.serving.sidecar.config import AgentClientConfig
from kvcast.serving.sidecar.consumer import StateKeeper
from kvcast.serving.sidecar.decisions import Decision
from kvcast.serving.sidecar.event_queue import EventQueue
from kvcast.serving.sidecar.node_loads import NodeLoads
from kvcast.serving.sidecar.replicas import Release, ReplicaTracker
from kvcast.serving.sidecar.tick_input import chain_holders

SOURCE = "executor"
log = logging.getLogger("kvcast.serving.sidecar")
_COMMAND_ID = re.compile(r"[\x21-\x7e]{1,128}")  # what an agent takes as a claim id


def claim_id(request_id: str) -> str:
    """The agents' id of a routed request's claim: its request id, or a digest of it when
    the id is not printable ASCII of at most 128 characters."""
    if _COMMAND_ID.fullmatch(request_id):
        return request_id
    return "request-" + hashlib.blake2b(request_id.encode(), digest_size=16).hexdigest()


class Executor:
    def __init__(
        self, cfg: AgentClientConfig, agents: list[str | None], loads: NodeLoads,
        queue: EventQueue, replicas: ReplicaTracker, keeper: StateKeeper, client: AgentClient,
        clock_ms: Callable[[], float] = lambda: time.time() * 1000.0,
    ) -> None:  # fmt: skip
        self.cfg, self.agents, self.loads, self.queue = cfg, agents, loads, queue
        self.replicas, self.keeper, self.client, self.clock_ms = replicas, keeper, client, clock_ms
        self.in_flight: dict[tuple[int, int], int] = {}  # (source, target) -> bytes moving
        self.issued = self.done = self.retried = self.moved_bytes = self.evictions = 0
        self.evicted_blocks = 0  # replicas the agents evicted on command
        self.failed: Counter[str] = Counter()  # failed attempts by reason
        self.claims: Counter[str] = Counter()  # replicas held / released / failed, by outcome
        self.dropped: Counter[str] = Counter()  # decisions given up, by reason
        self._slots = asyncio.Semaphore(cfg.max_in_flight)
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop  # the loop that runs the commands (submit() may come from any thread)

    def submit(self, decisions: list[Decision]) -> None:
        assert self._loop is not None, "bind() the executor to the event loop first"
        self._loop.call_soon_threadsafe(self._spawn, decisions)

    def pairs(self) -> dict[tuple[int, int], int]:  # a copy, for other threads
        return dict(self.in_flight)

    def _spawn(self, decisions: list[Decision]) -> None:
        for d in decisions:
            if len(self._tasks) >= 4 * self.cfg.max_in_flight:
                self._drop(d, "backlog", "executor backlog full")
                continue
            task = asyncio.create_task(self._run(d))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def drain(self, timeout_s: float) -> None:
        """Wait for the commands in flight (up to ``timeout_s``), then cancel the rest."""
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=timeout_s)
            for task in pending:
                task.cancel()

    async def _run(self, d: Decision) -> None:
        async with self._slots:
            url = self.agents[d.target]
            if url is None or not self.loads.agent_up[d.target]:
                self._drop(d, "target_down", "the target has no reachable agent")
            elif d.kind == "replicate":
                await self._replicate(d, url)
            elif d.kind == "evict":
                await self._evict(d, url)
            else:
                self._drop(d, "unsupported", f"no agent executes {d.kind} commands")

    def _drop(self, d: Decision, reason: str, detail: str) -> None:
        self.dropped[reason] += 1
        d.move("dropped", detail)
        if reason != "backlog":  # a full backlog is counted, not logged per command
            log.info("%s %s to node %d dropped (%s): %s", d.kind, d.id, d.target, reason, detail)

    # -- replicate -------------------------------------------------------------------------
    async def _replicate(self, d: Decision, url: str) -> None:
        if not d.tenant:
            self._drop(d, "no_tenant", "the chain's tenant is unknown")
            return
        self.issued += 1
        tried, landed = [d.source], set[int]()
        while True:
            failure = await self._attempt(d, url, tried[-1], landed)
            if failure is None:
                return
            detail = failure.detail
            self.failed["target_down" if failure.agent_down else "pull"] += 1
            if failure.agent_down or not self.cfg.retry_elsewhere or len(tried) > 1:
                break
            source = await self._other_holder(d, exclude=tried)
            if source is None:
                detail += "; no other node holds the chain"
                break
            tried.append(source)
            self.retried += 1
            d.move("retried", f"{detail}; retrying from node {source}")
        if landed:  # verified blocks that did land stay replicas: a partial copy
            self.done += 1
            missing = len(d.block_hashes) - len(landed)
            d.move("done", f"partial: {len(landed)} landed, {missing} not ({detail})")
            log.info("replicate %s to node %d: partial copy: %s", d.id, d.target, d.detail)
        else:
            self._drop(d, "failed", detail)

    async def _attempt(
        self, d: Decision, url: str, source: int, landed: set[int]
    ) -> AgentCallError | None:
        """:meth:`_pull`, during which requests routed to the target claim the blocks on
        their way: those that land are held for them then (none if the pull was cancelled)."""
        self.replicas.expect(d.target, d.tenant, d.block_hashes)
        try:
            failure = await self._pull(d, url, source, landed)
        except BaseException:
            self.replicas.landed(d.target, d.tenant, d.block_hashes)  # over all the same
            raise
        landed_now = self.replicas.landed(d.target, d.tenant, d.block_hashes)
        for request_id, hashes, left_s in landed_now:
            self.hold(d.target, request_id, d.tenant, hashes, left_s)
        return failure

    async def _pull(
        self, d: Decision, url: str, source: int, landed: set[int]
    ) -> AgentCallError | None:
        """One replicate call; None when every block landed. Verified blocks that landed are
        recorded (``landed``) whatever the outcome; those that did not are marked absent on
        the target. A retry gets its own command id."""
        address = self.loads.transfer[source]
        if address is None:
            return AgentCallError(f"node {source} has no known transfer address", False)
        left_s = (d.deadline_ms - self.clock_ms()) / 1000.0
        cap = self.cfg.replicate_deadline_s
        deadline = cap if math.isnan(left_s) else min(max(left_s, self.cfg.min_deadline_s), cap)
        req = ReplicateRequest(
            command_id=f"{d.id}.r{d.attempts}" if d.attempts else d.id, source=address,
            tenant=d.tenant, block_hashes=list(d.block_hashes), deadline_s=deadline,
            ttl_s=max(d.ttl_ms / 1000.0, 1e-3),
        )  # fmt: skip
        d.attempts += 1
        d.move("issued", f"from node {source}")
        pair = (source, d.target)
        self.in_flight[pair] = self.in_flight.get(pair, 0) + d.nbytes
        try:
            result = await self.client.replicate(url, req)
        finally:
            self.in_flight[pair] -= d.nbytes
            if self.in_flight[pair] <= 0:
                del self.in_flight[pair]
        if isinstance(result, AgentCallError):
            self._absent(d, source, landed, result.detail)
            return result
        got = ints(*result.committed, *result.already_present)
        committed = ints(*result.committed)
        if committed:
            per_block = result.bytes_committed // len(committed)
            self.replicas.place(d.target, committed, d.tenant, per_block, req.ttl_s or 0.0)
        if got:
            ev = ReplicationDone(self.clock_ms(), source, d.target, tuple(got), ok=True)
            self.queue.put([ev], SOURCE)
        landed.update(got)
        self.moved_bytes += result.bytes_committed
        d.moved_bytes += result.bytes_committed
        status = result.status.value
        if status == "ok" or (status == "partial" and len(landed) == len(d.block_hashes)):
            self.done += 1
            d.move("done", f"{status}: {len(committed)} copied, {len(got) - len(committed)} held")
            return None
        detail = f"pull {status}: {result.error or 'nothing copied'}"
        self._absent(d, source, landed, detail)
        return AgentCallError(detail, False)

    def _absent(self, d: Decision, source: int, landed: set[int], reason: str) -> None:
        """The blocks of ``d`` that did not land are not on the target: forget any replica of
        them there, and record the failure in the event stream (``ok=False``: residency
        unchanged, so the target is never reported as holding them)."""
        lost = tuple(h for h in d.block_hashes if h not in landed)
        if not lost:
            return
        self.replicas.remove(d.target, lost)
        ev = ReplicationDone(self.clock_ms(), source, d.target, lost, ok=False, reason=reason)
        self.queue.put([ev], SOURCE)

    async def _other_holder(self, d: Decision, exclude: list[int]) -> int | None:
        """Another node whose agent is up (as the telemetry poller last found it) and holds
        the whole chain in GPU memory."""
        blocks = list(d.block_hashes)
        mask = await asyncio.wrap_future(self.keeper.ask(lambda k: chain_holders(k, blocks)))
        loads = self.loads
        for node in range(len(self.agents)):
            usable = (self.agents[node] is not None and loads.agent_up[node]
                      and loads.transfer[node] is not None)  # fmt: skip
            if (mask >> node) & 1 and node not in exclude and node != d.target and usable:
                return node
        return None

    # -- claims ----------------------------------------------------------------------------
    def hold(
        self, node: int, request_id: str, tenant: str, hashes: list[int],
        hold_s: float | None = None,
    ) -> None:  # fmt: skip
        """Have ``node``'s agent hold these replicas for the routed request ``request_id``
        for ``hold_s`` (None: ``claim_hold_s``) at most (any thread)."""
        claim, hold_s = claim_id(request_id), hold_s or self.cfg.claim_hold_s
        for i in range(0, len(hashes), MAX_HASHES_PER_PULL):
            part = hashes[i : i + MAX_HASHES_PER_PULL]
            req = HoldRequest(claim_id=claim, tenant=tenant, block_hashes=part, hold_s=hold_s)
            self._claim_task(node, "hold", req)

    def release(self, node: int, releases: list[Release]) -> None:
        """Have ``node``'s agent end these claims (by request id): its engine stored the
        blocks (any thread)."""
        for request_id, tenant, hashes in releases:
            claim = claim_id(request_id)
            for i in range(0, len(hashes), MAX_HASHES_PER_PULL):
                part = hashes[i : i + MAX_HASHES_PER_PULL]
                req = ReleaseRequest(claim_id=claim, tenant=tenant, block_hashes=part)
                self._claim_task(node, "release", req)

    def _claim_task(self, node: int, kind: str, req: HoldRequest | ReleaseRequest) -> None:
        assert self._loop is not None, "bind() the executor to the event loop first"
        self._loop.call_soon_threadsafe(self._spawn_claim, node, kind, req)

    def _spawn_claim(self, node: int, kind: str, req: HoldRequest | ReleaseRequest) -> None:
        url = self.agents[node] if 0 <= node < len(self.agents) else None
        if url is None or not self.loads.agent_up[node]:
            self.claims[f"{kind}_failed"] += len(req.block_hashes)
            return
        if len(self._tasks) >= 4 * self.cfg.max_in_flight:
            self.claims[f"{kind}_dropped"] += len(req.block_hashes)
            return
        task = asyncio.create_task(self._send_claim(url, kind, req))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send_claim(self, url: str, kind: str, req: HoldRequest | ReleaseRequest) -> None:
        done: int | AgentCallError
        if isinstance(req, HoldRequest):
            held = await self.client.hold(url, req)
            done = held if isinstance(held, AgentCallError) else len(held.held)
        else:
            gone = await self.client.release(url, req)
            done = gone if isinstance(gone, AgentCallError) else len(gone.released)
        if isinstance(done, AgentCallError):
            self.claims[f"{kind}_failed"] += len(req.block_hashes)
            log.info("%s of %d replicas for %s failed: %s", kind, len(req.block_hashes),
                     req.claim_id, done.detail)  # fmt: skip
            return
        self.claims["held" if kind == "hold" else "released"] += done

    # -- evict -----------------------------------------------------------------------------
    async def _evict(self, d: Decision, url: str) -> None:
        by_tenant: dict[str, list[int]] = {}
        for h in d.block_hashes:
            tenant = self.replicas.tenant(d.target, h)
            if tenant is not None:
                by_tenant.setdefault(tenant, []).append(h)
        if not by_tenant:  # the replica view forgot them at their TTL (their agent reclaims
            d.move("done", "no live replica left: expired or removed already")  # them itself)
            return
        d.move("issued")
        self.evictions += 1
        gone: list[int] = []
        for i, (tenant, hashes) in enumerate(sorted(by_tenant.items())):
            req = BlockRefs(command_id=f"{d.id}.{i}", tenant=tenant, block_hashes=hashes)
            result = await self.client.evict(url, req)
            if isinstance(result, AgentCallError):
                self.failed["evict"] += 1
                self._drop(d, "failed", result.detail)
                break
            gone += ints(*result.evicted, *result.absent)
            self.evicted_blocks += len(result.evicted)
        if gone:
            self.replicas.remove(d.target, gone)
            self.queue.put([BlockRemoved(self.clock_ms(), d.target, tuple(gone))], SOURCE)
        if d.status != "dropped":
            d.move("done", f"{len(gone)} replicas gone")
