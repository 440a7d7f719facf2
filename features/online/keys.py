"""Distinct keys over a sliding window, stored inline in a state list (children, sessions, ...).

A key counts while ``last_seen + window > now``. Five slots per kind: the newest key and its
time, the newest *other* key and its time (enough to answer "is there an active key other than
x?" in O(1)), and once a second key appears a dict of the older keys' exact last times. The
dict is pruned of stale keys whenever its size reaches a power of two (amortised O(1)), so it
holds at most about twice the keys active in the window.
"""

from __future__ import annotations

from typing import Any

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
