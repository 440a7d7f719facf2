"""Block meta arithmetic shared by both paths: tokens, KV bytes, recompute cost, tenant code.

All functions take floats or numpy arrays alike, so the online state and the offline pipeline
evaluate the very same expressions.
"""

from __future__ import annotations

import zlib
from typing import TypeVar

import numpy as np

from kvcast.features.config import FeatureConfig
from kvcast.llm import get_llm

# float and numpy array; the expressions below are written to work for both.
Num = TypeVar("Num", float, np.ndarray)


def kv_bytes_per_token(cfg: FeatureConfig) -> int:
    return get_llm(cfg.model).kv_bytes_per_token(cfg.kv_dtype)


def block_tokens(input_tokens: Num, pos: Num, block_size: int) -> Num:
    """Tokens in the block at ``pos`` of a prompt of ``input_tokens`` (1..block_size)."""
    return np.clip(input_tokens - pos * block_size, 1, block_size)


def whole_blocks(input_tokens: int, n_blocks: int, block_size: int) -> int:
    """How many of a request's ``n_blocks`` blocks are full, the blocks an engine caches and
    reuses (a trailing partial block never is): its tokens' whole blocks; without a token
    count (0), all but the last. Every path counts a request's blocks with repeats removed
    (first kept): a request naming a block twice is bad input (counted), read one way."""
    if input_tokens > 0:
        return min(input_tokens // block_size, n_blocks)
    return max(n_blocks - 1, 0)


def whole_blocks_of(input_tokens: np.ndarray, n_blocks: np.ndarray, block_size: int) -> np.ndarray:
    """:func:`whole_blocks` of each request (int64 arrays)."""
    return np.where(
        input_tokens > 0,
        np.minimum(input_tokens // block_size, n_blocks),
        np.maximum(n_blocks - 1, 0),
    )


def prefill_ms(n: Num, cfg: FeatureConfig) -> Num:
    """``a + b*n + c*n^2`` for ``n > 0`` uncached tokens, 0 for none (NaN stays NaN)."""
    p = cfg.prefill
    return (p.a_ms + p.b_ms_per_token * n + p.c_ms_per_token2 * n * n) * (n > 0)


def tenant_code(tenant: str) -> float:
    """The ``tenant_code`` feature: crc32 of the tenant name."""
    return float(zlib.crc32(tenant.encode()))
