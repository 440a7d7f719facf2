"""Time-ordered splits: train, then validation, then test windows of the tick range.

Never random: a model is always judged on ticks later than any it learned from. The training
window fits a model, validation stops and calibrates it, and the test window, which nothing
tunes on, gives every reported metric and the champion comparison (:mod:`.champion`). The windows
are fractions of ``[first tick, last tick]``; rows whose label window ``(t, t + H]`` would
reach into the next window are purged (``purge_ms``, default H), so no label of an earlier
window looks at events a later window is scored on.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvcast.training.config import SplitConfig

PARTS = ("train", "validation", "test")


@dataclass(frozen=True)
class TimeSplit:
    bounds: dict[str, tuple[float, float]]  # part -> [start, end) in tick ms
    index: dict[str, np.ndarray]  # part -> row indices, ascending
    purge_ms: float = 0.0  # the purge applied before each boundary

    def rows(self, part: str) -> np.ndarray:
        if part not in self.index:
            raise ValueError(f"unknown split part {part!r}; valid: {', '.join(PARTS)}")
        return self.index[part]


def time_split(tick_ms: np.ndarray, cfg: SplitConfig) -> TimeSplit:
    """Row indices of each window; refuses a split that leaves a window empty."""
    t = np.asarray(tick_ms, dtype=np.float64)
    if len(t) == 0:
        raise ValueError("time split: the table has no rows")
    lo, hi = float(t.min()), float(t.max())
    span = hi - lo
    e1 = lo + cfg.train * span
    e2 = e1 + cfg.validation * span
    bounds = {"train": (lo, e1), "validation": (e1, e2), "test": (e2, np.nextafter(hi, np.inf))}
    index: dict[str, np.ndarray] = {}
    for part, (start, end) in bounds.items():
        stop = end if part == "test" else end - cfg.purge_ms
        rows = np.flatnonzero((t >= start) & (t < stop))
        if len(rows) == 0 and stop <= start:  # the purge takes the whole window
            need = cfg.purge_ms / min(cfg.train, cfg.validation)
            raise ValueError(
                f"time split: the {part} window [{start:.0f}, {end:.0f}) ms is no longer than "
                f"the purge of {cfg.purge_ms:g} ms before it ends (purge_ms, never below the "
                f"table's label horizon); the ticks span {span:.0f} ms, and this split needs "
                f"more than {need:.0f} ms: use a longer trace"
            )
        if len(rows) == 0:
            raise ValueError(
                f"time split: the {part} window [{start:.0f}, {stop:.0f}) ms has no rows "
                f"(ticks span {lo:.0f}-{hi:.0f} ms; use more data)"
            )
        index[part] = rows
    return TimeSplit(bounds, index, cfg.purge_ms)
