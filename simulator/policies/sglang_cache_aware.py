"""``sglang_cache_aware``: the SGLang router's ``cache_aware`` policy.

Anchor: sgl-project/sglang ``sgl-router/src/policies/cache_aware.rs`` (defaults from the
router's CLI, ``--cache-threshold 0.3 --balance-abs-threshold 64 --balance-rel-threshold
1.5``). The load of a node is its outstanding request count. A node's prefix match is read from
the router's own index of the prefixes it routed there (its approximate radix tree, updated as
it routes: :mod:`kvcast.simulator.routed_index`), as the anchor does; ``prefix_view: engine``
reads the engines' caches instead, and ``prefix_view: both`` per node the longer of the two
matches (a router that inserts as it routes and is fed KV events: it sees both the prefixes
still being prefilled and the replicas; :meth:`RoutingContext.prefix_view`).

1. Imbalanced (``max_load - min_load > abs`` and ``max_load > rel x min_load``): shortest
   queue.
2. Else, if the best prefix match rate (``match_blocks x block_tokens / input_tokens``, capped
   at 1) exceeds ``cache_threshold``: the best-matching node (ties: least loaded, then lowest
   id).
3. Else the least loaded node (DESIGN.md; the Rust router sends these to the node with the
   smallest approximate radix tree, a signal the simulator does not model).
"""

from __future__ import annotations

from pydantic import Field

from kvcast.config import FrozenConfig
from kvcast.simulator.policies.base import PrefixView, RoutingContext, RoutingDecision
from kvcast.simulator.policies.least_loaded import least_outstanding
from kvcast.simulator.policies.registry import register_policy


class SglangCacheAwareParams(FrozenConfig):
    # Which prefixes a node is taken to hold: "router", those this router sent there (the
    # router's approximate radix tree per worker, updated as it routes: the anchor's own
    # view, so a burst sharing a prefix goes to one node and a replica another component
    # placed is not seen), or "engine": the engines' caches (KV events): replicas seen,
    # blocks still being prefilled not; or "both": per node the longer of the two matches, a
    # router that inserts as it routes and is also fed KV events (RoutingContext.prefix_view:
    # a lower bound of the prefix held in the union of the two, what two indexes read).
    prefix_view: PrefixView = "router"
    # Route to the best-matching node only when its prefix match rate is above this
    # (sgl-router --cache-threshold, default 0.3).
    cache_threshold: float = Field(0.3, ge=0.0, le=1.0)
    # Imbalanced needs max_load - min_load > this (--balance-abs-threshold, default 64).
    balance_abs_threshold: int = Field(64, ge=0)
    # ... and max_load > this x min_load (--balance-rel-threshold, default 1.5).
    balance_rel_threshold: float = Field(1.5, ge=0.0)


@register_policy("sglang_cache_aware", SglangCacheAwareParams)
class SglangCacheAware:
    """Shortest queue when imbalanced, else cache affinity above the match threshold."""

    name: str

    def __init__(self, params: SglangCacheAwareParams, *, num_nodes: int, seed: int) -> None:
        self.params = params

    def route(self, ctx: RoutingContext) -> RoutingDecision:
        p = self.params
        nodes = ctx.nodes
        match = ctx.prefix_view(self.params.prefix_view)
        first = nodes[0]
        min_load = max_load = best_load = first.outstanding
        best_match = match[0]
        best_id = first.node_id
        for i in range(1, len(nodes)):
            node = nodes[i]
            load = node.outstanding
            if load < min_load:
                min_load = load
            elif load > max_load:
                max_load = load
            m = match[i]
            if m > best_match or (
                m == best_match
                and (load < best_load or (load == best_load and node.node_id < best_id))
            ):
                best_match, best_load, best_id = m, load, node.node_id
        imbalanced = (
            max_load - min_load > p.balance_abs_threshold
            and max_load > p.balance_rel_threshold * min_load
        )
        if imbalanced:
            return RoutingDecision(node=least_outstanding(nodes))
        if ctx.input_tokens > 0:
            rate = min(best_match * ctx.block_tokens / ctx.input_tokens, 1.0)
            if rate > p.cache_threshold:
                return RoutingDecision(node=best_id)
        return RoutingDecision(node=least_outstanding(nodes))
