"""``predictive_recency``: the base router + the decider, scoring blocks by recency alone.

The probability that a block is used within the window depends here only on its *age* (time
since the last request that contained it). The mapping age -> probability is learnt online,
from the past of the stream alone: for every earlier use of any block whose outcome is known
(it lies at least ``age + window`` in the past), was the block used again within
``(age, age + window]``, given that it was not within ``age``? That is the empirical hazard of
the reuse gap, recomputed every ``loop.recency_refresh_ms`` on a grid of ages and
interpolated, shrunk towards 0 by ``loop.recency_pseudo_count`` (``P = reused / (known +
pseudo)``): with no evidence yet it predicts nothing, so it acts only on what it has seen. It
knows nothing of sessions, think times or load.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from kvcast.predictor.cluster_view import ChainCandidates
from kvcast.predictor.decider_config import DeciderConfig
from kvcast.simulator.policies.registry import register_policy
from kvcast.simulator.predictive import ArrivalFeed, PredictiveReplicator
from kvcast.simulator.replicating_policy import DeciderReplicator, ReplicatingPolicy

if TYPE_CHECKING:
    from kvcast.simulator.engine import Simulator

SPAN_MS = 1_800_000.0  # uses older than this are forgotten (bounded memory)
AGES_MS = np.array([0, 1, 2, 5, 10, 20, 30, 45, 60, 90, 120, 180, 240, 300, 450, 600]) * 1e3


class RecencyScorer:
    """P(used within the window | age), calibrated online on the stream's own past."""

    def __init__(self, window_ms: float, refresh_ms: float, pseudo_count: float) -> None:
        self.window_ms = window_ms
        self.refresh_ms = refresh_ms
        self.pseudo_count = pseudo_count
        self.feed = ArrivalFeed()
        self._reset()

    def _reset(self) -> None:
        self.last: dict[int, int] = {}  # block -> index of its latest use
        self.use_ms: list[float] = []
        self.gap_ms: list[float] = []  # time to the next use of the same block (inf: none yet)
        self._base = 0  # index of use_ms[0] in the stream's numbering
        self.table = np.zeros(len(AGES_MS))
        self._refreshed = -np.inf  # learn at the first update

    def _update(self, now_ms: float, sim: Simulator) -> None:
        feed, last, use, gap = self.feed, self.last, self.use_ms, self.gap_ms
        base = self._base
        for r in feed.new(now_ms, sim):
            t = float(feed.arrivals[r])
            for b in feed.blocks[r]:
                b = int(b)
                i = last.get(b)
                if i is not None and i >= base:
                    gap[i - base] = t - use[i - base]
                last[b] = base + len(use)
                use.append(t)
                gap.append(np.inf)
        if now_ms - self._refreshed >= self.refresh_ms:
            self._refreshed = now_ms
            self._forget(now_ms)
            self._calibrate(now_ms)

    def _forget(self, now_ms: float) -> None:
        drop = int(np.searchsorted(self.use_ms, now_ms - SPAN_MS))
        if drop:
            del self.use_ms[:drop], self.gap_ms[:drop]
            self._base += drop
            self.last = {b: i for b, i in self.last.items() if i >= self._base}

    def _calibrate(self, now_ms: float) -> None:
        use, gap = np.asarray(self.use_ms), np.asarray(self.gap_ms)
        w = self.window_ms
        for k, a in enumerate(AGES_MS):
            known = use <= now_ms - (a + w)
            alive = known & (gap > a)
            hits = float((gap[alive] <= a + w).sum())
            seen = float(alive.sum()) + self.pseudo_count
            self.table[k] = hits / seen if seen > 0 else 0.0

    def score(self, now_ms: float, candidates: ChainCandidates, sim: Simulator) -> np.ndarray:
        if not self.feed.follows(sim):
            self._reset()
        self._update(now_ms, sim)
        use, last, base = self.use_ms, self.last, self._base
        ages = np.array(
            [
                now_ms - use[last[b] - base] if b in last else np.inf
                for chain in candidates.chains
                for b in chain
            ],
            dtype=float,
        )
        p = np.interp(ages, AGES_MS, self.table, right=0.0)
        return np.where(np.isfinite(ages), p, 0.0)


@register_policy("predictive_recency", DeciderConfig)
class PredictiveRecencyPolicy(ReplicatingPolicy):
    """Base router + the decider with the recency scorer."""

    def make_replicator(self, params: DeciderConfig) -> DeciderReplicator:
        loop = params.loop
        scorer = RecencyScorer(params.window_ms, loop.recency_refresh_ms, loop.recency_pseudo_count)
        return PredictiveReplicator(scorer, params)
