"""What the decider sees: candidate chains and a snapshot of the cluster, as plain data.

The simulator builds a :class:`ClusterView` from its running state
(:mod:`kvcast.simulator.cluster_adapter`); the live sidecar will build the same from vLLM KV
events and node telemetry. Nothing here refers to the simulator.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
from numpy.typing import ArrayLike


@dataclass(frozen=True, slots=True)
class PrefillCost:
    """Prefill time ``a + b*n + c*n^2`` ms (DistServe form), as the simulator models it."""

    a_ms: float
    b_ms_per_token: float
    c_ms_per_token2: float

    def span_ms(self, start_tokens: float, end_tokens: float) -> float:
        """Marginal time to compute tokens ``[start, end)`` after a cached prefix of ``start``."""
        if end_tokens <= start_tokens:
            return 0.0
        b, c = self.b_ms_per_token, self.c_ms_per_token2  # plain floats: a per-chain hot path
        return b * (end_tokens - start_tokens) + c * (end_tokens**2 - start_tokens**2)

    def spans_ms(self, start_tokens: ArrayLike, end_tokens: ArrayLike) -> np.ndarray:
        """:meth:`span_ms` elementwise over arrays (the same arithmetic), without the clamp:
        negative where ``end < start`` (callers mask those)."""
        s, e = np.asarray(start_tokens, dtype=float), np.asarray(end_tokens, dtype=float)
        return self.b_ms_per_token * (e - s) + self.c_ms_per_token2 * (e**2 - s**2)


@dataclass(frozen=True, slots=True)
class Links:
    """Per ordered node pair: bandwidth, latency, current backlog and topology tier."""

    bytes_per_ms: np.ndarray  # [n, n] achieved bytes per ms
    latency_ms: np.ndarray  # [n, n]
    backlog_ms: np.ndarray  # [n, n] ms until the pair's NICs are both free
    tier: np.ndarray  # [n, n] 0 same host, 1 rack, 2 datacenter, 3 cross zone

    def wire_ms(self, src: int, dst: int, nbytes: float) -> float:
        """Time on the wire once the transfer starts."""
        return float(self.latency_ms[src, dst] + nbytes / self.bytes_per_ms[src, dst])

    def transfer_ms(self, src: int, dst: int, nbytes: float) -> float:
        """Time from now until such a transfer would land (backlog + wire)."""
        if src == dst or nbytes <= 0:
            return 0.0
        return float(self.backlog_ms[src, dst]) + self.wire_ms(src, dst, nbytes)


RouteProbe = Callable[[tuple[int, ...], int, Sequence[int]], int]
"""``(chain, input_tokens, match per node) -> node``: where the base router would send such a
request now if the nodes held these prefixes (no side effects on the live router)."""

LowerTier = tuple[Container[int], float]
"""A node's lower tier: the blocks it holds and its load bandwidth into HBM (bytes per ms)."""


@dataclass(frozen=True)
class ClusterView:
    """The cluster at ``now_ms``: loads, memory, links and who holds which block."""

    now_ms: float
    block_bytes: int
    block_tokens: int
    prefill: PrefillCost
    queue_ms: np.ndarray  # [n] predicted wait before a new request's prefill starts
    capacity_bytes: np.ndarray  # [n] HBM KV capacity
    pinned_bytes: np.ndarray  # [n] in use by requests (never evictable)
    cached_bytes: np.ndarray  # [n] evictable cached blocks
    spec_bytes: np.ndarray  # [n] speculative replicas resident
    links: Links
    hbm: Mapping[int, int]  # block -> bitmask of nodes holding it in HBM
    lower: Sequence[Sequence[LowerTier]] = ()  # per node, its lower tiers in load order
    node_tenants: Sequence[frozenset[str] | None] = ()  # per node; None (or absent): any
    reactive_pull: bool = False  # the router pulls missing KV on the critical path (Mooncake)
    would_route: RouteProbe | None = None  # None: assume the router follows the replicas
    # recent HBM evictions per node (blocks per ms): a replica is evicted before any cached
    # block, so on a full node it survives only if no allocation comes before its use
    evict_blocks_per_ms: np.ndarray | None = None

    @property
    def n(self) -> int:
        return len(self.queue_ms)

    @property
    def free_bytes(self) -> np.ndarray:
        """Unused HBM (no eviction needed)."""
        return self.capacity_bytes - self.pinned_bytes - self.cached_bytes - self.spec_bytes

    def serves(self, node: int, tenant: str) -> bool:
        if not self.node_tenants:
            return True
        allowed = self.node_tenants[node]
        return allowed is None or tenant in allowed


@dataclass(frozen=True)
class ChainCandidates:
    """Prefix chains (root first) whose blocks a scorer gives a probability of use.

    A scorer returns one probability per block, aligned with the chains concatenated
    (``offsets[i]:offsets[i + 1]`` are chain i's). Per chain: its tenant, how many leading
    blocks are public (shareable across tenants), the predicted first use (NaN: unknown, the
    window's end), the tokens its next request computes beyond the chain, and how long the
    chain is expected to stay in use (NaN: unknown, the window).
    """

    chains: tuple[tuple[int, ...], ...]
    tenants: tuple[str, ...] = ()
    public_blocks: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    first_use_ms: np.ndarray = field(default_factory=lambda: np.zeros(0))
    tail_tokens: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    life_ms: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @classmethod
    def build(
        cls,
        chains: Sequence[Sequence[int]],
        *,
        tenants: Sequence[str] | None = None,
        public_blocks: Sequence[int] | None = None,
        first_use_ms: Sequence[float] | None = None,
        tail_tokens: Sequence[int] | None = None,
        life_ms: Sequence[float] | None = None,
        default_tail_tokens: int = 0,
    ) -> ChainCandidates:
        k = len(chains)
        return cls(
            tuple(c if isinstance(c, tuple) else tuple(int(b) for b in c) for c in chains),
            tuple(tenants) if tenants is not None else ("default",) * k,
            np.asarray(public_blocks if public_blocks is not None else [0] * k, dtype=np.int64),
            np.asarray(first_use_ms if first_use_ms is not None else [np.nan] * k, dtype=float),
            np.asarray(
                tail_tokens if tail_tokens is not None else [default_tail_tokens] * k,
                dtype=np.int64,
            ),
            np.asarray(life_ms if life_ms is not None else [np.nan] * k, dtype=float),
        )

    def __len__(self) -> int:
        return len(self.chains)

    @property
    def offsets(self) -> np.ndarray:
        out = np.zeros(len(self.chains) + 1, np.int64)
        np.cumsum(self.lengths, out=out[1:])
        return out

    @cached_property
    def lengths(self) -> np.ndarray:
        """``[k]`` each chain's block count (read only). Cached, as :attr:`total_blocks`: the
        chains are an immutable tuple, and a tick reads both several times."""
        out = np.fromiter(map(len, self.chains), np.int64, len(self.chains))
        out.flags.writeable = False
        return out

    @cached_property
    def total_blocks(self) -> int:
        return sum(map(len, self.chains))
