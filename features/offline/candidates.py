"""Decision ticks and the candidate (tick, block) rows.

Ticks are ``start + j * period`` up to the last event (or up to ``last - H`` when censored
labels are dropped). A block is a candidate at tick ``t`` when its last access ``a <= t``
satisfies ``a + lookback > t`` (the online rule). Each candidate row points at that access.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvcast.features.config import FeatureConfig
from kvcast.features.offline.accesses import Accesses
from kvcast.features.offline.table import EventTable


def tick_times(table: EventTable, cfg: FeatureConfig) -> np.ndarray:
    start = cfg.ticks.start_ms if cfg.ticks.start_ms is not None else table.first_ts
    end = table.last_ts - (cfg.labels.horizon_ms if cfg.labels.drop_censored else 0.0)
    if end < start:
        return np.zeros(0)
    return start + cfg.ticks.period_ms * np.arange(int((end - start) // cfg.ticks.period_ms) + 1)


def first_tick_at_or_after(ticks: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Index of the first tick ``>= t``: an event at ``t`` is seen by ticks ``j >= rank``."""
    return np.searchsorted(ticks, t, side="left")


@dataclass(frozen=True)
class Rows:
    access: np.ndarray  # sorted-access index of the block's last access <= tick
    tick: np.ndarray  # tick index
    t: np.ndarray  # tick time

    def __len__(self) -> int:
        return len(self.t)

    def take(self, keep: np.ndarray) -> Rows:
        return Rows(self.access[keep], self.tick[keep], self.t[keep])


def candidate_rows(acc: Accesses, ticks: np.ndarray, lookback_ms: float) -> Rows:
    n = len(acc)
    nxt = np.full(n, np.inf)
    nxt[:-1] = np.where(acc.has_next[:-1], acc.ts[1:], np.inf)
    lo = first_tick_at_or_after(ticks, acc.ts)
    hi = first_tick_at_or_after(ticks, np.minimum(nxt, acc.ts + lookback_ms))
    counts = np.maximum(hi - lo, 0)
    access = np.repeat(np.arange(n), counts)
    offsets = np.cumsum(counts) - counts
    tick = lo[access] + (np.arange(len(access)) - offsets[access])
    return Rows(access, tick, ticks[tick])
