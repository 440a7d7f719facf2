"""Distinct keys (children, sessions, tenants) per block over a sliding window, at each row.

A (block, key) occurrence at ``t`` counts for ticks in ``[t, min(next occurrence, t + W))``:
the online rule "last_seen + W > now". Occurrences become start and end tick ranks; a row's
count is (starts <= its tick) - (ends <= its tick) within its block. Rows are sorted by
``block * M + tick``, so each start or end is one position in the rows (how many rows sort
before it) and the counts are a cumulative sum over those positions. An occurrence is an
access, whose rows are exactly those of its own tick range: its position is the number of rows
of the accesses sorted before it, no search needed; only ends at ``t + W`` are searched for.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvcast.features.offline.accesses import Accesses, stable_order
from kvcast.features.offline.candidates import Rows


@dataclass(frozen=True)
class RowKeys:
    key: np.ndarray  # per row: block code * m + tick index (ascending)
    before: np.ndarray  # per sorted access (and one past the end): rows of earlier accesses
    m: int  # len(ticks) + 1
    until: np.ndarray  # per access: tick rank of t + W
    before_until: np.ndarray  # per access: rows of its block before tick ``until``, and earlier


def row_keys(acc: Accesses, rows: Rows, window_ms: float) -> RowKeys:
    """Rows must be sorted by (block, tick), as :func:`~kvcast.features.offline.labels.sampled_rows`
    makes them."""
    m = len(acc.ticks) + 1
    before = np.zeros(len(acc) + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows.access, minlength=len(acc)), out=before[1:])
    key = acc.code[rows.access] * m + rows.tick
    until = acc.rank_of(acc.r_ts + window_ms)
    return RowKeys(key, before, m, until, np.searchsorted(key, acc.code * m + until, "left"))


def _order(block: np.ndarray, key: np.ndarray) -> np.ndarray:
    """Stable order by (block, key) of occurrences sorted by block (keys >= 0). Keys mostly
    come in order within a block already: only the blocks where they do not are sorted."""
    n = len(block)
    order = np.arange(n)
    unsorted = (block[1:] == block[:-1]) & (key[1:] < key[:-1])
    if not unsorted.any():
        return order
    redo = np.zeros(int(block[-1]) + 1, dtype=bool)
    redo[block[1:][unsorted]] = True
    at = np.flatnonzero(redo[block])  # whole blocks, still in block order
    b, k = block[at], key[at]
    span = int(k.max()) + 1
    if int(b[-1]) < (1 << 62) // span:
        order[at] = at[stable_order(b * span + k)]
    else:
        order[at] = at[np.lexsort((k, b))]
    return order


def window_counts(occ: np.ndarray, key: np.ndarray, acc: Accesses, rk: RowKeys) -> np.ndarray:
    """Distinct keys per row. ``occ``: the (sorted) accesses that are occurrences, ascending;
    ``key`` (ints >= 0) per occurrence."""
    order = _order(acc.code[occ], key)
    a, k = occ[order], key[order]
    until = rk.until[a]
    b, start = acc.code[a], acc.rank[a]
    nxt = np.full(len(a), -1)
    same = (b[1:] == b[:-1]) & (k[1:] == k[:-1])
    nxt[:-1] = np.where(same, a[1:], -1)  # the next occurrence of the same (block, key)
    next_rank = acc.rank[nxt]  # (nxt -1: the last access's rank, unused)
    by_next = (nxt >= 0) & (next_rank <= until)
    end = np.where(by_next, next_rank, until)
    used = end > start
    at_start = rk.before[a[used]]
    at_end = rk.before[nxt[used & by_next]]
    at_until = rk.before_until[a[used & ~by_next]]
    n = len(rk.key) + 1
    delta = np.bincount(at_start, minlength=n)
    delta -= np.bincount(at_end, minlength=n)
    delta -= np.bincount(at_until, minlength=n)
    return np.cumsum(delta[:-1]).astype(float)
