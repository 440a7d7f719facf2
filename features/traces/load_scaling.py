"""How a load factor X turns a trace into X times the traffic (``SimConfig.load_scaling``).

- ``arrivals``: every arrival time divided by X (:meth:`Trace.time_scaled`): the same requests
  X times as fast. Within a conversation or an agent task the gaps shrink too, so the user's
  think time and the agent's tool time, which a predictive copy hides in, are X times shorter.
- ``sessions``: X times as many sessions over the same span, each as it was. Sessions are
  told apart by :mod:`kvcast.features.traces.sessions`; each is replayed ``floor(X)`` times,
  plus once more with probability ``X - floor(X)`` (so X < 1 thins the trace): the first
  replay as recorded, every further one starting where a session drawn at random started,
  with its own gaps kept (turns past the end wrap around to the start, as ``kvcast trace
  synth`` does: the load stays level, and the first minutes hold late turns of sessions begun
  before them, as a recorded trace's first minutes do), and the blocks only that session
  uses renamed to fresh ids (a block that two or more sessions use, such as a system prompt
  or an agent app's tool descriptions, keeps its id, so sharing between sessions stays what
  it was). This is how load grows in a real cluster: more users or agents, each as fast as
  before.

At X = 1 both return the trace as it is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Literal

import numpy as np
import pandas as pd

from kvcast.features.traces.block_ids import fresh_ids
from kvcast.features.traces.sessions import replay_span, session_ids, session_starts
from kvcast.features.traces.table import Trace, sort_by_arrival

LoadScaling = Literal["arrivals", "sessions"]


def _shared_blocks(chains: list[list[int]], sess: np.ndarray) -> set[int]:
    """The blocks that two or more sessions use."""
    owner: dict[int, int] = {}
    shared: set[int] = set()
    for s, hs in zip(sess.tolist(), chains, strict=True):
        for h in hs:
            if owner.setdefault(h, s) != s:
                shared.add(h)
    return shared


class _FreshIds:
    """Per replay, a fresh id for each private block: counting up above the trace's ids, then
    (ids reaching the int64 maximum, or the u64 one for a trace of u64 hashes) down below
    them, then in the gaps between them (:func:`kvcast.features.traces.block_ids.fresh_ids`)."""

    def __init__(self, chains: list[list[int]]) -> None:
        self.free = fresh_ids([h for hs in chains for h in hs])
        self.ids: dict[tuple[int, int], int] = {}

    def __call__(self, block: int, replay: int) -> int:
        key = (replay, block)
        got = self.ids.get(key)
        if got is None:
            got = next(self.free, None)
            if got is None:
                raise ValueError("load scaling by sessions ran out of 64-bit block ids")
            self.ids[key] = got
        return got


def _separator(names: list[set[str]], replays: int) -> str:
    """The separator of replay names (``name + sep + k``, k = 1 .. replays - 1) that names no
    existing name in any of the sets (a trace already scaled and saved has ``r~1``)."""
    sep = "~"
    while any(_taken(ns, sep, replays) for ns in names):
        sep += "~"
    return sep


def _taken(names: set[str], sep: str, replays: int) -> bool:
    for m in names:
        if sep in m:
            head, _, k = m.rpartition(sep)
            if k.isdigit() and 1 <= int(k) < replays and head in names:
                return True
    return False


def _sessions(trace: Trace, factor: float, seed: int) -> Trace:
    df = trace.requests
    if len(df) == 0:
        return trace
    chains = [list(map(int, h)) for h in df["block_hashes"]]
    sess = session_ids(df)
    t = df["arrival_ms"].to_numpy(dtype=float)
    start = session_starts(sess, t)
    n_sess = len(start)
    rng = np.random.default_rng(seed)
    whole = int(factor)
    replays = whole + (rng.random(n_sess) < factor - whole)  # per session
    t0, span = float(t.min()), replay_span(t)
    shared = _shared_blocks(chains, sess)
    fresh = _FreshIds(chains)
    session = df["session"]
    named = (session.notna() & (session != "")).fillna(False).to_numpy(bool)  # "": unknown
    rounds = int(replays.max())
    sep = _separator([set(df["request_id"]), set(session[named])], rounds)
    parts = []
    for k in range(rounds):
        rows = np.flatnonzero(replays[sess] > k)
        part = df.iloc[rows].copy()
        if k:
            moved = start[rng.integers(n_sess, size=n_sess)]  # each session's new start
            s = sess[rows]
            part["arrival_ms"] = t0 + (moved[s] + (t[rows] - start[s]) - t0) % span
            part["block_hashes"] = [
                [h if h in shared else fresh(h, k) for h in chains[i]] for i in rows.tolist()
            ]
            part["request_id"] = part["request_id"] + f"{sep}{k}"
            own = named[rows]  # an unknown session (NA, "") stays unknown: inferred again
            part["session"] = part["session"].where(~own, part["session"] + f"{sep}{k}")
            part["chat_id"] = pd.NA
            part["parent_chat_id"] = pd.NA
        parts.append(part)
    if not parts:  # X < 1 and no session drawn
        return replace(trace, requests=df.iloc[:0].copy())
    out = pd.concat(parts, ignore_index=True).astype(df.dtypes.to_dict())
    out, _ = sort_by_arrival(out)
    return replace(trace, requests=out.reset_index(drop=True))


SCALERS: dict[str, Callable[[Trace, float, int], Trace]] = {
    "arrivals": lambda trace, factor, seed: trace.time_scaled(factor),
    "sessions": _sessions,
}


def scale_load(trace: Trace, factor: float, how: LoadScaling = "arrivals", seed: int = 0) -> Trace:
    """``trace`` at ``factor`` times its load, the ``how`` way (see the module doc); ``seed``
    draws the ``sessions`` replays."""
    if not np.isfinite(factor) or factor <= 0:
        raise ValueError(f"time-scale must be a positive finite number, got {factor!r}")
    if how not in SCALERS:
        raise ValueError(f"unknown load scaling {how!r}; valid: {', '.join(sorted(SCALERS))}")
    return trace if factor == 1.0 else SCALERS[how](trace, factor, seed)
