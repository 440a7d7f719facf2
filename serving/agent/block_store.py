"""The agent's block store: verified blocks by (tenant, hash), with LRU, quota and TTL.

Kept whatever the caller does: a block is visible only once its bytes matched their checksum;
an active (pinned) block is never evicted and no stored block is overwritten; speculative
replicas go first, expire after their TTL, stay within the quota and only displace each other;
total bytes never exceed the capacity.

A request routed to this node may *hold* the replicas it will read (:meth:`BlockStore.hold`,
the sidecar's claim, by the request's id): a held replica does not expire, is not evicted on
command, and is evicted for room only after every cached block, until each request holding
it releases it (:meth:`BlockStore.release`: its engine stored the block) or its hold runs
out (a maximum, so that a lost release never holds memory for ever); then its TTL applies
again (at once if it passed). Pinning it (the engine reads it) makes it active as before.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable

from kvcast.serving.agent.block_table import BlockTable, Entry
from kvcast.serving.agent.blocks import (
    BlockHeld,
    BlockInfo,
    BlockKey,
    BlockNotFound,
    BlockPinned,
    BlockState,
    ChecksumMismatch,
    OverTenantCap,
    StoredBlock,
    StoreError,
    StoreFull,
    StoreStats,
)
from kvcast.serving.agent.buffers import BlockBuffer
from kvcast.serving.agent.checksum import checksum as compute_checksum
from kvcast.serving.agent.eviction import plan_evictions
from kvcast.serving.agent.removal_log import RemovalLog
from kvcast.serving.messages import BlockHash

ACTIVE, CACHED, SPECULATIVE = BlockState.ACTIVE, BlockState.CACHED, BlockState.SPECULATIVE


class BlockStore:
    """Blocks of one agent. Not thread-safe: use it from one thread (the agent's event loop)."""

    def __init__(
        self,
        capacity_bytes: int,
        speculative_quota_bytes: int,
        speculative_ttl_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if capacity_bytes <= 0 or not 0 <= speculative_quota_bytes <= capacity_bytes:
            raise ValueError("need capacity > 0 and 0 <= speculative quota <= capacity")
        if speculative_ttl_s <= 0:
            raise ValueError("speculative_ttl_s must be > 0")
        self.capacity_bytes, self.speculative_quota_bytes = capacity_bytes, speculative_quota_bytes
        self.speculative_ttl_s, self._clock = speculative_ttl_s, clock
        self._table = BlockTable()
        self.stats = StoreStats()
        self.removals = RemovalLog()  # what left without a command (evicted, expired)

    def __len__(self) -> int:
        return len(self._table)

    @property
    def used_bytes(self) -> int:
        return self._table.used_bytes

    @property
    def speculative_bytes(self) -> int:
        return self._table.bytes[SPECULATIVE]

    @property
    def active_bytes(self) -> int:
        return self._table.bytes[ACTIVE]

    def tenant_bytes(self, tenants: Iterable[str]) -> int:
        """Bytes of the blocks of ``tenants``, expired replicas reclaimed first."""
        self.sweep()
        return self._table.bytes_of(tenants)

    def totals(self) -> dict[BlockState, tuple[int, int]]:
        """(blocks, bytes) in each state, expired replicas reclaimed first; O(1) otherwise."""
        self.sweep()
        return {s: (self._table.counts[s], self._table.bytes[s]) for s in BlockState}

    def put(
        self,
        tenant: str,
        block_hash: BlockHash,
        buffer: BlockBuffer,
        checksum: int,
        state: BlockState = CACHED,
        ttl_s: float | None = None,
        digest: int | None = None,
        cap: tuple[Collection[str], int] | None = None,
    ) -> BlockInfo:
        """Verify ``buffer`` against ``checksum``, make room, store it. A block already stored
        keeps its bytes; its state may only rise (speculative -> cached -> active).
        ``digest``: the xxh3-64 of ``buffer``'s current bytes when the caller computed it while
        writing them (a transport, as they arrived); None: computed here from the buffer.
        ``cap``: (tenants, bytes): a new block is stored only if those tenants' blocks, with
        it, take at most that many bytes (read after expired replicas are reclaimed).
        Raises :class:`ChecksumMismatch`, :class:`QuotaExceeded`, :class:`StoreFull` or
        :class:`OverTenantCap`."""
        if digest is None:
            digest = compute_checksum(buffer.view())
        if digest != checksum:
            self.stats.rejected_checksum += 1
            raise ChecksumMismatch(f"block {block_hash!r} of tenant {tenant!r}: bad checksum")
        key = BlockKey(tenant, block_hash)
        self.sweep()
        expires_at = self._clock() + (self.speculative_ttl_s if ttl_s is None else ttl_s)
        if (entry := self._table.entries.get(key)) is not None:
            self.stats.duplicate_puts += 1
            return self._restate(key, entry, state, expires_at)
        if cap is not None:
            held = self._table.bytes_of(cap[0])
            if held + buffer.nbytes > cap[1]:
                self.stats.rejected_tenant_cap += 1
                raise OverTenantCap(held, buffer.nbytes, cap[1])
        try:
            victims = plan_evictions(
                self._table, buffer.nbytes, state, self.capacity_bytes,
                self.speculative_quota_bytes, self._clock(),
            )  # fmt: skip
        except StoreFull as err:  # QuotaExceeded is a StoreFull
            self.stats.note_rejection(err)
            raise
        for victim in victims:
            gone = self._table.entries[victim]
            if gone.holds and gone.held(self._clock()):
                self.stats.held_evicted += 1
            self._remove(victim, "evicted_" + gone.state.value)
        try:
            buffer.commit()  # device memory: staged bytes to the device
        except RuntimeError as err:  # e.g. the device is out of memory
            msg = f"block {block_hash!r}: could not be moved to its device: {err}"
            raise StoreError(msg) from err
        entry = Entry(buffer, checksum, state, pins=int(state is ACTIVE))
        entry.expires_at = expires_at if state is SPECULATIVE else None
        self._table.add(key, entry)
        self.stats.puts += 1
        self.stats.note_peaks(self.used_bytes, self.speculative_bytes)
        return self._info(key, entry)

    def get(self, tenant: str, block_hash: BlockHash) -> StoredBlock | None:
        """Read a block for use: counts a hit or a miss and refreshes its LRU position."""
        key = BlockKey(tenant, block_hash)
        if (entry := self._live(key)) is None:
            self.stats.misses += 1
            return None
        self.stats.hits += 1
        self._table.touch(key)
        return StoredBlock(entry.buffer, entry.checksum)

    def peek(self, tenant: str, block_hash: BlockHash) -> StoredBlock | None:
        """Read a block without counting or touching it (to serve a peer's pull)."""
        entry = self._live(BlockKey(tenant, block_hash))
        return None if entry is None else StoredBlock(entry.buffer, entry.checksum)

    def info(self, tenant: str, block_hash: BlockHash) -> BlockInfo | None:
        key = BlockKey(tenant, block_hash)
        return None if (entry := self._live(key)) is None else self._info(key, entry)

    def restate(
        self, tenant: str, block_hash: BlockHash, state: BlockState, ttl_s: float | None = None
    ) -> BlockInfo | None:
        """What storing a block already held does, without its bytes (a pull of a block the
        node holds): its state rises to ``state`` (speculative -> cached -> active, a pin), a
        speculative one gets a new TTL; None if the block is not held."""
        key = BlockKey(tenant, block_hash)
        if (entry := self._live(key)) is None:
            return None
        expires_at = self._clock() + (self.speculative_ttl_s if ttl_s is None else ttl_s)
        return self._restate(key, entry, state, expires_at)

    def _restate(
        self, key: BlockKey, entry: Entry, state: BlockState, expires_at: float
    ) -> BlockInfo:
        if state is ACTIVE:
            return self.pin(key.tenant, key.block_hash)
        if state is CACHED and entry.state is SPECULATIVE:
            self._table.move(key, CACHED)
        elif state is SPECULATIVE and entry.state is SPECULATIVE:
            self._table.set_expiry(key, expires_at)
        self._table.touch(key)
        return self._info(key, entry)

    def pin(self, tenant: str, block_hash: BlockHash) -> BlockInfo:
        """Mark a block active (in use); pinning a speculative replica counts it as used."""
        key, entry = self._require(tenant, block_hash)
        if entry.state is SPECULATIVE:
            self.stats.speculative_used += 1
        if entry.state is not ACTIVE:
            self._table.move(key, ACTIVE)
        entry.pins += 1
        return self._info(key, entry)

    def unpin(self, tenant: str, block_hash: BlockHash) -> BlockInfo:
        """Release one pin; at zero pins the block becomes cached (most recently used)."""
        key, entry = self._require(tenant, block_hash)
        if entry.state is not ACTIVE:
            raise StoreError(f"block {block_hash!r} of tenant {tenant!r} is not pinned")
        entry.pins -= 1
        if entry.pins == 0:
            self._table.move(key, CACHED)
        return self._info(key, entry)

    def evict(self, tenant: str, block_hash: BlockHash, logged: bool = False) -> bool:
        """Remove a block on request: False if absent, :class:`BlockPinned` if active,
        :class:`BlockHeld` if a replica held for a routed request. ``logged``: the removal
        also goes to the removals log (a tenant token's command, which the sidecar did not
        order: it learns of it there)."""
        key = BlockKey(tenant, block_hash)
        if (entry := self._live(key)) is None:
            return False
        if entry.state is ACTIVE:
            raise BlockPinned(f"block {block_hash!r} of tenant {tenant!r} is active")
        if entry.held(self._clock()):
            raise BlockHeld(f"block {block_hash!r} of tenant {tenant!r} is held for a request")
        self._remove(key, "removed")
        if logged:
            self.removals.record(tenant, block_hash, "evicted_by_tenant")
        return True

    def hold(self, tenant: str, block_hash: BlockHash, claim: str, hold_s: float) -> bool:
        """Hold a speculative replica for the routed request ``claim`` until :meth:`release`
        or for ``hold_s`` seconds at most (holding it again renews that); whether it is one
        (an absent, cached or active block needs no hold)."""
        entry = self._live(BlockKey(tenant, block_hash))
        if entry is None or entry.state is not SPECULATIVE:
            return False
        now = self._clock()
        holds = entry.holds = {c: t for c, t in (entry.holds or {}).items() if t > now}
        if claim not in holds:
            self.stats.holds += 1
        holds[claim] = now + hold_s
        return True

    def release(self, tenant: str, block_hash: BlockHash, claim: str) -> bool:
        """End ``claim``'s hold on a replica; whether it held one. Held by no request any
        more, the replica expires by its TTL (at the next sweep if that passed)."""
        entry = self._table.entries.get(BlockKey(tenant, block_hash))
        if entry is None or not entry.holds or entry.holds.pop(claim, None) is None:
            return False
        self._table.note_end(entry.ends_at())
        return True

    def sweep(self) -> int:
        """Reclaim every expired speculative replica now; return how many."""
        expired = self._table.expired(self._clock())
        for key in expired:
            self._remove(key, "expired")
        return len(expired)

    def inventory(self) -> list[BlockInfo]:
        """Every live block (expired replicas reclaimed first), for the sidecar's recovery."""
        self.sweep()
        return [self._info(k, e) for k, e in self._table.entries.items()]

    def _remove(self, key: BlockKey, counter: str) -> None:
        self._table.move(key, None)
        if counter != "removed":  # on its own: the sidecar did not order it
            self.removals.record(key.tenant, key.block_hash, counter)
        setattr(self.stats, counter, getattr(self.stats, counter) + 1)

    def _live(self, key: BlockKey) -> Entry | None:
        """The entry for ``key`` unless absent or expired (an expired one is reclaimed now)."""
        entry = self._table.entries.get(key)
        if entry is not None and entry.expires_at is not None and entry.ends_at() <= self._clock():
            self._remove(key, "expired")
            return None
        return entry

    def _require(self, tenant: str, block_hash: BlockHash) -> tuple[BlockKey, Entry]:
        key = BlockKey(tenant, block_hash)
        if (entry := self._live(key)) is None:
            raise BlockNotFound(f"no block {block_hash!r} for tenant {tenant!r}")
        return key, entry

    def _info(self, key: BlockKey, e: Entry) -> BlockInfo:
        now = self._clock()
        claims = tuple((c, t) for c, t in e.holds.items() if t > now) if e.holds else ()
        return BlockInfo(
            *key, e.state, e.buffer.nbytes, e.checksum, e.pins, e.expires_at, len(claims), claims
        )
