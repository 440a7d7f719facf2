"""The vocabulary of the block store: keys, states, read-only views, counters and errors."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import NamedTuple

from kvcast.serving.agent.buffers import BlockBuffer
from kvcast.serving.messages import BlockHash


class BlockKey(NamedTuple):
    """Blocks are addressed by tenant *and* hash: equal hashes of two tenants never meet."""

    tenant: str
    block_hash: BlockHash


class BlockState(StrEnum):
    """``active``: in use by a request, pinned, never evicted or overwritten.
    ``cached``: evictable (LRU). ``speculative``: a replica placed ahead of demand; evicted
    first, expires after its TTL, and counted against the speculative quota; while *held* for
    a request routed to the node it neither expires nor is evicted on command, and is evicted
    for room only after every cached block."""

    ACTIVE = "active"
    CACHED = "cached"
    SPECULATIVE = "speculative"


@dataclass(frozen=True, slots=True)
class BlockInfo:
    """What the inventory says about one block (no contents)."""

    tenant: str
    block_hash: BlockHash
    state: BlockState
    nbytes: int
    checksum: int
    pins: int
    expires_at: float | None
    holds: int = 0  # routed requests holding this replica now
    claims: tuple[tuple[str, float], ...] = ()  # their (claim id, end of its hold), clock s


@dataclass(frozen=True, slots=True)
class StoredBlock:
    """A verified block as read from the store."""

    buffer: BlockBuffer
    checksum: int


@dataclass(slots=True)
class StoreStats:
    """Monotonic counters and high-water marks of one store."""

    puts: int = 0
    duplicate_puts: int = 0
    hits: int = 0
    misses: int = 0
    evicted_cached: int = 0
    evicted_speculative: int = 0
    expired: int = 0
    removed: int = 0
    speculative_used: int = 0
    holds: int = 0  # replicas held for a routed request (one per request and block)
    held_evicted: int = 0  # held replicas evicted for room all the same (the last resort)
    rejected_checksum: int = 0
    rejected_capacity: int = 0
    rejected_quota: int = 0
    rejected_tenant_cap: int = 0  # new blocks over their tenants' cap (a tenant token's)
    peak_used_bytes: int = 0
    peak_speculative_bytes: int = 0

    def note_peaks(self, used_bytes: int, speculative_bytes: int) -> None:
        self.peak_used_bytes = max(self.peak_used_bytes, used_bytes)
        self.peak_speculative_bytes = max(self.peak_speculative_bytes, speculative_bytes)

    def note_rejection(self, err: StoreFull) -> None:
        if isinstance(err, QuotaExceeded):
            self.rejected_quota += 1
        else:
            self.rejected_capacity += 1

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class StoreError(Exception):
    """Base of every refusal by the block store."""


class ChecksumMismatch(StoreError):
    """The bytes do not match their checksum; the block was not stored."""


class StoreFull(StoreError):
    """No room without evicting an active block (or, for a replica, a non-speculative one)."""


class QuotaExceeded(StoreFull):
    """A speculative replica would push speculative bytes over the quota."""


class OverTenantCap(StoreError):
    """A new block would take its tenants' blocks past the cap it was put under."""

    def __init__(self, held: int, nbytes: int, cap: int) -> None:
        super().__init__(f"the tenants' blocks take {held} bytes; a new block of {nbytes} "
                         f"would pass their cap of {cap}")  # fmt: skip
        self.held, self.nbytes, self.cap = held, nbytes, cap


class BlockPinned(StoreError):
    """The block is active (pinned): it cannot be evicted."""


class BlockHeld(StoreError):
    """The replica is held for a request routed to this node: it cannot be evicted on
    command (it expires by its TTL once released)."""


class BlockNotFound(StoreError, KeyError):
    """No such (tenant, hash) in the store."""
