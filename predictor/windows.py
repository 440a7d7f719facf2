"""History windows for sequence models: each row's block, its last L candidate rows.

A window is the ``L`` most recent rows of the same block at or before the row's tick, oldest
first, the row itself last; a block with fewer than ``L`` rows so far repeats its earliest row
(edge padding). Windows must come from an unsampled table (every candidate row kept): with
negative sampling, which rows exist would depend on their labels and leak them.
"""

from __future__ import annotations

import numpy as np


def window_index(block: np.ndarray, tick_ms: np.ndarray, length: int) -> np.ndarray:
    """``[n, length]`` row indices into the table, in the table's own row order."""
    if length < 1:
        raise ValueError(f"window length must be >= 1, got {length}")
    n = len(block)
    order = np.lexsort((np.asarray(tick_ms), np.asarray(block)))
    b = np.asarray(block)[order]
    new = np.ones(n, dtype=bool)
    new[1:] = b[1:] != b[:-1]
    start = np.maximum.accumulate(np.where(new, np.arange(n), 0)) if n else np.zeros(0, int)
    pos = np.arange(n)
    back = np.arange(length - 1, -1, -1)  # oldest first
    sorted_idx = np.maximum(pos[:, None] - back[None, :], start[:, None])
    out = np.empty((n, length), dtype=np.int64)
    out[order] = order[sorted_idx]
    return out


def gather_windows(x: np.ndarray, index: np.ndarray) -> np.ndarray:
    """``[n, L, F]`` float32 windows for the rows whose window indices are ``index``."""
    return np.ascontiguousarray(x[index], dtype=np.float32)


def has_sampled_rows(weight: np.ndarray | None) -> bool:
    """True when a table was negatively sampled (some rows stand for several)."""
    return weight is not None and bool(np.any(np.asarray(weight) != 1.0))
