"""The speculative replicas this sidecar placed, and whether requests used them (hit rate).

A replica is placed when an agent confirms a replication (its tenant and TTL are known then);
it is *used* when a request routed to its node contains its block before it expired or was
evicted, and *wasted* when it leaves unused. ``hit_rate = used / (used + wasted)`` over the
replicas whose fate is known. A replica is *adopted* when its node's engine stores the block
itself (a non-speculative ``BlockStored``): from then on the engine's own KV events say when
it leaves. At its expiry a replica that was not adopted, used or not, is reported gone (the
agent reclaims it by itself): a request routed to it that never reached the engine's cache
(aborted, failed over) must not leave it in the sidecar's view for ever. Thread-safe: the
executor places and removes, the consumer thread reports requests and stores. Memory is
bounded by the live replicas (expired ones are swept).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass


@dataclass(slots=True)
class Replica:
    tenant: str
    nbytes: int
    placed_at: float  # clock seconds
    expires_at: float
    used: bool = False
    adopted: bool = False  # the engine stored it: its own events report its removal


class ReplicaTracker:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._live: dict[tuple[int, int], Replica] = {}  # (node, hash) -> replica
        self.placed = 0
        self.used = 0
        self.wasted = 0
        self.placed_bytes = 0

    def __bool__(self) -> bool:
        return bool(self._live)

    def __len__(self) -> int:
        return len(self._live)

    def place(
        self, node: int, hashes: Iterable[int], tenant: str, nbytes: int, ttl_s: float
    ) -> None:
        now = self._clock()
        with self._lock:
            for h in hashes:
                if (node, h) not in self._live:
                    self.placed += 1
                    self.placed_bytes += nbytes
                self._live[(node, h)] = Replica(tenant, nbytes, now, now + ttl_s)

    def on_request(self, node: int, hashes: Iterable[int]) -> None:
        with self._lock:
            live = self._live
            for h in hashes:
                r = live.get((node, h))
                if r is not None and not r.used:
                    r.used = True
                    self.used += 1

    def on_stored(self, node: int, hashes: Iterable[int]) -> None:
        """The engine on ``node`` stored these blocks in its own cache."""
        with self._lock:
            live = self._live
            for h in hashes:
                r = live.get((node, h))
                if r is not None:
                    r.adopted = True

    def remove(self, node: int, hashes: Iterable[int]) -> None:
        """The replicas left their node (evicted on command or reported gone)."""
        with self._lock:
            for h in hashes:
                self._drop((node, h))

    def left_agent(self, node: int, refs: Iterable[tuple[str, int]]) -> list[int]:
        """The agent of ``node`` removed these (tenant, hash) blocks on its own (evicted to
        make room, or expired): forget the live replicas among them, and return the hashes of
        those the engine had not adopted (its own events say when an adopted one leaves)."""
        gone = []
        with self._lock:
            for tenant, h in refs:
                r = self._live.get((node, h))
                if r is None or r.tenant != tenant:
                    continue  # not a replica of ours, or another tenant's block of that hash
                self._drop((node, h))
                if not r.adopted:
                    gone.append(h)
        return gone

    def sweep(self) -> list[tuple[int, int]]:
        """Forget expired replicas; return the (node, block) of those the engine did not
        adopt: the agent reclaims them itself, and nothing else will say they left."""
        now = self._clock()
        with self._lock:
            gone = [k for k, r in self._live.items() if r.expires_at <= now]
            left = []
            for k in gone:
                r = self._drop(k)
                if r is not None and not r.adopted:
                    left.append(k)
        return left

    def _drop(self, key: tuple[int, int]) -> Replica | None:
        """Forget the replica at ``key`` (wasted if it went unused); the caller holds the
        lock."""
        r = self._live.pop(key, None)
        if r is not None and not r.used:
            self.wasted += 1
        return r

    def on_node(self, node: int) -> list[tuple[str, int]]:
        """(tenant, hash) of the live replicas on ``node`` (a scan: for rare events)."""
        with self._lock:
            return [(r.tenant, h) for (n, h), r in self._live.items() if n == node]

    def tenant(self, node: int, block_hash: int) -> str | None:
        r = self._live.get((node, block_hash))
        return None if r is None else r.tenant

    def nodes_of(self, block_hash: int) -> list[int]:
        """Nodes holding a live replica of ``block_hash`` (a scan: for lookups, not hot paths)."""
        with self._lock:
            return sorted(n for (n, h) in self._live if h == block_hash)

    @property
    def hit_rate(self) -> float:
        done = self.used + self.wasted
        return self.used / done if done else 0.0
