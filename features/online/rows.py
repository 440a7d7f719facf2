"""Gather ``FeatureState`` into the feature matrix at a decision tick.

A block's *home* node is the node its last request was routed to; the queue and memory
families describe that node. A block without live state (never requested, or unseen for
``horizon_ms``) gets NaN everywhere except its residency columns.

Vectorised: one C-level dict pass reads each block's code (its run's slot and its index in
the run, :mod:`kvcast.features.online.codes`), the rows are grouped by slot in numpy, each
distinct run's numbers are read from the table that keeps them packed by slot (packed again
only for the runs that changed since, :mod:`kvcast.features.online.run_numbers`) and made
into the run's row; a block's row is its run's row (one ``take``) with the few columns
that depend on the block's own position (depth, fan-out, block meta, public) and residency
written over. No Python step runs per row or per run.
"""

from __future__ import annotations

from itertools import repeat
from typing import TYPE_CHECKING

import numpy as np

from kvcast.features.derive import meta_columns, session_columns
from kvcast.features.online.blocks import (
    CHILD,
    SESS,
    TENANT,
    Run,
)
from kvcast.features.online.codes import MASK, SHIFT
from kvcast.features.online.keys import count_many
from kvcast.features.online.packing import pack, pack_rows

if TYPE_CHECKING:
    from kvcast.features.online.state import FeatureState

NAN = float("nan")
NO_SESSION = (NAN, NAN, NAN, NAN)  # last, turns, gap EWMA, gap variance


Runs = tuple[np.ndarray, np.ndarray, np.ndarray]  # see _runs_of


def _runs_of(state: FeatureState, hashes: list[int]) -> Runs:
    """The slots of the distinct runs of ``hashes`` (slot 0: a dead stand-in for blocks
    without state), each hash's index among them and its index in its run."""
    table = state.blocks
    codes = pack(map(table.code_of.get, hashes, repeat(0)), len(hashes), np.int64)
    slot = codes >> SHIFT
    if len(table.slot_runs) > 16 * len(hashes):
        slots, at = np.unique(slot, return_inverse=True)
    else:  # few slots in all: mark them, cheaper than sorting
        used = np.zeros(len(table.slot_runs), bool)
        used[slot] = True
        slots, at = np.flatnonzero(used), (np.cumsum(used) - 1)[slot]
    return slots, at, codes & MASK


def _per_run(state: FeatureState, now: float, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``[R, width]``: each run's row (the columns that are a function of the run alone:
    session, heat, distinct sessions and tenants, ages, home node, tenant; NaN for a run
    without live state), and ``[R, 7]`` what the other columns are made of (see ``PARTS``).
    The runs' own numbers come packed from :class:`~kvcast.features.online.run_numbers.
    RunNumbers`, their live older keys too where the count packed still holds at ``now``;
    the others' are counted from the runs."""
    table, k, window, r = state.blocks, state.blocks.k, state.blocks.window, len(slots)
    c, s, t = k + CHILD, k + SESS, k + TENANT
    v = table.numbers.read(table.slot_runs, slots, now)  # columns: RunNumbers.columns(k)
    rec = v[:, k + 6 : k + 11]  # the request's node, tokens, public, tenant, explicit
    keys = map(table.numbers.keys.__getitem__, slots.tolist())
    sv = pack_rows(map(state.sessions.sessions.get, keys, repeat(NO_SESSION)), r, 4)
    first, last = v[:, k], v[:, k + 1]
    alive = sv[:, 0] + state.sessions.horizon > now
    sv = np.where(alive[:, None], sv, NAN)
    explicit = np.where(alive, rec[:, 4], NAN)
    olders = bool(v[:, k + 12].any())  # some run keeps older keys
    counted = (v[:, k + 19] <= now) if olders else None  # their counts' time: not after now

    def distinct(kind: int, at: int, newest: np.ndarray) -> np.ndarray:
        out = (newest + window > now).astype(float)
        if counted is None:  # only newest keys anywhere
            return out
        live, until = v[:, k + 13 + 2 * kind], v[:, k + 14 + 2 * kind]
        afresh = np.flatnonzero(~(counted & (now < until)))  # their counts no longer hold
        out += live
        if len(afresh):
            runs: list[Run] = list(map(table.slot_runs.__getitem__, slots[afresh].tolist()))  # type: ignore[arg-type]
            out[afresh] = count_many(runs, at, now, window, newest[afresh])
        return out

    now_r = np.full(r, now)
    think = state.cfg.session.think_factor
    decay = np.array([2.0 ** (-(now - table.t0) / hl) for hl in table.half_lives])
    width, nodes = len(state.spec), state.nodes
    h = 7 + k  # the first column after the session and heat families
    m = h + 6 + nodes[0].width  # the first meta column
    out = np.empty((r, width))
    session = session_columns(now_r, sv[:, 0], sv[:, 1], sv[:, 2], sv[:, 3], explicit, think)
    for j, col in enumerate(session):  # into place (no stacked copy first)
        out[:, j] = col
    np.multiply(v[:, :k], decay, out=out[:, 7:h])
    out[:, h + 2] = distinct(1, s, v[:, k + 4])
    out[:, h + 3] = distinct(2, t, v[:, k + 5])
    np.subtract(now, first, out=out[:, h + 4])
    np.subtract(now, last, out=out[:, h + 5])
    out[:, width - 2] = rec[:, 3]
    live = last + table.horizon > now
    home = np.where(live, rec[:, 0], -1).astype(np.intp)
    node_rows = np.full((len(nodes) + 1, nodes[0].width), NAN)  # the last row: no home
    for x in np.flatnonzero(np.bincount(home[live], minlength=1)).tolist():
        node_rows[x] = nodes[x].row(now)
    out[:, h + 6 : m] = node_rows[home]
    if not live.all():
        out[~live] = NAN
    parts = np.empty((r, len(PARTS)))
    parts[:, 0] = v[:, k + 2]  # depth = this + the block's index in the run
    parts[:, 1] = v[:, k + 11]  # the run's last index
    parts[:, 2] = distinct(0, c, v[:, k + 3])  # fan-out of the run's last block
    parts[:, 3] = last + window > now  # fan-out of the others
    parts[:, 4] = rec[:, 1]  # the request's input tokens
    parts[:, 5] = rec[:, 2]  # its public blocks
    parts[:, 6] = home
    return out, parts


PARTS = ("pos0", "end", "children", "next", "tokens", "public", "home")


def assemble_rows(
    state: FeatureState, now: float, hashes: list[int], runs_of: Runs | None = None
) -> np.ndarray:
    """The rows of ``hashes`` (canonical u64); ``runs_of``: what :func:`_runs_of` would read
    of them, when already at hand (:meth:`~kvcast.features.online.chain_codes.ChainBlocks.runs`)."""
    n, width = len(hashes), len(state.spec)
    if n == 0:
        return np.zeros((0, width))
    runs, at, off = _runs_of(state, hashes) if runs_of is None else runs_of
    per_run, parts = _per_run(state, now, runs)
    out = per_run.take(at, axis=0)
    pos0, end, children, nxt, tokens, public, home = parts.take(at, axis=0).T
    h = 7 + state.blocks.k
    m = h + 6 + state.nodes[0].width
    pos = pos0 + off
    out[:, h] = pos
    out[:, h + 1] = np.where(off == end, children, nxt)
    for j, col in enumerate(meta_columns(tokens, pos, state.cfg)):
        out[:, m + j] = col
    out[:, width - 1] = pos < public
    homes = home.astype(np.intp)
    dead = homes < 0
    if dead.any():
        out[dead, h : h + 2] = NAN
        out[dead, m : m + 4] = NAN
        out[dead, width - 1] = NAN
    for j, col in enumerate(state.residency.columns(hashes, homes)):
        out[:, m + 4 + j] = col
    return out
