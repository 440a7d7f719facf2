"""One candidate chain as the decider reasons about it: where its prefix already lives.

A child block is useless on a node without its parents, so everything here is per prefix:
``held[n]`` is the length of the longest prefix of the chain node n holds, and the chain's
probabilities are made non-increasing with depth (a request that uses block i uses every
block before it, so ``P(i) <= P(i-1)``; a scorer's raw output is clipped to that).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from kvcast.predictor.cluster_view import ChainCandidates, ClusterView


def prefix_lengths(
    blocks: tuple[int, ...], n: int, hbm: Mapping[int, int], pending: Mapping[int, int] | None
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


def build_plans(
    cands: ChainCandidates,
    probs: np.ndarray,
    view: ClusterView,
    pending: Mapping[int, int],
    *,
    window_ms: float,
    min_p: float,
    known_within_ms: float = float("inf"),
) -> list[ChainPlan]:
    """One plan per chain whose root is likely enough; probabilities clipped to [0, 1].

    Chains whose first use is known to be further than ``known_within_ms`` away are left
    for a later tick (nothing would be decided or forecast for them now)."""
    probs = np.clip(np.asarray(probs, dtype=float), 0.0, 1.0)
    if len(probs) != cands.total_blocks:
        raise ValueError(f"{len(probs)} probabilities for {cands.total_blocks} candidate blocks")
    offsets = cands.offsets
    now = view.now_ms
    plans = []
    for i, chain in enumerate(cands.chains):
        if not chain:
            continue
        first = float(cands.first_use_ms[i]) if len(cands.first_use_ms) else float("nan")
        if first - now > known_within_ms:
            continue
        p = np.minimum.accumulate(probs[offsets[i] : offsets[i + 1]])
        if p[0] < min_p:
            continue
        known = not np.isnan(first)
        life = float(cands.life_ms[i]) if len(cands.life_ms) else float("nan")
        plans.append(
            ChainPlan(
                i,
                chain,
                p,
                prefix_lengths(chain, view.n, view.hbm, pending),
                cands.tenants[i] if cands.tenants else "default",
                int(cands.public_blocks[i]) if len(cands.public_blocks) else 0,
                first - now if known else window_ms,
                known,
                int(cands.tail_tokens[i]) if len(cands.tail_tokens) else 0,
                window_ms if np.isnan(life) else min(life, window_ms),
            )
        )
    return plans
