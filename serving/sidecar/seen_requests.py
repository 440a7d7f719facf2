"""The request ids the router has posted lately, so that a retried ``POST /v1/requests`` (the
router timed out waiting for the answer, and sends the batch again) counts each arrival once.

The API remembers (tenant, request id): a retry repeats both, and an arrival of one tenant
never makes another tenant's arrival of the same id a repeat (a tenant token cannot silence
another tenant's requests). Bounded: the ``capacity`` most recent ids are remembered, the
oldest forgotten first; a retry comes seconds after the first try, long before its id is
pushed out.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable


class SeenRequests:
    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._ids: OrderedDict[Hashable, None] = OrderedDict()
        self._lock = threading.Lock()
        self.duplicates = 0  # arrivals refused as already seen

    def first_time(self, request_id: Hashable) -> bool:
        """Whether ``request_id`` is new (and now remembered); a repeat is counted."""
        with self._lock:
            if request_id in self._ids:
                self.duplicates += 1
                return False
            self._ids[request_id] = None
            if len(self._ids) > self.capacity:
                self._ids.popitem(last=False)
            return True
