"""vLLM KV-event wire constants: event tags, positional layouts, sequence frames, hash width.

Read from ``vllm/distributed/kv_events.py`` (vllm-project/vllm). Every message on the PUB socket
is three frames ``(topic, seq, payload)``: ``seq`` is an unsigned 8-byte big-endian counter that
starts at 0 when the engine process starts, ``payload`` one msgpack-encoded ``KVEventBatch``.

``KVEventBatch(ts, events, data_parallel_rank)`` is a msgspec Struct; ``ts`` is ``time.time()``
seconds. It is a positional array ``[ts, events, dp_rank]`` in every vLLM release read here; the
newest main encodes it as a map ``{"ts", "events", "data_parallel_rank"?}`` too. Events are
msgspec tagged unions (tag field ``"type"``, tag value the class name):

* legacy (``array_like=True``): ``["BlockStored", block_hashes, parent_block_hash, token_ids,
  block_size, lora_id, medium, lora_name, extra_keys, group_idx, kv_cache_spec_kind,
  kv_cache_spec_sliding_window]``, shorter in older releases (5 fields before ``medium``). msgspec
  writes every field of an array-like struct, ``None`` included (``omit_defaults`` is inert there).
* vLLM >= 0.26: ``{"type": "BlockStored", "block_hashes": ..., ...}``; fields equal to their
  default are omitted, unknown keys may appear and are ignored.

Replay (optional ROUTER socket): a client sends ``[b"", start_seq]`` (``start_seq`` 8-byte
big-endian; a REQ socket adds the empty delimiter itself, a DEALER must send it). The publisher
answers one ``[b"", seq, payload]`` per buffered batch with ``seq >= start_seq``, then the end
marker ``[b"", (-1).to_bytes(8, "big", signed=True), b""]``.

Block hashes are u64 ints or bytes (sha256 digests) depending on vLLM's
``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES``; vLLM's own int form is
``int.from_bytes(digest, "big") & (2**64 - 1)``. kvcast uses exactly that for bytes hashes, so a
fleet with mixed settings maps one block to one id; negative ints (old ``hash()``-based vLLM) are
taken modulo 2**64 (two's complement) the same way.
"""

from __future__ import annotations

from typing import Literal

STORED = "BlockStored"
REMOVED = "BlockRemoved"
CLEARED = "AllBlocksCleared"
TAG_FIELD = "type"

STORED_FIELDS: tuple[str, ...] = (
    "block_hashes",
    "parent_block_hash",
    "token_ids",
    "block_size",
    "lora_id",
    "medium",
    "lora_name",
    "extra_keys",
    "group_idx",
    "kv_cache_spec_kind",
    "kv_cache_spec_sliding_window",
)
STORED_MIN_FIELDS = 4  # block_hashes, parent_block_hash, token_ids, block_size
REMOVED_FIELDS: tuple[str, ...] = ("block_hashes", "medium", "group_idx")
REMOVED_MIN_FIELDS = 1
BATCH_FIELDS: tuple[str, ...] = ("ts", "events", "data_parallel_rank")

HASH_MASK = (1 << 64) - 1
SEQ_BYTES = 8
END_SEQ = -1
END_SEQ_FRAME = END_SEQ.to_bytes(SEQ_BYTES, "big", signed=True)

Encoding = Literal["array", "map"]


def pack_seq(seq: int) -> bytes:
    """``seq`` as the 8-byte big-endian frame vLLM sends (``-1`` is the replay end marker)."""
    return seq.to_bytes(SEQ_BYTES, "big", signed=seq < 0)


def unpack_seq(frame: bytes, *, signed: bool = False) -> int | None:
    """The sequence number in ``frame``, or None when it is not exactly 8 bytes."""
    if len(frame) != SEQ_BYTES:
        return None
    return int.from_bytes(frame, "big", signed=signed)
