"""Distinct keys over a sliding window, stored inline in a state list (children, sessions, ...).

A key counts while ``last_seen + window > now``. Five slots per kind: the newest key and its
time, the newest *other* key and its time (enough to answer "is there an active key other than
x?" in O(1)), and once a second key appears a dict of the older keys' exact last times. The
dict is pruned of stale keys whenever its size reaches a power of two (amortised O(1)), so it
holds at most about twice the keys active in the window. :func:`count_many` counts for many
state lists at once in C-level passes (a root block shared by many sessions can hold thousands
of keys).
"""

from __future__ import annotations

from itertools import chain, compress, repeat
from operator import itemgetter, ne
from typing import Any

import numpy as np

KEY, T, KEY2, T2, OLDER = range(5)
EMPTY: tuple[Any, ...] = (None, float("-inf"), None, float("-inf"), None)


def switch(st: list[Any], at: int, key: Any, ts: float, window: float) -> None:
    """``key``, which is not the newest key, was seen at ``ts``."""
    old, old_t = st[at + KEY], st[at + T]
    if old is not None:
        older = st[at + OLDER]
        if older is None:
            older = st[at + OLDER] = {}
        older[old] = old_t
        size = len(older)
        if size >= 16 and size & (size - 1) == 0:
            for stale in [x for x, t in older.items() if t + window <= ts]:
                del older[stale]
    st[at + KEY2], st[at + T2] = old, old_t
    st[at + KEY], st[at + T] = key, ts


def count_keys(st: list[Any], at: int, now: float, window: float) -> int:
    """Distinct keys of one kind seen in ``(now - window, now]``."""
    newest = st[at + KEY]
    n = int(st[at + T] + window > now)
    older = st[at + OLDER]
    if older:
        n += sum(1 for x, t in older.items() if t + window > now and x != newest)
    return n


def count_many(
    runs: list[list[Any]], at: int, now: float, window: float, newest: np.ndarray | None = None
) -> np.ndarray:
    """:func:`count_keys` of many state lists at once, in C-level passes; ``newest``: their
    newest keys' times (``st[at + T]``) where already gathered."""
    if newest is None:
        newest = np.fromiter(map(itemgetter(at + T), runs), float, len(runs))
    out = (newest + window > now).astype(float)
    olders = list(map(itemgetter(at + OLDER), runs))
    has = list(map(bool, olders))
    if not any(has):
        return out
    dicts = list(compress(olders, has))
    sizes = list(map(len, dicts))
    keys = chain.from_iterable(map(repeat, compress(map(itemgetter(at + KEY), runs), has), sizes))
    total = sum(sizes)
    times = np.fromiter(chain.from_iterable(map(dict.values, dicts)), float, total)
    other = np.fromiter(map(ne, chain.from_iterable(dicts), keys), bool, total)
    live = ((times + window > now) & other).astype(float)
    out[np.flatnonzero(has)] += np.add.reduceat(live, np.cumsum([0, *sizes[:-1]]))
    return out
