"""``build_feature_dataset``: a whole event stream -> one row per (tick, candidate block).

Columns: ``tick_ms``, ``block`` (uint64 hash), ``home_node`` (node of the block's last
request), the features in spec order, the labels (see :mod:`kvcast.features.offline.labels`)
and ``weight``. Rows are grouped by block (ascending hash), ticks ascending within a block:
the order in which every lookup is a sorted binary search (sort by ``tick_ms`` if needed).
``df.attrs`` holds the bad-input counters, the number of block events read and the spec digest.
Features read only events at or before the row's tick; they equal ``FeatureState.rows`` on the
same events.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from kvcast.features.config import FeatureConfig, TickConfig
from kvcast.features.counters import BadInputCounters
from kvcast.features.derive import meta_columns, session_columns
from kvcast.features.events import Event
from kvcast.features.offline.accesses import Accesses, accesses
from kvcast.features.offline.candidates import (
    Rows,
    candidate_ranges,
    full_accesses,
    table_and_ticks,
)
from kvcast.features.offline.distinct import row_keys, window_counts
from kvcast.features.offline.heat import decayed_counts
from kvcast.features.offline.labels import (
    burst_counts,
    burst_due,
    due_ticks,
    label_columns,
    sampled_rows,
)
from kvcast.features.offline.residency import residency_rows
from kvcast.features.offline.sessions import (
    first_branch,
    session_keys,
    session_rows,
    session_state,
)
from kvcast.features.offline.table import EventTable
from kvcast.features.offline.telemetry import node_table
from kvcast.features.spec import build_spec


def _child_codes(table: EventTable, acc: Accesses) -> np.ndarray:
    """Per sorted access: the code of the next block of the same request, -1 at the end."""
    code = np.empty(len(acc), dtype=np.int64)
    code[acc.order] = acc.code
    child = np.full(len(acc), -1)
    same = table.a_req[1:] == table.a_req[:-1]
    child[:-1] = np.where(same, code[1:], -1)
    return child[acc.order]


def _feature_columns(
    table: EventTable,
    acc: Accesses,
    rows: Rows,
    ticks: np.ndarray,
    cfg: FeatureConfig,
    bad: BadInputCounters,
) -> list[np.ndarray]:
    i, t, code = rows.access, rows.t, acc.code[rows.access]
    req = acc.req[i]
    child = _child_codes(table, acc)
    keys, n_explicit = session_keys(
        table, acc, first_branch(table, acc, child, cfg.distinct_window_ms)
    )
    state = session_state(table, keys, cfg)
    last, turns, ewma, var, explicit = session_rows(
        state, keys, req, rows, ticks, n_explicit, cfg.horizon_ms
    )
    cols = session_columns(t, last, turns, ewma, var, explicit, cfg.session.think_factor)
    since = t - acc.ts[i]
    for h in cfg.heat_half_lives_ms:
        cols.append(decayed_counts(acc, h)[i] * np.exp2(-since / h))
    rk = row_keys(acc, rows, cfg.distinct_window_ms)
    has_child = np.flatnonzero(child >= 0)
    acc_keys = keys[acc.req]
    has_sess = np.flatnonzero(acc_keys >= 0)
    tenant = np.unique(table.r_tenant, return_inverse=True)[1].reshape(-1)[acc.req]
    pos = acc.pos[i].astype(float)
    cols += [
        pos,
        window_counts(has_child, child[has_child], acc, rk),
        window_counts(has_sess, acc_keys[has_sess], acc, rk),
        window_counts(np.arange(len(acc)), tenant, acc, rk),
        t - acc.ts[acc.epoch_start[i]],
        since,
    ]
    home = table.r_node[req]
    nodes = node_table(table.telemetry, ticks, cfg, bad)
    at = home * len(ticks) + rows.tick  # gather each column from a contiguous copy
    cols += [col.take(at) for col in nodes.reshape(-1, nodes.shape[-1]).T.copy()]
    cols += meta_columns(table.r_input[req].astype(float), pos, cfg)
    cols += residency_rows(table, acc, rk, cfg.nodes, code, home, bad)
    cols += [table.r_tenant[req], (acc.pos[i] < table.r_public[req]).astype(float)]
    return cols


def build_feature_dataset(
    events: Iterable[Event] | EventTable,
    ticks: np.ndarray | TickConfig | None = None,
    cfg: FeatureConfig | None = None,
) -> pd.DataFrame:
    """The training table at ``ticks``: explicit times, or the grid of a :class:`TickConfig`
    (default: ``cfg.ticks``). ``events`` may be a prebuilt :class:`EventTable`."""
    cfg, table, ticks = table_and_ticks(events, ticks, cfg)
    acc = accesses(table, cfg.horizon_ms, ticks)
    full = full_accesses(table, acc, cfg.block_tokens)
    lo, counts = candidate_ranges(acc, cfg.ticks.lookback_ms, full)
    due = due_ticks(acc, cfg.labels.horizon_ms)
    rows, weight = sampled_rows(acc, lo, counts, burst_due(acc, due, cfg.labels.k), cfg)
    count = burst_counts(acc, rows, due)
    block = acc.hashes[acc.code[rows.access]]
    spec = build_spec(cfg)
    bad = BadInputCounters()
    bad.counts.update(table.bad.counts)
    feats = _feature_columns(table, acc, rows, ticks, cfg, bad)
    data = {"tick_ms": rows.t, "block": block, "home_node": table.r_node[acc.req[rows.access]]}
    data |= {
        name: np.asarray(col, dtype=float) for name, col in zip(spec.names, feats, strict=True)
    }
    data |= label_columns(table, acc, rows, count, cfg) | {"weight": weight}
    df = pd.DataFrame(data, copy=False)  # one block per column: no 2-D copy
    df.attrs["bad_input"] = bad.as_dict()
    df.attrs["block_events"] = table.block_events
    df.attrs["spec_digest"] = spec.digest
    return df
