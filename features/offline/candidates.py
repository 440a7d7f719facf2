"""Decision ticks and the candidate (tick, block) rows.

Ticks are ``start + j * period`` up to the last event (or up to the last request ``- H`` when
censored labels are dropped). A block is a candidate at tick ``t`` when its last access
``a <= t`` satisfies ``a + lookback > t`` and the block was full in that request (a trailing
partial block is never reused: the online rule). Each candidate row points at that access.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from kvcast.features.block_meta import whole_blocks_of
from kvcast.features.config import FeatureConfig, TickConfig
from kvcast.features.events import Event
from kvcast.features.offline.accesses import Accesses
from kvcast.features.offline.ingest import event_table
from kvcast.features.offline.table import EventTable


def tick_times(table: EventTable, cfg: FeatureConfig) -> np.ndarray:
    """The tick grid. With ``drop_censored`` it ends ``H`` before the last *request*: a
    label counts arrivals, and events after the last one (a replay's drain: telemetry,
    stores, removals) cannot show one, so a later tick's label would be negative unseen."""
    start = cfg.ticks.start_ms if cfg.ticks.start_ms is not None else table.first_ts
    if cfg.labels.drop_censored:
        last = float(table.r_ts.max()) if len(table.r_ts) else table.last_ts
        end = last - cfg.labels.horizon_ms
    else:
        end = table.last_ts
    if end < start:
        return np.zeros(0)
    return start + cfg.ticks.period_ms * np.arange(int((end - start) // cfg.ticks.period_ms) + 1)


def table_and_ticks(
    events: Iterable[Event] | EventTable,
    ticks: np.ndarray | TickConfig | None,
    cfg: FeatureConfig | None,
) -> tuple[FeatureConfig, EventTable, np.ndarray]:
    """The arguments every offline builder takes, resolved: the config (with ``ticks`` as its
    grid when a :class:`TickConfig` is given), the event table (built unless given) and the
    sorted tick times (explicit, or the config's grid over the stream)."""
    cfg = cfg if cfg is not None else FeatureConfig()
    if isinstance(ticks, TickConfig):
        cfg = cfg.model_copy(update={"ticks": ticks})
        ticks = None
    table = events if isinstance(events, EventTable) else event_table(events, cfg)
    times = tick_times(table, cfg) if ticks is None else np.unique(np.asarray(ticks, dtype=float))
    return cfg, table, times


@dataclass(frozen=True)
class Rows:
    access: np.ndarray  # sorted-access index of the block's last access <= tick
    tick: np.ndarray  # tick index
    ticks: np.ndarray  # all tick times

    def __len__(self) -> int:
        return len(self.access)

    @cached_property
    def t(self) -> np.ndarray:
        """Tick time per row."""
        return self.ticks[self.tick]

    def take(self, keep: np.ndarray) -> Rows:
        return Rows(self.access[keep], self.tick[keep], self.ticks)


def full_accesses(table: EventTable, acc: Accesses, block_tokens: int) -> np.ndarray:
    """Per sorted access: whether its block is full in its request (:func:`whole_blocks`)."""
    blocks = np.bincount(table.a_req, minlength=len(table.r_ts))
    return acc.pos < whole_blocks_of(table.r_input, blocks, block_tokens)[acc.req]


def candidate_ranges(
    acc: Accesses, lookback_ms: float, full: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per access: the first tick of its rows and how many rows it has; ``full``
    (:func:`full_accesses`): an access of a block that is not full has none, and ends the
    rows of the block's access before it, as any access does."""
    n = len(acc)
    lo = acc.rank  # first tick that sees the access
    hi = np.full(n, len(acc.ticks))
    hi[:-1] = np.where(acc.has_next[:-1], lo[1:], len(acc.ticks))  # rank(min(a, b)): min
    np.minimum(hi, acc.rank_of(acc.r_ts + lookback_ms), out=hi)
    hi[~full] = lo[~full]
    return lo, np.maximum(hi - lo, 0)


def expand(lo: np.ndarray, counts: np.ndarray, start: int, stop: int) -> list[np.ndarray]:
    """(access, tick) of the rows of accesses ``start..stop-1``."""
    c = counts[start:stop]
    access = np.repeat(np.arange(start, stop), c)
    tick = np.repeat(lo[start:stop] - (np.cumsum(c) - c), c)
    tick += np.arange(len(tick))
    return [access, tick]
