"""The decider's constants, one frozen config (``configs/decider/default.yaml`` writes it out).

Sections: ``costs`` (the terms and gates of the inequality), ``budgets`` (quota, bandwidth,
transfers in flight, TTL), ``targets`` (hot-node prediction and topology), ``feedback``
(P(hit) corrected by how often the copies were used), ``loop`` (how a policy drives the
decider: tick, base router, candidate chains, the recency scorer).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from kvcast.config import FrozenConfig, load_config

GIB = 1 << 30


class CostConfig(FrozenConfig):
    """Terms of ``P x saved > transfer + congestion + memory + reclaim`` and the gates."""

    transfer_weight: float = Field(0.25, ge=0)  # per ms of network transfer (off critical path)
    promote_transfer_weight: float = Field(0.2, ge=0)  # per ms of a node's own PCIe / NVMe load
    congestion_weight: float = Field(1.0, ge=0)  # per ms of wire time x the NICs' busy share
    displaced_reuse_prob: float = Field(0.1, ge=0, le=1)  # a displaced cached block's reuse odds
    reclaim_ms_per_block: float = Field(2.0, ge=0)  # cost of reclaiming one wasted replica block
    queue_gate_factor: float = Field(1.0, ge=0)  # holder queue must exceed this x transfer time
    safety_margin_gib: float = Field(4.0, ge=0)  # HBM a target keeps beyond the replica
    min_p: float = Field(0.05, ge=0, le=1)  # chains whose root is less likely are not considered
    max_cuts: int = Field(16, ge=2)  # depths weighed per chain (a grid over long chains)
    # a replica for a known first use lands no earlier than this before it: the later the
    # decision, the truer the load picture, and the shorter the replica waits to be evicted
    lead_ms: float = Field(1_000.0, gt=0)


class BudgetConfig(FrozenConfig):
    """Hard limits on what speculation may take; a decision that breaks one is not made."""

    speculative_quota_gib: float = Field(48.0, ge=0)  # per node
    speculative_quota_fraction: float = Field(0.15, ge=0, le=1)  # and at most this of its HBM KV
    link_budget_gbps: float = Field(60.0, gt=0)  # per NIC direction, gigabits/s
    global_budget_gbps: float = Field(240.0, gt=0)  # the whole cluster, gigabits/s
    budget_window_ms: float = Field(1000.0, gt=0)  # bandwidth budgets are averaged over this
    max_in_flight: int = Field(16, ge=0)  # replications and promotions not yet landed
    ttl_ms: float = Field(30_000.0, gt=0)  # a replica's life when its first use is unknown
    ttl_slack_ms: float = Field(5_000.0, ge=0)  # life beyond a known first use

    def quota_bytes(self, capacity_bytes: float) -> float:
        share = self.speculative_quota_fraction * capacity_bytes
        return min(self.speculative_quota_gib * GIB, share)

    def link_bytes(self) -> float:
        """Bytes one NIC direction may carry per budget window."""
        return self.link_budget_gbps * 1e9 / 8 * self.budget_window_ms / 1e3

    def global_bytes(self) -> float:
        return self.global_budget_gbps * 1e9 / 8 * self.budget_window_ms / 1e3


class TargetConfig(FrozenConfig):
    """Where a replica may go."""

    # predicted queue = current queue + load_weight x the prefill work the candidates' requests
    # are predicted to bring to the node (P x their uncached prefill) within horizon_ms
    load_weight: float = Field(1.0, ge=0)
    horizon_ms: float = Field(3_000.0, gt=0)
    hot_queue_ms: float = Field(3_000.0, gt=0)  # predicted queue at which a node is hot
    # extra cost per topology tier (same_host, rack, datacenter, cross_zone), ms per transfer
    tier_penalty_ms: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 20.0)
    max_targets_per_chain: int = Field(1, ge=1)
    route_checks: int = Field(8, ge=1)  # best options asked of the router's probe, per chain
    max_chains_per_tick: int = Field(16, ge=1)  # chains weighed per tick, by priority (compute)


class FeedbackConfig(FrozenConfig):
    """P(hit) corrected by what became of the decider's own copies
    (:mod:`kvcast.predictor.outcome_feedback`): times ``(strength + used) / (strength +
    expected)``, the sums over settled copies losing half their weight every
    ``half_life_ms`` (so that the decider tries again once it has stopped copying); with
    ``count_live``, ``expected`` also holds the P of the copies still live."""

    enabled: bool = True
    strength: float = Field(5.0, gt=0)  # the prior: this many expected hits at a factor of 1
    half_life_ms: float = Field(600_000.0, gt=0)
    # copies not settled yet count as expected and not (yet) used: a burst of copies made
    # before any outcome is back is held back by its own expectation
    count_live: bool = True


class LoopConfig(FrozenConfig):
    """How a replication policy runs the decider."""

    router: str = "dynamo_kv"  # base router (any registered routing policy)
    tick_ms: float = Field(500.0, gt=0)  # the decider runs every tick of simulated time
    lookback_ms: float = Field(120_000.0, gt=0)  # candidate chains: requests seen within this
    max_candidates: int = Field(64, ge=1)  # most recent chains scored per tick
    default_tail_tokens: int = Field(512, ge=0)  # new tokens a chain's next request computes
    # recency scorer: P(used within the window | age) learnt online, recomputed this often and
    # shrunk towards 0 by this many pseudo-observations
    recency_refresh_ms: float = Field(10_000.0, gt=0)
    recency_pseudo_count: float = Field(50.0, ge=0)


class DeciderConfig(FrozenConfig):
    window_ms: float = Field(30_000.0, gt=0)  # prediction window: P(hit) is within this horizon
    promote: bool = True  # also promote chains from DRAM / NVMe to HBM ahead of use
    costs: CostConfig = CostConfig()
    budgets: BudgetConfig = BudgetConfig()
    targets: TargetConfig = TargetConfig()
    feedback: FeedbackConfig = FeedbackConfig()
    loop: LoopConfig = LoopConfig()


def load_decider_config(path: str | Path | None = None) -> DeciderConfig:
    """Load a decider config; ``None`` gives the embedded defaults."""
    return DeciderConfig() if path is None else load_config(DeciderConfig, path)
