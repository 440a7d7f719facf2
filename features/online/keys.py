"""Distinct keys over a sliding window, stored inline in a state list (children, sessions, ...).

A key counts while ``last_seen + window > now``. Five slots per kind: the newest key and its
time, the newest *other* key and its time (enough to answer "is there an active key other than
x?" in O(1)), and once a second key appears an ordered dict of the older keys' expiry times
(``last_seen + window``). Events come in time order (the feature state's reorder buffer sees
to it), so each key a switch puts (or moves) at the dict's end expires no earlier than those
before it: the dict stays in expiry order, each switch drops the keys expired by then from
its front (amortised O(1)), and a count reads only the few that expired since the last
switch, not every key. That matters: a root block shared by many sessions holds thousands
of session keys, and every tick counts them (a pass over all of them was half the feature
rows' time under load). Counts are exact for any ``now`` at or after the last event applied.
A query before it (a source whose clock runs ahead of the querying one stamps events in its
future) may miss keys that expired between the two: pruned by a later switch (the unordered
dict before this one missed them whenever it pruned, at sizes 16, 32, ...).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from itertools import compress, islice, repeat, takewhile
from operator import itemgetter
from typing import Any

import numpy as np

KEY, T, KEY2, T2, OLDER = range(5)
EMPTY: tuple[Any, ...] = (None, float("-inf"), None, float("-inf"), None)


def switch(st: list[Any], at: int, key: Any, ts: float, window: float) -> None:
    """``key``, which is not the newest key, was seen at ``ts`` (no earlier than any event
    before it)."""
    old, old_t = st[at + KEY], st[at + T]
    if old is not None:
        older = st[at + OLDER]
        if older is None:
            older = st[at + OLDER] = OrderedDict()
        older[old] = float(old_t) + window  # its expiry: the latest yet, so it goes last
        older.move_to_end(old)
        while older:  # drop the expired keys, oldest first
            first = next(iter(older))
            if older[first] > ts:
                break
            del older[first]
        if not older:
            st[at + OLDER] = None
    st[at + KEY2], st[at + T2] = old, old_t
    st[at + KEY], st[at + T] = key, ts


def _live(older: OrderedDict[Any, float], newest: Any, now: float) -> int:
    """The keys of ``older`` live at ``now`` (a float), ``newest`` left out."""
    return live_until(older, newest, now)[0]


def live_until(older: OrderedDict[Any, float], newest: Any, now: float) -> tuple[int, float]:
    """The keys of ``older`` live at ``now`` (a float), ``newest`` left out: all but its front
    of expired ones; and the time until which that count holds: the first expiry after
    ``now`` (inf if none), since the count changes only as ``now`` passes an expiry (the dict
    unchanged)."""
    values = older.values()
    expired = len(list(takewhile(now.__ge__, values)))
    until = next(islice(values, expired, None), math.inf)
    n = len(older) - expired
    expiry = older.get(newest)
    return (n - 1 if expiry is not None and expiry > now else n), until


def count_keys(st: list[Any], at: int, now: float, window: float) -> int:
    """Distinct keys of one kind seen in ``(now - window, now]``."""
    n = int(st[at + T] + window > now)
    older = st[at + OLDER]
    if older:
        n += _live(older, st[at + KEY], float(now))
    return n


def count_many(
    runs: list[list[Any]], at: int, now: float, window: float, newest: np.ndarray | None = None
) -> np.ndarray:
    """:func:`count_keys` of many state lists at once; ``newest``: their newest keys' times
    (``st[at + T]``) where already gathered."""
    if newest is None:
        newest = np.fromiter(map(itemgetter(at + T), runs), float, len(runs))
    out = (newest + window > now).astype(float)
    olders = list(map(itemgetter(at + OLDER), runs))
    has = list(map(bool, olders))
    if not any(has):
        return out
    keys = compress(map(itemgetter(at + KEY), runs), has)
    out[np.flatnonzero(has)] += list(map(_live, compress(olders, has), keys, repeat(float(now))))
    return out
