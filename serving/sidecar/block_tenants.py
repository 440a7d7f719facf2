"""Which tenants' arrivals named a block: what a tenant token may look up.

``GET /v1/blocks/{hash}`` shows a tenant token a block only when an arrival of one of its
tenants named it (:mod:`.tenant_scope`). For that alone the sidecar keeps, per block that
arrivals named, the exact names of the tenants that named it, among the tenants some tenant
token speaks for (no other name is ever asked about): a bitmask over those names. Never the
feature model's tenant codes: those are 32-bit hashes of the names, and two names may share
one.

Bounded like the feature state: at most ``capacity`` blocks (the config's
``max_tracked_blocks``; None: the horizon alone), the least recently named forgotten first,
and a block no arrival named for ``horizon_s`` (the features' ``horizon_ms``) is forgotten
too. A block's tenants are kept as long as the block is. A forgotten block is a 404 to a
tenant token until one of its tenants names it again. Thread-safe.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable

from kvcast.features.events import RequestArrived


class BlockTenants:
    def __init__(
        self, tenants: Iterable[str], capacity: int | None, horizon_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:  # fmt: skip
        if capacity is not None and capacity < 1:
            raise ValueError(f"capacity must be >= 1 or None, got {capacity}")
        self.capacity, self.horizon_s, self._clock = capacity, horizon_s, clock
        self._bit = {t: 1 << i for i, t in enumerate(sorted(set(tenants)))}
        self._named: OrderedDict[int, tuple[int, float]] = OrderedDict()  # -> (mask, named at)
        self._lock = threading.Lock()
        self.forgotten = 0  # blocks dropped for the cap or the horizon

    def __len__(self) -> int:
        return len(self._named)

    def note(self, arrivals: Iterable[RequestArrived]) -> None:
        """These arrivals named their blocks for their tenants (those of no tenant token's
        are not kept)."""
        now = self._clock()
        with self._lock:
            named = self._named
            for ev in arrivals:
                bit = self._bit.get(ev.tenant)
                if bit is None:
                    continue
                for h in ev.block_hashes:
                    old = named.pop(h, None)
                    named[h] = (bit if old is None else old[0] | bit, now)
            self._trim(now)

    def named_by(self, block: int, tenants: Iterable[str]) -> bool:
        """Whether an arrival of one of ``tenants`` named ``block`` and it is not forgotten."""
        mask = 0
        for t in tenants:
            mask |= self._bit.get(t, 0)
        now = self._clock()
        with self._lock:
            entry = self._named.get(block)
        return entry is not None and bool(entry[0] & mask) and now - entry[1] <= self.horizon_s

    def _trim(self, now: float) -> None:
        """Forget past the cap, then past the horizon, least recently named first; the caller
        holds the lock."""
        named, cap, oldest = self._named, self.capacity, now - self.horizon_s
        while named and (
            (cap is not None and len(named) > cap) or next(iter(named.values()))[1] < oldest
        ):
            named.popitem(last=False)
            self.forgotten += 1
