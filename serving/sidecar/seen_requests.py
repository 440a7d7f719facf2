"""The request ids the router has posted lately, so that a retried ``POST /v1/requests`` (the
router timed out waiting for the answer, and sends the batch again) counts each arrival once.

The API remembers (tenant, request id): a retry repeats both, and an arrival of one tenant
never makes another tenant's arrival of the same id a repeat (a tenant token cannot silence
another tenant's requests). Bounded, per poster: the ids the shared token posted (``owner``
None) are remembered among its ``capacity`` most recent, those each tenant token posted
(``owner``: its entry's position) among that token's own ``owner_capacity`` most recent; the
oldest of each are forgotten first. So a tenant token posting ever new ids pushes out only
its own, never the router's or another token's. An id is a repeat when any poster's memory
holds it. A retry comes seconds after the first try, long before its id is pushed out.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterable


class SeenRequests:
    def __init__(self, capacity: int, owner_capacity: int | None = None) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        if owner_capacity is not None and owner_capacity < 1:
            raise ValueError(f"owner_capacity must be >= 1, got {owner_capacity}")
        self.capacity = capacity
        self.owner_capacity = capacity if owner_capacity is None else owner_capacity
        self._ids: dict[int | None, OrderedDict[Hashable, None]] = {None: OrderedDict()}
        self._lock = threading.Lock()
        self.duplicates = 0  # arrivals refused as already seen

    def unseen(self, request_ids: Iterable[Hashable]) -> int:
        """How many distinct ``request_ids`` :meth:`first_time` would now take as new (read
        only: nothing remembered, nothing counted)."""
        with self._lock:
            return len({r for r in request_ids if not self._known(r)})

    def first_time(self, request_id: Hashable, owner: int | None = None) -> bool:
        """Whether ``request_id`` is new (and now remembered among ``owner``'s); a repeat is
        counted."""
        with self._lock:
            if self._known(request_id):
                self.duplicates += 1
                return False
            ids = self._ids.setdefault(owner, OrderedDict())
            ids[request_id] = None
            if len(ids) > (self.capacity if owner is None else self.owner_capacity):
                ids.popitem(last=False)
            return True

    def _known(self, request_id: Hashable) -> bool:
        """Whether any poster's memory holds ``request_id`` (under the lock)."""
        return any(request_id in ids for ids in self._ids.values())
