"""The store's indexes: entries by key, LRU order per evictable state, bytes per state and
per tenant.

Every state change goes through :meth:`BlockTable.move`, so they never disagree.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import repeat

from kvcast.serving.agent.blocks import BlockKey, BlockState
from kvcast.serving.agent.buffers import BlockBuffer

EVICTABLE = (BlockState.SPECULATIVE, BlockState.CACHED)
"""Evictable states, lowest priority first; active blocks are in no LRU list."""


@dataclass(slots=True)
class Entry:
    buffer: BlockBuffer
    checksum: int
    state: BlockState
    pins: int = 0
    expires_at: float | None = None
    # a speculative replica's holds: claim id of a request routed here -> until when (clock)
    holds: dict[str, float] | None = None

    def held(self, now: float) -> bool:
        """Whether a routed request holds this replica at ``now``."""
        return self.holds is not None and any(until > now for until in self.holds.values())

    def ends_at(self) -> float:
        """When the replica leaves by itself: its TTL, or its last hold's end if later
        (inf: not a replica)."""
        end = math.inf if self.expires_at is None else self.expires_at
        return max(end, *self.holds.values()) if self.holds else end


class BlockTable:
    """``bytes`` and ``counts``: the bytes and the number of blocks in each state;
    ``tenant_bytes``: the bytes of each tenant's blocks (tenants holding no block left out;
    one holding only empty blocks is kept, at 0)."""

    def __init__(self) -> None:
        self.entries: dict[BlockKey, Entry] = {}
        self._lru: dict[BlockState, OrderedDict[BlockKey, None]] = {
            s: OrderedDict() for s in EVICTABLE
        }
        self.bytes = dict.fromkeys(BlockState, 0)
        self.counts = dict.fromkeys(BlockState, 0)
        self.tenant_bytes: dict[str, int] = {}
        self._tenant_blocks: dict[str, int] = {}  # blocks per tenant: when to drop its entry
        self._next_expiry = math.inf  # a lower bound on every speculative block's expiry

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def used_bytes(self) -> int:
        return sum(self.bytes.values())

    def bytes_of(self, tenants: Iterable[str]) -> int:
        """The bytes of the blocks of ``tenants``."""
        return sum(map(self.tenant_bytes.get, tenants, repeat(0)))

    def add(self, key: BlockKey, entry: Entry) -> None:
        if key in self.entries:
            raise KeyError(f"{key} already present")
        self.entries[key] = entry
        tenant = key.tenant
        self.tenant_bytes[tenant] = self.tenant_bytes.get(tenant, 0) + entry.buffer.nbytes
        self._tenant_blocks[tenant] = self._tenant_blocks.get(tenant, 0) + 1
        self._link(key, entry)
        if entry.expires_at is not None:
            self._next_expiry = min(self._next_expiry, entry.expires_at)

    def set_expiry(self, key: BlockKey, expires_at: float) -> None:
        self.entries[key].expires_at = expires_at
        self._next_expiry = min(self._next_expiry, expires_at)

    def note_end(self, at: float) -> None:
        """A replica may now leave as early as ``at`` (a hold on it ended)."""
        self._next_expiry = min(self._next_expiry, at)

    def expired(self, now: float) -> list[BlockKey]:
        """Speculative blocks whose expiry (or last hold, if later) is <= ``now`` (O(1) while
        none is)."""
        if now < self._next_expiry:
            return []
        out, self._next_expiry = [], math.inf
        for key, entry in self.lru(BlockState.SPECULATIVE):
            at = entry.ends_at()
            if at <= now:
                out.append(key)
            else:
                self._next_expiry = min(self._next_expiry, at)
        return out

    def move(self, key: BlockKey, state: BlockState | None) -> None:
        """Give ``key`` a new state (None removes it); it becomes most recently used."""
        entry = self.entries[key]
        self.bytes[entry.state] -= entry.buffer.nbytes
        self.counts[entry.state] -= 1
        if entry.state in self._lru:
            del self._lru[entry.state][key]
        if state is None:
            del self.entries[key]
            tenant = key.tenant
            if left := self._tenant_blocks[tenant] - 1:
                self._tenant_blocks[tenant] = left
                self.tenant_bytes[tenant] -= entry.buffer.nbytes
            else:
                del self._tenant_blocks[tenant], self.tenant_bytes[tenant]
            return
        entry.state = state
        if state is not BlockState.SPECULATIVE:  # no longer a replica: no TTL, nothing held
            entry.expires_at = entry.holds = None
        self._link(key, entry)

    def touch(self, key: BlockKey) -> None:
        """Mark ``key`` most recently used within its state."""
        state = self.entries[key].state
        if state in self._lru:
            self._lru[state].move_to_end(key)

    def lru(self, state: BlockState) -> Iterator[tuple[BlockKey, Entry]]:
        """Blocks in ``state``, least recently used first (empty for active)."""
        for key in self._lru.get(state, ()):
            yield key, self.entries[key]

    def _link(self, key: BlockKey, entry: Entry) -> None:
        self.bytes[entry.state] += entry.buffer.nbytes
        self.counts[entry.state] += 1
        if entry.state in self._lru:
            self._lru[entry.state][key] = None
