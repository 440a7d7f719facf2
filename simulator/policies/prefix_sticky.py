"""``prefix_sticky``: consistent hashing of the session, else of the first n block hashes.

A hash ring with virtual nodes (the SGLang router's ``consistent_hash`` policy uses 160 per
worker) maps each key to a node, so that adding or removing a node moves only about
``1/num_nodes`` of the keys. Keys are hashed with BLAKE2b, never Python's salted ``hash``, so
the mapping is the same in every process and run.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_right
from collections.abc import Sequence

from pydantic import Field

from kvcast.config import FrozenConfig
from kvcast.simulator.policies.base import RoutingContext, RoutingDecision
from kvcast.simulator.policies.registry import register_policy


def stable_hash(data: bytes) -> int:
    """A 64-bit hash that is identical across processes and platforms."""
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


class HashRing:
    """A consistent-hash ring over node ids with ``virtual_nodes`` points per node."""

    def __init__(self, node_ids: Sequence[int], virtual_nodes: int) -> None:
        points = sorted(
            (stable_hash(f"node-{nid}#{v}".encode()), nid)
            for nid in node_ids
            for v in range(virtual_nodes)
        )
        self.node_ids = tuple(node_ids)
        self._points = [p for p, _ in points]
        self._owners = [nid for _, nid in points]

    def lookup(self, key: int) -> int:
        """The node owning the first ring point clockwise of ``key``."""
        i = bisect_right(self._points, key)
        return self._owners[i if i < len(self._owners) else 0]


class PrefixStickyParams(FrozenConfig):
    # Leading block hashes that form the key when the request has no session. 2, not 1:
    # block 0 of Mooncake traces is a system prompt shared by every request.
    prefix_blocks: int = Field(2, ge=1)
    # Ring points per node (SGLang router consistent_hash policy default: 160).
    virtual_nodes: int = Field(160, ge=1)
    # Key by the session id when the request carries one.
    use_session: bool = True


@register_policy("prefix_sticky", PrefixStickyParams)
class PrefixSticky:
    """Same session (or same first ``prefix_blocks`` blocks) -> same node."""

    name: str

    def __init__(self, params: PrefixStickyParams, *, num_nodes: int, seed: int) -> None:
        self.params = params
        self._ring = HashRing(range(num_nodes), params.virtual_nodes)

    def key(self, ctx: RoutingContext) -> int:
        """The ring key of this request."""
        if self.params.use_session and ctx.session is not None:
            return stable_hash(b"s:" + ctx.session.encode())
        head = ctx.block_hashes[: self.params.prefix_blocks]
        return stable_hash(b"b:" + ",".join(map(str, head)).encode())

    def route(self, ctx: RoutingContext) -> RoutingDecision:
        nodes = ctx.nodes
        ids = self._ring.node_ids
        if len(nodes) != len(ids) or nodes[-1].node_id != ids[-1]:  # cluster changed
            self._ring = HashRing([n.node_id for n in nodes], self.params.virtual_nodes)
        return RoutingDecision(node=self._ring.lookup(self.key(ctx)))
