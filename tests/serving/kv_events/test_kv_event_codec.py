"""decode_batch / encode_batch: both vLLM encodings, both hash forms, tolerance and rejection."""

from __future__ import annotations

import math

import pytest

msgspec = pytest.importorskip("msgspec")

from kvcast.features.events import AllBlocksCleared, BlockRemoved, BlockStored  # noqa: E402
from kvcast.serving.kv_events import (  # noqa: E402
    KvEventDecodeError,
    decode_batch,
    encode_batch,
    hash_from_wire,
    hash_to_wire,
)

U64 = (1 << 64) - 1
EVENTS = (
    BlockStored(1234.0, 3, (11, U64, 0), None, 16),
    BlockStored(1234.0, 3, (12,), 11, 16, medium="CPU"),
    BlockRemoved(1234.0, 3, (11, U64), medium="GPU"),
    AllBlocksCleared(1234.0, 3),
)


def _pack(obj: object) -> bytes:
    return msgspec.msgpack.encode(obj)


@pytest.mark.parametrize("hash_format", ["int", "bytes"])
@pytest.mark.parametrize("batch_encoding", ["array", "map"])
@pytest.mark.parametrize("encoding", ["array", "map"])
def test_round_trip_preserves_events_in_every_encoding(encoding, batch_encoding, hash_format):
    payload = encode_batch(
        EVENTS,
        ts_ms=1234.0,
        data_parallel_rank=1,
        encoding=encoding,
        batch_encoding=batch_encoding,
        hash_format=hash_format,
    )
    batch = decode_batch(payload, node=3)
    assert batch.ts_ms == pytest.approx(1234.0)
    assert batch.data_parallel_rank == 1
    assert batch.events == EVENTS
    assert (batch.unknown_types, batch.unknown_media) == (0, 0)


def test_node_comes_from_the_caller_and_ts_is_seconds_on_the_wire():
    payload = _pack([1_700_000_000.25, [["AllBlocksCleared"]]])
    batch = decode_batch(payload, node=9)
    assert batch.ts_ms == 1_700_000_000_250.0
    assert batch.events == (AllBlocksCleared(1_700_000_000_250.0, 9),)
    assert batch.data_parallel_rank is None


def test_bytes_hashes_become_vllm_int_form_low_64_bits_big_endian():
    digest = bytes(range(32))
    assert hash_from_wire(digest) == int.from_bytes(digest, "big") & U64
    assert hash_from_wire(digest) == int.from_bytes(digest[-8:], "big")
    assert hash_from_wire(b"\x01\x02") == 0x0102
    assert hash_from_wire(-1) == U64  # old hash()-based vLLM: two's complement
    assert hash_to_wire(0x0102, "bytes", 8) == b"\x00" * 6 + b"\x01\x02"
    with pytest.raises(ValueError):
        hash_to_wire(-1, "int")


def test_unknown_event_types_are_skipped_and_counted_in_both_encodings():
    events = [
        ["FutureEvent", 1, 2, 3],
        {"type": "AnotherOne", "x": 1},
        ["BlockRemoved", [5], None],
        {"type": "BlockRemoved", "block_hashes": [6]},
    ]
    batch = decode_batch(_pack([1.0, events, 0]), node=0)
    assert batch.unknown_types == 2
    assert [e.block_hashes for e in batch.events] == [(5,), (6,)]


def test_extra_fields_and_trailing_array_fields_are_ignored():
    stored_map = {
        "type": "BlockStored",
        "block_hashes": [b"\x00" * 31 + b"\x07"],
        "parent_block_hash": None,
        "token_ids": [1, 2],
        "block_size": 2,
        "cache_salt": "tenant-a",
        "group_idx": 1,
        "something_new": {"nested": [1]},
    }
    stored_array = ["BlockStored", [8], 7, [1, 2], 2, None, "GPU", None, None, 0, "full", None, 99]
    raw = {"ts": 2.0, "events": [stored_map, stored_array], "future_field": True}
    batch = decode_batch(_pack(raw), node=1)
    assert [(e.block_hashes, e.parent_block_hash) for e in batch.events] == [
        ((7,), None),
        ((8,), 7),
    ]


def test_oldest_vllm_layout_without_medium_or_rank_decodes_as_gpu():
    raw = [5.0, [["BlockStored", [1, 2], None, [0] * 32, 16, None], ["BlockRemoved", [1]]]]
    batch = decode_batch(_pack(raw), node=2)
    assert batch.events == (
        BlockStored(5000.0, 2, (1, 2), None, 16, "GPU"),
        BlockRemoved(5000.0, 2, (1,), "GPU"),
    )


def test_medium_is_case_insensitive_and_unknown_media_are_skipped_and_counted():
    events = [
        {"type": "BlockRemoved", "block_hashes": [1], "medium": "cpu"},
        {"type": "BlockRemoved", "block_hashes": [2], "medium": None},
        {"type": "BlockRemoved", "block_hashes": [3], "medium": "NVME"},
    ]
    batch = decode_batch(_pack([1.0, events]), node=0)
    assert [e.medium for e in batch.events] == ["CPU", "GPU"]
    assert batch.unknown_media == 1


BAD_PAYLOADS = {
    "empty": b"",
    "invalid opcode": b"\xc1",
    "truncated": b"\x92\xcb\x00",
    "trailing bytes": _pack([1.0, []]) + b"\x00",
    "invalid utf-8": b"\x92\xa2\xff\xfe\x90",
    "scalar batch": _pack(7),
    "short batch": _pack([1.0]),
    "map batch without events": _pack({"ts": 1.0}),
    "ts string": _pack(["1.0", []]),
    "ts bool": _pack([True, []]),
    "ts nan": _pack([math.nan, []]),
    "ts overflows in ms": _pack([1e308, []]),
    "events map": _pack([1.0, {"a": 1}]),
    "rank string": _pack([1.0, [], "0"]),
    "event scalar": _pack([1.0, [3]]),
    "array event without tag": _pack([1.0, [[]]]),
    "array event int tag": _pack([1.0, [[1, [1]]]]),
    "map event without type": _pack([1.0, [{"block_hashes": [1]}]]),
    "stored array too short": _pack([1.0, [["BlockStored", [1], None, []]]]),
    "stored without block_size": _pack([1.0, [{"type": "BlockStored", "block_hashes": [1]}]]),
    "block_size bool": _pack([1.0, [["BlockStored", [1], None, [], True]]]),
    "block_size zero": _pack([1.0, [["BlockStored", [1], None, [], 0]]]),
    "hashes not a list": _pack([1.0, [["BlockRemoved", 5]]]),
    "hash float": _pack([1.0, [["BlockRemoved", [1.5]]]]),
    "hash empty bytes": _pack([1.0, [["BlockRemoved", [b""]]]]),
    "parent str": _pack([1.0, [["BlockStored", [1], "p", [], 16]]]),
    "medium int": _pack([1.0, [["BlockRemoved", [1], 3]]]),
    "ext type": b"\x92\xcb" + _pack(1.0)[1:] + b"\x91\xd4\x01\x02",
}


@pytest.mark.parametrize("payload", list(BAD_PAYLOADS.values()), ids=list(BAD_PAYLOADS))
def test_bad_payloads_raise_only_kv_event_decode_error(payload):
    with pytest.raises(KvEventDecodeError) as info:
        decode_batch(payload, node=0)
    assert isinstance(info.value, ValueError)
    assert str(info.value)


def test_encoder_rejects_bad_options():
    with pytest.raises(ValueError):
        encode_batch([], ts_ms=1.0, encoding="json")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        encode_batch([], ts_ms=1.0, hash_format="hex")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        encode_batch([], ts_ms=1.0, hash_bytes_len=4)
