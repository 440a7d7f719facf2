"""Which events are bad input: one check shared by the online state and the offline pipeline."""

from __future__ import annotations

from collections.abc import Callable

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


def _request(ev: RequestArrived, nodes: int) -> str | None:
    if not (0 <= ev.node < nodes):
        return "unknown_node"
    if not (0 <= ev.ts_ms < INF and ev.input_tokens >= 0 and ev.output_tokens >= 0):
        return "bad_value"
    return None if ev.public_blocks >= 0 else "bad_value"


def _stored(ev: BlockStored, nodes: int) -> str | None:
    if not (0 <= ev.node < nodes):
        return "unknown_node"
    return None if 0 <= ev.ts_ms < INF and ev.block_size >= 0 else "bad_value"


def _node_event(ev: BlockRemoved | AllBlocksCleared, nodes: int) -> str | None:
    if not (0 <= ev.node < nodes):
        return "unknown_node"
    return None if 0 <= ev.ts_ms < INF else "bad_value"


def _telemetry(ev: TelemetrySample, nodes: int) -> str | None:
    if not (0 <= ev.node < nodes):
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
    if not (0 <= ev.source < nodes and 0 <= ev.target < nodes):
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


def unique_blocks(hashes: tuple[int, ...]) -> tuple[tuple[int, ...], int]:
    """``hashes`` with repeats removed (first kept) and how many were removed."""
    if len(set(hashes)) == len(hashes):
        return hashes, 0
    seen: set[int] = set()
    out = tuple(h for h in hashes if not (h in seen or seen.add(h)))
    return out, len(hashes) - len(out)
