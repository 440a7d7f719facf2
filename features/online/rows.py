"""Gather ``FeatureState`` into the feature matrix at a decision tick.

A block's *home* node is the node its last request was routed to; the queue and memory
families describe that node. A block without live state (never requested, or unseen for
``horizon_ms``) gets NaN everywhere except its residency columns.

Vectorised: the blocks are looked up and grouped by run in C-level passes (``map`` over the
dicts, ``np.unique`` of the run ids), each distinct run's values are read once into arrays
(``itemgetter``, again C-level), and each row takes its run's values by fancy indexing. No
Python step runs per row or per run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import chain, repeat
from operator import itemgetter
from typing import TYPE_CHECKING, Any

import numpy as np

from kvcast.features.derive import meta_columns, session_columns
from kvcast.features.online.blocks import (
    BASE,
    CHILD,
    FIRST,
    HASHES,
    LAST,
    POS0,
    REQ,
    SESS,
    TENANT,
    Run,
)
from kvcast.features.online.keys import count_many

if TYPE_CHECKING:
    from kvcast.features.online.state import FeatureState

NAN = float("nan")
NO_SESSION = (NAN, NAN, NAN, NAN)  # last, turns, gap EWMA, gap variance
REC = itemgetter(1, 3, 4, 5, 6)  # of a request record: node, tokens, public, tenant, explicit


def _table(getter: Callable[[Any], Iterable[float]], items: list, width: int) -> np.ndarray:
    """``[len(items), width]`` floats: ``getter`` (``width`` fields) of each item."""
    flat = chain.from_iterable(map(getter, items))
    return np.fromiter(flat, float, len(items) * width).reshape(len(items), width)


def _runs_of(state: FeatureState, hashes: list[int]) -> tuple[list[Run], np.ndarray]:
    """The distinct runs of ``hashes`` (a dead stand-in for blocks without state) and each
    hash's index among them."""
    table = state.blocks
    found = list(map(table.run_of.get, hashes, repeat(table.dead)))
    ids = np.fromiter(map(id, found), np.int64, len(found))
    _, first, at = np.unique(ids, return_index=True, return_inverse=True)
    return list(map(found.__getitem__, first.tolist())), at


def _per_run(state: FeatureState, now: float, runs: list[Run]) -> dict[str, np.ndarray]:
    """Arrays over ``runs``: ``cols`` (the columns that are a function of the run alone:
    session, heat, distinct sessions and tenants, ages, tenant) and the parts of the others."""
    table, k, window = state.blocks, state.blocks.k, state.blocks.window
    fields = itemgetter(*range(k), k + FIRST, k + LAST, k + POS0, k + BASE)
    v = _table(fields, runs, k + 4)
    first, last, pos0, base = v[:, k], v[:, k + 1], v[:, k + 2], v[:, k + 3]
    size = np.fromiter(map(len, map(itemgetter(k + HASHES), runs)), np.intp, len(runs))
    recs = list(map(itemgetter(k + REQ), runs))
    rec = _table(REC, recs, 5)
    keys = map(itemgetter(2), recs)
    sv = _table(iter, list(map(state.sessions.sessions.get, keys, repeat(NO_SESSION))), 4)
    alive = sv[:, 0] + state.sessions.horizon > now
    sv[~alive] = NAN
    explicit = np.where(alive, rec[:, 4], NAN)
    now_r = np.full(len(runs), now)
    think = state.cfg.session.think_factor
    decay = np.array([2.0 ** (-(now - table.t0) / hl) for hl in table.half_lives])
    cols = [
        *session_columns(now_r, sv[:, 0], sv[:, 1], sv[:, 2], sv[:, 3], explicit, think),
        *(v[:, :k] * decay).T,
        count_many(runs, k + SESS, now, window),
        count_many(runs, k + TENANT, now, window),
        now_r - first,
        now_r - last,
        rec[:, 3],
    ]
    return {
        "cols": np.column_stack(cols),
        "live": last + table.horizon > now,
        "pos_base": pos0 - base,  # depth = this + the block's offset (``BlockTable.off_of``)
        "end": base + size - 1,  # the offset of the run's last block
        "children": count_many(runs, k + CHILD, now, window),  # fan-out of the last block
        "next": (last + window > now).astype(float),  # fan-out of the others
        "home": rec[:, 0],
        "tokens": rec[:, 1],
        "public": rec[:, 2],
    }


def assemble_rows(state: FeatureState, now: float, hashes: list[int]) -> np.ndarray:
    table, n, width = state.blocks, len(hashes), len(state.spec)
    if n == 0:
        return np.zeros((0, width))
    runs, at = _runs_of(state, hashes)
    p = _per_run(state, now, runs)
    off = np.fromiter(map(table.off_of.get, hashes, repeat(0)), np.intp, n)
    pos = p["pos_base"][at] + off
    live = p["live"][at]
    homes = np.where(live, p["home"][at], -1).astype(np.intp)
    nodes = state.nodes
    node_rows = np.full((len(nodes) + 1, nodes[0].width), NAN)  # the last row: no home
    for x in np.unique(homes[homes >= 0]).tolist():
        node_rows[x] = nodes[x].row(now)

    out = np.empty((n, width))
    h = 7 + table.k  # the first column after the session and heat families
    m = h + 6 + nodes[0].width  # the first meta column
    out[:, [*range(h), h + 2, h + 3, h + 4, h + 5, width - 2]] = p["cols"][at]
    out[:, h] = pos
    out[:, h + 1] = np.where(off == p["end"][at], p["children"][at], p["next"][at])
    out[:, h + 6 : m] = node_rows[homes]
    out[:, m : m + 4] = np.column_stack(meta_columns(p["tokens"][at], pos, state.cfg))
    out[:, width - 1] = pos < p["public"][at]
    out[~live] = NAN
    out[:, m + 4 : m + 8] = np.column_stack(state.residency.columns(hashes, homes))
    return out
