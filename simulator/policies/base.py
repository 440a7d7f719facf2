"""What a routing policy sees and returns.

A policy is called once per arriving request with a :class:`RoutingContext`: the request's
block chain, per node the length of its longest cached prefix of that chain, each node's load,
and the simulator's own cost model (prefill time, transfer time). It returns a
:class:`RoutingDecision`. Policies are pure functions of the context (plus their own state, such
as a round-robin counter or a seeded RNG for tie-breaks), so each rule can be tested on a
hand-made cluster state.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, get_args, runtime_checkable

PrefixView = Literal["router", "engine", "both"]
"""Which prefixes a prefix-matching router takes a node to hold: its own index of what it
routed, the engines' caches (KV events), or per node the longer of the two
(:meth:`RoutingContext.prefix_view`)."""

PREFIX_VIEWS: tuple[str, ...] = get_args(PrefixView)

ROUTED_INDEX_VIEWS: frozenset[str] = frozenset({"router", "both"})
"""The views that read the router's own index of what it routed (the simulator keeps it)."""


@runtime_checkable
class NodeLoad(Protocol):
    """Load signals of one node at routing time (the simulator's nodes satisfy this)."""

    @property
    def node_id(self) -> int: ...
    @property
    def outstanding(self) -> int:
        """Requests on the node not yet finished: queued + prefilling + decoding."""
        ...

    @property
    def queue_len(self) -> int:
        """Requests waiting for or in prefill."""
        ...

    @property
    def queued_prefill_tokens(self) -> int:
        """Uncached prompt tokens still to prefill on this node."""
        ...

    @property
    def inflight_prefill_tokens(self) -> int:
        """Uncached prompt tokens of the requests routed here and not yet past their first
        token, as predicted when each was routed (its prompt less the node's cached prefix)."""
        ...

    @property
    def active_blocks(self) -> Collection[int]:
        """The distinct prompt blocks of the requests routed here and not finished (waiting,
        prefilling or decoding)."""
        ...

    @property
    def kv_usage(self) -> float:
        """Fraction of HBM KV capacity in use by active blocks (0..1)."""
        ...

    @property
    def est_queue_ms(self) -> float:
        """Estimated wait before a new request's prefill would start."""
        ...


@dataclass(frozen=True, slots=True)
class NodeSnapshot:
    """A plain :class:`NodeLoad` for tests and for the live sidecar."""

    node_id: int
    outstanding: int = 0
    queue_len: int = 0
    queued_prefill_tokens: int = 0
    inflight_prefill_tokens: int = 0
    active_blocks: Collection[int] = frozenset()
    kv_usage: float = 0.0
    est_queue_ms: float = 0.0


@dataclass(slots=True)
class RoutingContext:
    """Everything a routing rule may look at for one arriving request."""

    now_ms: float
    input_tokens: int
    block_hashes: Sequence[int]
    block_tokens: int
    match_blocks: Sequence[int]
    """Per node: longest prefix of ``block_hashes`` cached in that node's HBM."""
    nodes: Sequence[NodeLoad]
    prefill_ms: Callable[[int], float]
    """Isolated prefill time for n uncached tokens on one node."""
    transfer_ms: Callable[[int, int, int], float]
    """Estimated time to move n blocks from node src to node dst now: (src, dst, n)."""
    session: str | None = None
    slo_ms: float = float("inf")
    """This request's TTFT SLO (used by policies that reject over the SLO)."""
    routed_blocks: Sequence[int] | None = None
    """Per node: longest prefix of ``block_hashes`` among the blocks the router itself sent
    there (:mod:`kvcast.simulator.routed_index`), for the rules that index prefixes as they
    route; None where no such index is kept (they then read ``match_blocks``)."""

    def prefix_view(self, view: str) -> Sequence[int]:
        """Per node, the prefix of ``block_hashes`` a router with this view takes it to hold.

        - ``"engine"``: ``match_blocks``, the engines' caches as KV events report them:
          replicas placed by another component included, blocks still being prefilled not.
        - ``"router"``: ``routed_blocks``, the router's own index of what it sent there
          (inserted at routing time): prefixes still being computed included, replicas not.
        - ``"both"``: per node the longer of the two, as read by a router that inserts at
          routing time and is also fed KV events. ``max(routed, match)`` is a lower bound of
          the longest prefix held in the union of the two block sets (each view's prefix lies
          in the union; the union can be longer only where one set fills a gap in the other
          one's chain). It is what a router holding two indexes reads: it matches the request
          in each and takes the longer match; stitching a chain across the two indexes would
          take a merged tree that neither anchor keeps.

        ``"router"`` and ``"both"`` read ``match_blocks`` alone where no routed index is kept
        (``routed_blocks`` None). Any other view is a ValueError.
        """
        if view not in PREFIX_VIEWS:
            raise ValueError(f"unknown prefix_view {view!r}; valid: {', '.join(PREFIX_VIEWS)}")
        routed = self.routed_blocks
        if view == "engine" or routed is None:
            return self.match_blocks
        if view == "router":
            return routed
        return [max(r, m) for r, m in zip(routed, self.match_blocks, strict=True)]

    @property
    def num_blocks(self) -> int:
        return len(self.block_hashes)


@dataclass(frozen=True, slots=True)
class RoutingDecision:
    """Where the request goes, and optionally a reactive pull of KV from another node."""

    node: int
    pull_from: int | None = None
    """Copy ``pull_blocks`` leading blocks from this node to ``node`` before prefill."""
    pull_blocks: int = 0
    reject: bool = False
    """The router refused the request (it counts as an SLO miss)."""


class RoutingPolicy(Protocol):
    """A routing rule. ``name`` is its registry key."""

    name: str

    def route(self, ctx: RoutingContext) -> RoutingDecision: ...
