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
from kvcast.features.offline.accesses import (
    Accesses,
    first_tick_at_or_after,
    group_starts,
    sort_ids,
    stable_order,
)
from kvcast.features.offline.distinct import RowKeys
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


def changes(table: EventTable, hashes: np.ndarray) -> tuple[Changes, np.ndarray]:
    """Every residency change in event order, clears expanded, and their stable order by
    block; ``hashes``: the requested blocks' hashes (others get code -1)."""
    uniq, by_block, ids = sort_ids(table.s_hash)
    ident = np.empty(len(ids), dtype=np.int64)
    ident[by_block] = ids
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
        return base, by_block
    fields = Changes.__dataclass_fields__
    merged = Changes(*(np.concatenate([getattr(p, f) for p in parts]) for f in fields))
    merged = merged.take(stable_order(merged.seq))
    return merged, stable_order(merged.ident)


def flag_deltas(ch: Changes, nodes: int, bad: BadInputCounters) -> np.ndarray:
    """Change of each event's (block, node, tier) flag; counts removals of absent blocks."""
    pair = (ch.ident * nodes + ch.node) * 2 + ch.tier
    order = stable_order(pair)  # changes are in event order
    pair, flag = pair[order], ch.flag[order]
    prev = np.zeros(len(order), dtype=np.int64)
    prev[1:] = np.where(pair[1:] == pair[:-1], flag[:-1], 0)
    delta = np.empty(len(order), dtype=np.int64)
    delta[order] = flag - prev
    bad.inc("removed_not_resident", int(((prev == 0) & ch.removal[order]).sum()))
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
    order = stable_order(key)
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
    acc: Accesses,
    rk: RowKeys,
    nodes: int,
    row_code: np.ndarray,
    row_home: np.ndarray,
    bad: BadInputCounters,
) -> list[np.ndarray]:
    """replicas_gpu, replicas_lower, replica_mask, home_holds per row (rows as in ``rk``)."""
    ch, by_block = changes(table, acc.hashes)
    delta = flag_deltas(ch, nodes, bad)
    live = (ch.code >= 0) & (delta != 0)  # no-op stores and removes change nothing
    sel = by_block[live[by_block]]  # by block (codes ascend with hashes), then event order
    if len(sel) == 0:
        return [np.zeros(len(rk.key)) for _ in range(4)]
    gpu = ch.tier == 0
    on_gpu = np.where(gpu, delta, 0)
    bit = np.where(ch.node < MASK_NODES, np.left_shift(1, np.minimum(ch.node, 62)), 0)
    code, rank = ch.code[sel], first_tick_at_or_after(acc.ticks, ch.ts)[sel]
    at = np.searchsorted(code * rk.m + rank, rk.key, "right") - 1  # last change at or before
    ok = at >= 0
    at[~ok] = 0
    ok &= code[at] == row_code
    first = group_starts(code)[at]

    def running(v: np.ndarray) -> np.ndarray:  # sum of v over the block's changes up to at
        total = np.zeros(len(v) + 1, dtype=np.int64)
        np.cumsum(v, out=total[1:])  # wraps past 2^63 as the differences need
        return np.where(ok, total[at + 1] - total[first], 0)

    lower = running((delta - on_gpu)[sel]) if not gpu.all() else np.zeros(len(at), np.int64)
    mask = running((on_gpu * bit)[sel])
    if nodes <= MASK_NODES:  # the home node's bit of the GPU mask
        home = (mask >> np.clip(row_home, 0, MASK_NODES - 1)) & 1
    else:
        home = _state_at(
            code[gpu[sel]] * nodes + ch.node[sel][gpu[sel]],
            rank[gpu[sel]],
            ch.flag[sel][gpu[sel]],
            rk.m,
            row_code * nodes + np.maximum(row_home, 0),
            rk.key - row_code * rk.m,
            cumulative=False,
        )
    return [
        running(on_gpu[sel]).astype(float),
        lower.astype(float),
        mask.astype(float),
        home.astype(float),
    ]
