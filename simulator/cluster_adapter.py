"""Builds the decider's :class:`~kvcast.predictor.cluster_view.ClusterView` from a running
:class:`~kvcast.simulator.engine.Simulator`.

Everything the decider reads is what a live sidecar can know too: per node the queue estimate,
HBM capacity and its pinned / cached / speculative occupancy, the lower tiers' contents, per
link its tier, bandwidth, latency and current backlog, and the cluster-wide block -> holders
index (shared by reference, not copied). Static parts are computed once per simulator.

Given a *probe router* (a separate instance of the base router, so that probing never
touches the live router's state), the view also answers "where would the router send such a
request now, if these nodes held these prefixes?": a live sidecar sits beside its router and
can ask it the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from kvcast.predictor.cluster_view import ClusterView, Links, LowerTier, PrefillCost, RouteProbe
from kvcast.simulator.policies.base import NodeSnapshot, RoutingContext, RoutingPolicy

if TYPE_CHECKING:
    from kvcast.simulator.engine import Simulator


EVICT_TAU_MS = 5_000.0


class SimulatorView:
    """Snapshots one simulator's cluster for the decider."""

    def __init__(
        self,
        sim: Simulator,
        node_tenants: Sequence[frozenset[str] | None] = (),
        *,
        reactive_pull: bool = False,
        probe_router: RoutingPolicy | None = None,
    ) -> None:
        self.sim = sim
        self.reactive_pull = reactive_pull
        self.probe_router = probe_router
        net = sim.network
        n = sim.cfg.nodes
        self._bytes_per_ms = np.array(
            [[net.link(i, j).bytes_per_ms for j in range(n)] for i in range(n)]
        )
        self._latency_ms = np.array(
            [[net.link(i, j).latency_us / 1e3 for j in range(n)] for i in range(n)]
        )
        self._tier = np.array([[net.tier_index(i, j) for j in range(n)] for i in range(n)])
        p = sim.cfg.node.prefill
        self._prefill = PrefillCost(p.a_ms, p.b_ms_per_token, p.c_ms_per_token2)
        self._lower: list[list[LowerTier]] = []
        for node in sim.nodes:
            pool = node.pool
            dram_bw, nvme_bw, shared_bw = node.tier_bytes_per_ms
            tiers: list[LowerTier] = []
            if pool.dram_capacity:
                tiers.append((pool.dram, dram_bw))
            if pool.nvme_capacity:
                tiers.append((pool.nvme, nvme_bw))
            if pool.shared_capacity:
                tiers.append((pool.shared, shared_bw))
            self._lower.append(tiers)
        self.node_tenants = tuple(node_tenants)
        self._evictions = np.zeros(n)
        self._evict_rate = np.zeros(n)
        self._last_ms: float | None = None

    def _eviction_rate(self, now: float) -> np.ndarray:
        """EWMA (time constant ``EVICT_TAU_MS``) of each node's HBM evictions per ms."""
        counts = np.array([node.pool.evictions for node in self.sim.nodes], dtype=float)
        if self._last_ms is not None and now > self._last_ms:
            dt = now - self._last_ms
            a = 1.0 - np.exp(-dt / EVICT_TAU_MS)
            self._evict_rate += a * ((counts - self._evictions) / dt - self._evict_rate)
        self._evictions, self._last_ms = counts, now
        return self._evict_rate.copy()

    def view(self) -> ClusterView:
        sim = self.sim
        now = sim.now
        bb = sim.block_bytes
        n = sim.cfg.nodes
        net = sim.network
        backlog = np.zeros((n, n))
        for i in range(n):
            for j in range(n):
                if i != j:
                    backlog[i, j] = net.estimate_ms(i, j, 1, now) - net.duration_ms(i, j, 1)
        pools = [node.pool for node in sim.nodes]
        queue = np.array([node.est_queue_ms_at(now) for node in sim.nodes])
        return ClusterView(
            now_ms=now,
            block_bytes=bb,
            block_tokens=sim.block_tokens,
            prefill=self._prefill,
            queue_ms=queue,
            capacity_bytes=np.array([p.capacity * bb for p in pools], dtype=float),
            pinned_bytes=np.array([p.in_use * bb for p in pools], dtype=float),
            cached_bytes=np.array([len(p.cached) * bb for p in pools], dtype=float),
            spec_bytes=np.array([len(p.spec) * bb for p in pools], dtype=float),
            links=Links(self._bytes_per_ms, self._latency_ms, np.maximum(backlog, 0.0), self._tier),
            hbm=sim.holders,
            lower=self._lower if any(self._lower) else (),
            node_tenants=self.node_tenants,
            reactive_pull=self.reactive_pull,
            evict_blocks_per_ms=self._eviction_rate(now),
            would_route=self._probe(queue) if self.probe_router is not None else None,
        )

    def _probe(self, queue: np.ndarray) -> RouteProbe:
        sim, router = self.sim, self.probe_router
        assert router is not None
        now, bt = sim.now, sim.block_tokens
        nodes = [
            NodeSnapshot(
                n.node_id,
                n.outstanding,
                n.queue_len,
                n.queued_prefill_tokens,
                n.inflight_prefill_tokens,
                n.active_blocks,  # (by reference: read within the probe)
                n.kv_usage,
                float(queue[i]),
            )
            for i, n in enumerate(sim.nodes)
        ]
        prefill = sim.cfg.node.prefill.isolated_ms

        def would_route(chain: tuple[int, ...], tokens: int, match: Sequence[int]) -> int:
            ctx = RoutingContext(
                now,
                tokens,
                chain,
                bt,
                match,
                nodes,
                prefill,
                sim.transfer_estimate_ms,
                slo_ms=sim.slo_ms(tokens),
                # a copy is not in the router's own index
                routed_blocks=sim.routed.match(chain) if sim.routed is not None else None,
            )
            return router.route(ctx).node

        return would_route
