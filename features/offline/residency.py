"""Residency at each row: replica counts and masks per tier, and whether the home node holds it.

Each (block, node, tier) has a flag after every residency event: 1 after a store, 0 after a
remove or a clear of the node (a clear removes every block stored there before it). A block's
count and mask change by the change of that flag; its state at a tick is the running sum up to
its last event at or before the tick. Removing a block whose flag is 0 is counted, as online.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvcast.features.counters import BadInputCounters
from kvcast.features.derive import MASK_NODES
from kvcast.features.offline.candidates import first_tick_at_or_after
from kvcast.features.offline.table import EventTable


@dataclass(frozen=True)
class Changes:
    ident: np.ndarray  # block identity among residency events
    code: np.ndarray  # access code, -1 for blocks never requested
    node: np.ndarray
    tier: np.ndarray
    flag: np.ndarray
    seq: np.ndarray
    ts: np.ndarray
    removal: np.ndarray  # an explicit BlockRemoved (counted when nothing was there)

    def take(self, idx: np.ndarray) -> Changes:
        return Changes(*(getattr(self, f)[idx] for f in self.__dataclass_fields__))


def changes(table: EventTable, hashes: np.ndarray) -> Changes:
    """Every residency change in event order, clears expanded; ``hashes``: the requested
    blocks' hashes (others get code -1)."""
    uniq, ident = np.unique(table.s_hash, return_inverse=True)
    at = np.searchsorted(hashes, uniq)
    known = at < len(hashes)
    known[known] = hashes[at[known]] == uniq[known]
    code = np.where(known, at, -1)[ident]
    base = Changes(
        ident,
        code,
        table.s_node,
        table.s_tier,
        (table.s_kind > 0).astype(np.int64),
        table.s_seq,
        table.s_ts,
        table.s_kind < 0,
    )
    parts = [base]
    for seq, ts, node in zip(table.c_seq, table.c_ts, table.c_node, strict=True):
        before = np.flatnonzero((base.node == node) & (base.seq < seq) & (base.flag > 0))
        key = base.ident[before] * 2 + base.tier[before]
        cleared = base.take(before[np.unique(key, return_index=True)[1]])
        n = len(cleared.ident)
        parts.append(
            Changes(
                cleared.ident,
                cleared.code,
                cleared.node,
                cleared.tier,
                np.zeros(n, np.int64),
                np.full(n, seq),
                np.full(n, ts),
                np.zeros(n, dtype=bool),
            )
        )
    if len(parts) == 1:
        return base
    fields = Changes.__dataclass_fields__
    merged = Changes(*(np.concatenate([getattr(p, f) for p in parts]) for f in fields))
    return merged.take(np.argsort(merged.seq, kind="stable"))


def flag_deltas(ch: Changes, nodes: int, bad: BadInputCounters) -> np.ndarray:
    """Change of each event's (block, node, tier) flag; counts removals of absent blocks."""
    pair = (ch.ident * nodes + ch.node) * 2 + ch.tier
    order = np.argsort(pair, kind="stable")  # changes are in event order
    prev = np.zeros(len(order), dtype=np.int64)
    same = pair[order][1:] == pair[order][:-1]
    prev[1:] = np.where(same, ch.flag[order][:-1], 0)
    delta = np.empty(len(order), dtype=np.int64)
    delta[order] = ch.flag[order] - prev
    absent = np.zeros(len(order), dtype=bool)
    absent[order] = prev == 0
    bad.inc("removed_not_resident", int((absent & ch.removal).sum()))
    return delta


def _state_at(
    key: np.ndarray,
    rank: np.ndarray,
    value: np.ndarray,
    m: int,
    query_key: np.ndarray,
    query_tick: np.ndarray,
    cumulative: bool,
) -> np.ndarray:
    """Per query: value after the key's last event with rank <= tick (summed if cumulative).
    Events must come in event order."""
    if len(key) == 0:
        return np.zeros(len(query_key), dtype=np.int64)
    order = np.argsort(key, kind="stable")
    k, v = key[order], value[order]
    if cumulative:
        total = np.cumsum(v)
        start = np.searchsorted(k, k, "left")
        v = total - np.where(start > 0, total[start - 1], 0)
    at = np.searchsorted(k * m + rank[order], query_key * m + query_tick, "right") - 1
    ok = at >= 0
    ok[ok] &= k[at[ok]] == query_key[ok]
    return np.where(ok, v[np.maximum(at, 0)], 0)


def residency_rows(
    table: EventTable,
    hashes: np.ndarray,
    ticks: np.ndarray,
    nodes: int,
    row_code: np.ndarray,
    row_tick: np.ndarray,
    row_home: np.ndarray,
    bad: BadInputCounters,
) -> list[np.ndarray]:
    """replicas_gpu, replicas_lower, replica_mask, home_holds per row."""
    ch = changes(table, hashes)
    delta = flag_deltas(ch, nodes, bad)
    ch_rank = first_tick_at_or_after(ticks, ch.ts)
    m = len(ticks) + 1
    keep = (ch.code >= 0) & (delta != 0)  # no-op stores and removes change nothing
    out = []
    for tier in (0, 1):
        sel = keep & (ch.tier == tier)
        args = (ch.code[sel], ch_rank[sel])
        out.append(_state_at(*args, delta[sel], m, row_code, row_tick, cumulative=True))
    gpu = keep & (ch.tier == 0)
    bit = np.where(ch.node < MASK_NODES, np.left_shift(1, np.minimum(ch.node, 62)), 0)
    args = (ch.code[gpu], ch_rank[gpu])
    mask = _state_at(*args, delta[gpu] * bit[gpu], m, row_code, row_tick, cumulative=True)
    pair = ch.code[gpu] * nodes + ch.node[gpu]
    home = _state_at(
        pair,
        ch_rank[gpu],
        ch.flag[gpu],
        m,
        row_code * nodes + np.maximum(row_home, 0),
        row_tick,
        cumulative=False,
    )
    return [out[0].astype(float), out[1].astype(float), mask.astype(float), home.astype(float)]
