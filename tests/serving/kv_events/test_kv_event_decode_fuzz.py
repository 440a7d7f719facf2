"""decode_batch is total: whatever the bytes, it returns a batch or raises KvEventDecodeError."""

from __future__ import annotations

import pytest

msgspec = pytest.importorskip("msgspec")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from kvcast.features.events import BlockStored  # noqa: E402
from kvcast.serving.kv_events import (  # noqa: E402
    DecodedBatch,
    KvEventDecodeError,
    decode_batch,
    encode_batch,
)

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
STRUCTURED = settings(FUZZ, max_examples=200)
TAGS = ["BlockStored", "BlockRemoved", "AllBlocksCleared", "type", "ts", "events", "medium"]

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from(TAGS)
    | st.text(max_size=8)
    | st.binary(max_size=40)
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(TAGS) | st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=8,
)


def _mostly(good: st.SearchStrategy, bad: st.SearchStrategy) -> st.SearchStrategy:
    """``good`` seven times in eight, so generated batches get past the envelope checks."""
    return st.integers(0, 7).flatmap(lambda i: bad if i == 0 else good)


hashes = st.lists(st.integers(0, 2**64 - 1) | st.binary(min_size=1, max_size=32), max_size=4)
fields = _mostly(
    hashes | st.integers(-1, 64) | st.sampled_from(["GPU", "cpu", "NVME", None]), values
)
array_events = st.tuples(st.sampled_from([*TAGS[:3], "Other"]), st.lists(fields, max_size=12)).map(
    lambda t: [t[0], *t[1]]
)
map_events = st.tuples(
    st.sampled_from([*TAGS[:3], "Other"]),
    st.dictionaries(
        st.sampled_from(["block_hashes", "parent_block_hash", "block_size", "medium", "x"]), fields
    ),
).map(lambda t: {"type": t[0], **t[1]})
batches = st.tuples(
    _mostly(st.floats(0, 2e9), scalars),
    st.lists(_mostly(array_events | map_events, scalars), max_size=4),
    _mostly(st.none() | st.integers(0, 8), scalars),
).map(list)


def _total(payload: bytes) -> None:
    try:
        result = decode_batch(payload, node=0)
    except KvEventDecodeError:
        return
    assert isinstance(result, DecodedBatch)


@FUZZ
@given(st.binary(max_size=256))
def test_random_bytes_raise_nothing_but_decode_error(payload):
    _total(payload)


@STRUCTURED
@given(values)
def test_random_msgpack_values_raise_nothing_but_decode_error(obj):
    _total(msgspec.msgpack.encode(obj))


@STRUCTURED
@given(batches)
def test_batch_shaped_msgpack_raises_nothing_but_decode_error(obj):
    _total(msgspec.msgpack.encode(obj))


VALID = encode_batch([BlockStored(1.0, 0, (1, 2, 3), 9, 16)], ts_ms=1.0, encoding="array")


@FUZZ
@given(st.lists(st.tuples(st.integers(0, len(VALID) - 1), st.integers(0, 255)), max_size=4))
def test_corrupted_valid_payloads_raise_nothing_but_decode_error(edits):
    payload = bytearray(VALID)
    for index, byte in edits:
        payload[index] = byte
    _total(bytes(payload))
