"""Gather ``FeatureState`` into the feature matrix at a decision tick.

A block's *home* node is the node its last request was routed to; the queue and memory
families describe that node. A block without live state (never requested, or unseen for
``horizon_ms``) gets NaN everywhere except its residency columns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from kvcast.features.derive import MASK_NODES, meta_columns, session_columns
from kvcast.features.online.blocks import CHILD, FIRST, HASHES, LAST, POS0, REQ, SESS, TENANT
from kvcast.features.online.keys import count_keys

if TYPE_CHECKING:
    from kvcast.features.online.state import FeatureState

NAN = float("nan")
LOW_BITS = (1 << MASK_NODES) - 1
N_BLOCK = 9  # depth, fanout, sessions, tenants, first, last, input tokens, public, tenant


def _block_fields(state: FeatureState, now: float, h: int) -> tuple[list[float], list[float]]:
    """(session state + explicit flag, block fields) of one live block, else NaNs."""
    table = state.blocks
    k, window = table.k, table.window
    run = table.run_of.get(h)
    if not table.live(run, now):
        return [NAN] * 5, [NAN] * N_BLOCK
    rec = run[k + REQ]
    sess = state.sessions.live(rec[2], now) if rec[2] is not None else None
    hs = run[k + HASHES]
    off = hs.index(h)
    pos = run[k + POS0] + off
    if off < len(hs) - 1:  # inside a run the only child is the next block
        fanout = int(run[k + LAST] + window > now)
    else:
        fanout = count_keys(run, k + CHILD, now, window)
    fields = [
        float(pos),
        float(fanout),
        float(count_keys(run, k + SESS, now, window)),
        float(count_keys(run, k + TENANT, now, window)),
        run[k + FIRST],
        run[k + LAST],
        float(rec[3]),
        float(pos < rec[4]),
        rec[5],
    ]
    return ([NAN] * 5 if sess is None else [*sess, rec[6]]), fields


def assemble_rows(state: FeatureState, now: float, hashes: list[int]) -> np.ndarray:
    cfg, table = state.cfg, state.blocks
    k = table.k
    n = len(hashes)
    if n == 0:
        return np.zeros((0, len(state.spec)))
    sess_rows, block_rows, heat, homes = [], [], [], []
    for h in hashes:
        s, b = _block_fields(state, now, h)
        sess_rows.append(s)
        block_rows.append(b)
        run = table.run_of.get(h)
        alive = b[0] == b[0]  # not NaN
        heat.append(run[:k] if alive else [NAN] * k)
        homes.append(run[k + REQ][1] if alive else -1)
    s = np.array(sess_rows, dtype=float)
    b = np.array(block_rows, dtype=float)
    decay = np.array([2.0 ** (-(now - table.t0) / hl) for hl in table.half_lives])
    hcols = np.array(heat, dtype=float) * decay
    node_rows = {x: state.nodes[x].row(now) for x in set(homes) if x >= 0}
    width = len(state.nodes[0].row(now))
    nodes = np.array([node_rows.get(x, [NAN] * width) for x in homes], dtype=float)
    gpu, lower = state.residency.masks(hashes)
    home_holds = [(m >> x) & 1 if x >= 0 else NAN for m, x in zip(gpu, homes, strict=True)]
    now_v = np.full(n, now)
    think = cfg.session.think_factor
    cols = [
        *session_columns(now_v, s[:, 0], s[:, 1], s[:, 2], s[:, 3], s[:, 4], think),
        *hcols.T,
        *b[:, :4].T,
        now_v - b[:, 4],
        now_v - b[:, 5],
        *nodes.T,
        *meta_columns(b[:, 6], b[:, 0], cfg),
        np.array([m.bit_count() for m in gpu], dtype=float),
        np.array([m.bit_count() for m in lower], dtype=float),
        np.array([m & LOW_BITS for m in gpu], dtype=float),
        np.array(home_holds, dtype=float),
        b[:, 8],
        b[:, 7],
    ]
    return np.column_stack(cols)
