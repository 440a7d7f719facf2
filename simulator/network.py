"""Links between nodes: topology tiers, bandwidth sharing, transfer times.

A pair of nodes is joined by the tier of the smallest group they share (same host: NVLink;
same rack: RDMA; same zone: datacenter Ethernet; else cross-zone). Each node has one NIC, used
by all of its off-host transfers; a transfer holds the sender's egress and the receiver's
ingress for ``latency + bytes / (bandwidth x efficiency)``. Transfers queue FIFO on those two
resources, so concurrent transfers share a link's bandwidth in aggregate (a fluid fair-share
model would finish the same total bytes at the same time). Same-host NVLink pairs have their
own lanes.
"""

from __future__ import annotations

from kvcast.simulator.config import LinkTier, NetworkConfig

TIERS: tuple[str, ...] = ("same_host", "rack", "datacenter", "cross_zone")


class Network:
    __slots__ = ("_busy", "_links", "bytes_moved", "cfg", "n", "transfers")

    def __init__(self, cfg: NetworkConfig, nodes: int) -> None:
        self.cfg = cfg
        self.n = nodes
        tiers = [cfg.same_host, cfg.rack, cfg.datacenter, cfg.cross_zone]
        self._links: list[list[LinkTier]] = [
            [tiers[self.tier_index(i, j)] for j in range(nodes)] for i in range(nodes)
        ]
        # resource key -> time it is free: ("out", i), ("in", j) or ("nv", i, j)
        self._busy: dict[tuple[object, ...], float] = {}
        self.bytes_moved = 0
        self.transfers = 0

    def tier_index(self, i: int, j: int) -> int:
        c = self.cfg
        if i // c.nodes_per_host == j // c.nodes_per_host:
            return 0
        if i // c.nodes_per_rack == j // c.nodes_per_rack:
            return 1
        if i // c.nodes_per_zone == j // c.nodes_per_zone:
            return 2
        return 3

    def tier(self, i: int, j: int) -> str:
        return TIERS[self.tier_index(i, j)]

    def link(self, i: int, j: int) -> LinkTier:
        return self._links[i][j]

    def _resources(self, src: int, dst: int) -> tuple[tuple[object, ...], ...]:
        if self._links[src][dst] is self.cfg.same_host:
            return (("nv", src, dst),)
        return (("out", src), ("in", dst))

    def duration_ms(self, src: int, dst: int, nbytes: int) -> float:
        link = self._links[src][dst]
        return link.latency_us / 1e3 + nbytes / link.bytes_per_ms

    def estimate_ms(self, src: int, dst: int, nbytes: int, now: float) -> float:
        """Time from ``now`` until such a transfer would complete, without reserving."""
        if src == dst or nbytes <= 0:
            return 0.0
        busy = self._busy
        start = max([now, *(busy.get(r, 0.0) for r in self._resources(src, dst))])
        return start - now + self.duration_ms(src, dst, nbytes)

    def reserve(self, src: int, dst: int, nbytes: int, now: float) -> float:
        """Schedule a transfer; returns its completion time."""
        if src == dst or nbytes <= 0:
            return now
        res = self._resources(src, dst)
        busy = self._busy
        start = max([now, *(busy.get(r, 0.0) for r in res)])
        end = start + self.duration_ms(src, dst, nbytes)
        for r in res:
            busy[r] = end
        self.bytes_moved += nbytes
        self.transfers += 1
        return end

    def in_flight(self, node: int, now: float) -> bool:
        return self._busy.get(("out", node), 0.0) > now or self._busy.get(("in", node), 0.0) > now
