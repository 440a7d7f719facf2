"""Encode kvcast events as a vLLM ``KVEventBatch`` payload, in either encoding vLLM has shipped.

The inverse of :func:`decode.decode_batch`, used by tests and by tools that play an engine
(``kvcast cluster replay``). Output matches what msgspec writes for vLLM's structs: array-like
structs carry every field (``None`` included); map events omit fields still at their default.
kvcast events carry no token ids, LoRA or KV-cache-group data: those go out as vLLM's "absent"
values (``token_ids=[]``, ``lora_id=None``, ...). ``node``, the per-event ``ts_ms`` and
``speculative`` have no wire field: the endpoint names the node and the batch carries one time.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

import msgspec

from kvcast.features.events import AllBlocksCleared, BlockRemoved, BlockStored

from .decode import KvEvent
from .wire import CLEARED, HASH_MASK, REMOVED, REMOVED_FIELDS, STORED, STORED_FIELDS, TAG_FIELD
from .wire import Encoding as Encoding

HashFormat = Literal["int", "bytes"]
_ENCODER = msgspec.msgpack.Encoder()


def encode_batch(
    events: Iterable[KvEvent],
    *,
    ts_ms: float,
    data_parallel_rank: int | None = None,
    encoding: Encoding = "map",
    batch_encoding: Encoding = "array",
    hash_format: HashFormat = "int",
    hash_bytes_len: int = 32,
) -> bytes:
    """One payload; ``encoding`` shapes the events, ``batch_encoding`` the batch envelope.

    Defaults are vLLM >= 0.26 (array batch, map events, int hashes). ``encoding="array"`` is the
    legacy tagged-array form; ``batch_encoding="map"`` the newest main's envelope. Bytes hashes
    are ``hash_bytes_len`` big-endian bytes (32 like vLLM's sha256), so decoding returns the id.
    """
    if encoding not in ("array", "map") or batch_encoding not in ("array", "map"):
        raise ValueError("encoding and batch_encoding must be 'array' or 'map'")
    if hash_format not in ("int", "bytes"):
        raise ValueError("hash_format must be 'int' or 'bytes'")
    if hash_bytes_len < 8:
        raise ValueError("hash_bytes_len must be at least 8")
    wire_events = [
        _event(e, encoding, hash_format=hash_format, width=hash_bytes_len) for e in events
    ]
    ts = ts_ms / 1000.0
    batch: Any
    if batch_encoding == "array":
        batch = [ts, wire_events, data_parallel_rank]
    else:
        batch = {"ts": ts, "events": wire_events}
        if data_parallel_rank is not None:
            batch["data_parallel_rank"] = data_parallel_rank
    return _ENCODER.encode(batch)


def hash_to_wire(block_hash: int, hash_format: HashFormat, width: int = 32) -> int | bytes:
    """A kvcast u64 block id as vLLM sends it: the int itself, or big-endian bytes."""
    if not 0 <= block_hash <= HASH_MASK:
        raise ValueError(f"block hash {block_hash} is not a u64")
    return block_hash if hash_format == "int" else block_hash.to_bytes(width, "big")


def _event(event: KvEvent, encoding: Encoding, *, hash_format: HashFormat, width: int) -> Any:
    if isinstance(event, BlockStored):
        tag, values = STORED, _stored(event, hash_format, width)
        required = STORED_FIELDS[:7]  # fields without a default in vLLM's struct
    elif isinstance(event, BlockRemoved):
        hashes = [hash_to_wire(h, hash_format, width) for h in event.block_hashes]
        tag, values, required = REMOVED, [hashes, event.medium, None], REMOVED_FIELDS[:2]
    elif isinstance(event, AllBlocksCleared):
        tag, values, required = CLEARED, [], ()
    else:
        raise TypeError(f"not a KV event: {type(event).__name__}")
    if encoding == "array":
        return [tag, *values]
    names = STORED_FIELDS if tag == STORED else REMOVED_FIELDS
    out: dict[str, Any] = {TAG_FIELD: tag}
    for name, value in zip(names, values, strict=False):
        if name in required or value is not None:
            out[name] = value
    return out


def _stored(event: BlockStored, hash_format: HashFormat, width: int) -> list[Any]:
    parent = event.parent_block_hash
    return [
        [hash_to_wire(h, hash_format, width) for h in event.block_hashes],
        None if parent is None else hash_to_wire(parent, hash_format, width),
        [],  # token_ids
        event.block_size,
        None,  # lora_id
        event.medium,
        None,  # lora_name
        None,  # extra_keys
        None,  # group_idx
        None,  # kv_cache_spec_kind
        None,  # kv_cache_spec_sliding_window
    ]
