"""Decode one vLLM ``KVEventBatch`` payload into kvcast's typed events.

Both encodings vLLM has shipped are accepted, per batch and per event (see ``wire``): positional
arrays tagged by class name, and maps keyed by ``"type"``. Unknown keys and trailing array fields
are ignored, unknown event types are skipped and counted. Anything else that is not a well-formed
batch raises :class:`KvEventDecodeError` and nothing else, whatever the input bytes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, get_args

import msgspec

from kvcast.features.events import AllBlocksCleared, BlockRemoved, BlockStored, Medium

from .wire import (
    CLEARED,
    HASH_MASK,
    REMOVED,
    REMOVED_FIELDS,
    REMOVED_MIN_FIELDS,
    STORED,
    STORED_FIELDS,
    STORED_MIN_FIELDS,
    TAG_FIELD,
)

KvEvent = BlockStored | BlockRemoved | AllBlocksCleared
_MEDIA: frozenset[str] = frozenset(get_args(Medium))
_DECODER = msgspec.msgpack.Decoder()


class KvEventDecodeError(ValueError):
    """A payload that is not a vLLM ``KVEventBatch``; the message is a short reason."""


@dataclass(frozen=True, slots=True)
class DecodedBatch:
    """One batch: events in wire order, stamped with ``node`` and the batch time."""

    ts_ms: float
    data_parallel_rank: int | None
    events: tuple[KvEvent, ...]
    unknown_types: int = 0
    unknown_media: int = 0


def decode_batch(payload: bytes, *, node: int) -> DecodedBatch:
    """Decode ``payload`` (one PUB payload or replay reply); raise only KvEventDecodeError."""
    try:
        raw = _DECODER.decode(payload)
    except Exception as exc:  # msgspec raises DecodeError; anything else is still "not msgpack"
        raise KvEventDecodeError(f"not msgpack: {exc}") from None
    try:
        return _batch(raw, node)
    except KvEventDecodeError:
        raise
    except Exception as exc:  # defensive: keep the function total for fuzzers
        raise KvEventDecodeError(f"malformed batch: {type(exc).__name__}") from None


def hash_from_wire(value: Any) -> int:
    """A wire block hash (int or bytes) as kvcast's u64 id: big-endian, low 64 bits."""
    if isinstance(value, bytes):
        if not value:
            raise KvEventDecodeError("empty bytes block hash")
        return int.from_bytes(value, "big") & HASH_MASK
    if isinstance(value, int) and not isinstance(value, bool):
        return value & HASH_MASK
    raise KvEventDecodeError(f"block hash must be int or bytes, got {type(value).__name__}")


def _batch(raw: Any, node: int) -> DecodedBatch:
    if isinstance(raw, list):
        if len(raw) < 2:
            raise KvEventDecodeError("batch array needs at least [ts, events]")
        ts, events, rank = raw[0], raw[1], raw[2] if len(raw) > 2 else None
    elif isinstance(raw, dict):
        if "ts" not in raw or "events" not in raw:
            raise KvEventDecodeError("batch map needs 'ts' and 'events'")
        ts, events, rank = raw["ts"], raw["events"], raw.get("data_parallel_rank")
    else:
        raise KvEventDecodeError(f"batch must be array or map, got {type(raw).__name__}")
    ts_ms = _number(ts, "ts", scale=1000.0)
    if rank is not None and not _is_int(rank):
        raise KvEventDecodeError("data_parallel_rank must be int or nil")
    if not isinstance(events, list):
        raise KvEventDecodeError("events must be an array")
    out: list[KvEvent] = []
    unknown_types = unknown_media = 0
    for item in events:
        fields = _fields(item)
        if fields is None:
            unknown_types += 1
            continue
        event = _event(fields, ts_ms, node)
        if event is None:
            unknown_media += 1
        else:
            out.append(event)
    return DecodedBatch(ts_ms, rank, tuple(out), unknown_types, unknown_media)


def _fields(item: Any) -> dict[str, Any] | None:
    """The event's fields by name (tag under TAG_FIELD); None for an unknown event type."""
    if isinstance(item, list):
        if not item or not isinstance(item[0], str):
            raise KvEventDecodeError("array event must start with its type tag")
        tag, values = item[0], item[1:]
        layout, minimum = _layout(tag)
        if layout is None:
            return None
        if len(values) < minimum:
            raise KvEventDecodeError(f"{tag} array too short ({len(values)} fields)")
        fields = dict(zip(layout, values, strict=False))
        fields[TAG_FIELD] = tag
        return fields
    if isinstance(item, dict):
        tag = item.get(TAG_FIELD)
        if not isinstance(tag, str):
            raise KvEventDecodeError("map event needs a string 'type'")
        return item if _layout(tag)[0] is not None else None
    raise KvEventDecodeError(f"event must be array or map, got {type(item).__name__}")


def _layout(tag: str) -> tuple[tuple[str, ...] | None, int]:
    if tag == STORED:
        return STORED_FIELDS, STORED_MIN_FIELDS
    if tag == REMOVED:
        return REMOVED_FIELDS, REMOVED_MIN_FIELDS
    if tag == CLEARED:
        return (), 0
    return None, 0


def _event(fields: Mapping[str, Any], ts_ms: float, node: int) -> KvEvent | None:
    """The typed event, or None when its medium is one kvcast does not model."""
    tag = fields[TAG_FIELD]
    if tag == CLEARED:
        return AllBlocksCleared(ts_ms=ts_ms, node=node)
    medium = _medium(fields.get("medium"))
    hashes = _hashes(fields.get("block_hashes"), tag)
    if tag == REMOVED:
        return None if medium is None else BlockRemoved(ts_ms, node, hashes, medium)
    parent = fields.get("parent_block_hash")
    block_size = fields.get("block_size")
    if not _is_int(block_size) or block_size < 1:
        raise KvEventDecodeError("BlockStored.block_size must be a positive int")
    return (
        None
        if medium is None
        else BlockStored(
            ts_ms=ts_ms,
            node=node,
            block_hashes=hashes,
            parent_block_hash=None if parent is None else hash_from_wire(parent),
            block_size=block_size,
            medium=medium,
        )
    )


def _hashes(value: Any, tag: str) -> tuple[int, ...]:
    if not isinstance(value, list):
        raise KvEventDecodeError(f"{tag}.block_hashes must be an array")
    return tuple(hash_from_wire(h) for h in value)


def _medium(value: Any) -> Medium | None:
    """``None`` on the wire means GPU (vLLM's default); None back means an unknown medium."""
    if value is None:
        return "GPU"
    if not isinstance(value, str):
        raise KvEventDecodeError("medium must be a string or nil")
    upper = value.upper()
    return upper if upper in _MEDIA else None  # type: ignore[return-value]


def _number(value: Any, name: str, *, scale: float = 1.0) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise KvEventDecodeError(f"{name} must be a number")
    out = float(value) * scale
    if not math.isfinite(out):
        raise KvEventDecodeError(f"{name} must be finite")
    return out


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
