"""What a router knows of the nodes' caches from its own decisions: the blocks it sent where.

SGLang's router (``sgl-router``'s ``cache_aware``: an approximate radix tree per worker, the
request inserted as it is routed) and AIBrix's gateway (``prefix_cache.go``: a prefix hash
table, ``AddPrefix`` on routing) match a request against the prefixes they *routed* to each
node, not against what the engines report. So a burst of requests sharing a prefix goes to
one node (the first one's prefix is in the index at once, before any engine computed it),
the index keeps blocks an engine has since evicted, and it never learns of a copy another
component placed (a kvcast replica): those routers do not follow replicas.

The simulator keeps one index per run, noted at every accepted routing, and hands each
router the longest prefix of the request per node (:attr:`RoutingContext.routed_blocks`);
a policy chooses which view it reads. Each node's part keeps its ``per_node`` most recently
routed blocks (LRU), as the anchors bound theirs: the default, 32,768 blocks of 512 tokens,
is SGLang's ``--max-tree-size`` of 2^26 characters at ~4 characters per token.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

PER_NODE = 32_768  # blocks remembered per node (SGLang's tree bound, in 512-token blocks)


class RoutedIndex:
    def __init__(self, nodes: int, per_node: int = PER_NODE) -> None:
        if per_node < 1:
            raise ValueError(f"per_node must be >= 1, got {per_node}")
        self.per_node = per_node
        self._routed: list[OrderedDict[int, None]] = [OrderedDict() for _ in range(nodes)]

    def note(self, node: int, blocks: Sequence[int]) -> None:
        """The router sent a request of ``blocks`` to ``node`` (they become its newest; the
        least recently routed go beyond ``per_node``)."""
        routed = self._routed[node]
        for b in reversed(blocks):  # the head last: the newest, so forgotten last (as a
            routed[b] = None  # radix tree drops leaves, not the prefix they hang from)
            routed.move_to_end(b)
        while len(routed) > self.per_node:
            routed.popitem(last=False)

    def match(self, blocks: Sequence[int]) -> list[int]:
        """Per node, the longest prefix of ``blocks`` routed there."""
        out = []
        for routed in self._routed:
            n = 0
            for b in blocks:
                if b not in routed:
                    break
                n += 1
            out.append(n)
        return out
