"""The bytes the replay's engines store for a KV block: pseudo-random, fixed per block.

A block's bytes depend only on the seed, its tenant and its hash, as real KV depends only on
the prefix: two engines that compute the same block store the same bytes, so any copy of a
block, replicated or recomputed, has one expected checksum (xxh3-64, the agents' algorithm).
"""

from __future__ import annotations

import zlib

import numpy as np

from kvcast.serving.agent.checksum import checksum

MASK64 = (1 << 64) - 1


class BlockMaker:
    """``make(tenant, hash)`` -> (bytes, checksum), ``block_bytes`` long."""

    def __init__(self, block_bytes: int, seed: int = 0) -> None:
        if block_bytes <= 0:
            raise ValueError(f"block size must be > 0, got {block_bytes}")
        self.block_bytes, self.seed = block_bytes, seed

    def data(self, tenant: str, block_hash: int) -> bytes:
        key = [self.seed & MASK64, block_hash & MASK64, zlib.crc32(tenant.encode("utf-8"))]
        return np.random.default_rng(key).bytes(self.block_bytes)

    def make(self, tenant: str, block_hash: int) -> tuple[bytes, int]:
        data = self.data(tenant, block_hash)
        return data, checksum(data)

    def checksum(self, tenant: str, block_hash: int) -> int:
        """The checksum every stored copy of this block must have."""
        return checksum(self.data(tenant, block_hash))
