"""Decayed access counts right after each access, per block epoch, for every half-life.

``c_i = sum_{j <= i, same epoch} 2^(-(t_i - t_j)/h)``, computed without a sequential loop:
time is cut into chunks of ``R = 64 h``; inside a chunk the terms are scaled to the chunk start
(at most ``2^64``) and summed with a grouped cumulative sum; the previous chunk contributes its
total times ``2^-64``; older chunks are more than ``R`` old and contribute less than
``count * 2^-64`` (far below the parity tolerance). A row at tick ``t`` reads
``c_i * 2^(-(t - t_i)/h)`` from the block's last access ``i <= t``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from kvcast.features.offline.accesses import Accesses

CHUNK_HALF_LIVES = 64.0


def decayed_counts(acc: Accesses, half_life_ms: float) -> np.ndarray:
    n = len(acc)
    if n == 0:
        return np.zeros(0)
    span = CHUNK_HALF_LIVES * half_life_ms
    r_chunk = np.floor(acc.r_ts / span)  # per request, then per access
    r_offset = (acc.r_ts - r_chunk * span) / half_life_ms
    chunk = r_chunk[acc.req]
    new = np.ones(n, dtype=bool)
    new[1:] = (acc.epoch_start[1:] != acc.epoch_start[:-1]) | (chunk[1:] != chunk[:-1])
    first = np.maximum.accumulate(np.where(new, np.arange(n), 0))
    cum = np.exp2(r_offset)[acc.req]
    grouped = ~new  # accesses in segments of two or more: a cumulative sum per segment
    grouped[:-1] |= ~new[1:]
    at = np.flatnonzero(grouped)
    if len(at):
        by_segment = pd.Series(cum[at]).groupby(first[at], sort=False)
        cum[at] = by_segment.cumsum().to_numpy()
    prev = np.maximum(first - 1, 0)
    carry_ok = (first > acc.epoch_start) & (chunk[prev] == chunk - 1)
    carry = np.where(carry_ok, cum[prev] * 2.0**-CHUNK_HALF_LIVES, 0.0)
    return (cum + carry) * np.exp2(-r_offset)[acc.req]
