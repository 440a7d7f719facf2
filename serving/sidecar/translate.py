"""From HTTP bodies to the event stream, and from decisions back to HTTP bodies.

A node given by name or id that is not in the config, or a block hash that is not one, is a
422 naming the field (``body.requests.3.node``), like any other validation error.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from fastapi.exceptions import RequestValidationError

from kvcast.features.events import AllBlocksCleared, BlockRemoved, BlockStored, RequestArrived
from kvcast.serving.http.block_hash import hash_from_header
from kvcast.serving.kv_events import KvEvent, hash_from_wire
from kvcast.serving.messages import BlockHash
from kvcast.serving.sidecar.api_models import (
    ArrivalBatch,
    CostTerms,
    DecisionOut,
    KvEventBatch,
    RemovedEvent,
    StoredEvent,
)
from kvcast.serving.sidecar.decisions import Decision


def invalid(loc: Sequence[str | int], msg: str) -> RequestValidationError:
    return RequestValidationError([{"loc": tuple(loc), "msg": msg, "type": "value_error"}])


MAX_AHEAD_MS = 60_000.0  # an event stamped further ahead of the sidecar's clock is refused


def stamp(ts_ms: float | None, now_ms: float, loc: Sequence[str | int]) -> float:
    """An event's time: ``now_ms`` when not given; a time more than :data:`MAX_AHEAD_MS` ahead
    of the sidecar's clock is a 422 (one such event would re-stamp every later one into the
    future: the consumer keeps the stream in order)."""
    if ts_ms is None:
        return now_ms
    if ts_ms > now_ms + MAX_AHEAD_MS:
        ahead = (ts_ms - now_ms) / 1e3
        msg = f"ts_ms {ts_ms:.0f} is {ahead:,.0f} s ahead of the sidecar's clock"
        if ts_ms >= 1e21:  # past nanoseconds (1.8e18): no unit, no skew; say it short
            msg = f"ts_ms {ts_ms:.6g} is {ahead:.3g} s ahead of the sidecar's clock"
        raise invalid(loc, msg + ": unix milliseconds expected; check the sender's clock")
    return ts_ms


def node_index(ref: int | str, names: Sequence[str], loc: Sequence[str | int]) -> int:
    if isinstance(ref, int) and 0 <= ref < len(names):
        return ref
    if isinstance(ref, str) and ref in names:
        return names.index(ref)
    raise invalid(loc, f"unknown node {ref!r}; nodes: 0..{len(names) - 1} or {list(names)}")


def u64(value: BlockHash) -> int:
    """A block's u64 id (bytes hashes: big-endian, low 64 bits, as vLLM does)."""
    return value if isinstance(value, int) else hash_from_wire(value)


def block_hash_param(text: str) -> int:
    """A path's block hash, read as :func:`hash_from_header` reads it, as its u64 id.
    ValueError when it is neither a decimal u64 nor hex bytes."""
    return u64(hash_from_header(text))


def arrival_events(
    batch: ArrivalBatch, names: Sequence[str], now_ms: float, *, ahead_ok: bool = True
) -> tuple[list[RequestArrived], list[tuple[int, int, float]]]:
    """The arrivals as events, and the (node, queue depth, ts_ms) reports they carried. Not
    ``ahead_ok`` (a tenant token's arrivals), a ``ts_ms`` later than ``now_ms`` is taken as
    ``now_ms``: the consumer keeps the stream in order, so one arrival stamped ahead would move
    every tenant's later events ahead with it."""
    events, queues = [], []
    for i, a in enumerate(batch.requests):
        node = node_index(a.node, names, ("body", "requests", i, "node"))
        ts_ms = stamp(a.ts_ms, now_ms, ("body", "requests", i, "ts_ms"))
        if not ahead_ok:
            ts_ms = min(ts_ms, now_ms)
        events.append(RequestArrived(
            ts_ms=ts_ms,
            request_id=a.request_id, node=node,
            tenant=a.tenant, session=a.session, input_tokens=a.input_tokens,
            output_tokens=a.output_tokens, block_hashes=tuple(u64(h) for h in a.block_hashes),
            public_blocks=a.public_blocks,
        ))  # fmt: skip
        if a.queue_depth is not None:
            queues.append((node, a.queue_depth, ts_ms))
    return events, queues


def kv_events(batch: KvEventBatch, names: Sequence[str], now_ms: float) -> list[KvEvent]:
    node = node_index(batch.node, names, ("body", "node"))
    ts = stamp(batch.ts_ms, now_ms, ("body", "ts_ms"))
    out: list[KvEvent] = []
    for e in batch.events:
        if isinstance(e, StoredEvent):
            parent = None if e.parent_block_hash is None else u64(e.parent_block_hash)
            hashes = tuple(u64(h) for h in e.block_hashes)
            out.append(BlockStored(ts, node, hashes, parent, e.block_size, e.medium))
        elif isinstance(e, RemovedEvent):
            out.append(BlockRemoved(ts, node, tuple(u64(h) for h in e.block_hashes), e.medium))
        else:
            out.append(AllBlocksCleared(ts, node))
    return out


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def decision_out(d: Decision, names: Sequence[str]) -> DecisionOut:
    r = d.reason
    terms = None
    if r is not None:
        terms = CostTerms(**{k: _finite(getattr(r, k)) for k in CostTerms.model_fields})
    return DecisionOut(
        id=d.id, tick=d.tick, ts_ms=d.ts_ms, mode=d.mode, kind=d.kind,  # type: ignore[arg-type]
        source=names[d.source] if d.source >= 0 else None, target=names[d.target],
        tenant=d.tenant, block_hashes=list(d.block_hashes), bytes=d.nbytes, priority=d.priority,
        ttl_ms=d.ttl_ms, deadline_ms=_finite(d.deadline_ms),
        p_blocks=[_finite(p) for p in d.p_blocks], terms=terms, reason=d.text, model=d.model,
        status=d.status, detail=d.detail, moved_bytes=d.moved_bytes, attempts=d.attempts,
    )  # fmt: skip
