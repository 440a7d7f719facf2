"""The blocks an agent removed on its own, numbered, so that the sidecar can follow them.

The sidecar learns of a speculative replica when the agent confirms the copy, and of its end
when it orders the eviction; but the agent also removes blocks by itself: to make room for a
new block (LRU, speculative replicas first) and when a replica's TTL runs out. Without a report
the sidecar would keep such a replica in its view (and the decider in its ledger) until its
own TTL sweep: a chain "already copied" would not be copied again, and the feature state would
place the block on a node that lost it.

Every removal the agent makes on its own gets the next sequence number, and so does an
eviction a tenant token orders (``evicted_by_tenant``: the sidecar did not order it); the
shared token's evictions are not logged (the sidecar ordered them). The log keeps the last
``capacity`` entries; a reader asks for what came after the last number it saw
(``GET /v1/removals?since=N``) and is told how many it missed when it fell behind by more than
the log holds. Memory is bounded by ``capacity``.
"""

from __future__ import annotations

from collections import deque
from itertools import islice
from typing import NamedTuple

from kvcast.serving.messages import BlockHash

DEFAULT_CAPACITY = 16_384


class Removal(NamedTuple):
    seq: int
    tenant: str
    block_hash: BlockHash
    reason: str  # expired | evicted_speculative | evicted_cached | evicted_by_tenant


class RemovalLog:
    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError(f"removal log capacity must be >= 1, got {capacity}")
        self._entries: deque[Removal] = deque(maxlen=capacity)
        self.next_seq = 0  # the number the next removal gets

    def __len__(self) -> int:
        return len(self._entries)

    def record(self, tenant: str, block_hash: BlockHash, reason: str) -> None:
        self._entries.append(Removal(self.next_seq, tenant, block_hash, reason))
        self.next_seq += 1

    def since(self, seq: int, limit: int) -> tuple[list[Removal], int, int]:
        """Up to ``limit`` removals numbered ``seq`` or later, oldest first; the number to ask
        for next; and how many removals from ``seq`` on the log no longer holds. A ``seq``
        beyond the last number (a reader that saw a previous life of this agent) reads from
        the start of what is held."""
        entries = self._entries
        first = entries[0].seq if entries else self.next_seq
        if seq > self.next_seq:
            seq = first
        missed = max(first - seq, 0)
        start = max(seq, first) - first
        out = list(islice(entries, start, start + limit))
        nxt = out[-1].seq + 1 if out else max(seq, first)
        return out, nxt, missed
