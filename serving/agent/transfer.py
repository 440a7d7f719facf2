"""Pulling blocks from a peer: verify every block, commit only verified ones, report the rest.

:meth:`TransferClient.pull` runs one command: it skips blocks already held, asks the peer
through a :class:`Transport` (TCP by default), commits each block that passes its checksum
(speculative with a TTL, or cached), retries what is left with exponential back-off, and stops
at the deadline. A command id seen before moves nothing: its first outcome is returned.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from kvcast.serving.agent.block_store import BlockStore
from kvcast.serving.agent.blocks import BlockState, ChecksumMismatch, StoreError
from kvcast.serving.agent.buffers import BlockBuffer, BufferAllocator, HostAllocator
from kvcast.serving.agent.command_log import CommandLog
from kvcast.serving.agent.pull_result import PullResult, PullStatus, TransferStats
from kvcast.serving.agent.tcp_transport import TcpTransport
from kvcast.serving.agent.transport import PullRefused, Transport, TransportError
from kvcast.serving.messages import BlockHash, BlockHeader, ProtocolError, PullRequest

log = logging.getLogger(__name__)
MAX_HASHES_PER_PULL = 8192  # keeps a PullRequest under the protocol's body limit


@dataclass
class _Progress:
    """What one command has achieved so far; :meth:`sink` receives the transport's blocks."""

    client: TransferClient
    tenant: str
    state: BlockState
    ttl_s: float | None
    pending: dict[BlockHash, None]
    committed: list[BlockHash] = field(default_factory=list)
    present: list[BlockHash] = field(default_factory=list)  # arrived, but held already
    missing: list[BlockHash] = field(default_factory=list)
    rejected: list[BlockHash] = field(default_factory=list)
    corrupt: dict[BlockHash, None] = field(default_factory=dict)
    nbytes: int = 0
    held_bytes: int = 0  # arrived and verified, but held already

    def sink(self, header: BlockHeader, buffer: BlockBuffer, digest: int | None = None) -> None:
        """A :class:`BlockSink`: commit the block if it matches its checksum (``digest``, when
        the transport computed it as the bytes arrived, else computed by the store)."""
        h, stats = header.block_hash, self.client.stats
        if header.tenant != self.tenant or h not in self.pending:
            raise ProtocolError(f"peer sent unrequested block {h!r} of tenant {header.tenant!r}")
        store = self.client.store
        held = store.info(self.tenant, h) is not None  # stored meanwhile by another command
        try:
            store.put(self.tenant, h, buffer, header.checksum, self.state, self.ttl_s, digest)
        except ChecksumMismatch:
            stats.checksum_failures += 1
            self.corrupt[h] = None
            return  # stays pending: retried
        except StoreError:
            stats.store_rejections += 1
            self.rejected.append(h)
        else:
            if held:  # stored by this command: no (the bytes were dropped, the state applied)
                self.present.append(h)
                self.held_bytes += buffer.nbytes
            else:
                self.committed.append(h)
                self.nbytes += buffer.nbytes
        del self.pending[h]

    def mark_missing(self, hashes: Iterable[BlockHash]) -> None:
        for h in hashes:
            if h in self.pending:
                del self.pending[h]
                self.missing.append(h)


class TransferClient:
    """Pulls blocks into ``store`` from peers. The transport authenticates this node to them
    (:class:`TcpTransport`: its ``token``; the default one has none)."""

    def __init__(
        self,
        store: BlockStore,
        transport: Transport | None = None,
        *,
        allocator: BufferAllocator | None = None,
        max_retries: int = 3,
        backoff_base_s: float = 0.05,
        backoff_max_s: float = 1.0,
        command_log_size: int = 4096,
        rng: random.Random | None = None,
    ) -> None:
        self.store, self.transport = store, transport or TcpTransport()
        self.allocator = allocator or HostAllocator()
        self.max_retries = max_retries
        self.backoff_base_s, self.backoff_max_s = backoff_base_s, backoff_max_s
        self.commands: CommandLog[PullResult] = CommandLog(command_log_size)
        self.stats = TransferStats()
        self._rng = rng or random.Random()

    async def pull(
        self,
        peer: str,
        block_hashes: Iterable[BlockHash],
        tenant: str,
        deadline: float,
        *,
        command_id: str | None = None,
        state: BlockState = BlockState.SPECULATIVE,
        ttl_s: float | None = None,
    ) -> PullResult:
        """Pull ``block_hashes`` of ``tenant`` from ``peer`` (``host:port``) before ``deadline``
        (an instant of :func:`time.monotonic`). Transfer failures are never raised: read the
        result's status. A malformed command (bad peer address, too many hashes) raises
        ValueError."""
        cid = command_id or uuid.uuid4().hex
        hashes = tuple(dict.fromkeys(block_hashes))
        if len(hashes) > MAX_HASHES_PER_PULL:
            raise ValueError(f"{len(hashes)} blocks in one pull; at most {MAX_HASHES_PER_PULL}")
        return await self.commands.run_once(
            cid, lambda: self._run(cid, peer, hashes, tenant, deadline, state, ttl_s)
        )

    def backoff_s(self, attempt: int) -> float:
        """Delay before retry ``attempt`` (1, 2, ...): exponential, capped, half-jittered."""
        delay = min(self.backoff_max_s, self.backoff_base_s * 2 ** (attempt - 1))
        return delay * (0.5 + self._rng.random() / 2)

    async def _run(
        self,
        cid: str,
        peer: str,
        hashes: tuple[BlockHash, ...],
        tenant: str,
        deadline: float,
        state: BlockState,
        ttl_s: float | None,
    ) -> PullResult:
        start, stats = time.monotonic(), self.stats
        # blocks held already take the state asked (a cached copy of a speculative replica
        # makes it cached, a speculative one refreshes its TTL); nothing moves for them
        restate = self.store.restate
        present = tuple(h for h in hashes if restate(tenant, h, state, ttl_s) is not None)
        todo = dict.fromkeys(hashes)
        for h in present:
            del todo[h]
        prog = _Progress(self, tenant, state, ttl_s, todo)
        status: PullStatus | None = None
        error, attempts = "", 0
        stats.pulls += 1
        try:
            async with asyncio.timeout(deadline - time.monotonic()):
                while prog.pending:
                    attempts += 1
                    request = PullRequest(cid, tenant, tuple(prog.pending))
                    try:
                        done = await self.transport.pull(peer, request, prog.sink, self.allocator)
                        prog.mark_missing(done.missing)
                    except PullRefused as err:
                        status, error = PullStatus.REFUSED, str(err)
                        break
                    except TransportError as err:
                        error = str(err)
                    if not prog.pending or attempts > self.max_retries:
                        break
                    stats.retries += 1
                    await asyncio.sleep(self.backoff_s(attempts))
        except TimeoutError:
            status, error = PullStatus.DEADLINE_EXCEEDED, f"deadline passed ({error or 'slow'})"
        stats.attempts += attempts
        stats.blocks_committed += len(prog.committed)
        stats.bytes_committed += prog.nbytes
        stats.bytes_already_held += prog.held_bytes
        if status is None:
            if not (prog.pending or prog.missing or prog.rejected):
                status = PullStatus.OK
            else:
                done = prog.committed or present or prog.present
                status = PullStatus.PARTIAL if done else PullStatus.FAILED
        stats.pulls_ok += status is PullStatus.OK
        stats.refused += status is PullStatus.REFUSED
        stats.deadline_exceeded += status is PullStatus.DEADLINE_EXCEEDED
        if status is not PullStatus.OK:
            log.warning("pull %s from %s: %s %s", cid, peer, status.value, error)
        return PullResult(
            cid, peer, tenant, status, tuple(prog.committed), (*present, *prog.present),
            tuple(prog.missing),
            tuple(prog.pending), tuple(prog.corrupt), tuple(prog.rejected), prog.nbytes,
            attempts, time.monotonic() - start, error,
        )  # fmt: skip
