"""``dynamo_kv``: NVIDIA Dynamo's KV router cost function.

Anchor: ai-dynamo/dynamo, KV router (``docs/design_docs/router_design.md``: "Potential Active
Blocks" and "Potential New Prefill Blocks"; the scheduler's ``DefaultWorkerSelector``)::

    cost = overlap_score_weight x prefill_blocks + decode_blocks
    prefill_blocks = (in-flight prefill tokens + input tokens - overlap x block_size)
                     / block_size
    decode_blocks  = active blocks + the request's blocks not already active

per worker, where ``overlap`` is the worker's cached prefix of the request (``match_blocks``),
*in-flight prefill tokens* are the tokens the router predicted each request routed there to
prefill (its prompt less that worker's cached prefix at routing), dropped at its first token,
and *active blocks* are the distinct prompt blocks of the requests routed there and not
finished (prefilling or decoding; blocks several share count once). The design document's
``max(active_prefill_blocks + incoming_blocks - overlap, 0) + active_decode_blocks`` names
the same two terms; this reads each as Dynamo computes it (the decode term includes the new
request's blocks not already active, which Dynamo's "potential active blocks" counts). The
weight is ``prefill_load_scale`` here (Dynamo's ``--kv-overlap-score-weight``, default 1.0).
At ``--router-temperature 0`` (the default) the
lowest cost wins and ties are broken uniformly at random, here by a seeded RNG; above 0 a node
is sampled with probability ``softmax(-(cost / (max_cost - min_cost)) / temperature)``, as
Dynamo does.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from pydantic import Field

from kvcast.config import FrozenConfig
from kvcast.simulator.policies.base import NodeLoad, RoutingContext, RoutingDecision
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
        scale, bt = self.params.prefill_load_scale, ctx.block_tokens
        blocks, tokens, match = ctx.block_hashes, ctx.input_tokens, ctx.match_blocks
        out = []
        for i, node in enumerate(ctx.nodes):
            new_tokens = tokens - match[i] * bt
            prefill = (node.inflight_prefill_tokens + (new_tokens if new_tokens > 0 else 0)) / bt
            out.append(scale * prefill + len(node.active_blocks) + _not_active(blocks, node))
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


def _not_active(blocks: Sequence[int], node: NodeLoad) -> int:
    """How many of ``blocks`` no unfinished request on the node holds already."""
    return len(blocks) - sum(map(node.active_blocks.__contains__, blocks))
