"""Sessions, vectorised: the inference rule of :mod:`kvcast.features.online.sessions`, the gap
EWMA per session epoch, and the owning session's state at each row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from kvcast.features.config import FeatureConfig
from kvcast.features.offline.accesses import (
    Accesses,
    first_tick_at_or_after,
    group_starts,
    stable_order,
)
from kvcast.features.offline.candidates import Rows
from kvcast.features.offline.table import EventTable


def first_branch(
    table: EventTable, acc: Accesses, child: np.ndarray, window_ms: float
) -> np.ndarray:
    """Per request: first position whose block has >1 distinct active child, else -1.

    ``child`` is the child block code of each sorted access (-1: none). The other children
    are active iff the newest earlier occurrence with a different child is in the window.
    """
    out = np.full(len(table.r_ts), -1)
    has = np.flatnonzero(child >= 0)
    if len(has) == 0:
        return out
    b, c, ts = acc.code[has], child[has], acc.ts[has]
    run = group_starts(np.where(np.r_[True, (b[1:] != b[:-1]) | (c[1:] != c[:-1])], 1, 0).cumsum())
    prev = run - 1
    ok = prev >= 0
    ok[ok] &= b[prev[ok]] == b[ok]
    branched = ok & (ts[np.maximum(prev, 0)] + window_ms > ts)
    big = np.iinfo(np.int64).max
    pos = np.full(len(table.a_req), big)
    pos[acc.order[has[branched]]] = acc.pos[has[branched]]
    if len(pos):
        starts = np.flatnonzero(np.r_[True, table.a_req[1:] != table.a_req[:-1]])
        per_req = np.minimum.reduceat(pos, starts)
        found = per_req != big
        out[table.a_req[starts[found]]] = per_req[found]
    return out


def session_keys(table: EventTable, acc: Accesses, branch: np.ndarray) -> tuple[np.ndarray, int]:
    """Session code per request (explicit ids first, then inferred block codes; -1 none) and
    how many codes are explicit."""
    explicit, names = pd.factorize(pd.Series(table.r_session, dtype=object), use_na_sentinel=True)
    code_orig = np.empty(len(acc), dtype=np.int64)
    code_orig[acc.order] = acc.code
    first = np.full(len(table.r_ts), -1)
    counts = np.bincount(table.a_req, minlength=len(table.r_ts))
    starts = np.cumsum(counts) - counts
    has = counts > 0
    at = np.where(branch >= 0, starts + branch + 1, starts)
    first[has] = code_orig[at[has]] + len(names)
    return np.where(explicit >= 0, explicit, first), len(names)


@dataclass(frozen=True)
class SessionState:
    order: np.ndarray  # requests with a session, sorted by (key, seq)
    key: np.ndarray  # per sorted request
    ts: np.ndarray
    turns: np.ndarray
    ewma: np.ndarray
    var: np.ndarray


def session_state(table: EventTable, keys: np.ndarray, cfg: FeatureConfig) -> SessionState:
    alpha, horizon = cfg.session.ewma_alpha, cfg.horizon_ms
    idx = np.flatnonzero(keys >= 0)
    order = idx[stable_order(keys[idx])]
    key, ts = keys[order], table.r_ts[order]
    n = len(order)
    fresh = np.ones(n, dtype=bool)
    fresh[1:] = (key[1:] != key[:-1]) | (ts[:-1] + horizon <= ts[1:])
    turn = np.arange(n) - np.maximum.accumulate(np.where(fresh, np.arange(n), 0))
    gap = np.zeros(n)
    gap[1:] = ts[1:] - ts[:-1]
    ewma, var = np.full(n, np.nan), np.full(n, np.nan)
    by_turn = stable_order(turn)
    bounds = np.searchsorted(turn[by_turn], np.arange(1, turn.max(initial=0) + 2))
    for k in range(1, len(bounds)):
        at = by_turn[bounds[k - 1] : bounds[k]]
        if k == 1:
            ewma[at], var[at] = gap[at], 0.0
            continue
        d = gap[at] - ewma[at - 1]
        inc = alpha * d
        ewma[at] = ewma[at - 1] + inc
        var[at] = (1.0 - alpha) * (var[at - 1] + d * inc)
    return SessionState(order, key, ts, turn + 1.0, ewma, var)


def session_rows(
    state: SessionState,
    keys: np.ndarray,
    owner: np.ndarray,
    rows: Rows,
    ticks: np.ndarray,
    n_explicit: int,
    horizon_ms: float,
) -> list[np.ndarray]:
    """last_ts, turns, ewma, var, explicit of each row's owning session (NaN: none)."""
    m = len(ticks) + 1
    sorted_keys = state.key * m + first_tick_at_or_after(ticks, state.ts)
    key = keys[owner]
    at = np.searchsorted(sorted_keys, np.maximum(key, 0) * m + rows.tick, "right") - 1
    at = np.maximum(at, 0)
    ok = (key >= 0) & (state.ts[at] + horizon_ms > rows.t) if len(at) else key >= 0
    nan = np.nan
    return [
        np.where(ok, state.ts[at], nan),
        np.where(ok, state.turns[at], nan),
        np.where(ok, state.ewma[at], nan),
        np.where(ok, state.var[at], nan),
        np.where(ok, (key < n_explicit).astype(float), nan),
    ]
