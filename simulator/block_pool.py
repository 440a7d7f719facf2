"""One node's KV block pool: HBM with active / cached / speculative blocks, plus lower tiers.

All blocks of a run have the same size, so the pool counts blocks; bytes are
``count x block_bytes``. A block lives in exactly one place on a node:

- HBM ``active``: pinned by at least one request (refcount); never evicted.
- HBM ``speculative``: a replica placed ahead of use, counted against the node's speculative
  quota. While it is *held* (until its predicted first use, plus slack) it is a reservation
  carved from the cache: requests evict every cached block before a held replica, and a held
  replica still never displaces an active block. Past its hold it is the first thing evicted
  (before any cached block); past its TTL it is reclaimed.
- HBM ``cached``: evictable, least recently used first.
- ``dram`` / ``nvme``: lower tiers (exclusive); an HBM eviction demotes down the tiers.
- ``shared``: an optional NVMe-oF pool shared by every node (one LRU for the cluster); what
  falls out of a node's last local tier lands there, and any node can load it back.

``holders`` is the cluster-wide index block -> bitmask of nodes holding it in HBM, shared by
all pools so that a router can match a prefix on every node in one pass.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence

Moved = Callable[[int, str, str], None]
"""Callback ``(block, medium_from, medium_to)``; ``medium_to == ""`` means dropped."""


class BlockPool:
    __slots__ = (
        "_drop_after_source",
        "active",
        "bit",
        "cached",
        "capacity",
        "claimed",
        "dram",
        "dram_capacity",
        "evictions",
        "holders",
        "node_id",
        "nvme",
        "nvme_capacity",
        "on_move",
        "reserved",
        "shared",
        "shared_capacity",
        "sourcing",
        "spec",
        "spec_active_evictions",
        "spec_claimed_evicted",
        "spec_evicted",
        "spec_hits",
        "spec_lead_ms",
        "spec_quota",
        "spec_wasted",
    )

    def __init__(
        self,
        node_id: int,
        capacity: int,
        holders: dict[int, int],
        *,
        dram_capacity: int = 0,
        nvme_capacity: int = 0,
        spec_quota: int = 0,
        shared: OrderedDict[int, None] | None = None,
        shared_capacity: int = 0,
    ) -> None:
        self.node_id = node_id
        self.bit = 1 << node_id
        self.capacity = capacity
        self.holders = holders
        self.active: dict[int, int] = {}
        self.cached: OrderedDict[int, None] = OrderedDict()
        # block -> (ready, expiry, hold_until), oldest first
        self.spec: OrderedDict[int, tuple[float, float, float]] = OrderedDict()
        # replicas being read as a transfer's source -> transfers reading them: they stay
        # speculative (a copy is not a use) and are not evicted until the reads end
        self.sourcing: dict[int, int] = {}
        self._drop_after_source: set[int] = set()  # evicted by command while being read
        # replicas claimed by routed requests not yet started -> how many claim each (an entry
        # outlives the replica's leaving until its claimers release it; it holds only a
        # replica, i.e. while the block is in ``spec``)
        self.claimed: dict[int, int] = {}
        self.dram: OrderedDict[int, None] = OrderedDict()
        self.nvme: OrderedDict[int, None] = OrderedDict()
        self.dram_capacity = dram_capacity
        self.nvme_capacity = nvme_capacity
        self.spec_quota = spec_quota
        self.shared = shared if shared is not None else OrderedDict()
        self.shared_capacity = shared_capacity if shared is not None else 0
        self.reserved = 0  # anonymous active blocks (decode output)
        self.evictions = 0
        self.spec_hits = 0
        self.spec_wasted = 0
        self.spec_lead_ms = 0.0
        self.spec_active_evictions = 0  # invariant check: must stay 0
        self.spec_claimed_evicted = 0  # claimed replicas evicted for room (the last resort)
        # replicas evicted to make room before their TTL (the replicator drains it each tick,
        # as the live sidecar reads its agents' removals)
        self.spec_evicted: list[int] = []
        self.on_move: Moved | None = None

    # -- occupancy ---------------------------------------------------------------------------
    @property
    def used(self) -> int:
        return len(self.active) + len(self.cached) + len(self.spec) + self.reserved

    @property
    def free(self) -> int:
        return self.capacity - self.used

    @property
    def evictable(self) -> int:
        return len(self.cached) + len(self.spec) - self._spec_sourcing()

    def _spec_sourcing(self) -> int:
        """Replicas that cannot be evicted now: being read as a transfer's source."""
        spec = self.spec
        return sum(1 for b in self.sourcing if b in spec) if self.sourcing else 0

    @property
    def in_use(self) -> int:
        """Blocks that cannot be evicted (vLLM's KV usage)."""
        return len(self.active) + self.reserved

    def in_hbm(self, block: int) -> bool:
        return block in self.active or block in self.cached or block in self.spec

    def lower_prefix(self, blocks: Sequence[int], start: int) -> tuple[int, int, int]:
        """From ``start``, how many consecutive blocks sit in DRAM, then NVMe, then the
        shared pool."""
        i, n = start, len(blocks)
        dram, nvme, shared = self.dram, self.nvme, self.shared
        while i < n and blocks[i] in dram:
            i += 1
        d = i - start
        while i < n and (blocks[i] in nvme or blocks[i] in dram):
            i += 1
        v = i - start - d
        while i < n and (blocks[i] in shared or blocks[i] in nvme or blocks[i] in dram):
            i += 1
        return d, v, i - start - d - v

    # -- eviction ----------------------------------------------------------------------------
    def _drop_hbm(self, block: int) -> None:
        h = self.holders[block] & ~self.bit
        if h:
            self.holders[block] = h
        else:
            del self.holders[block]
        self.evictions += 1
        if self._demotes():
            self._demote(block)

    def _demotes(self) -> bool:
        return bool(
            self.dram_capacity
            or self.nvme_capacity
            or self.shared_capacity
            or self.on_move is not None
        )

    def _demote(self, block: int) -> None:
        """An HBM eviction moves the block to DRAM, else NVMe, else drops it."""
        if self.dram_capacity > 0:
            if len(self.dram) >= self.dram_capacity:
                victim, _ = self.dram.popitem(last=False)
                self._store_nvme(victim, "CPU")
            self.dram[block] = None
            self._moved(block, "GPU", "CPU")
        else:
            self._store_nvme(block, "GPU")

    def _store_nvme(self, block: int, medium_from: str) -> None:
        if self.nvme_capacity > 0:
            if len(self.nvme) >= self.nvme_capacity:
                victim, _ = self.nvme.popitem(last=False)
                self._to_shared(victim, "DISK")
            self.nvme[block] = None
            self._moved(block, medium_from, "DISK")
        else:
            self._to_shared(block, medium_from)

    def _to_shared(self, block: int, medium_from: str) -> None:
        shared = self.shared
        if self.shared_capacity <= 0:
            self._moved(block, medium_from, "")
            return
        if block in shared:
            shared.move_to_end(block)
        else:
            if len(shared) >= self.shared_capacity:
                shared.popitem(last=False)
            shared[block] = None
        self._moved(block, medium_from, "REMOTE")

    def _moved(self, block: int, medium_from: str, medium_to: str) -> None:
        if self.on_move is not None:
            self.on_move(block, medium_from, medium_to)

    def make_room(self, n: int, now: float) -> bool:
        """Evict until ``n`` blocks are free: speculative replicas past their hold first, then
        LRU cached blocks, then held replicas (a request always wins over a prediction)."""
        cached, spec = self.cached, self.spec
        deficit = n - (self.capacity - len(self.active) - len(cached) - len(spec) - self.reserved)
        if deficit <= 0:
            return True
        if deficit > self.evictable:
            return False
        sourcing, claimed = self.sourcing, self.claimed
        if spec:
            released = [b for b, (_, _, hold) in spec.items()
                        if hold <= now and b not in sourcing and b not in claimed]  # fmt: skip
            del released[deficit:]
            for b in released:
                del spec[b]
                self.spec_wasted += 1
                self._drop_hbm(b)
            self.spec_evicted += released
            deficit -= len(released)
        holders, mask = self.holders, ~self.bit
        demote = self._demotes()
        for _ in range(deficit):
            if cached:
                block, _ = cached.popitem(last=False)
            else:  # held replicas, then claimed ones (the last resort)
                block = next((b for b in spec if b not in sourcing and b not in claimed), None)
                if block is None:
                    block = next(b for b in spec if b not in sourcing)
                    self.spec_claimed_evicted += 1
                del spec[block]
                self.spec_wasted += 1
                self.spec_evicted.append(block)
            h = holders[block] & mask
            if h:
                holders[block] = h
            else:
                del holders[block]
            if demote:
                self._demote(block)
        self.evictions += max(deficit, 0)
        return True

    # -- request path ------------------------------------------------------------------------
    def pin(self, blocks: Sequence[int], now: float) -> None:
        """Pin resident blocks for a request (they become active)."""
        active, cached, spec = self.active, self.cached, self.spec
        for b in blocks:
            r = active.get(b)
            if r is not None:
                active[b] = r + 1
            elif b in cached:
                del cached[b]
                active[b] = 1
            else:
                ready, _, _ = spec.pop(b)
                self.spec_hits += 1
                self.spec_lead_ms += now - ready
                active[b] = 1 + self._unsource(b)

    def add_active(self, blocks: Sequence[int]) -> None:
        """Insert new blocks pinned (room must have been made); resident ones get a ref."""
        active, cached, spec, holders, bit = (
            self.active,
            self.cached,
            self.spec,
            self.holders,
            self.bit,
        )
        tiers = self.dram_capacity or self.nvme_capacity
        for b in blocks:
            r = active.get(b)
            if r is not None:
                active[b] = r + 1
                continue
            if b in cached:
                del cached[b]
            elif b in spec:  # the request computed or loaded it itself: the replica saved nothing
                del spec[b]
                self.spec_wasted += 1
                active[b] = 1 + self._unsource(b)
                continue
            else:
                holders[b] = holders.get(b, 0) | bit
                if tiers:
                    self.dram.pop(b, None)
                    self.nvme.pop(b, None)
            active[b] = 1

    def release(self, blocks: Sequence[int]) -> None:
        """Unpin; a block whose last pin goes becomes the most recently used cached block."""
        active, cached = self.active, self.cached
        for b in blocks:
            r = active[b] - 1
            if r:
                active[b] = r
            else:
                del active[b]
                cached[b] = None

    def pin_source(self, blocks: Sequence[int]) -> None:
        """Hold resident blocks while a transfer reads them. A replica stays speculative (being
        copied is not being used; its hit, TTL and quota are unchanged) but is not evicted
        until :meth:`release_source`; other blocks are pinned as by a request, uncounted."""
        active, cached, spec, sourcing = self.active, self.cached, self.spec, self.sourcing
        for b in blocks:
            if b in spec:
                sourcing[b] = sourcing.get(b, 0) + 1
                continue
            r = active.get(b)
            if r is not None:
                active[b] = r + 1
            else:
                del cached[b]
                active[b] = 1

    def _unsource(self, block: int) -> int:
        """A replica being read became active: its transfers' holds become plain pins (each
        released by :meth:`release_source`); how many."""
        self._drop_after_source.discard(block)
        return self.sourcing.pop(block, 0)

    def release_source(self, blocks: Sequence[int]) -> None:
        """The transfer that :meth:`pin_source` held ``blocks`` for is over."""
        sourcing, later = self.sourcing, self._drop_after_source
        for b in blocks:
            r = sourcing.get(b)
            if r is None:
                self.release([b])
                continue
            if r > 1:
                sourcing[b] = r - 1
                continue
            del sourcing[b]
            if b in later:
                later.discard(b)
                self.drop_speculative([b])

    def claim(self, blocks: Sequence[int]) -> list[int]:
        """A request routed here counts these resident blocks as its cached prefix: the
        replicas among them are held for it until :meth:`unclaim`; returns those replicas
        (what the request must release)."""
        spec, claimed = self.spec, self.claimed
        if not spec:
            return []
        mine = [b for b in blocks if b in spec]
        for b in mine:
            claimed[b] = claimed.get(b, 0) + 1
        return mine

    def unclaim(self, blocks: Sequence[int]) -> None:
        """The request that :meth:`claim` ed ``blocks`` started: its claims end. A replica it
        read is active by now; one it did not read (a gap before it), no longer claimed by
        anyone, is a plain replica again and expires by its TTL (at once if that passed)."""
        claimed = self.claimed
        for b in blocks:
            r = claimed[b] - 1
            if r:
                claimed[b] = r
            else:
                del claimed[b]

    def take_lower(self, blocks: Sequence[int]) -> None:
        """Remove blocks from the node's lower tiers (they are being promoted into HBM); the
        shared pool keeps its copy."""
        for b in blocks:
            if b in self.dram:
                del self.dram[b]
            else:
                self.nvme.pop(b, None)

    # -- speculative path --------------------------------------------------------------------
    def add_speculative(
        self,
        blocks: Sequence[int],
        now: float,
        ttl_ms: float,
        hold_until: float | None = None,
        *,
        promoted: bool = False,
    ) -> list[int]:
        """Place replicas that are not yet resident; returns the blocks placed (in order; a
        block already resident is skipped, the quota or a full HBM stops the placement).
        ``promoted``: the blocks come from this node's lower tiers, each leaving its tier as
        it is placed; one no longer there (pushed out by the room made) stops the placement.

        Never displaces an active block; stops at the speculative quota; evicts expired
        replicas, then LRU cached blocks, to make room. ``hold_until``: until when the replica
        is held against eviction by requests (default: not held; never past its TTL).
        """
        expiry = now + ttl_ms
        hold = min(hold_until, expiry) if hold_until is not None else now
        self.expire(now)
        placed: list[int] = []
        for b in blocks:
            if self.in_hbm(b):
                continue
            if len(self.spec) >= self.spec_quota:
                break
            if self.free < 1:
                if not self.cached:
                    break
                victim, _ = self.cached.popitem(last=False)
                if victim in self.active:  # would mean a speculative write hit a pinned block
                    self.spec_active_evictions += 1
                self._drop_hbm(victim)
            if promoted and not (b in self.dram or b in self.nvme or b in self.shared):
                break
            self.spec[b] = (now, expiry, hold)
            self.holders[b] = self.holders.get(b, 0) | self.bit
            self.dram.pop(b, None)
            self.nvme.pop(b, None)
            placed.append(b)
        return placed

    def expire(self, now: float) -> int:
        """Reclaim speculative replicas whose TTL has passed."""
        # a replica being read expires once the read ends, a claimed one once its claims end
        sourcing, claimed = self.sourcing, self.claimed
        expired = [b for b, (_, exp, _) in self.spec.items()
                   if exp <= now and b not in sourcing and b not in claimed]  # fmt: skip
        for b in expired:
            del self.spec[b]
            self.spec_wasted += 1
            self._drop_hbm(b)
        return len(expired)

    def drop_speculative(self, blocks: Sequence[int]) -> int:
        """Drop replicas on command; a claimed one is kept (its request is being served: it
        expires by its TTL once released), one being read is dropped once the read ends."""
        n = 0
        for b in blocks:
            if b in self.claimed:
                continue
            if b in self.sourcing and b in self.spec:  # dropped once the transfer has read it
                self._drop_after_source.add(b)
            elif b in self.spec:
                del self.spec[b]
                self.spec_wasted += 1
                self._drop_hbm(b)
                n += 1
        return n
