"""Labels of each candidate row, and negative sampling with weights.

``label_count``: requests containing the block that arrive in ``(t, t+H]``; ``label_burst`` is
``count >= k`` (and ``label_burst_k{j}`` for each extra k); ``label_next_ms``: time to the
next request containing it (NaN: none in the stream); ``label_next_node``: where that request
was routed (-1: none). Labels are the only columns that read events after ``t``.

Sampling keeps every positive and each negative with probability ``negative_keep``, decided by
a hash of (block, tick time, seed) so the choice does not depend on row order; kept negatives
weigh ``1 / negative_keep``.
"""

from __future__ import annotations

import numpy as np

from kvcast.features.config import FeatureConfig
from kvcast.features.offline.accesses import Accesses
from kvcast.features.offline.candidates import Rows
from kvcast.features.offline.table import EventTable


def burst_counts(acc: Accesses, rows: Rows, ticks: np.ndarray, horizon_ms: float) -> np.ndarray:
    """Requests containing each row's block that arrive in ``(t, t + H]``."""
    uniq = np.unique(acc.ts)
    m = len(uniq) + 1
    keys = acc.code * m + np.searchsorted(uniq, acc.ts)
    until = np.searchsorted(uniq, ticks + horizon_ms, "right")[rows.tick]
    upto = np.searchsorted(keys, acc.code[rows.access] * m + until, "left")
    return upto - (rows.access + 1)


def label_columns(
    table: EventTable, acc: Accesses, rows: Rows, count: np.ndarray, cfg: FeatureConfig
) -> dict[str, np.ndarray]:
    """All label columns from the burst counts of :func:`burst_counts`."""
    i = rows.access
    nxt = np.minimum(i + 1, len(acc) - 1)
    has_next = acc.has_next[i]
    out = {
        "label_burst": (count >= cfg.labels.k).astype(np.int8),
        "label_count": count.astype(np.int32),
        "label_next_ms": np.where(has_next, acc.ts[nxt] - rows.t, np.nan),
        "label_next_node": np.where(has_next, table.r_node[acc.req[nxt]], -1).astype(np.int16),
    }
    for k in cfg.labels.extra_k:
        out[f"label_burst_k{k}"] = (count >= k).astype(np.int8)
    return out


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser on uint64 (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def sample_weights(
    block_hash: np.ndarray, t: np.ndarray, positive: np.ndarray, cfg: FeatureConfig
) -> np.ndarray:
    """Weight per row: 1 for positives, 1/keep for kept negatives, 0 for dropped ones."""
    keep = cfg.sampling.negative_keep
    if keep >= 1.0:
        return np.ones(len(t))
    seed = np.uint64(cfg.sampling.seed & 0xFFFFFFFFFFFFFFFF)
    u = _mix(_mix(block_hash ^ seed) ^ np.ascontiguousarray(t, dtype=np.float64).view(np.uint64))
    draw = (u >> np.uint64(11)).astype(np.float64) / float(1 << 53)
    return np.where(positive, 1.0, np.where(draw < keep, 1.0 / keep, 0.0))
