"""Sessions of a whole trace, offline: which requests are turns (or steps) of one conversation
(or agent task).

A request's session is its explicit id when the trace has one. Otherwise it is read off the
prefix tree of the whole trace: walking a request's chain from the root, the first block that
branches (is followed by two or more distinct *inner* blocks anywhere in the trace) ends the
prompt shared between sessions, and the block right after it names the session. An inner block
is one that some request continues past; a block that only ever ends a request (the partial
last block of a prompt, which gets a new id once the context grows) never makes a branch, so
a session's own chain, extended turn after turn, does not split it. A chain that never branches
is one session named by its root; a request that is only the shared prompt is a session of its
own, and so is one whose own part is under one block (its partial block is a leaf, and the next
turn's grown block has another id: hashes alone cannot link the two). Unlike the causal rule of
:mod:`kvcast.features.online.sessions` (which sees only the past), this one sees the whole
trace.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

import numpy as np
import pandas as pd


def branching_blocks(chains: Sequence[Sequence[int]]) -> set[int]:
    """The blocks followed by two or more distinct inner blocks (see the module doc)."""
    inner: set[int] = set()
    for hs in chains:
        inner.update(hs[:-1])
    first: dict[int, int] = {}  # block -> the first inner block seen after it
    branches: set[int] = set()
    for hs in chains:
        for a, b in pairwise(hs):
            if b in inner and a not in branches and first.setdefault(a, b) != b:
                branches.add(a)
    return branches


def session_ids(requests: pd.DataFrame) -> np.ndarray:
    """A session number per request (0, 1, ... in order of first appearance): see the module
    doc. ``requests`` needs ``block_hashes`` and may have ``session``."""
    chains = [list(map(int, h)) for h in requests["block_hashes"]]
    branch = branching_blocks(chains)
    explicit = requests["session"] if "session" in requests.columns else None
    keys: dict[object, int] = {}
    out = np.empty(len(chains), dtype=np.int64)
    for i, hs in enumerate(chains):
        sess = explicit.iat[i] if explicit is not None else None
        key: object
        if isinstance(sess, str) and sess:
            key = ("s", sess)
        elif not hs:
            key = ("r", i)
        else:
            at = next((j for j, b in enumerate(hs) if b in branch), None)
            if at is None:
                key = ("b", hs[0])
            elif at + 1 < len(hs):
                key = ("b", hs[at + 1])
            else:  # the request is the shared prompt alone
                key = ("r", i)
        out[i] = keys.setdefault(key, len(keys))
    return out


def session_starts(sess: np.ndarray, arrivals: np.ndarray) -> np.ndarray:
    """Per session (numbered by :func:`session_ids`), its first arrival."""
    start = np.full(int(sess.max()) + 1 if len(sess) else 0, np.inf)
    np.minimum.at(start, sess, arrivals)
    return start


def replay_span(arrivals: np.ndarray) -> float:
    """The span over which sessions replayed at other start times wrap around: first to last
    arrival plus the median gap between distinct arrivals (1 ms without one), so that the
    last arrival does not land on the first."""
    gaps = np.diff(np.unique(arrivals))
    return float(arrivals.max() - arrivals.min()) + (float(np.median(gaps)) if len(gaps) else 1.0)
