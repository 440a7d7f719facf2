"""Candidate chains as the decider reasons about them: where each prefix already lives.

A child block is useless on a node without its parents, so everything here is per prefix:
``held[n]`` is the length of the longest prefix of the chain node n holds, and the chain's
probabilities are made non-increasing with depth (a request that uses block i uses every
block before it, so ``P(i) <= P(i-1)``; a scorer's raw output is clipped to that). A
probability that is not a number (NaN) counts as 0, one above 1 as 1.

:func:`build_plans` weighs every candidate at once in numpy (:class:`PlanBatch`: one row per
chain kept); the decider makes a :class:`ChainPlan` only for the few chains it acts on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, repeat

import numpy as np

from kvcast.predictor.cluster_view import ChainCandidates, ClusterView

MAX_MASK_NODES = 62  # node bitmasks as int64 (the arrays); beyond, per chain in Python
PADDED = 2  # chains padded to the longest when that is at most twice their blocks


def prefix_lengths(
    blocks: Sequence[int], n: int, hbm: Mapping[int, int], pending: Mapping[int, int] | None
) -> list[int]:
    """Per node, the longest prefix of ``blocks`` it holds (``pending`` counts as held)."""
    out = [0] * n
    alive = (1 << n) - 1
    nb = len(blocks)
    i = 0
    while i < nb and alive:
        b = blocks[i]
        h = hbm.get(b, 0)
        if pending:
            h |= pending.get(b, 0)
        h &= alive
        if h != alive:
            gone = alive & ~h
            while gone:
                low = gone & -gone
                out[low.bit_length() - 1] = i
                gone ^= low
            alive = h
        i += 1
    while alive:
        low = alive & -alive
        out[low.bit_length() - 1] = i
        alive ^= low
    return out


@dataclass(slots=True)
class ChainPlan:
    """A candidate chain with its effective probabilities and current placement."""

    index: int
    blocks: tuple[int, ...]
    p: np.ndarray  # effective P per depth (non-increasing)
    held: list[int]  # per node, prefix length in HBM or on its way
    tenant: str
    public_blocks: int
    time_left_ms: float  # until the predicted first use (the window when unknown)
    known_first_use: bool
    tail_tokens: int
    life_ms: float  # how long the chain stays in use (the window when unknown)

    @property
    def p_request(self) -> float:
        """Probability that the whole chain is used (its deepest block)."""
        return float(self.p[-1]) if len(self.p) else 0.0

    def work_ms(self, view: ClusterView, node: int) -> float:
        """Prefill the chain's request would cost on ``node`` (its uncached part)."""
        bt = view.block_tokens
        total = len(self.blocks) * bt + self.tail_tokens
        return view.prefill.a_ms + view.prefill.span_ms(self.held[node] * bt, total)

    def priority(self, view: ClusterView) -> float:
        """Object choice: recompute cost of the held prefix x P x expected remaining life."""
        depth = max(self.held)
        if depth == 0:
            return 0.0
        bt = view.block_tokens
        return view.prefill.span_ms(0, depth * bt) * float(self.p[depth - 1]) * self.life_ms


@dataclass(frozen=True)
class PlanBatch:
    """The chains kept by :func:`build_plans`, one row each (chain order kept)."""

    cands: ChainCandidates
    index: np.ndarray  # [P] the chain's index among the candidates
    lens: np.ndarray  # [P] blocks in the chain
    held: np.ndarray  # [P, n] per node, prefix length in HBM or on its way
    p: np.ndarray  # [P, L] effective P per depth (beyond a chain's length: its last value)
    time_left_ms: np.ndarray  # [P]
    known: np.ndarray  # [P] bool: the first use is predicted
    tail_tokens: np.ndarray  # [P]
    life_ms: np.ndarray  # [P]
    depth: np.ndarray  # [P] the deepest prefix any node holds (or is being sent)

    def __len__(self) -> int:
        return len(self.index)

    @property
    def p_request(self) -> np.ndarray:
        """[P] probability that the whole chain is used."""
        return self.p[np.arange(len(self)), self.lens - 1]

    def priority(self, view: ClusterView) -> np.ndarray:
        """[P] :meth:`ChainPlan.priority` of every chain (0 where no node holds its root)."""
        depth = self.depth
        span = view.prefill.spans_ms(0, depth * view.block_tokens)
        p = self.p[np.arange(len(self)), np.maximum(depth - 1, 0)]
        with np.errstate(invalid="ignore"):
            out = np.where(depth > 0, span * p * self.life_ms, 0.0)
        return np.where(np.isnan(out), -np.inf, out)  # 0 x -inf life: last

    def plan(self, j: int) -> ChainPlan:
        """Row ``j`` as a :class:`ChainPlan`."""
        return self.plans(np.array([j]))[0]

    def plans(self, rows: np.ndarray) -> list[ChainPlan]:
        """Rows ``rows`` as :class:`ChainPlan` (each field read out of numpy once, not per row)."""
        c = self.cands
        index = self.index[rows].tolist()
        lens = self.lens[rows].tolist()
        tenants = [c.tenants[i] for i in index] if c.tenants else ["default"] * len(index)
        public = c.public_blocks[index].tolist() if len(c.public_blocks) else [0] * len(index)
        return [
            ChainPlan(i, c.chains[i], p[:size], held, tenant, pub, left, known, tail, life)
            for i, size, p, held, tenant, pub, left, known, tail, life in zip(
                index,
                lens,
                self.p[rows],
                self.held[rows].tolist(),
                tenants,
                public,
                self.time_left_ms[rows].tolist(),
                self.known[rows].tolist(),
                self.tail_tokens[rows].tolist(),
                self.life_ms[rows].tolist(),
                strict=True,
            )
        ]


def _per_chain(values: np.ndarray, k: int, fill: float) -> np.ndarray:
    return values if len(values) else np.full(k, fill)


def build_plans(
    cands: ChainCandidates,
    probs: np.ndarray,
    view: ClusterView,
    pending: Mapping[int, int],
    *,
    window_ms: float,
    min_p: float,
    known_within_ms: float = float("inf"),
    holders: np.ndarray | None = None,
) -> PlanBatch:
    """Every chain whose root is likely enough, with its placement and probabilities.

    Chains whose first use is known to be further than ``known_within_ms`` away are left
    for a later tick (nothing would be decided or forecast for them now). ``holders``: per
    block of the concatenated chains, its ``view.hbm`` bitmask, when the caller has them."""
    probs = np.asarray(probs, dtype=float)
    if len(probs) != cands.total_blocks:
        raise ValueError(f"{len(probs)} probabilities for {cands.total_blocks} candidate blocks")
    probs = np.fmin(np.fmax(probs, 0.0), 1.0)  # NaN: 0
    k, n, now = len(cands), view.n, view.now_ms
    lens = cands.lengths
    first = _per_chain(np.asarray(cands.first_use_ms, dtype=float), k, np.nan)
    with np.errstate(invalid="ignore"):
        keep = (lens > 0) & ~(first - now > known_within_ms)
    starts = cands.offsets[:-1]
    longest = int(lens.max(initial=0))
    total = len(probs)
    # [k, L + 1]: each chain's flat positions, then the sentinel (position total), or None:
    # chains of unequal lengths (2 to hundreds of blocks) pad to several times their blocks,
    # and are read on the flat positions instead
    at = None
    if k * (longest + 1) <= PADDED * (total + 1):
        at = starts[:, None] + np.arange(longest + 1)
        at = np.where(np.arange(longest + 1) < lens[:, None], at, total)
        p = np.append(probs, 1.0)[at[:, :longest]]
    else:  # each chain's probabilities, then 1.0, scattered into [k, L]
        p = np.ones((k, longest))
        p[np.repeat(np.arange(k), lens), np.arange(total) - np.repeat(starts, lens)] = probs
    np.minimum.accumulate(p, axis=1, out=p)
    if longest:
        keep &= ~(p[:, 0] < min_p)
    rows = np.flatnonzero(keep)
    p, lens, first = p[rows], lens[rows], first[rows]
    at = at if at is None else at[rows]
    held = _held(cands, rows, starts[rows], lens, at, n, view.hbm, pending, holders)
    known = ~np.isnan(first)
    life = _per_chain(np.asarray(cands.life_ms, dtype=float), k, np.nan)[rows]
    tail = _per_chain(np.asarray(cands.tail_tokens, dtype=np.int64), k, 0)[rows]
    return PlanBatch(
        cands,
        rows,
        lens,
        held,
        p,
        np.where(known, first - now, window_ms),
        known,
        tail,
        np.where(np.isnan(life), window_ms, np.minimum(life, window_ms)),
        held.max(axis=1, initial=0),
    )


def _held(
    cands: ChainCandidates,
    rows: np.ndarray,
    start: np.ndarray,
    lens: np.ndarray,
    at: np.ndarray | None,
    n: int,
    hbm: Mapping[int, int],
    pending: Mapping[int, int],
    holders: np.ndarray | None,
) -> np.ndarray:
    """[len(rows), n]: :func:`prefix_lengths` of the chains ``rows`` (``start``: their first
    flat positions, ``lens``: their lengths; ``at``: their flat positions padded with the
    sentinel, ``[len(rows), L + 1]``, or None). Padded: on each node, the first position a
    chain's row lacks (the sentinel lacks all). Else on the flat ``[n, blocks + 1]`` array: a
    chain's prefix ends at the first flat position from its start whose block the node lacks
    (one search in the sorted positions lacked), or at the chain's own end."""
    if n > MAX_MASK_NODES:
        chains = cands.chains
        out = [prefix_lengths(chains[i], n, hbm, pending) for i in rows.tolist()]
        return np.array(out, dtype=np.int64).reshape(len(rows), n)
    total = cands.total_blocks
    alive = (1 << n) - 1
    masks = np.zeros(total + 1, np.int64)  # the sentinel: held by none
    flat: list[int] = []
    if holders is not None:
        masks[:total] = np.asarray(holders, dtype=np.int64) & alive
    else:
        flat = list(chain.from_iterable(cands.chains))
        masks[:total] = _masks(hbm, flat, alive)
    if pending:
        flat = flat or list(chain.from_iterable(cands.chains))
        masks[:total] |= _masks(pending, flat, alive)
    if at is not None:
        has = (masks[at][:, None, :] & (1 << np.arange(n))[:, None]) != 0  # [P, n, L + 1]
        return has.argmin(axis=2)
    width = total + 1
    lacks = (masks & (1 << np.arange(n))[:, None]) == 0  # [n, total + 1]
    lacked = np.flatnonzero(lacks)  # node x width + position, sorted
    first = np.arange(0, n * width, width) + start[:, None]  # [P, n]: each chain's first
    return np.minimum(lacked[np.searchsorted(lacked, first)] - first, lens[:, None])


def _masks(holders: Mapping[int, int], flat: list[int], alive: int) -> np.ndarray:
    """Each block's node bitmask, limited to the nodes ``alive`` (C-level unless a mask has
    bits beyond 63)."""
    try:
        out = np.fromiter(map(holders.get, flat, repeat(0)), np.int64, len(flat))
    except OverflowError:
        out = np.fromiter((m & alive for m in map(holders.get, flat, repeat(0))), np.int64)
    return out & alive
