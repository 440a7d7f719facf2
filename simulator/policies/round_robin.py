"""``round_robin``: the textbook rotation over the nodes, ignoring load and cache."""

from __future__ import annotations

from kvcast.config import FrozenConfig
from kvcast.simulator.policies.base import RoutingContext, RoutingDecision
from kvcast.simulator.policies.registry import register_policy


class RoundRobinParams(FrozenConfig):
    """Round robin has no thresholds."""


@register_policy("round_robin", RoundRobinParams)
class RoundRobin:
    """Send request k to node ``k mod len(nodes)`` (in the order of ``ctx.nodes``)."""

    name: str

    def __init__(self, params: RoundRobinParams, *, num_nodes: int, seed: int) -> None:
        self.params = params
        self._next = 0

    def route(self, ctx: RoutingContext) -> RoutingDecision:
        nodes = ctx.nodes
        i = self._next % len(nodes)
        self._next = i + 1
        return RoutingDecision(node=nodes[i].node_id)
