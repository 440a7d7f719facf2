"""``oracle``: the decider fed with the future, the upper bound on what prediction can buy.

On every tick the oracle reads, from the simulator's own (time-scaled, spread) trace, the
requests that will arrive within the decider's window, and hands the decider their chains
with ``P = 1`` for every block they will reuse (all but the last, which the engine always
recomputes) and their exact arrival as the first use; every other block has ``P = 0`` (it is
simply not a candidate). Everything else is the same as a predictive policy: the same
decider, budgets, gates and base router. It knows *what* and *when*, not the loads to come.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from kvcast.predictor.cluster_view import ChainCandidates
from kvcast.predictor.decider_config import DeciderConfig
from kvcast.simulator.policies.registry import register_policy
from kvcast.simulator.replicating_policy import DeciderReplicator, ReplicatingPolicy

if TYPE_CHECKING:
    from kvcast.simulator.engine import Simulator


class OracleReplicator(DeciderReplicator):
    def __init__(self, cfg: DeciderConfig) -> None:
        super().__init__(cfg)
        self._sim: Simulator | None = None

    def start(self, sim: Simulator) -> None:
        super().start(sim)
        self._sim = sim
        df = sim.trace.requests
        self._arrivals = df["arrival_ms"].to_numpy(dtype=np.float64)
        self._inputs = df["input_tokens"].to_numpy()
        self._blocks = df["block_hashes"].to_numpy()
        self._tenants = df["tenant"].to_numpy(dtype=object)
        self._chains: dict[int, tuple[int, ...]] = {}

    def _chain(self, r: int) -> tuple[int, ...]:
        chain = self._chains.get(r)
        if chain is None:
            blocks = self._blocks[r]
            chain = tuple(int(b) for b in blocks[: max(len(blocks) - 1, 0)])
            self._chains[r] = chain
        return chain

    def candidates(self, now_ms: float, sim: Simulator) -> ChainCandidates:
        lo = int(np.searchsorted(self._arrivals, now_ms, side="right"))
        hi = int(np.searchsorted(self._arrivals, now_ms + self.cfg.window_ms, side="right"))
        for r in [r for r in self._chains if r < lo]:
            del self._chains[r]
        rows = [r for r in range(lo, hi) if len(self._blocks[r]) > 1]
        chains = [self._chain(r) for r in rows]
        bt = sim.block_tokens
        return ChainCandidates.build(
            chains,
            tenants=[str(self._tenants[r]) for r in rows],
            first_use_ms=[float(self._arrivals[r]) for r in rows],
            tail_tokens=[
                max(int(self._inputs[r]) - len(c) * bt, 0)
                for r, c in zip(rows, chains, strict=True)
            ],
        )

    def probabilities(self, now_ms: float, cands: ChainCandidates, sim: Simulator) -> np.ndarray:
        return np.ones(cands.total_blocks)


@register_policy("oracle", DeciderConfig)
class OraclePolicy(ReplicatingPolicy):
    """Base router + the decider with perfect knowledge of the arrivals to come."""

    def make_replicator(self, params: DeciderConfig) -> DeciderReplicator:
        return OracleReplicator(params)
