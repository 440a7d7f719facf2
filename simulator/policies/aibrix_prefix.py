"""``aibrix_prefix``: AIBrix gateway's ``prefix-cache`` routing algorithm.

Anchor: vllm-project/aibrix ``pkg/plugins/gateway/algorithms/prefix_cache.go``, with the
thresholds its Helm chart deploys (``AIBRIX_PREFIX_CACHE_POD_RUNNING_REQUEST_IMBALANCE_ABS_COUNT
=16``, ``AIBRIX_PREFIX_CACHE_STANDARD_DEVIATION_FACTOR=2``). Running requests = outstanding.
A node's prefix match is read from the gateway's own table of the prefixes it routed there
(``AddPrefix`` as it routes: :mod:`kvcast.simulator.routed_index`), as the anchor does;
``prefix_view: engine`` reads the engines' caches instead, and ``prefix_view: both`` per node
the longer of the two matches (a gateway that adds prefixes as it routes and is fed KV events:
it sees both the prefixes still being prefilled and the replicas;
:meth:`RoutingContext.prefix_view`).

1. If ``max_running - min_running > imbalance_abs_count``: least running requests.
2. Else the nodes with a prefix match, sorted by match descending then running ascending
   (then node id): the first whose running count is ``<= mean + factor x stddev`` of all
   nodes' running counts (sample stddev, as in the anchor).
3. No such node (or no match anywhere): least running requests.
"""

from __future__ import annotations

import math

from pydantic import Field

from kvcast.config import FrozenConfig
from kvcast.simulator.policies.base import PrefixView, RoutingContext, RoutingDecision
from kvcast.simulator.policies.least_loaded import least_outstanding
from kvcast.simulator.policies.registry import register_policy


class AibrixPrefixParams(FrozenConfig):
    # Which prefixes a node is taken to hold: "router", those this router sent there (the
    # gateway's prefix hash table, updated as it routes by AddPrefix: the anchor's own view,
    # so a burst sharing a prefix goes to one node and a replica another component placed
    # is not seen), or "engine": the engines' caches (KV events): replicas seen,
    # blocks still being prefilled not; or "both": per node the longer of the two matches, a
    # router that inserts as it routes and is also fed KV events (RoutingContext.prefix_view:
    # a lower bound of the prefix held in the union of the two, what two indexes read).
    prefix_view: PrefixView = "router"
    # Load imbalance gate: max - min running requests above this routes to the least
    # loaded node (AIBRIX_PREFIX_CACHE_POD_RUNNING_REQUEST_IMBALANCE_ABS_COUNT, chart: 16).
    imbalance_abs_count: int = Field(16, ge=0)
    # A matched node is eligible only with running <= mean + this x stddev
    # (AIBRIX_PREFIX_CACHE_STANDARD_DEVIATION_FACTOR, chart: 2).
    stddev_factor: float = Field(2.0, ge=0.0)


@register_policy("aibrix_prefix", AibrixPrefixParams)
class AibrixPrefix:
    """Best prefix match among nodes that are not load outliers."""

    name: str

    def __init__(self, params: AibrixPrefixParams, *, num_nodes: int, seed: int) -> None:
        self.params = params

    def route(self, ctx: RoutingContext) -> RoutingDecision:
        nodes = ctx.nodes
        loads = [n.outstanding for n in nodes]
        if max(loads) - min(loads) > self.params.imbalance_abs_count:
            return RoutingDecision(node=least_outstanding(nodes))
        n = len(loads)
        mean = sum(loads) / n
        var = sum((x - mean) ** 2 for x in loads) / (n - 1) if n > 1 else 0.0
        limit = mean + self.params.stddev_factor * math.sqrt(var)
        match = ctx.prefix_view(self.params.prefix_view)
        best: tuple[int, int, int] | None = None  # (-match, running, node id): smallest wins
        for i, node in enumerate(nodes):
            m = match[i]
            if m > 0 and loads[i] <= limit:
                key = (-m, loads[i], node.node_id)
                if best is None or key < best:
                    best = key
        if best is None:
            return RoutingDecision(node=least_outstanding(nodes))
        return RoutingDecision(node=best[2])
