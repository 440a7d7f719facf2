"""``llmd_precise``: llm-d's precise prefix-cache-aware scheduling profile.

Anchor: llm-d/llm-d ``guides/precise-prefix-cache-aware`` (scheduler values: weights
precise-prefix-cache-scorer 2.0, kv-cache-utilization-scorer 1.0, queue-scorer 1.0,
max-score-picker). Per node::

    prefix = longest consecutive cached prefix / total blocks of the request
    kv     = 1 - kv_usage
    queue  = (max_q - q) / (max_q - min_q) over queue_len, 1.0 for all when max_q == min_q
    score  = w_prefix x prefix + w_kv x kv + w_queue x queue

The highest score wins; ties are broken uniformly at random by a seeded RNG, as the anchor's
max-score picker shuffles them (the lowest id would send every request of an idle cluster to
node 0, an affinity the anchor does not have).
"""

from __future__ import annotations

import math
import random
from typing import Literal

from pydantic import Field

from kvcast.config import FrozenConfig
from kvcast.simulator.policies.base import RoutingContext, RoutingDecision
from kvcast.simulator.policies.registry import register_policy


class LlmdPreciseParams(FrozenConfig):
    # Weight of the precise-prefix-cache-scorer (llm-d guide: 2.0).
    prefix_weight: float = Field(2.0, ge=0.0)
    # Weight of the kv-cache-utilization-scorer, score 1 - kv_usage (llm-d guide: 1.0).
    kv_utilization_weight: float = Field(1.0, ge=0.0)
    # Weight of the queue-scorer, min-max normalised waiting queue (llm-d guide: 1.0).
    queue_weight: float = Field(1.0, ge=0.0)
    # Prefix score: "fraction" = matched / total blocks (DESIGN.md); "minmax" = the
    # scorer's own min-max normalisation of matched blocks over the nodes with a hit
    # (1.0 for all of them when equal, 0 for nodes without a hit).
    prefix_normalization: Literal["fraction", "minmax"] = "fraction"


@register_policy("llmd_precise", LlmdPreciseParams)
class LlmdPrecise:
    """Weighted sum of prefix, KV-utilisation and queue scores; the maximum wins."""

    name: str

    def __init__(self, params: LlmdPreciseParams, *, num_nodes: int, seed: int) -> None:
        self.params = params
        self._rng = random.Random(seed)

    def prefix_scores(self, ctx: RoutingContext) -> list[float]:
        """Per node the prefix scorer's value in [0, 1]."""
        match = ctx.match_blocks
        if self.params.prefix_normalization == "fraction":
            total = ctx.num_blocks
            return [m / total if total > 0 else 0.0 for m in match]
        hits = [m for m in match if m > 0]
        if not hits:
            return [0.0] * len(match)
        lo, hi = min(hits), max(hits)
        if lo == hi:
            return [1.0 if m > 0 else 0.0 for m in match]
        return [(m - lo) / (hi - lo) if m > 0 else 0.0 for m in match]

    def scores(self, ctx: RoutingContext) -> list[float]:
        """Per node (in ``ctx.nodes`` order) the weighted total score."""
        p = self.params
        w_kv, w_q, w_p = p.kv_utilization_weight, p.queue_weight, p.prefix_weight
        nodes = ctx.nodes
        qs = [n.queue_len for n in nodes]
        min_q, max_q = min(qs), max(qs)
        span = max_q - min_q
        return [
            w_p * pre + w_kv * (1.0 - node.kv_usage) + w_q * ((max_q - q) / span if span else 1.0)
            for node, q, pre in zip(nodes, qs, self.prefix_scores(ctx), strict=True)
        ]

    def route(self, ctx: RoutingContext) -> RoutingDecision:
        best_score, best = -math.inf, []
        for node, score in zip(ctx.nodes, self.scores(ctx), strict=True):
            if score > best_score:
                best_score, best = score, [node.node_id]
            elif score == best_score:
                best.append(node.node_id)
        return RoutingDecision(node=best[0] if len(best) == 1 else self._rng.choice(best))
