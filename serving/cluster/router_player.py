"""The router's part of a replay: route each request with a baseline rule, tell the sidecar.

Routing uses the simulator's own rules (:mod:`kvcast.simulator.policies`) on the engines'
state as the replay models it (:class:`NodeModel`: each node's cached prefix of the request
and its :class:`NodeSnapshot` load), as a KV-aware router would see it through the engines'
KV events. Only rules that pick a node are offered (no reactive pull, no rejection: the
replay has no engine-to-engine KV path besides the agents'). The arrival is then posted to
the sidecar (``POST /v1/requests``) with the node's queue depth as the router saw it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from kvcast.prefill import PrefillModel
from kvcast.serving.cluster.node_model import NodeModel
from kvcast.simulator.policies import RoutingContext, create_policy

ROUTERS = (
    "prefix_sticky", "least_loaded", "round_robin", "dynamo_kv", "llmd_precise",
    "sglang_cache_aware", "aibrix_prefix",
)  # fmt: skip
LINK_BYTES_PER_MS = 100e9 / 8 * 0.87 / 1e3  # datacenter Ethernet, as the simulator's default
POSTS_IN_FLIGHT = 16  # arrivals being posted to the sidecar at once


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request of the trace, in trace time."""

    request_id: str
    arrival_ms: float
    tenant: str
    session: str | None
    input_tokens: int
    output_tokens: int
    block_hashes: tuple[int, ...]


def arrival_body(req: TraceRequest, node: int, queue_depth: int, ts_ms: float) -> dict[str, Any]:
    """The ``POST /v1/requests`` item for ``req`` routed to ``node``."""
    body: dict[str, Any] = {
        "request_id": req.request_id, "node": node, "tenant": req.tenant,
        "block_hashes": list(req.block_hashes), "input_tokens": req.input_tokens,
        "output_tokens": req.output_tokens, "ts_ms": ts_ms, "queue_depth": queue_depth,
    }  # fmt: skip
    if req.session:
        body["session"] = req.session
    return body


class RouterPlayer:
    """``route(now_ms, req)`` -> node id; ``post(...)`` sends the arrival to the sidecar."""

    def __init__(
        self, policy: str, nodes: Sequence[NodeModel], block_tokens: int, block_bytes: int,
        prefill: PrefillModel | None = None, seed: int = 0,
    ) -> None:  # fmt: skip
        if policy not in ROUTERS:
            raise ValueError(f"--router {policy!r}: one of {', '.join(ROUTERS)}")
        self.policy = create_policy(policy, num_nodes=len(nodes), seed=seed)
        self.nodes, self.block_tokens, self.block_bytes = list(nodes), block_tokens, block_bytes
        self.prefill = prefill or PrefillModel()
        self.routed = [0] * len(self.nodes)
        self.posted = self.post_failures = 0
        self._slots = asyncio.Semaphore(POSTS_IN_FLIGHT)

    def _transfer_ms(self, src: int, dst: int, blocks: int) -> float:
        return 0.0 if src == dst else blocks * self.block_bytes / LINK_BYTES_PER_MS

    def route(self, now_ms: float, req: TraceRequest) -> int:
        chain = req.block_hashes
        ctx = RoutingContext(
            now_ms=now_ms, input_tokens=req.input_tokens, block_hashes=chain,
            block_tokens=self.block_tokens, match_blocks=[n.match(chain) for n in self.nodes],
            nodes=[n.snapshot(now_ms) for n in self.nodes], prefill_ms=self.prefill.isolated_ms,
            transfer_ms=self._transfer_ms, session=req.session,
        )  # fmt: skip
        node = self.policy.route(ctx).node
        self.routed[node] += 1
        return node

    async def post(
        self, http: httpx.AsyncClient, sidecar: str, headers: dict[str, str],
        items: list[dict[str, Any]],
    ) -> bool:  # fmt: skip
        """Post arrivals to the sidecar; False (counted) when it refused or did not answer."""
        async with self._slots:
            try:
                r = await http.post(f"{sidecar}/v1/requests", json={"requests": items},
                                    headers=headers)  # fmt: skip
                ok = r.status_code == 202
            except httpx.HTTPError:
                ok = False
        if ok:
            self.posted += len(items)
        else:
            self.post_failures += len(items)
        return ok
