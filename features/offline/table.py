"""A whole event stream as columns: what the vectorised pipeline reads.

Built by :func:`kvcast.features.offline.ingest.event_table`; ``seq`` is an event's index in
the order ``FeatureState`` applies the events in.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kvcast.features.counters import BadInputCounters

TELEMETRY_FIELDS = (
    "queue_len",
    "queued_prefill_tokens",
    "est_queue_ms",
    "transfers_in_flight",
    "capacity_bytes",
    "used_bytes",
    "cached_bytes",
    "speculative_bytes",
    "pending_replication_bytes",
    "evictions_total",
)


def u64_hashes(values: list[int]) -> np.ndarray:
    """Block hashes as uint64 (negative Python ints wrap, as a u64 hash would)."""
    try:
        return np.array(values, dtype=np.int64).view(np.uint64)
    except OverflowError:
        return np.array([v & 0xFFFFFFFFFFFFFFFF for v in values], dtype=np.uint64)


@dataclass
class EventTable:
    # requests, one row each, in seq order
    r_ts: np.ndarray
    r_seq: np.ndarray
    r_node: np.ndarray
    r_input: np.ndarray
    r_public: np.ndarray
    r_tenant: np.ndarray  # tenant_code
    r_session: list[str | None]
    # block accesses: (request, position, hash), request order then position
    a_req: np.ndarray
    a_pos: np.ndarray
    a_hash: np.ndarray
    # residency changes, one row per block: +1 store / -1 remove; tier 0 GPU, 1 lower
    s_seq: np.ndarray
    s_ts: np.ndarray
    s_node: np.ndarray
    s_kind: np.ndarray
    s_tier: np.ndarray
    s_hash: np.ndarray
    c_seq: np.ndarray  # AllBlocksCleared
    c_ts: np.ndarray
    c_node: np.ndarray
    telemetry: dict[str, np.ndarray]  # ts, seq, node and TELEMETRY_FIELDS
    bad: BadInputCounters = field(default_factory=BadInputCounters)
    block_events: int = 0  # block hashes named by all accepted events

    def _times(self) -> list[np.ndarray]:
        return [a for a in (self.r_ts, self.s_ts, self.c_ts, self.telemetry["ts"]) if len(a)]

    @property
    def last_ts(self) -> float:
        return float(max(a[-1] for a in self._times())) if self._times() else 0.0

    @property
    def first_ts(self) -> float:
        return float(min(a[0] for a in self._times())) if self._times() else 0.0
