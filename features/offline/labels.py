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

import math
from itertools import pairwise

import numpy as np

from kvcast.features.config import FeatureConfig
from kvcast.features.offline.accesses import Accesses, first_tick_at_or_after
from kvcast.features.offline.candidates import Rows, expand
from kvcast.features.offline.table import EventTable

CHUNK_ROWS = 1 << 16  # candidate rows hashed at a time


def due_ticks(acc: Accesses, horizon_ms: float) -> np.ndarray:
    """Per access: the first tick ``t`` with ``ts <= t + H`` (from there its window holds it)."""
    return first_tick_at_or_after(acc.ticks + horizon_ms, acc.r_ts)[acc.req]


def burst_due(acc: Accesses, due: np.ndarray, k: int) -> np.ndarray:
    """Per access: the first tick at which its row has ``count >= k``: when the k-th next
    access of the block is due (later ones are due no earlier); past the ticks when none."""
    out = np.full(len(acc), len(acc.ticks))
    if k < len(acc):
        same = acc.code[k:] == acc.code[:-k]
        out[:-k] = np.where(same, due[k:], len(acc.ticks))
    return out


def burst_counts(acc: Accesses, rows: Rows, due: np.ndarray) -> np.ndarray:
    """Requests containing each row's block that arrive in ``(t, t + H]`` (searched for only
    where the next access is due by the row's tick: elsewhere 0)."""
    m = len(acc.ticks) + 1
    some = np.flatnonzero(burst_due(acc, due, 1)[rows.access] <= rows.tick)
    keys = acc.code * m + due  # ascending: blocks, then due ticks
    i = rows.access[some]
    count = np.zeros(len(rows), dtype=np.int64)
    count[some] = np.searchsorted(keys, acc.code[i] * m + rows.tick[some], "right") - (i + 1)
    return count


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
    """splitmix64 finaliser on uint64 (wrapping arithmetic); a new array."""
    with np.errstate(over="ignore"):
        x = x ^ (x >> np.uint64(30))
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
    return x


def _weights(u: np.ndarray, positive: np.ndarray, keep: float) -> np.ndarray:
    draw = (u >> np.uint64(11)).astype(np.float64) / float(1 << 53)
    return np.where(positive, 1.0, np.where(draw < keep, 1.0 / keep, 0.0))


def sample_weights(
    block_hash: np.ndarray, t: np.ndarray, positive: np.ndarray, cfg: FeatureConfig
) -> np.ndarray:
    """Weight per row: 1 for positives, 1/keep for kept negatives, 0 for dropped ones."""
    keep = cfg.sampling.negative_keep
    if keep >= 1.0:
        return np.ones(len(t))
    seed = np.uint64(cfg.sampling.seed & 0xFFFFFFFFFFFFFFFF)
    u = _mix(_mix(block_hash ^ seed) ^ np.ascontiguousarray(t, dtype=np.float64).view(np.uint64))
    return _weights(u, positive, keep)


def sampled_rows(
    acc: Accesses, lo: np.ndarray, counts: np.ndarray, due_k: np.ndarray, cfg: FeatureConfig
) -> tuple[Rows, np.ndarray]:
    """The candidate rows (see :func:`candidate_ranges`) :func:`sample_weights` keeps, and
    their weights; ``due_k``: :func:`burst_due` for ``labels.k``. Built a slice of accesses at
    a time (the arrays stay in cache), mixing each block hash and tick time once."""
    keep = cfg.sampling.negative_keep
    if keep >= 1.0:
        rows = Rows(*expand(lo, counts, 0, len(acc)), acc.ticks)
        return rows, np.ones(len(rows))
    seed = np.uint64(cfg.sampling.seed & 0xFFFFFFFFFFFFFFFF)
    per_tick = np.ascontiguousarray(acc.ticks, dtype=np.float64).view(np.uint64)
    per_access = _mix(acc.hashes ^ seed)[acc.code]
    below = np.uint64(math.ceil(keep * 2**53))  # draw < keep: (u >> 11) / 2^53 < keep
    ends = np.searchsorted(np.cumsum(counts), np.arange(CHUNK_ROWS, counts.sum(), CHUNK_ROWS))
    parts = []
    for start, stop in pairwise([0, *ends.tolist(), len(acc)]):
        access, tick = expand(lo, counts, start, stop)
        positive = due_k[access] <= tick
        u = per_access[access]
        u ^= per_tick[tick]
        kept = np.flatnonzero(positive | ((_mix(u) >> np.uint64(11)) < below))
        parts.append((access[kept], tick[kept], positive[kept]))
    access, tick, positive = (np.concatenate(p) for p in zip(*parts, strict=True))
    return Rows(access, tick, acc.ticks), np.where(positive, 1.0, 1.0 / keep)
