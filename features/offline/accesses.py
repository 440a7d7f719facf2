"""Block accesses grouped by block: the backbone of every per-block vectorised computation.

Accesses (one per block per request) are renumbered by block (``code``: index into the sorted
unique hashes) and stably sorted by block, so each block's accesses are one contiguous, time
ordered segment. Epochs follow the online rule: a block accessed ``horizon_ms`` or more after its
previous access starts afresh.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvcast.features.offline.table import EventTable


@dataclass(frozen=True)
class Accesses:
    hashes: np.ndarray  # uint64, unique block hashes; a block's code is its index here
    order: np.ndarray  # sorted position -> access index in the table
    code: np.ndarray  # per sorted access: block code
    ts: np.ndarray
    req: np.ndarray  # request index
    pos: np.ndarray
    start: np.ndarray  # index of the first access of the same block
    has_next: np.ndarray  # the next sorted access is the same block
    epoch_start: np.ndarray  # index of the first access of the same block epoch
    ticks: np.ndarray  # the decision ticks (empty when not given)
    r_ts: np.ndarray  # per request: its time
    rank: np.ndarray  # first tick that sees the access

    def __len__(self) -> int:
        return len(self.ts)

    def rank_of(self, per_request: np.ndarray) -> np.ndarray:
        """At each access: the first tick ``>=`` a per-request time (ascending with ``r_ts``)."""
        return first_tick_at_or_after(self.ticks, per_request)[self.req]


def first_tick_at_or_after(ticks: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Index of the first tick ``>= t``: an event at ``t`` is seen by ticks ``j >= rank``.

    For ascending ``t`` (times in event order) this costs one pass over ``t`` and a binary
    search per tick instead of a binary search per time."""
    t = np.asarray(t, dtype=float)
    if len(t) > len(ticks) and np.all(t[1:] >= t[:-1]):
        at = np.searchsorted(t, ticks, "right")  # times <= each tick: ranks <= j from there
        return np.cumsum(np.bincount(at, minlength=len(t) + 1)[: len(t)])
    return np.searchsorted(ticks, t, side="left")


def stable_order(key: np.ndarray) -> np.ndarray:
    """``np.argsort(key, kind="stable")`` for integer keys, by sorting (key, index) packed in
    one int64 when they fit (a plain sort is several times faster than a stable argsort)."""
    n = len(key)
    bits = max(n - 1, 1).bit_length()
    if n == 0 or key.min() < 0 or int(key.max()) >= 1 << (62 - bits):
        return np.argsort(key, kind="stable")
    packed = (key.astype(np.int64) << bits) | np.arange(n)
    packed.sort()
    return packed & ((1 << bits) - 1)


def sort_ids(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(unique values, stable order by value, id of each value in that order, ascending): what
    ``np.unique(values, return_inverse=True)`` then a stable sort by the ids give, in one sort
    when value and index fit in an int64."""
    n = len(values)
    bits = max(n - 1, 1).bit_length()
    if n and values.min() >= 0 and int(values.max()) < 1 << (62 - bits):
        packed = (values.astype(np.int64) << bits) | np.arange(n)
        packed.sort()
        ordered = (packed >> bits).astype(values.dtype)
        new = np.ones(n, dtype=bool)
        new[1:] = ordered[1:] != ordered[:-1]
        return ordered[new], packed & ((1 << bits) - 1), np.cumsum(new) - 1
    uniq, ids = np.unique(values, return_inverse=True)
    order = stable_order(ids.reshape(-1))
    return uniq, order, ids.reshape(-1)[order].astype(np.int64)


def group_starts(key: np.ndarray) -> np.ndarray:
    """For a sorted key array: the index where each element's run of equal keys starts."""
    n = len(key)
    new = np.ones(n, dtype=bool)
    new[1:] = key[1:] != key[:-1]
    return np.maximum.accumulate(np.where(new, np.arange(n), 0)) if n else np.zeros(0, np.int64)


def accesses(table: EventTable, horizon_ms: float, ticks: np.ndarray | None = None) -> Accesses:
    hashes, order, code = sort_ids(table.a_hash)
    req = table.a_req[order]
    ts = table.r_ts[req]
    n = len(ts)
    start = group_starts(code)
    has_next = np.zeros(n, dtype=bool)
    has_next[:-1] = code[1:] == code[:-1]
    fresh = np.ones(n, dtype=bool)
    fresh[1:] = ~has_next[:-1] | (ts[:-1] + horizon_ms <= ts[1:])
    epoch_start = np.maximum.accumulate(np.where(fresh, np.arange(n), 0))
    ticks = np.zeros(0) if ticks is None else ticks
    return Accesses(
        hashes=hashes,
        order=order,
        code=code,
        ts=ts,
        req=req,
        pos=table.a_pos[order],
        start=start,
        has_next=has_next,
        epoch_start=epoch_start if n else np.zeros(0, np.int64),
        ticks=ticks,
        r_ts=table.r_ts,
        rank=first_tick_at_or_after(ticks, table.r_ts)[req],
    )
