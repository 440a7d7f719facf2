"""Seed a store with random verified blocks (``kvcast serve agent --seed-blocks N``): a way to
try the agent, and the source for process tests, without an engine. Not for production."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kvcast.serving.agent.block_store import BlockStore
from kvcast.serving.agent.blocks import BlockState
from kvcast.serving.agent.buffers import BlockBuffer, HostBuffer
from kvcast.serving.agent.checksum import checksum


def seed_blocks(
    store: BlockStore, count: int, tenant: str, nbytes: int, seed: int | None = None,
    buffer_for: Callable[[bytes], BlockBuffer] = HostBuffer.from_bytes,
) -> list[int]:  # fmt: skip
    """Store ``count`` cached blocks of ``tenant``, ``nbytes`` random bytes each, under random
    u64 hashes, each in a buffer from ``buffer_for`` (the agent's memory); return the hashes.
    Raises :class:`StoreFull` when they do not fit."""
    if count < 0 or nbytes < 0:
        raise ValueError("count and nbytes must be >= 0")
    if count * nbytes > store.capacity_bytes:
        raise ValueError(f"{count} blocks of {nbytes} B exceed the capacity")
    rng = np.random.default_rng(seed)
    hashes: list[int] = []
    while len(hashes) < count:
        h = int(rng.integers(0, 1 << 64, dtype=np.uint64))
        if store.info(tenant, h) is not None:
            continue
        data = rng.integers(0, 256, nbytes, dtype=np.uint8).tobytes()
        store.put(tenant, h, buffer_for(data), checksum(data), BlockState.CACHED)
        hashes.append(h)
    return hashes
