"""Byte-level fidelity with vLLM: its KV-event schemas re-declared as msgspec Structs (the codec
and options vLLM uses, per ``vllm/distributed/kv_events.py``), encoded by msgspec itself.

Three generations: ``array_like`` batch and events (<= 0.25), ``array_like`` batch with map
events (0.26), and map batch with map events (newest main).
"""

from __future__ import annotations

from typing import Any

import pytest

msgspec = pytest.importorskip("msgspec")

from kvcast.features.events import AllBlocksCleared, BlockRemoved, BlockStored  # noqa: E402
from kvcast.serving.kv_events import decode_batch, encode_batch  # noqa: E402


def _schemas(events_array: bool, batch_array: bool) -> dict[str, type]:
    class Event(msgspec.Struct, array_like=events_array, omit_defaults=True, tag=True):
        pass

    class Stored(Event, tag="BlockStored"):
        block_hashes: list[int | bytes]
        parent_block_hash: int | bytes | None
        token_ids: list[int]
        block_size: int
        lora_id: int | None
        medium: str | None
        lora_name: str | None
        extra_keys: list[Any] | None = None
        group_idx: int | None = None
        kv_cache_spec_kind: str | None = None
        kv_cache_spec_sliding_window: int | None = None

    class Removed(Event, tag="BlockRemoved"):
        block_hashes: list[int | bytes]
        medium: str | None
        group_idx: int | None = None

    class Cleared(Event, tag="AllBlocksCleared"):
        pass

    class Batch(msgspec.Struct, array_like=batch_array, omit_defaults=True):
        ts: float
        events: list[Stored | Removed | Cleared]
        data_parallel_rank: int | None = None

    return {"stored": Stored, "removed": Removed, "cleared": Cleared, "batch": Batch}


GENERATIONS = {
    "legacy-array": (True, True),
    "v0.26-map-events": (False, True),
    "main-map-batch": (False, False),
}


def _vllm_payload(gen: str, *, as_bytes: bool, rank: int | None) -> bytes:
    s = _schemas(*GENERATIONS[gen])

    def h(x: int) -> int | bytes:
        return x.to_bytes(32, "big") if as_bytes else x

    events = [
        s["stored"]([h(1), h(2)], None, [], 16, None, "GPU", None),
        s["stored"]([h(3)], h(2), [], 16, None, "CPU", None),
        s["removed"]([h(1)], "GPU"),
        s["cleared"](),
    ]
    return msgspec.msgpack.encode(s["batch"](12.5, events, rank))


EXPECTED = (
    BlockStored(12500.0, 4, (1, 2), None, 16, "GPU"),
    BlockStored(12500.0, 4, (3,), 2, 16, "CPU"),
    BlockRemoved(12500.0, 4, (1,), "GPU"),
    AllBlocksCleared(12500.0, 4),
)


@pytest.mark.parametrize("rank", [None, 2])
@pytest.mark.parametrize("as_bytes", [False, True])
@pytest.mark.parametrize("gen", list(GENERATIONS))
def test_payloads_encoded_by_msgspec_with_vllm_schemas_decode(gen, as_bytes, rank):
    batch = decode_batch(_vllm_payload(gen, as_bytes=as_bytes, rank=rank), node=4)
    assert batch.events == EXPECTED
    assert batch.data_parallel_rank == rank
    assert batch.ts_ms == 12500.0


@pytest.mark.parametrize("rank", [None, 2])
@pytest.mark.parametrize("as_bytes", [False, True])
@pytest.mark.parametrize("gen", list(GENERATIONS))
def test_encoder_output_is_byte_identical_to_vllm_schemas(gen, as_bytes, rank):
    events_array, batch_array = GENERATIONS[gen]
    ours = encode_batch(
        EXPECTED,
        ts_ms=12500.0,
        data_parallel_rank=rank,
        encoding="array" if events_array else "map",
        batch_encoding="array" if batch_array else "map",
        hash_format="bytes" if as_bytes else "int",
    )
    assert ours == _vllm_payload(gen, as_bytes=as_bytes, rank=rank)
