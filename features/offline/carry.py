"""The long-memory state that crosses time windows, computed once over the whole stream.

A row's block epoch (``age_first_ms``), its decayed heat, its owning session's turns and gap
EWMA, and its next access (``label_next_*``) can depend on events any distance away; every
other column reads a bounded window (see :func:`kvcast.features.offline.partitions.overlap_ms`).
:func:`carried_state` computes those long-memory values per access and per request from the
light columns of the stream (request times, block hashes, sessions), with the same functions
as the pandas path, so each window task reads them exactly instead of recomputing them from a
truncated history.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvcast.features.config import FeatureConfig
from kvcast.features.offline.accesses import accesses
from kvcast.features.offline.heat import decayed_counts
from kvcast.features.offline.pipeline import _child_codes
from kvcast.features.offline.sessions import (
    SessionState,
    first_branch,
    session_keys,
    session_state,
)
from kvcast.features.offline.table import EventTable


@dataclass(frozen=True)
class CarriedState:
    """Per table access (``a_*`` order): epoch start time, decayed counts right after the access
    (one row per half-life), the next access of the same block (time, node; NaN / -1: none).
    Per request: session key (-1: none). The whole stream's session state."""

    epoch_ts: np.ndarray
    heat: np.ndarray  # [half-lives, accesses]
    next_ts: np.ndarray
    next_node: np.ndarray
    keys: np.ndarray
    n_explicit: int
    sessions: SessionState

    def sessions_for(self, start_ms: float, end_ms: float) -> SessionState:
        """The session entries a window ``[start, end]`` reads: its own, and each session's
        last one before ``start`` (the state carried into the window)."""
        s = self.sessions
        inside = (s.ts >= start_ms) & (s.ts <= end_ms)
        before = np.flatnonzero(s.ts < start_ms)
        last = np.zeros(len(s.ts), dtype=bool)
        if len(before):
            k = s.key[before]
            last_of_key = np.r_[k[1:] != k[:-1], True]  # entries are sorted by (key, seq)
            last[before[last_of_key]] = True
        keep = np.flatnonzero(inside | last)
        return SessionState(
            s.order[keep], s.key[keep], s.ts[keep], s.turns[keep], s.ewma[keep], s.var[keep]
        )


def carried_state(table: EventTable, cfg: FeatureConfig) -> CarriedState:
    acc = accesses(table, cfg.horizon_ms)
    n = len(acc)
    child = _child_codes(table, acc)
    keys, n_explicit = session_keys(
        table, acc, first_branch(table, acc, child, cfg.distinct_window_ms)
    )
    epoch_ts = np.empty(n)
    epoch_ts[acc.order] = acc.ts[acc.epoch_start] if n else np.zeros(0)
    heat = np.empty((len(cfg.heat_half_lives_ms), n))
    for j, h in enumerate(cfg.heat_half_lives_ms):
        heat[j, acc.order] = decayed_counts(acc, h)
    nxt = np.minimum(np.arange(n) + 1, max(n - 1, 0))
    next_ts, next_node = np.full(n, np.nan), np.full(n, -1, dtype=np.int64)
    if n:
        next_ts[acc.order] = np.where(acc.has_next, acc.ts[nxt], np.nan)
        next_node[acc.order] = np.where(acc.has_next, table.r_node[acc.req[nxt]], -1)
    return CarriedState(
        epoch_ts, heat, next_ts, next_node, keys, n_explicit, session_state(table, keys, cfg)
    )
