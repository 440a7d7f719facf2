"""Time windows of the decision ticks, and the slice of the event table each window reads.

Window ``k`` owns the ticks in ``[T0, T1)``. It reads the events in ``[T0 - overlap, last tick
+ label horizon]``, plus a snapshot of the state that outlives the overlap: the blocks each node
held at the window start (one synthetic store per resident block) and each node's last
telemetry sample before it. The overlap covers every bounded window a feature reads
(:func:`overlap_ms`); the unbounded ones come from :mod:`kvcast.features.offline.carry`.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from kvcast.features.config import FeatureConfig
from kvcast.features.offline.residency import Changes, changes
from kvcast.features.offline.table import EventTable


@dataclass(frozen=True)
class Window:
    index: int
    ticks: np.ndarray  # the ticks this window owns
    start_ms: float  # first event time read
    end_ms: float  # last event time read


def overlap_ms(cfg: FeatureConfig) -> float:
    """History a window needs before its first tick: candidates (lookback), distinct counts
    over the distinct window of requests whose session key itself reads one distinct window
    back, and the telemetry windows."""
    return max(
        2.0 * cfg.distinct_window_ms,
        cfg.ticks.lookback_ms,
        *cfg.queue_windows_ms,
        cfg.eviction_window_ms,
    )


def plan_windows(ticks: np.ndarray, window_ms: float, cfg: FeatureConfig) -> list[Window]:
    """Cut ``ticks`` (ascending) into windows of ``window_ms``; empty windows are skipped."""
    if not window_ms > 0:
        raise ValueError(f"window_ms must be a positive number, got {window_ms}")
    if len(ticks) == 0:
        return []
    # each tick's window by index (edges rebuilt as ticks[0] + k * window_ms round otherwise
    # than the count, and could leave the last tick in no window); only non-empty ones exist
    k = np.floor((ticks - ticks[0]) / window_ms).astype(np.int64)
    bounds = np.r_[np.flatnonzero(np.r_[True, k[1:] != k[:-1]]), len(ticks)]
    out: list[Window] = []
    for lo, hi in pairwise(bounds.tolist()):
        own = ticks[lo:hi]
        start = float(own[0]) - overlap_ms(cfg)
        out.append(Window(len(out), own, start, float(own[-1]) + cfg.labels.horizon_ms))
    return out


@dataclass(frozen=True)
class Residency:
    """Every (block, node, tier) flag interval of the stream: resident in ``[ts, until)``."""

    hash: np.ndarray
    node: np.ndarray
    tier: np.ndarray
    ts: np.ndarray
    until: np.ndarray

    @staticmethod
    def of(table: EventTable) -> Residency:
        uniq = np.unique(table.s_hash)
        return Residency.of_changes(changes(table, uniq)[0], uniq)

    @staticmethod
    def of_changes(ch: Changes, uniq: np.ndarray) -> Residency:
        """From :func:`changes` of the whole table with ``hashes = uniq`` (its residency
        hashes, ascending)."""
        pair = (ch.ident * (int(ch.node.max(initial=0)) + 1) + ch.node) * 2 + ch.tier
        order = np.argsort(pair, kind="stable")  # changes are in event order
        p, ts = pair[order], ch.ts[order]
        until = np.full(len(p), np.inf)
        same = p[1:] == p[:-1]
        until[:-1] = np.where(same, ts[1:], np.inf)
        held = np.flatnonzero(ch.flag[order] > 0)
        o = order[held]
        return Residency(uniq[ch.ident[o]], ch.node[o], ch.tier[o], ts[held], until[held])

    def at(self, t: float) -> np.ndarray:
        """Indices of the intervals holding at ``t`` (set before ``t``, not yet changed)."""
        return np.flatnonzero((self.ts < t) & (self.until >= t))


def _rows(ts: np.ndarray, start: float, end: float) -> slice:
    return slice(int(np.searchsorted(ts, start, "left")), int(np.searchsorted(ts, end, "right")))


def window_table(table: EventTable, res: Residency, win: Window) -> tuple[EventTable, slice, slice]:
    """The events ``win`` reads as a table of its own, with the residency snapshot first;
    also the slices of the whole table's requests and accesses it holds."""
    s, e = win.start_ms, win.end_ms
    r = _rows(table.r_ts, s, e)
    a = slice(*np.searchsorted(table.a_req, [r.start, r.stop], "left").tolist())
    sr = _rows(table.s_ts, s, e)
    c = _rows(table.c_ts, s, e)
    # the snapshot is ordered before every event of the window, a clear included
    seqs = (table.r_seq[r], table.s_seq[sr], table.c_seq[c])
    first_seq = min([int(x.min()) for x in seqs if len(x)], default=0)
    snap = res.at(s)
    tel = table.telemetry
    keep = np.flatnonzero((tel["ts"] >= s) & (tel["ts"] <= e))
    before = np.flatnonzero(tel["ts"] < s)
    if len(before):
        node = tel["node"][before]
        last = np.unique(node[::-1], return_index=True)[1]  # each node's newest sample
        keep = np.r_[np.sort(before[::-1][last]), keep]
    n = len(snap)
    sub = EventTable(
        r_ts=table.r_ts[r],
        r_seq=table.r_seq[r],
        r_node=table.r_node[r],
        r_input=table.r_input[r],
        r_public=table.r_public[r],
        r_tenant=table.r_tenant[r],
        r_session=table.r_session[r],
        a_req=table.a_req[a] - r.start,
        a_pos=table.a_pos[a],
        a_hash=table.a_hash[a],
        s_seq=np.r_[np.full(n, first_seq - 1, dtype=np.int64), table.s_seq[sr]],
        s_ts=np.r_[np.full(n, s), table.s_ts[sr]],
        s_node=np.r_[res.node[snap], table.s_node[sr]],
        s_kind=np.r_[np.ones(n, dtype=np.int64), table.s_kind[sr]],
        s_tier=np.r_[res.tier[snap], table.s_tier[sr]],
        s_hash=np.r_[res.hash[snap], table.s_hash[sr]],
        c_seq=table.c_seq[c],
        c_ts=table.c_ts[c],
        c_node=table.c_node[c],
        telemetry={k: v[keep] for k, v in tel.items()},
    )
    return sub, r, a
