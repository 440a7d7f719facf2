"""What the sidecar knows of each node's load and memory, from the agents and the router.

Per node: the agent's last telemetry (memory by block state, the queue depth its engines
report) and transfer address, from :mod:`.telemetry_poller`; the queue depth the router saw
when it routed a request there (optional in ``POST /v1/requests``), and the mean prompt size
of the requests sent there. The predicted wait before a new request's prefill starts is
``queue_depth x prefill(mean prompt tokens)``, the queue depth being the freshest of the
router's and the engines' reports (none within ``stale_s``: 0). A node without telemetry
has no capacity in the decider's view: it is never a target.

Written by the event loop (telemetry, router reports) and the consumer (prompt sizes), read
by the decision thread: each field is replaced whole, never mutated in place.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kvcast.prefill import PrefillModel
from kvcast.serving.agent.api_models import Telemetry

TOKENS_ALPHA = 0.1  # EWMA weight of the newest request's prompt size


@dataclass(frozen=True, slots=True)
class AgentState:
    telemetry: Telemetry
    at: float  # clock seconds when received


@dataclass(frozen=True, slots=True)
class NodeArrays:
    """The memory and queue figures of every node, as the decider's view wants them."""

    queue_ms: np.ndarray
    queue_depth: np.ndarray
    capacity_bytes: np.ndarray
    pinned_bytes: np.ndarray
    cached_bytes: np.ndarray
    spec_bytes: np.ndarray


class NodeLoads:
    def __init__(
        self,
        nodes: int,
        prefill: PrefillModel,
        stale_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.n, self.prefill, self.stale_s, self._clock = nodes, prefill, stale_s, clock
        self.agents: list[AgentState | None] = [None] * nodes
        self.transfer: list[str | None] = [None] * nodes  # agent transfer address
        self.agent_up: list[bool] = [False] * nodes
        # (depth, when it came, the router's ts_ms for it)
        self.router_queue: list[tuple[int, float, float] | None] = [None] * nodes
        self.mean_tokens = np.zeros(nodes)

    def note_telemetry(self, node: int, telemetry: Telemetry) -> None:
        self.agents[node] = AgentState(telemetry, self._clock())
        self.agent_up[node] = True

    def note_agent_down(self, node: int) -> None:
        self.agent_up[node] = False

    def note_router_queue(self, node: int, depth: int, ts_ms: float) -> None:
        """The router's report of ``node``'s queue, made at ``ts_ms``; one older than the report
        kept is ignored (concurrent posts can land out of order)."""
        kept = self.router_queue[node]
        if kept is None or ts_ms >= kept[2]:
            self.router_queue[node] = (depth, self._clock(), ts_ms)

    def note_request(self, node: int, input_tokens: int) -> None:
        if 0 <= node < self.n and input_tokens > 0:
            m = self.mean_tokens[node]
            self.mean_tokens[node] = (
                input_tokens if m == 0 else m + TOKENS_ALPHA * (input_tokens - m)
            )

    def queue_depth(self, node: int) -> int:
        """The freshest report of the node's waiting requests (0 when none is fresh)."""
        now, best, depth = self._clock(), -1.0, 0
        agent, router = self.agents[node], self.router_queue[node]
        if agent is not None and agent.telemetry.queue_depth is not None:
            best, depth = agent.at, agent.telemetry.queue_depth
        if router is not None and router[1] > best:
            best, depth = router[1], router[0]
        return depth if best >= 0 and now - best <= self.stale_s else 0

    def queue_ms(self, node: int, depth: int | None = None) -> float:
        """The predicted wait on ``node`` (``depth``: its :meth:`queue_depth`, when at hand)."""
        if depth is None:
            depth = self.queue_depth(node)
        return depth * self.prefill.isolated_ms(int(self.mean_tokens[node])) if depth else 0.0

    def arrays(self) -> NodeArrays:
        z = np.zeros(self.n)
        cap, pinned, cached, spec = z.copy(), z.copy(), z.copy(), z.copy()
        for i, a in enumerate(self.agents):
            if a is None or not self.agent_up[i]:
                continue
            t = a.telemetry
            cap[i], pinned[i] = t.capacity_bytes, t.bytes.active
            cached[i], spec[i] = t.bytes.cached, t.bytes.speculative
        depths = [self.queue_depth(i) for i in range(self.n)]
        queue = np.array([self.queue_ms(i, d) for i, d in enumerate(depths)], dtype=float)
        return NodeArrays(queue, np.array(depths, dtype=float), cap, pinned, cached, spec)
