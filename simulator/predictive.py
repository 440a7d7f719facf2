"""``PredictiveReplicator``: candidate chains from the recent past, a scorer, the decider.

On every tick the replicator takes the chains of the requests seen within ``loop.lookback_ms``
(the most recent ``loop.max_candidates``, each without its last block: a request's last block
is partial and never reused), asks its :class:`Scorer` for a probability per block that it is
used within the decider's window, and runs the decider. It sees only arrivals up to now (the
past of the simulator's own trace), exactly what a live sidecar sees from its router.

A scorer is anything with ``score(now_ms, candidates, sim) -> np.ndarray``: the recency rule
of :mod:`kvcast.simulator.recency_scorer`, or an ONNX model over the sidecar's feature state
(:mod:`kvcast.simulator.model_scorer`), which also takes the run's event stream through
``observer_for(sim)``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import numpy as np

from kvcast.predictor.cluster_view import ChainCandidates
from kvcast.predictor.decider_config import DeciderConfig
from kvcast.simulator.replicating_policy import DeciderReplicator

if TYPE_CHECKING:
    from kvcast.features.events import Event
    from kvcast.simulator.engine import Simulator


class Scorer(Protocol):
    def score(self, now_ms: float, candidates: ChainCandidates, sim: Simulator) -> np.ndarray:
        """One probability per candidate block (chains concatenated), in [0, 1]."""
        ...


class ArrivalFeed:
    """The requests of a simulator's trace that have arrived by ``now``, each once."""

    def __init__(self) -> None:
        self._sim: Simulator | None = None
        self._next = 0

    def follows(self, sim: Simulator) -> bool:
        return self._sim is sim

    def new(self, now_ms: float, sim: Simulator) -> range:
        if sim is not self._sim:
            self._sim = sim
            self._next = 0
            df = sim.trace.requests
            self.arrivals = df["arrival_ms"].to_numpy(dtype=np.float64)
            self.blocks = df["block_hashes"].to_numpy()
            self.tenants = df["tenant"].to_numpy(dtype=object)
        # requests arrived before the tick: one arriving at the tick's instant is routed after
        # it (the engine runs a tick before an arrival of the same time), so the next tick
        # sees it, as a live sidecar would
        end = int(np.searchsorted(self.arrivals, now_ms, side="left"))
        rows = range(self._next, end)
        self._next = end
        return rows

    def chain(self, r: int) -> tuple[int, ...]:
        blocks = self.blocks[r]
        return tuple(int(b) for b in blocks[: max(len(blocks) - 1, 0)])


class RecentChains:
    """The chains of the requests seen within a lookback, newest first, one per chain."""

    def __init__(self, lookback_ms: float, limit: int) -> None:
        self.lookback_ms = lookback_ms
        self.limit = limit
        self.feed = ArrivalFeed()
        self._recent: deque[tuple[float, tuple[int, ...], str]] = deque()

    def update(self, now_ms: float, sim: Simulator) -> None:
        feed = self.feed
        if not feed.follows(sim):  # a new run: the last run's chains are not this trace's
            self._recent.clear()
        for r in feed.new(now_ms, sim):
            chain = feed.chain(r)
            if chain:
                self._recent.append((float(feed.arrivals[r]), chain, str(feed.tenants[r])))
        horizon = now_ms - self.lookback_ms
        while self._recent and self._recent[0][0] < horizon:
            self._recent.popleft()

    def candidates(self, default_tail_tokens: int) -> ChainCandidates:
        seen: set[tuple[int, ...]] = set()
        chains: list[tuple[int, ...]] = []
        tenants: list[str] = []
        for _, chain, tenant in reversed(self._recent):
            if chain in seen:
                continue
            seen.add(chain)
            chains.append(chain)
            tenants.append(tenant)
            if len(chains) >= self.limit:
                break
        return ChainCandidates.build(
            chains, tenants=tenants, default_tail_tokens=default_tail_tokens
        )


class PredictiveReplicator(DeciderReplicator):
    """Recent chains, scored by ``scorer``, through the decider."""

    def __init__(self, scorer: Scorer, cfg: DeciderConfig) -> None:
        super().__init__(cfg)
        self.scorer = scorer
        self.recent = RecentChains(cfg.loop.lookback_ms, cfg.loop.max_candidates)

    def observer_for(self, sim: Simulator) -> Callable[[Event], None] | None:
        attach = getattr(self.scorer, "observer_for", None)
        return attach(sim) if attach is not None else None

    def candidates(self, now_ms: float, sim: Simulator) -> ChainCandidates:
        self.recent.update(now_ms, sim)
        return self.recent.candidates(self.cfg.loop.default_tail_tokens)

    def probabilities(self, now_ms: float, cands: ChainCandidates, sim: Simulator) -> np.ndarray:
        return np.asarray(self.scorer.score(now_ms, cands, sim), dtype=float)
