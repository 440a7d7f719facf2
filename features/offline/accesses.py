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

    def __len__(self) -> int:
        return len(self.ts)


def group_starts(key: np.ndarray) -> np.ndarray:
    """For a sorted key array: the index where each element's run of equal keys starts."""
    n = len(key)
    new = np.ones(n, dtype=bool)
    new[1:] = key[1:] != key[:-1]
    return np.maximum.accumulate(np.where(new, np.arange(n), 0)) if n else np.zeros(0, np.int64)


def accesses(table: EventTable, horizon_ms: float) -> Accesses:
    hashes, code = np.unique(table.a_hash, return_inverse=True)
    order = np.argsort(code, kind="stable")
    code = code[order].astype(np.int64)
    req = table.a_req[order]
    ts = table.r_ts[req]
    n = len(ts)
    start = group_starts(code)
    has_next = np.zeros(n, dtype=bool)
    has_next[:-1] = code[1:] == code[:-1]
    fresh = np.ones(n, dtype=bool)
    fresh[1:] = ~has_next[:-1] | (ts[:-1] + horizon_ms <= ts[1:])
    epoch_start = np.maximum.accumulate(np.where(fresh, np.arange(n), 0))
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
    )
