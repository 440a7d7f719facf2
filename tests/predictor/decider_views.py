"""Hand-made cluster views and candidates for the decider tests (imported by them)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kvcast.config import parse_config
from kvcast.predictor.cluster_view import (
    ChainCandidates,
    ClusterView,
    Links,
    LowerTier,
    PrefillCost,
    RouteProbe,
)
from kvcast.predictor.decider import Decider
from kvcast.predictor.decider_config import DeciderConfig

GIB = 1 << 30
BLOCK = 160 * (1 << 20)  # one 512-token Llama-3-70B fp16 block
GBPS_100 = 100e9 / 8 * 0.87 / 1e3  # bytes per ms of a 100 Gb/s link at 87%
CHAIN = tuple(range(1, 11))  # ten blocks, root first


def decider_cfg(**sections: dict[str, object]) -> DeciderConfig:
    return parse_config(DeciderConfig, dict(sections), source="<test>")


def view(
    *,
    queue: Sequence[float] = (2000.0, 0.0, 500.0),
    holders: dict[int, int] | None = None,
    free_gib: Sequence[float] | None = None,
    spec_gib: Sequence[float] | None = None,
    bytes_per_ms: float = GBPS_100,
    now_ms: float = 0.0,
    node_tenants: Sequence[frozenset[str] | None] = (),
    lower: Sequence[Sequence[LowerTier]] = (),
    would_route: RouteProbe | None = None,
    evict_per_ms: Sequence[float] | None = None,
) -> ClusterView:
    """Three nodes (by default); node 0 holds CHAIN in HBM; 400 GiB of KV each, 100 GiB
    pinned, the rest cached except ``free_gib`` (default 50)."""
    n = len(queue)
    cap = np.full(n, 400.0 * GIB)
    free = np.asarray(free_gib if free_gib is not None else [50.0] * n) * GIB
    spec = np.asarray(spec_gib if spec_gib is not None else [0.0] * n) * GIB
    pinned = np.full(n, 100.0 * GIB)
    cached = cap - pinned - spec - free
    links = Links(
        np.full((n, n), bytes_per_ms),
        np.full((n, n), 0.05),
        np.zeros((n, n)),
        np.full((n, n), 2),
    )
    return ClusterView(
        now_ms=now_ms,
        block_bytes=BLOCK,
        block_tokens=512,
        prefill=PrefillCost(20.0, 0.07, 7e-7),
        queue_ms=np.asarray(queue, dtype=float),
        capacity_bytes=cap,
        pinned_bytes=pinned,
        cached_bytes=cached,
        spec_bytes=spec,
        links=links,
        hbm=holders if holders is not None else {b: 0b001 for b in CHAIN},
        lower=lower,
        node_tenants=node_tenants,
        would_route=would_route,
        evict_blocks_per_ms=None if evict_per_ms is None else np.asarray(evict_per_ms),
    )


def one_chain(
    p: float = 0.9,
    chain: tuple[int, ...] = CHAIN,
    *,
    tenant: str = "default",
    public_blocks: int = 0,
    first_use_ms: float = float("nan"),
) -> tuple[ChainCandidates, np.ndarray]:
    cands = ChainCandidates.build(
        [chain], tenants=[tenant], public_blocks=[public_blocks], first_use_ms=[first_use_ms]
    )
    return cands, np.full(len(chain), p)


class EveryChain(Decider):
    """The decider without its tick screen: every weighed chain gets its copy terms and is
    weighed in turn (what the screen must never change)."""

    def _may_copy(self, plans: Any, rows: Any, weighed: list[Any], forecast: Any) -> list[int]:
        return list(range(len(weighed)))

    def _may_pay(self, plans: Any, rows: Any, batched: list[int], *args: Any) -> list[int]:
        return batched

    def _cannot_pay(self, rows: Any, weighed: list[Any], *args: Any) -> list[bool]:
        return [False] * len(weighed)


class ScreensAgain(Decider):
    """The decider making its screens again after every command that leaves a chain they
    ruled out (the default waits for ``Decider.RESCREEN_AT`` of them)."""

    RESCREEN_AT = 1
