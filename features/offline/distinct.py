"""Distinct keys (children, sessions, tenants) per block over a sliding window, at each row.

A (block, key) occurrence at ``t`` counts for ticks in ``[t, min(next occurrence, t + W))``:
the online rule "last_seen + W > now". Occurrences become start and end tick ranks; a row's
count is (starts <= its tick) - (ends <= its tick) within its block, found by binary search on
``block * M + rank`` keys.
"""

from __future__ import annotations

import numpy as np

from kvcast.features.offline.candidates import first_tick_at_or_after


def window_counts(
    block: np.ndarray,
    key: np.ndarray,
    ts: np.ndarray,
    window_ms: float,
    ticks: np.ndarray,
    row_block: np.ndarray,
    row_tick: np.ndarray,
) -> np.ndarray:
    """Occurrences in time order within each block; returns the count per row."""
    order = np.lexsort((key, block))
    b, k, t = block[order], key[order], ts[order]
    nxt = np.full(len(t), np.inf)
    same = (b[1:] == b[:-1]) & (k[1:] == k[:-1])
    nxt[:-1] = np.where(same, t[1:], np.inf)
    start = first_tick_at_or_after(ticks, t)
    end = first_tick_at_or_after(ticks, np.minimum(nxt, t + window_ms))
    used = end > start
    m = len(ticks) + 1
    starts = np.sort(b[used] * m + start[used])
    ends = np.sort(b[used] * m + end[used])
    q = row_block * m + row_tick
    return (np.searchsorted(starts, q, "right") - np.searchsorted(ends, q, "right")).astype(float)
