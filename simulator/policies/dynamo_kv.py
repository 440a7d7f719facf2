"""``dynamo_kv``: NVIDIA Dynamo's KV router cost function.

Anchor: ai-dynamo/dynamo, KV router scheduler (``DefaultWorkerSelector``)::

    cost = prefill_load_scale x max(active_prefill_blocks + incoming_blocks - overlap, 0)
           + active_decode_blocks

with ``overlap`` the node's cached prefix (``match_blocks``) and ``incoming_blocks`` the
request's block count. Dynamo calls ``prefill_load_scale`` ``--kv-overlap-score-weight``
(default 1.0). At ``--router-temperature 0`` (the default) the lowest cost wins and ties are
broken uniformly at random, here by a seeded RNG; above 0 a node is sampled with
probability ``softmax(-(cost / (max_cost - min_cost)) / temperature)``, as Dynamo does.
"""

from __future__ import annotations

import math
import random

from pydantic import Field

from kvcast.config import FrozenConfig
from kvcast.simulator.policies.base import RoutingContext, RoutingDecision
from kvcast.simulator.policies.registry import register_policy


class DynamoKvParams(FrozenConfig):
    # Weight of the prefill term (Dynamo --kv-overlap-score-weight, default 1.0); 0 turns
    # the router into pure decode-load balancing.
    prefill_load_scale: float = Field(1.0, ge=0.0)
    # Softmax sampling temperature over the costs (Dynamo --router-temperature, default
    # 0.0: deterministic lowest cost, random among ties).
    router_temperature: float = Field(0.0, ge=0.0)


@register_policy("dynamo_kv", DynamoKvParams)
class DynamoKv:
    """Lowest prefill-plus-decode block cost wins."""

    name: str

    def __init__(self, params: DynamoKvParams, *, num_nodes: int, seed: int) -> None:
        self.params = params
        self._rng = random.Random(seed)

    def costs(self, ctx: RoutingContext) -> list[float]:
        """Per node (in ``ctx.nodes`` order) the router's cost of taking this request."""
        scale = self.params.prefill_load_scale
        incoming = ctx.num_blocks
        match = ctx.match_blocks
        out = []
        for i, node in enumerate(ctx.nodes):
            prefill = node.active_prefill_blocks + incoming - match[i]
            out.append(scale * (prefill if prefill > 0 else 0) + node.active_decode_blocks)
        return out

    def route(self, ctx: RoutingContext) -> RoutingDecision:
        costs = self.costs(ctx)
        nodes = ctx.nodes
        if self.params.router_temperature > 0.0:
            return RoutingDecision(node=nodes[self._sample(costs)].node_id)
        lowest = min(costs)
        ties = [i for i, c in enumerate(costs) if c == lowest]
        i = ties[0] if len(ties) == 1 else ties[self._rng.randrange(len(ties))]
        return RoutingDecision(node=nodes[i].node_id)

    def _sample(self, costs: list[float]) -> int:
        lo, hi = min(costs), max(costs)
        if lo == hi:
            return self._rng.randrange(len(costs))
        t = self.params.router_temperature * (hi - lo)
        weights = [math.exp((lo - c) / t) for c in costs]  # max-subtracted softmax of -c/t
        u = self._rng.random() * sum(weights)
        acc = 0.0
        for i, w in enumerate(weights):
            acc += w
            if u < acc:
                return i
        return len(costs) - 1
