"""One time window's rows: the pandas pipeline on the window's events, with the long-memory
columns read from the carried state. Pure: no Dask here, so a window is testable alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from kvcast.features.config import FeatureConfig
from kvcast.features.counters import BadInputCounters
from kvcast.features.derive import session_columns
from kvcast.features.offline.accesses import accesses
from kvcast.features.offline.candidates import candidate_ranges, full_accesses
from kvcast.features.offline.carry import CarriedState
from kvcast.features.offline.labels import (
    burst_counts,
    burst_due,
    due_ticks,
    label_columns,
    sampled_rows,
)
from kvcast.features.offline.partitions import Residency, Window, window_table
from kvcast.features.offline.pipeline import _feature_columns
from kvcast.features.offline.sessions import SessionState, session_rows
from kvcast.features.offline.table import EventTable
from kvcast.features.spec import build_spec, duration_tag

SESSION_COLUMNS = (
    "sess_since_last_ms",
    "sess_gap_ewma_ms",
    "sess_gap_std_ms",
    "sess_gap_z",
    "sess_turns",
    "sess_in_think_gap",
    "sess_explicit",
)


@dataclass(frozen=True)
class WindowInput:
    """Everything one window task needs (what is shipped to a worker)."""

    window: Window
    table: EventTable
    epoch_ts: np.ndarray  # per window access, as :class:`CarriedState`
    heat: np.ndarray
    next_ts: np.ndarray
    next_node: np.ndarray
    keys: np.ndarray  # per window request
    n_explicit: int
    sessions: SessionState


def window_input(
    table: EventTable, res: Residency, carry: CarriedState, win: Window
) -> WindowInput:
    sub, r, a = window_table(table, res, win)
    return WindowInput(
        win,
        sub,
        carry.epoch_ts[a],
        carry.heat[:, a],
        carry.next_ts[a],
        carry.next_node[a],
        carry.keys[r],
        carry.n_explicit,
        carry.sessions_for(win.start_ms, win.end_ms),
    )


def window_rows(w: WindowInput, cfg: FeatureConfig) -> pd.DataFrame:
    """The rows of ``w.window``'s ticks, ordered by (block, tick) like the pandas path."""
    table, ticks = w.table, w.window.ticks
    acc = accesses(table, cfg.horizon_ms, ticks)
    full = full_accesses(table, acc, cfg.block_tokens)
    lo, counts = candidate_ranges(acc, cfg.ticks.lookback_ms, full)
    due = due_ticks(acc, cfg.labels.horizon_ms)
    rows, weight = sampled_rows(acc, lo, counts, burst_due(acc, due, cfg.labels.k), cfg)
    count = burst_counts(acc, rows, due)
    spec = build_spec(cfg)
    feats = dict(
        zip(
            spec.names,
            _feature_columns(table, acc, rows, ticks, cfg, BadInputCounters()),
            strict=True,
        )
    )
    t, ai = rows.t, acc.order[rows.access]  # ai: the row's access in table order
    since = t - acc.ts[rows.access]
    feats["age_first_ms"] = t - w.epoch_ts[ai]
    for j, h in enumerate(cfg.heat_half_lives_ms):
        feats[f"heat_{duration_tag(h)}"] = w.heat[j, ai] * np.exp2(-since / h)
    req = acc.req[rows.access]
    sess = session_rows(w.sessions, w.keys, req, rows, ticks, w.n_explicit, cfg.horizon_ms)
    feats |= dict(
        zip(SESSION_COLUMNS, session_columns(t, *sess, cfg.session.think_factor), strict=True)
    )
    data = {
        "tick_ms": t,
        "block": acc.hashes[acc.code[rows.access]],
        "home_node": table.r_node[req],
    }
    data |= {name: np.asarray(feats[name], dtype=float) for name in spec.names}
    labels = label_columns(table, acc, rows, count, cfg)
    has_next = ~np.isnan(w.next_ts[ai])
    labels["label_next_ms"] = np.where(has_next, w.next_ts[ai] - t, np.nan)
    labels["label_next_node"] = w.next_node[ai].astype(np.int16)
    data |= labels | {"weight": weight}
    return pd.DataFrame(data, copy=False)
