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

from kvcast.features.offline.accesses import Accesses, group_starts

CHUNK_HALF_LIVES = 64.0


def decayed_counts(acc: Accesses, half_life_ms: float) -> np.ndarray:
    n = len(acc)
    if n == 0:
        return np.zeros(0)
    span = CHUNK_HALF_LIVES * half_life_ms
    chunk = np.floor(acc.ts / span)
    offset = (acc.ts - chunk * span) / half_life_ms
    new = np.ones(n, dtype=bool)
    new[1:] = (acc.epoch_start[1:] != acc.epoch_start[:-1]) | (chunk[1:] != chunk[:-1])
    seg = np.cumsum(new)
    cum = pd.Series(np.exp2(offset)).groupby(seg).cumsum().to_numpy()
    first = group_starts(seg)
    prev = first - 1
    carry_ok = (prev >= acc.epoch_start) & (chunk[np.maximum(prev, 0)] == chunk - 1)
    carry = np.where(carry_ok, cum[np.maximum(prev, 0)] * 2.0**-CHUNK_HALF_LIVES, 0.0)
    return (cum + carry) * np.exp2(-offset)
