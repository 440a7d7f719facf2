"""Events -> :class:`EventTable`: validation, ordering and flattening, once per stream.

Every event is checked with the online rules (same counters); one more than
``reorder_tolerance_ms`` older than the newest before it is dropped; the rest are stably sorted
by time: the order ``FeatureState`` applies them in.

The work is done per event type in bulk: the events are grouped by type, each field becomes a
column (one list comprehension per field) and the checks run on whole columns
(:func:`kvcast.features.validate.check_columns`; a column that is not plain numbers falls back
to :func:`kvcast.features.validate.check` per event).
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import repeat
from operator import eq

import numpy as np

from kvcast.features.block_meta import tenant_code
from kvcast.features.config import FeatureConfig
from kvcast.features.counters import BadInputCounters
from kvcast.features.events import Event, RequestArrived
from kvcast.features.offline.accesses import stable_order
from kvcast.features.offline.blocks import flat_blocks
from kvcast.features.offline.groups import KINDS, Group, groups, take
from kvcast.features.offline.table import TELEMETRY_FIELDS, EventTable

STORED, REMOVED, CLEARED, TELEMETRY, REPLICATED = range(1, 6)  # indices into KINDS


def _kept_order(gs: list[Group | None], n: int, tol: float, bad: BadInputCounters) -> np.ndarray:
    """Stream positions of the events ``FeatureState`` applies, in the order it applies them."""
    ts = np.zeros(n)
    valid = np.zeros(n, dtype=bool)
    for g in gs:
        if g is not None:
            ts[g.idx] = g.ts
            valid[g.idx] = g.good
    idx = np.flatnonzero(valid)
    t = ts[idx]
    newest = np.full(len(t), -np.inf)
    if len(t) > 1:
        newest[1:] = np.maximum.accumulate(t[:-1])
    late = t < newest
    drop = late & (newest - t > tol)
    bad.counts["out_of_order_dropped"] += int(drop.sum())
    bad.counts["reordered"] += int(late.sum()) - int(drop.sum())
    if drop.any():
        idx, t = idx[~drop], t[~drop]
    return idx[np.argsort(t, kind="stable")] if late.any() else idx


def _tiers(events: list) -> np.ndarray:
    """0 where the medium is "GPU", else 1."""
    try:
        kinds = {e.medium for e in events}
    except TypeError:  # something unhashable: compare one by one
        kinds = None
    if kinds == {"GPU"}:
        return np.zeros(len(events), np.int64)
    media = [e.medium for e in events]
    return (~np.fromiter(map(eq, media, repeat("GPU")), bool, len(media))).astype(np.int64)


def _residency(gs: list[Group | None], pos: np.ndarray) -> dict:
    """Residency rows (one per block) of the stores, removals and good replications."""
    parts, flat = [], []
    for k in (STORED, REMOVED, REPLICATED):
        g = gs[k]
        if g is None:
            continue
        seq, rows = g.rows(pos)
        hashes = take(g.cols["block_hashes"], rows)
        if k == REPLICATED:
            ok = np.fromiter((bool(e.ok) for e in take(g.events, rows)), bool, len(rows))
            seq, rows = seq[ok], rows[ok]
            hashes = [h for h, o in zip(hashes, ok.tolist(), strict=True) if o]
            tier = np.zeros(len(rows), np.int64)
        else:
            tier = _tiers(take(g.events, rows))
        node = g.floats("target" if k == REPLICATED else "node", rows).astype(np.int64)
        kind = np.full(len(rows), -1 if k == REMOVED else 1, np.int64)
        block_hashes, counts = flat_blocks(hashes, None)
        flat.append(block_hashes)
        parts.append((seq, g.ts[rows], node, kind, tier, counts))
    names = ("s_seq", "s_ts", "s_node", "s_kind", "s_tier")
    if not parts:
        empty = {n: np.zeros(0, float if n == "s_ts" else np.int64) for n in names}
        return empty | {"s_hash": np.zeros(0, np.uint64)}
    *cols, counts = (np.concatenate(c) for c in zip(*parts, strict=True))
    hashes = np.concatenate(flat)
    if len(parts) > 1:  # interleave the types' events (and their hashes) in event order
        order = stable_order(cols[0])
        start = np.cumsum(counts) - counts
        cols, counts = [c[order] for c in cols], counts[order]
        hashes = hashes[
            np.repeat(start[order] - np.cumsum(counts) + counts, counts) + np.arange(len(hashes))
        ]
    out = {n: np.repeat(c, counts) for n, c in zip(names, cols, strict=True)}
    return out | {"s_hash": hashes}


def _requests(g: Group | None, pos: np.ndarray, bad: BadInputCounters) -> dict:
    seq, rows = g.rows(pos) if g is not None else (np.zeros(0, np.int64),) * 2
    cols = g.cols if g is not None else {f: [] for f in ("tenant", "session", "block_hashes")}
    a_hash, lens = flat_blocks(take(cols["block_hashes"], rows), bad)
    tenants = take(cols["tenant"], rows)
    codes = {t: tenant_code(t) for t in set(tenants)}
    ints = ("node", "input_tokens", "public_blocks")
    node, inp, public = (np.array(take(cols.get(f, []), rows), dtype=np.int64) for f in ints)
    starts = np.repeat(np.cumsum(lens) - lens, lens)
    return {
        "r_ts": g.ts[rows] if g is not None else np.zeros(0),
        "r_seq": seq,
        "r_node": node,
        "r_input": inp,
        "r_public": public,
        "r_tenant": np.array([codes[x] for x in tenants], dtype=float),
        "r_session": take(cols["session"], rows),
        "a_req": np.repeat(np.arange(len(lens)), lens),
        "a_pos": np.arange(len(starts)) - starts,
        "a_hash": a_hash,
    }


def _small(g: Group | None, pos: np.ndarray, names: tuple) -> list:
    """seq, ts, node and ``names`` of a small group as float columns."""
    if g is None:
        return [np.zeros(0)] * (3 + len(names))
    seq, rows = g.rows(pos)
    return [seq.astype(float), g.ts[rows], *(g.floats(f, rows) for f in ("node", *names))]


def event_table(events: Iterable[Event], cfg: FeatureConfig) -> EventTable:
    bad = BadInputCounters()
    evs = events if isinstance(events, list) else list(events)
    gs = groups(evs, cfg.nodes, bad)
    kept = _kept_order(gs, len(evs), cfg.reorder_tolerance_ms, bad)
    pos = np.full(len(evs), -1, np.int64)  # stream position -> seq (-1: not applied)
    pos[kept] = np.arange(len(kept))
    table = _requests(gs[KINDS.index(RequestArrived)], pos, bad)
    table |= _residency(gs, pos)
    c = _small(gs[CLEARED], pos, ())
    t = _small(gs[TELEMETRY], pos, TELEMETRY_FIELDS)
    telemetry = {"ts": t[1], "seq": t[0].astype(np.int64), "node": t[2].astype(np.int64)}
    telemetry |= dict(zip(TELEMETRY_FIELDS, t[3:], strict=True))
    return EventTable(
        **table,
        c_seq=c[0].astype(np.int64),
        c_ts=c[1],
        c_node=c[2].astype(np.int64),
        telemetry=telemetry,
        bad=bad,
        block_events=len(table["a_hash"]) + len(table["s_hash"]),
    )
