"""Row-time formulas shared by both paths: kept state at ``now`` -> feature values.

The online state and the offline pipeline gather the same state (arrays, one entry per row) and
call these, so a feature's arithmetic exists once.
"""

from __future__ import annotations

import numpy as np

from kvcast.features.block_meta import block_tokens, kv_bytes_per_token, prefill_ms
from kvcast.features.config import FeatureConfig

MASK_NODES = 52  # replica_mask keeps nodes 0..51, exact in a float64


def session_columns(
    now: np.ndarray,
    last: np.ndarray,
    turns: np.ndarray,
    ewma: np.ndarray,
    var: np.ndarray,
    explicit: np.ndarray,
    think_factor: float,
) -> list[np.ndarray]:
    """sess_* columns; NaN where the block has no session (turns = NaN)."""
    since = now - last
    std = np.sqrt(var)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(std > 0, (since - ewma) / std, np.nan)
    think = np.where(np.isnan(ewma), np.nan, (since <= think_factor * ewma).astype(float))
    return [since, ewma, std, z, turns, think, explicit]


def meta_columns(input_tokens: np.ndarray, pos: np.ndarray, cfg: FeatureConfig) -> list[np.ndarray]:
    """block_tokens, kv_bytes, recompute_chain_ms, recompute_block_ms."""
    tokens = block_tokens(input_tokens, pos, cfg.block_tokens)
    before = pos * cfg.block_tokens
    chain = prefill_ms(before + tokens, cfg)
    return [tokens, tokens * kv_bytes_per_token(cfg), chain, chain - prefill_ms(before, cfg)]
