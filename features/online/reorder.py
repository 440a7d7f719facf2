"""Put a slightly shuffled event stream back in time order, or count what is too late.

An event older than the newest one seen by more than ``tolerance_ms`` is dropped and counted
(``out_of_order_dropped``); one within the tolerance is held and applied in time order
(``reordered``). Events are released once the newest time seen is ``tolerance_ms`` past them, so
with the default tolerance of 0 an in-order stream passes straight through. Equal times keep
their arrival order. :meth:`commit` moves the clock to a query time: later events older than it
can no longer be applied in order and are dropped.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

from kvcast.features.counters import BadInputCounters


class ReorderBuffer:
    __slots__ = ("_apply", "_bad", "_heap", "_newest", "_released", "_seq", "_tol")

    def __init__(
        self, apply: Callable[[Any], None], tolerance_ms: float, bad: BadInputCounters
    ) -> None:
        self._apply = apply
        self._tol = tolerance_ms
        self._bad = bad
        self._heap: list[tuple[float, int, Any]] = []
        self._newest = float("-inf")  # newest time accepted
        self._released = float("-inf")  # time of the last event applied (or committed)
        self._seq = 0

    def push(self, ts: float, ev: Any) -> None:
        if not self._heap and ts >= self._newest:  # the in-order fast path
            self._newest = ts
            if self._tol == 0:
                self._released = ts
                self._apply(ev)
                return
        elif ts < self._released or self._newest - ts > self._tol:
            self._bad.counts["out_of_order_dropped"] += 1
            return
        elif ts < self._newest:
            self._bad.counts["reordered"] += 1
        else:
            self._newest = ts
        self._seq += 1
        heapq.heappush(self._heap, (ts, self._seq, ev))
        self._release(self._newest - self._tol)

    def _release(self, upto: float) -> None:
        heap = self._heap
        while heap and heap[0][0] <= upto:
            ts, _, ev = heapq.heappop(heap)
            self._released = ts
            self._apply(ev)

    def commit(self, now: float) -> None:
        """Apply every held event up to ``now`` and refuse anything older from here on."""
        self._release(now)
        self._released = max(self._released, now)
        self._newest = max(self._newest, now)

    def flush(self) -> None:
        """Apply everything still held (end of stream)."""
        self._release(float("inf"))

    def __len__(self) -> int:
        return len(self._heap)
