"""An event stream split by event type, each type's fields as columns, checked in bulk.

:func:`groups` counts the bad input exactly as :func:`kvcast.features.validate.check` per event
would (``unknown_event``, ``unknown_node``, ``bad_value``); the ordering rules and the table
itself are built by :mod:`kvcast.features.offline.ingest`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import repeat
from operator import attrgetter, itemgetter

import numpy as np

from kvcast.features.counters import BadInputCounters
from kvcast.features.events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    ReplicationDone,
    RequestArrived,
    TelemetrySample,
)
from kvcast.features.validate import (
    NODE_FIELDS,
    REASONS,
    VALUE_FIELDS,
    check,
    check_columns,
    numeric,
)

KINDS = (
    RequestArrived,
    BlockStored,
    BlockRemoved,
    AllBlocksCleared,
    TelemetrySample,
    ReplicationDone,
)
_KIND = {k: i for i, k in enumerate(KINDS)}
_EXTRA = {  # fields the table needs beyond the checked ones
    RequestArrived: ("tenant", "session", "block_hashes"),
    BlockStored: ("block_hashes",),
    BlockRemoved: ("block_hashes",),
    ReplicationDone: ("block_hashes",),
}
_FAST: dict[str, Callable[[list], list]] = {  # the busiest fields, without a call per event
    "ts_ms": lambda evs: [e.ts_ms for e in evs],
    "node": lambda evs: [e.node for e in evs],
    "block_hashes": lambda evs: [e.block_hashes for e in evs],
}
_CODE = {reason: i for i, reason in enumerate(REASONS)}


def take(values: list, rows: np.ndarray) -> list:
    """``values[rows]`` for a list (the list itself when ``rows`` is all of it, in order)."""
    if len(rows) == len(values) and (rows == np.arange(len(rows))).all():
        return values
    return [values[i] for i in rows.tolist()]


@dataclass
class Group:
    """The events of one type, in stream order."""

    idx: np.ndarray  # stream positions, ascending
    events: list  # the events themselves
    cols: dict[str, list]  # field -> values as given
    arrays: dict[str, np.ndarray | None]  # checked field -> numeric array (None: not numbers)
    good: np.ndarray  # passed the checks
    ts: np.ndarray  # float times (meaningful where good)

    def rows(self, seq_of: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(seq, row) of this group's applied events in apply order; ``seq_of``: stream
        position -> seq, -1 when not applied."""
        seq = seq_of[self.idx]
        rows = np.flatnonzero(seq >= 0)
        seq = seq[rows]
        if len(seq) > 1 and (seq[1:] < seq[:-1]).any():
            o = np.argsort(seq, kind="stable")
            seq, rows = seq[o], rows[o]
        return seq, rows

    def floats(self, name: str, rows: np.ndarray) -> np.ndarray:
        """Field ``name`` at ``rows`` as floats (what ``np.array(values, dtype=float)`` gives)."""
        arr = self.arrays.get(name)
        if arr is not None:
            return arr[rows].astype(float)
        return np.array(take(self.cols[name], rows), dtype=float)


def _group(kind: type, evs: list, idx: np.ndarray, nodes: int, bad: BadInputCounters) -> Group:
    if len(idx) == len(evs):
        sub = evs
    else:
        sub = list(itemgetter(*idx.tolist())(evs)) if len(idx) > 1 else [evs[idx[0]]]
    checked = (*NODE_FIELDS[kind], *(f for f, _ in VALUE_FIELDS[kind]))
    cols = {}
    for f in (*checked, *_EXTRA.get(kind, ())):
        fast = _FAST.get(f)
        cols[f] = fast(sub) if fast is not None else list(map(attrgetter(f), sub))
    arrays = {f: numeric(cols[f]) for f in checked}
    if all(a is not None for a in arrays.values()):
        code = check_columns(kind, arrays, nodes)
    else:  # some field holds None, a string, ...: the per-event rule decides
        code = np.array([_CODE[check(e, nodes)] for e in sub], dtype=np.int8)
    bad.counts["unknown_node"] += int((code == 1).sum())
    bad.counts["bad_value"] += int((code == 2).sum())
    good = code == 0
    ts = arrays["ts_ms"]
    if ts is not None:
        ts = ts.astype(float)
    else:
        ts = np.zeros(len(sub))
        rows = np.flatnonzero(good)
        ts[rows] = np.array(take(cols["ts_ms"], rows), dtype=float)
    return Group(idx, sub, cols, arrays, good, ts)


def groups(evs: list, nodes: int, bad: BadInputCounters) -> list[Group | None]:
    """One :class:`Group` per entry of :data:`KINDS` (None: no such events); objects of any
    other type are counted as ``unknown_event``."""
    kind = np.fromiter(map(_KIND.get, map(type, evs), repeat(len(KINDS))), np.int8, len(evs))
    by_kind = np.argsort(kind, kind="stable")
    bounds = np.searchsorted(kind[by_kind], np.arange(len(KINDS) + 2))
    bad.counts["unknown_event"] += int(bounds[-1] - bounds[-2])
    out: list[Group | None] = []
    for k, cls in enumerate(KINDS):
        idx = by_kind[bounds[k] : bounds[k + 1]]
        out.append(_group(cls, evs, idx, nodes, bad) if len(idx) else None)
    return out
