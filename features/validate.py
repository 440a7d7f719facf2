"""Which events are bad input: one check shared by the online state and the offline pipeline."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from kvcast.features.events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    Event,
    ReplicationDone,
    RequestArrived,
    TelemetrySample,
)

INF = float("inf")


def _node(x: int, nodes: int) -> bool:
    """A node id: an integer (or an integral float) in 0..nodes-1."""
    return 0 <= x < nodes and (type(x) is int or x == int(x))


def _request(ev: RequestArrived, nodes: int) -> str | None:
    if not _node(ev.node, nodes):
        return "unknown_node"
    if not (0 <= ev.ts_ms < INF and ev.input_tokens >= 0 and ev.output_tokens >= 0):
        return "bad_value"
    return None if ev.public_blocks >= 0 else "bad_value"


def _stored(ev: BlockStored, nodes: int) -> str | None:
    if not _node(ev.node, nodes):
        return "unknown_node"
    return None if 0 <= ev.ts_ms < INF and ev.block_size >= 0 else "bad_value"


def _node_event(ev: BlockRemoved | AllBlocksCleared, nodes: int) -> str | None:
    if not _node(ev.node, nodes):
        return "unknown_node"
    return None if 0 <= ev.ts_ms < INF else "bad_value"


def _telemetry(ev: TelemetrySample, nodes: int) -> str | None:
    if not _node(ev.node, nodes):
        return "unknown_node"
    ok = (
        0 <= ev.ts_ms < INF
        and ev.queue_len >= 0
        and ev.queued_prefill_tokens >= 0
        and ev.running_decodes >= 0
        and ev.active_tokens >= 0
        and ev.capacity_bytes > 0
        and ev.used_bytes >= 0
        and ev.cached_bytes >= 0
        and ev.speculative_bytes >= 0
        and ev.evictions_total >= 0
        and 0 <= ev.est_queue_ms < INF
        and ev.transfers_in_flight >= 0
        and ev.pending_replication_bytes >= 0
    )
    return None if ok else "bad_value"


def _replication(ev: ReplicationDone, nodes: int) -> str | None:
    if not (_node(ev.source, nodes) and _node(ev.target, nodes)):
        return "unknown_node"
    return None if 0 <= ev.ts_ms < INF else "bad_value"


CHECKS: dict[type, Callable[..., str | None]] = {
    RequestArrived: _request,
    BlockStored: _stored,
    BlockRemoved: _node_event,
    AllBlocksCleared: _node_event,
    TelemetrySample: _telemetry,
    ReplicationDone: _replication,
}


def check(ev: Event | object, nodes: int) -> str | None:
    """The bad-input counter name for ``ev``, or None when it is fine."""
    fn = CHECKS.get(type(ev))
    if fn is None:
        return "unknown_event"
    try:
        return fn(ev, nodes)
    except TypeError:  # a None or a string where a number belongs
        return "bad_value"


U64 = (1 << 64) - 1
_NODE_FIELDS = ("node", "source", "target")


def canonical(ev: Event) -> Event:
    """``ev`` (already checked) as the offline pipeline reads it: nodes as ints (an integral
    float such as ``1.0`` is node 1) and block hashes as u64 (a negative id wraps, as numpy's
    uint64 cast does). The same object when nothing changes (the common case, checked first
    per event type: this runs on every ingested event)."""
    return _CANON[type(ev)](ev)


def _canon_blocks(ev: RequestArrived | BlockRemoved) -> Event:
    h = ev.block_hashes
    return ev if type(ev.node) is int and (not h or min(h) >= 0) else _canonical(ev)


def _canon_stored(ev: BlockStored) -> Event:
    h, p = ev.block_hashes, ev.parent_block_hash
    if type(ev.node) is int and (not h or min(h) >= 0) and (p is None or p >= 0):
        return ev
    return _canonical(ev)


def _canon_node(ev: AllBlocksCleared | TelemetrySample) -> Event:
    return ev if type(ev.node) is int else _canonical(ev)


def _canonical(ev: Event) -> Event:
    changes: dict[str, object] = {}
    for f in _NODE_FIELDS:
        v = getattr(ev, f, None)
        if v is not None and type(v) is not int:
            changes[f] = int(v)
    hashes = getattr(ev, "block_hashes", None)
    if hashes and min(hashes) < 0:
        changes["block_hashes"] = tuple(h & U64 for h in hashes)
    parent = getattr(ev, "parent_block_hash", None)
    if parent is not None and parent < 0:
        changes["parent_block_hash"] = parent & U64
    return dataclasses.replace(ev, **changes) if changes else ev  # type: ignore[type-var]


_CANON: dict[type, Callable[..., Event]] = {
    RequestArrived: _canon_blocks,
    BlockRemoved: _canon_blocks,
    BlockStored: _canon_stored,
    AllBlocksCleared: _canon_node,
    TelemetrySample: _canon_node,
    ReplicationDone: _canonical,
}


def unique_blocks(hashes: Sequence[int]) -> tuple[tuple[int, ...], int]:
    """``hashes`` as a tuple with repeats removed (first kept) and how many were removed (a
    list's blocks become a run's as a tuple: runs are compared with chains as tuples)."""
    hashes = tuple(hashes)  # (a tuple is itself)
    if len(set(hashes)) == len(hashes):
        return hashes, 0
    seen: set[int] = set()
    out = tuple(h for h in hashes if not (h in seen or seen.add(h)))
    return out, len(hashes) - len(out)


# The same rules over whole columns (the offline pipeline checks one event type at a time):
# node fields must lie in 0..nodes-1 (else unknown_node), then each value field its rule.
TIME, NONNEG, POSITIVE = "0 <= x < inf", "x >= 0", "x > 0"
NODE_FIELDS: dict[type, tuple[str, ...]] = {
    RequestArrived: ("node",),
    BlockStored: ("node",),
    BlockRemoved: ("node",),
    AllBlocksCleared: ("node",),
    TelemetrySample: ("node",),
    ReplicationDone: ("source", "target"),
}
_COUNTS = ("queue_len", "queued_prefill_tokens", "running_decodes", "active_tokens")
_BYTES = ("used_bytes", "cached_bytes", "speculative_bytes", "evictions_total")
VALUE_FIELDS: dict[type, tuple[tuple[str, str], ...]] = {
    RequestArrived: (
        ("ts_ms", TIME),
        ("input_tokens", NONNEG),
        ("output_tokens", NONNEG),
        ("public_blocks", NONNEG),
    ),
    BlockStored: (("ts_ms", TIME), ("block_size", NONNEG)),
    BlockRemoved: (("ts_ms", TIME),),
    AllBlocksCleared: (("ts_ms", TIME),),
    TelemetrySample: (
        ("ts_ms", TIME),
        *((f, NONNEG) for f in _COUNTS),
        ("capacity_bytes", POSITIVE),
        *((f, NONNEG) for f in _BYTES),
        ("est_queue_ms", TIME),
        ("transfers_in_flight", NONNEG),
        ("pending_replication_bytes", NONNEG),
    ),
    ReplicationDone: (("ts_ms", TIME),),
}
REASONS: tuple[str | None, ...] = (None, "unknown_node", "bad_value")  # codes 0, 1, 2


def numeric(values: list) -> np.ndarray | None:
    """``values`` as a 1-D array of plain numbers (bool, int or float), else None."""
    try:
        arr = np.array(values)
    except (ValueError, TypeError, OverflowError):
        return None
    return arr if arr.ndim == 1 and arr.dtype.kind in "biuf" else None


def check_columns(kind: type, cols: Mapping[str, np.ndarray], nodes: int) -> np.ndarray:
    """:func:`check` over the events of one type at once, given their fields as numeric
    arrays (see :func:`numeric`): per event the index of its reason in :data:`REASONS`."""
    node_ok = np.ones(len(cols["ts_ms"]), dtype=bool)
    for f in NODE_FIELDS[kind]:
        node_ok &= (cols[f] >= 0) & (cols[f] < nodes) & (cols[f] == np.floor(cols[f]))
    ok = np.ones(len(node_ok), dtype=bool)
    for f, rule in VALUE_FIELDS[kind]:
        a = cols[f]
        ok &= (a > 0) if rule == POSITIVE else (a >= 0) if rule == NONNEG else (a >= 0) & (a < INF)
    return np.where(node_ok, np.where(ok, 0, 2), 1).astype(np.int8)
