"""Events -> :class:`EventTable`: validation, ordering and flattening, once per stream.

Every event is checked with the online rules (same counters); one more than
``reorder_tolerance_ms`` older than the newest before it is dropped; the rest are stably sorted
by time: the order ``FeatureState`` applies them in.
"""

from __future__ import annotations

from collections.abc import Iterable
from operator import attrgetter

import numpy as np

from kvcast.features.block_meta import tenant_code
from kvcast.features.config import FeatureConfig
from kvcast.features.counters import BadInputCounters
from kvcast.features.events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    Event,
    ReplicationDone,
    RequestArrived,
)
from kvcast.features.offline.table import TELEMETRY_FIELDS, EventTable, u64_hashes
from kvcast.features.validate import check, unique_blocks

_telemetry_values = attrgetter(*TELEMETRY_FIELDS)


def _accepted(events: Iterable[Event], cfg: FeatureConfig, bad: BadInputCounters) -> list[Event]:
    kept: list[Event] = []
    newest, tol, nodes = float("-inf"), cfg.reorder_tolerance_ms, cfg.nodes
    unordered = False
    for ev in events:
        reason = check(ev, nodes)
        if reason is not None:
            bad.counts[reason] += 1
            continue
        ts = ev.ts_ms
        if ts < newest:
            if newest - ts > tol:
                bad.counts["out_of_order_dropped"] += 1
                continue
            bad.counts["reordered"] += 1
            unordered = True
        else:
            newest = ts
        kept.append(ev)
    return sorted(kept, key=lambda e: e.ts_ms) if unordered else kept


def event_table(events: Iterable[Event], cfg: FeatureConfig) -> EventTable:
    bad = BadInputCounters()
    req: list[tuple] = []
    a_req: list[int] = []
    a_pos: list[int] = []
    a_hash: list[int] = []
    res: list[tuple[int, float, int, int, int, int]] = []  # seq ts node kind tier count
    s_hash: list[int] = []
    clears: list[tuple[int, float, int]] = []
    tel: list[tuple] = []
    block_events = 0
    for seq, ev in enumerate(_accepted(events, cfg, bad)):
        kind = type(ev)
        if kind is RequestArrived:
            hashes, repeats = unique_blocks(ev.block_hashes)
            if repeats:
                bad.counts["duplicate_block_in_request"] += repeats
            n = len(hashes)
            a_req.extend([len(req)] * n)
            a_pos.extend(range(n))
            a_hash.extend(hashes)
            req.append(
                (ev.ts_ms, seq, ev.node, ev.input_tokens, ev.public_blocks, ev.tenant, ev.session)
            )
            block_events += n
        elif kind is BlockStored or kind is BlockRemoved or kind is ReplicationDone:
            if kind is ReplicationDone and not ev.ok:
                continue
            node = ev.target if kind is ReplicationDone else ev.node
            tier = 0 if kind is ReplicationDone or ev.medium == "GPU" else 1
            hashes = unique_blocks(ev.block_hashes)[0]  # set semantics, as online
            n = len(hashes)
            res.append((seq, ev.ts_ms, node, -1 if kind is BlockRemoved else 1, tier, n))
            s_hash.extend(hashes)
            block_events += n
        elif kind is AllBlocksCleared:
            clears.append((seq, ev.ts_ms, ev.node))
        else:  # TelemetrySample
            tel.append((ev.ts_ms, seq, ev.node, *_telemetry_values(ev)))
    return _columns(req, a_req, a_pos, a_hash, res, s_hash, clears, tel, bad, block_events)


def _columns(
    req: list[tuple],
    a_req: list[int],
    a_pos: list[int],
    a_hash: list[int],
    res: list[tuple[int, float, int, int, int, int]],
    s_hash: list[int],
    clears: list[tuple[int, float, int]],
    tel: list[tuple],
    bad: BadInputCounters,
    block_events: int,
) -> EventTable:
    r = list(zip(*req, strict=True)) if req else [()] * 7
    codes = {t: tenant_code(t) for t in set(r[5])}
    s = np.array(res, dtype=float).reshape(-1, 6)
    counts = s[:, 5].astype(np.int64)
    c = np.array(clears, dtype=float).reshape(-1, 3)
    t = np.array(tel, dtype=float).reshape(-1, 3 + len(TELEMETRY_FIELDS))
    telemetry = {"ts": t[:, 0], "seq": t[:, 1].astype(np.int64), "node": t[:, 2].astype(np.int64)}
    telemetry |= {f: t[:, 3 + i] for i, f in enumerate(TELEMETRY_FIELDS)}
    return EventTable(
        r_ts=np.array(r[0], dtype=float),
        r_seq=np.array(r[1], dtype=np.int64),
        r_node=np.array(r[2], dtype=np.int64),
        r_input=np.array(r[3], dtype=np.int64),
        r_public=np.array(r[4], dtype=np.int64),
        r_tenant=np.array([codes[x] for x in r[5]], dtype=float),
        r_session=list(r[6]),
        a_req=np.array(a_req, dtype=np.int64),
        a_pos=np.array(a_pos, dtype=np.int64),
        a_hash=u64_hashes(a_hash),
        s_seq=np.repeat(s[:, 0].astype(np.int64), counts),
        s_ts=np.repeat(s[:, 1], counts),
        s_node=np.repeat(s[:, 2].astype(np.int64), counts),
        s_kind=np.repeat(s[:, 3].astype(np.int64), counts),
        s_tier=np.repeat(s[:, 4].astype(np.int64), counts),
        s_hash=u64_hashes(s_hash),
        c_seq=c[:, 0].astype(np.int64),
        c_ts=c[:, 1],
        c_node=c[:, 2].astype(np.int64),
        telemetry=telemetry,
        bad=bad,
        block_events=block_events,
    )
