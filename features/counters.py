"""Named counters for bad input: counted, never raised from the hot path, never a feature value.

A bad event is dropped whole (the only exceptions, which keep the event, say so below), so no
feature ever sees a NaN, a negative size or an unknown node that came from the input.
"""

from __future__ import annotations

BAD_INPUT: dict[str, str] = {
    "unknown_event": "an object that is not one of the event types (dropped)",
    "unknown_node": "a node id outside 0..nodes-1 (event dropped)",
    "bad_value": "a NaN, infinite or negative time, size or count (event dropped)",
    "out_of_order_dropped": "older than the newest event by more than the tolerance (dropped)",
    "reordered": "out of order within the tolerance (kept, applied in time order)",
    "removed_not_resident": "BlockRemoved for a block the node did not hold (no-op)",
    "duplicate_block_in_request": "a hash repeated inside one request (kept once)",
    "telemetry_counter_reset": "evictions_total went down (read as a counter reset)",
}


class BadInputCounters:
    """A fixed set of named counters; unknown names are a programming error."""

    __slots__ = ("counts",)

    def __init__(self) -> None:
        self.counts: dict[str, int] = dict.fromkeys(BAD_INPUT, 0)

    def inc(self, name: str, n: int = 1) -> None:
        if name not in self.counts:
            raise KeyError(f"unknown counter {name!r}; valid: {sorted(BAD_INPUT)}")
        self.counts[name] += n

    def as_dict(self) -> dict[str, int]:
        return dict(self.counts)

    def total(self) -> int:
        return sum(self.counts.values())
