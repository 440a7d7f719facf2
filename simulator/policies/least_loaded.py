"""``least_loaded``: the node with the fewest outstanding requests (ties: lowest node id)."""

from __future__ import annotations

from collections.abc import Sequence

from kvcast.config import FrozenConfig
from kvcast.simulator.policies.base import NodeLoad, RoutingContext, RoutingDecision
from kvcast.simulator.policies.registry import register_policy


def least_outstanding(nodes: Sequence[NodeLoad]) -> int:
    """Id of the node with the fewest outstanding requests; ties go to the lowest node id.

    Also the fallback branch of the SGLang and AIBrix rules ("shortest queue",
    "least request").
    """
    it = iter(nodes)
    first = next(it)
    best_id = first.node_id
    best_load = first.outstanding
    for node in it:
        load = node.outstanding
        if load < best_load or (load == best_load and node.node_id < best_id):
            best_id = node.node_id
            best_load = load
    return best_id


class LeastLoadedParams(FrozenConfig):
    """Least loaded has no thresholds."""


@register_policy("least_loaded", LeastLoadedParams)
class LeastLoaded:
    """Fewest outstanding (queued + prefilling + decoding) requests wins."""

    name: str

    def __init__(self, params: LeastLoadedParams, *, num_nodes: int, seed: int) -> None:
        self.params = params

    def route(self, ctx: RoutingContext) -> RoutingDecision:
        return RoutingDecision(node=least_outstanding(ctx.nodes))
