"""The speculative replicas this sidecar placed, and whether requests used them (hit rate).

A replica is placed when an agent confirms a replication (its tenant and TTL are known then);
it is *used* when a request routed to its node contains its block before it expired or was
evicted, and *wasted* when it leaves unused. ``hit_rate = used / (used + wasted)`` over the
replicas whose fate is known. A replica is *adopted* when its node's engine stores the block
itself (a non-speculative ``BlockStored``): from then on the engine's own KV events say when
it leaves. At its expiry a replica that was not adopted, used or not, is reported gone (the
agent reclaims it by itself): a request routed to it that never reached the engine's cache
(aborted, failed over) must not leave it in the sidecar's view for ever.

A replica is *claimed* (:meth:`ReplicaTracker.claim`, active mode) by a request routed to its
node, of its tenant, before the engine stored the block: the sidecar asks the node's agent to
hold it for that request (``/v1/hold``), so that its TTL does not run out while the request
waits in the engine's queue. A claim ends when the engine stores the block
(:meth:`ReplicaTracker.on_stored` returns the claims to release on the agent) or at its
maximum hold; meanwhile the sweep keeps the replica, as its agent does. Several requests may
claim one replica (one claim each, by request id). A replica still on its way when the request
is routed (:meth:`ReplicaTracker.expect`) is claimed when it lands, for what is left of the
hold (:meth:`ReplicaTracker.landed` says which to hold then); copies of one block to one node
for two tenants are on their way side by side, each with its own tenant's claims. A restarted
sidecar takes back the claims its agents still hold (:meth:`ReplicaTracker.restore_claims`,
from their inventories). Thread-safe: the executor places and removes, the consumer thread
reports requests and stores, the HTTP handlers claim. Memory is bounded by the live replicas
(expired ones are swept), the copies in flight, and their claims (each at most
``claim_hold_s``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass


def _hold(claims: dict[str, float] | None, claim_id: str, until: float) -> dict[str, float]:
    """``claims`` with ``claim_id`` held until ``until`` (or later, if it was already)."""
    if claims is None:
        claims = {}
    claims[claim_id] = max(claims.get(claim_id, until), until)
    return claims


@dataclass(slots=True)
class Replica:
    tenant: str
    nbytes: int
    placed_at: float  # clock seconds
    expires_at: float
    used: bool = False
    adopted: bool = False  # the engine stored it: its own events report its removal
    claims: dict[str, float] | None = None  # request id -> end of its hold (clock seconds)

    def held(self, now: float) -> bool:
        return self.claims is not None and any(t > now for t in self.claims.values())

    def hold_for(self, claim_id: str, until: float) -> None:
        """Claimed by ``claim_id`` until ``until`` (or later, if it was already)."""
        self.claims = _hold(self.claims, claim_id, until)


@dataclass(slots=True)
class Coming:
    """A block of one tenant on its way to a node (``copies`` in flight), and the requests of
    that tenant routed there meanwhile that claim it when it lands."""

    copies: int = 1
    claims: dict[str, float] | None = None  # request id -> end of its hold (clock seconds)


Release = tuple[str, str, list[int]]  # (claim id, tenant, hashes) to release on an agent
Hold = tuple[str, list[int], float]  # (claim id, hashes, seconds left) to hold on an agent


class ReplicaTracker:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._live: dict[tuple[int, int], Replica] = {}  # (node, hash) -> replica
        # (node, hash) -> tenant -> its copies in flight
        self._coming: dict[tuple[int, int], dict[str, Coming]] = {}
        self.placed = 0
        self.used = 0
        self.wasted = 0
        self.placed_bytes = 0

    def __bool__(self) -> bool:
        """Whether any replica is live or on its way."""
        return bool(self._live or self._coming)

    def __len__(self) -> int:
        return len(self._live)

    def place(
        self, node: int, hashes: Iterable[int], tenant: str, nbytes: int, ttl_s: float
    ) -> None:
        now = self._clock()
        with self._lock:
            for h in hashes:
                old = self._live.get((node, h))
                if old is None:
                    self.placed += 1
                    self.placed_bytes += nbytes
                r = self._live[(node, h)] = Replica(tenant, nbytes, now, now + ttl_s)
                if old is not None and old.tenant == tenant:
                    r.claims = old.claims  # its agent keeps the holds on a renewed replica

    def on_request(self, node: int, hashes: Iterable[int]) -> None:
        with self._lock:
            live = self._live
            for h in hashes:
                r = live.get((node, h))
                if r is not None and not r.used:
                    r.used = True
                    self.used += 1

    def claim(
        self, node: int, tenant: str, hashes: Iterable[int], claim_id: str, hold_s: float
    ) -> list[int]:
        """A request (``claim_id``) of ``tenant`` was routed to ``node``: the live replicas of
        that tenant among ``hashes`` that the engine has not stored yet are claimed for it,
        for ``hold_s`` at most; returns their hashes (to hold on the agent). Those still on
        their way are claimed when they land (:meth:`landed`)."""
        now = self._clock()
        out = []
        with self._lock:
            live, coming = self._live, self._coming
            for h in hashes:
                r = live.get((node, h))
                if r is None or r.expires_at <= now:  # not there (yet)
                    c = coming.get((node, h), {}).get(tenant)
                    if c is not None:
                        c.claims = _hold(c.claims, claim_id, now + hold_s)
                    continue
                if r.adopted or r.tenant != tenant:
                    continue
                r.hold_for(claim_id, now + hold_s)
                out.append(h)
        return out

    def expect(self, node: int, tenant: str, hashes: Iterable[int]) -> None:
        """A copy of these blocks of ``tenant`` to ``node`` started; :meth:`landed` must
        follow (with the same tenant), however it ends."""
        with self._lock:
            coming = self._coming
            for h in hashes:
                c = coming.setdefault((node, h), {}).get(tenant)
                if c is None:
                    coming[(node, h)][tenant] = Coming()
                else:
                    c.copies += 1

    def landed(self, node: int, tenant: str, hashes: Iterable[int]) -> list[Hold]:
        """The copy of ``tenant``'s blocks that :meth:`expect` announced is over (the blocks
        that landed are placed): the requests of ``tenant`` routed to ``node`` meanwhile
        claim those that are live replicas of ``tenant`` now; returns what to hold on the
        agent, for what is left of each hold."""
        now = self._clock()
        out: dict[str, Hold] = {}
        with self._lock:
            for h in hashes:
                key = (node, h)
                tenants = self._coming.get(key, {})
                c = tenants.get(tenant)
                if c is None:
                    continue
                c.copies -= 1
                if c.copies <= 0:
                    del tenants[tenant]
                    if not tenants:
                        del self._coming[key]
                r = self._live.get(key)
                if not c.claims or r is None or r.adopted or r.tenant != tenant:
                    continue
                for claim_id, until in c.claims.items():
                    if until > now:
                        r.hold_for(claim_id, until)
                        out.setdefault(claim_id, (claim_id, [], until - now))[1].append(h)
                c.claims = None  # claimed: a second copy in flight adds nothing to hold
        return list(out.values())

    def restore_claims(
        self, node: int, tenant: str, block_hash: int, held: Iterable[tuple[str, float]]
    ) -> int:
        """Recovery: the agent of ``node`` holds this replica of ``tenant`` for these
        (claim id, seconds its hold has left): they are this sidecar's claims again, as if it
        had made them. How many were taken back."""
        now, n = self._clock(), 0
        with self._lock:
            r = self._live.get((node, block_hash))
            if r is None or r.adopted or r.tenant != tenant:
                return 0
            for claim_id, left_s in held:
                if left_s > 0:
                    r.hold_for(claim_id, now + left_s)
                    n += 1
        return n

    def on_stored(self, node: int, hashes: Iterable[int]) -> list[Release]:
        """The engine on ``node`` stored these blocks in its own cache; returns the claims
        on them to release on the node's agent (the engine read or computed the blocks)."""
        now = self._clock()
        out: dict[tuple[str, str], list[int]] = {}
        with self._lock:
            live = self._live
            for h in hashes:
                r = live.get((node, h))
                for c in self._coming.get((node, h), {}).values():
                    c.claims = None  # its requests need it no more
                if r is None:
                    continue
                r.adopted = True
                if r.claims:
                    for c, until in r.claims.items():
                        if until > now:
                            out.setdefault((c, r.tenant), []).append(h)
                    r.claims = None
        return [(c, tenant, hs) for (c, tenant), hs in out.items()]

    def remove(self, node: int, hashes: Iterable[int]) -> None:
        """The replicas left their node (evicted on command or reported gone)."""
        with self._lock:
            for h in hashes:
                self._drop((node, h))

    def left_agent(self, node: int, refs: Iterable[tuple[str, int]]) -> list[int]:
        """The agent of ``node`` removed these (tenant, hash) blocks without the sidecar's
        command (evicted to make room, expired, or evicted on a tenant token's command): forget
        the live replicas among them, and return the hashes of those the engine had not adopted
        (its own events say when an adopted one leaves)."""
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
        with self._lock:  # a claimed replica is kept as its agent keeps it: until released
            gone = [k for k, r in self._live.items() if r.expires_at <= now and not r.held(now)]
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
