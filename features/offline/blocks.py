"""The block hashes named by many events as one flat uint64 array, with a count per event.

Repeats inside one event are removed (the first kept, as :func:`kvcast.features.validate.
unique_blocks` does online). Only events whose hashes do not strictly increase can hold a
repeat, so only those are checked one by one.
"""

from __future__ import annotations

from itertools import chain

import numpy as np

from kvcast.features.counters import BadInputCounters
from kvcast.features.offline.table import u64_hashes


def _u64(hashes: list, count: int, flat: bool) -> np.ndarray:
    """``hashes`` (flattened first unless ``flat``) as uint64, negative ints wrapping."""
    try:
        values = hashes if flat else chain.from_iterable(hashes)
        return np.fromiter(values, np.int64, count).view(np.uint64)
    except (OverflowError, TypeError, ValueError):
        return u64_hashes(hashes if flat else list(chain.from_iterable(hashes)))


def flat_blocks(hashes: list, bad: BadInputCounters | None) -> tuple[np.ndarray, np.ndarray]:
    """(every event's hashes in order, as uint64; how many each event keeps). Repeats are
    counted as ``duplicate_block_in_request`` into ``bad`` when given."""
    n = len(hashes)
    try:
        singles = [h for (h,) in hashes]  # one hash per event: nothing can repeat
    except (TypeError, ValueError):
        singles = None
    if singles is not None:
        return _u64(singles, n, flat=True), np.ones(n, dtype=np.int64)
    lens = np.fromiter(map(len, hashes), np.int64, n)
    out = _u64(hashes, int(lens.sum()), flat=False)
    starts = np.cumsum(lens) - lens
    rising = np.ones(len(out), dtype=bool)
    rising[1:] = out[1:] > out[:-1]
    rising[starts[lens > 0]] = True
    suspects = np.unique(np.searchsorted(starts, np.flatnonzero(~rising), "right") - 1)
    drop: list[int] = []
    for i in suspects.tolist():
        h = hashes[i]
        if len(set(h)) == len(h):
            continue
        seen: set = set()
        again = [j for j, x in enumerate(h) if x in seen or seen.add(x)]
        lens[i] -= len(again)
        drop += [int(starts[i]) + j for j in again]
    if drop:
        if bad is not None:
            bad.counts["duplicate_block_in_request"] += len(drop)
        keep = np.ones(len(out), dtype=bool)
        keep[drop] = False
        out = out[keep]
    return out, lens
