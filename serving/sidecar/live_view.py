"""Builds the decider's :class:`ClusterView` from live data, as the simulator's
:mod:`kvcast.simulator.cluster_adapter` does from its own state.

- loads and memory: :class:`NodeLoads` (agent telemetry, router and engine queue reports);
- links: bandwidth, latency and tier from the config; the backlog of each pair is the bytes
  of this sidecar's replications still in flight on it, over its bandwidth;
- ``hbm``: who holds each candidate block in GPU memory (the engines' KV events and the
  replications done), read at the tick for the candidates only;
- evictions: an EWMA (time constant ``EVICT_TAU_MS``) of the blocks leaving each node's HBM.

Lower tiers are not offered (``lower=()``): no agent executes a promotion yet, so the decider
proposes none. There is no router probe (``would_route=None``): the decider assumes the
router follows the replicas, as its own docstring allows.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from kvcast.predictor.cluster_view import ClusterView, Links, PrefillCost
from kvcast.prefill import PrefillModel
from kvcast.serving.sidecar.config import LinksConfig
from kvcast.serving.sidecar.node_loads import NodeLoads

EVICT_TAU_MS = 5_000.0


def link_arrays(cfg: LinksConfig, names: tuple[str, ...]) -> tuple[np.ndarray, ...]:
    """(bytes per ms, latency ms, tier), each ``[n, n]``, from the default and the pairs."""
    n = len(names)
    gbps = np.full((n, n), cfg.gbps)
    latency = np.full((n, n), cfg.latency_ms)
    tier = np.full((n, n), cfg.tier, dtype=np.int64)
    index = {name: i for i, name in enumerate(names)}
    for p in cfg.pairs:
        a, b = index[p.a], index[p.b]
        for i, j in ((a, b), (b, a)):
            if p.gbps is not None:
                gbps[i, j] = p.gbps
            if p.latency_ms is not None:
                latency[i, j] = p.latency_ms
            if p.tier is not None:
                tier[i, j] = p.tier
    bytes_per_ms = gbps * 1e9 / 8.0 * cfg.efficiency / 1e3
    return bytes_per_ms, latency, tier


class LiveView:
    def __init__(
        self,
        loads: NodeLoads,
        links: LinksConfig,
        names: tuple[str, ...],
        block_bytes: int,
        block_tokens: int,
        prefill: PrefillModel,
        node_tenants: tuple[frozenset[str] | None, ...] = (),
        reactive_pull: bool = False,
    ) -> None:
        self.loads, self.block_bytes, self.block_tokens = loads, block_bytes, block_tokens
        self.bytes_per_ms, self.latency_ms, self.tier = link_arrays(links, names)
        self.prefill = PrefillCost(prefill.a_ms, prefill.b_ms_per_token, prefill.c_ms_per_token2)
        self.node_tenants = node_tenants if any(t is not None for t in node_tenants) else ()
        self.reactive_pull = reactive_pull
        n = len(names)
        self._removals = np.zeros(n)
        self._rate = np.zeros(n)
        self._last_ms: float | None = None

    def eviction_rate(self, now_ms: float, removals: np.ndarray) -> np.ndarray:
        """Blocks per ms leaving each node's HBM (EWMA); ``removals`` is cumulative."""
        if self._last_ms is not None and now_ms > self._last_ms:
            dt = now_ms - self._last_ms
            a = 1.0 - np.exp(-dt / EVICT_TAU_MS)
            self._rate += a * (np.maximum(removals - self._removals, 0.0) / dt - self._rate)
        if self._last_ms is None or now_ms > self._last_ms:
            self._removals, self._last_ms = removals.copy(), now_ms
        return self._rate.copy()

    def view(
        self,
        now_ms: float,
        hbm: Mapping[int, int],
        in_flight: Mapping[tuple[int, int], int],
        removals: np.ndarray,
    ) -> ClusterView:
        """The cluster at ``now_ms``; ``in_flight`` maps (source, target) to bytes moving."""
        a = self.loads.arrays()
        backlog = np.zeros_like(self.bytes_per_ms)
        for (src, dst), nbytes in in_flight.items():
            backlog[src, dst] += nbytes / self.bytes_per_ms[src, dst]
        return ClusterView(
            now_ms=now_ms,
            block_bytes=self.block_bytes,
            block_tokens=self.block_tokens,
            prefill=self.prefill,
            queue_ms=a.queue_ms,
            capacity_bytes=a.capacity_bytes,
            pinned_bytes=a.pinned_bytes,
            cached_bytes=a.cached_bytes,
            spec_bytes=a.spec_bytes,
            links=Links(self.bytes_per_ms, self.latency_ms, backlog, self.tier),
            hbm=hbm,
            node_tenants=self.node_tenants,
            reactive_pull=self.reactive_pull,
            evict_blocks_per_ms=self.eviction_rate(now_ms, removals),
        )
