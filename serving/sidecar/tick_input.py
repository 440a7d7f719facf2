"""What a decision tick reads from the feature state, taken on the consumer thread.

:func:`snapshot` runs as a :meth:`StateKeeper.ask` query: the candidate chains, their distinct
blocks, the feature rows of those blocks at ``now``, who holds each in GPU memory, and the
requests routed since the last snapshot. The rest of the tick (scoring, deciding, acting)
runs on the decision thread from this snapshot, while the consumer goes back to the events.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from itertools import compress

import numpy as np

from kvcast.predictor.cluster_view import ChainCandidates
from kvcast.serving.sidecar.consumer import Routed, StateKeeper


@dataclass(frozen=True)
class TickInput:
    now_ms: float
    cands: ChainCandidates
    blocks: list[int]  # the distinct candidate blocks, rows in this order
    where: np.ndarray  # per block of the concatenated chains, its index in ``blocks``
    rows: np.ndarray  # [len(blocks), features]
    hbm: Mapping[int, int]  # block -> bitmask of nodes holding it in GPU memory (held ones only)
    removals: np.ndarray  # cumulative blocks removed from each node's HBM
    features_s: float  # time taken by the rows (the distinct blocks included)
    holders: np.ndarray | None = None  # per block of the chains, its ``hbm`` mask (or None)
    routed: tuple[Routed, ...] = ()  # requests routed since the last snapshot (time, node, blocks)


MASK_COLUMN = "replica_mask"  # bit n: node n holds the block in GPU memory (exact below 52)
MASK_NODES = 52


def mask_column(keeper: StateKeeper, rows: np.ndarray) -> np.ndarray | None:
    """Each row's bitmask of GPU holders, from the rows' own ``replica_mask`` column; None
    when some node does not fit in it."""
    spec = keeper.state.spec
    if keeper.state.cfg.nodes <= MASK_NODES and MASK_COLUMN in spec.names:
        return rows[:, spec.index(MASK_COLUMN)].astype(np.int64)
    return None


def gpu_holders(
    keeper: StateKeeper, blocks: list[int], rows: np.ndarray, masks: np.ndarray | None = None
) -> dict[int, int]:
    """block -> bitmask of GPU holders, for the held blocks: read from the rows' own
    ``replica_mask`` column when every node fits in it (``masks``: that column as
    :func:`mask_column` reads it, when at hand), else from the residency sets."""
    if masks is None:
        masks = mask_column(keeper, rows)
    masks_list = masks.tolist() if masks is not None else keeper.state.residency.masks(blocks)[0]
    return _held(blocks, masks_list)


def _held(blocks: list[int], masks: list[int]) -> dict[int, int]:
    return dict(compress(zip(blocks, masks, strict=True), masks))


class Holders(Mapping[int, int]):
    """:func:`gpu_holders` of a tick's blocks, made on the first lookup: the decider reads
    ``view.hbm`` only to commit a command or to place a chain with a copy on its way, which
    most ticks do not, so most ticks skip the dict (a pass over every candidate block).

    Once made, ``get`` (the decider's one lookup, once per block it moves or places) is the
    dict's own bound method, set on the instance: no Python frame per lookup (no
    ``__slots__``, so that the instance attribute can shadow the method)."""

    def __init__(self, blocks: list[int], masks: np.ndarray) -> None:
        self._args: tuple[list[int], np.ndarray] | None = (blocks, masks)  # the column
        self._map: dict[int, int] = {}

    def _made(self) -> dict[int, int]:
        if self._args is not None:
            blocks, masks = self._args
            self._map, self._args = _held(blocks, masks.tolist()), None
            self.get = self._map.get  # type: ignore[method-assign]
        return self._map

    def __getitem__(self, block: int) -> int:
        return self._made()[block]

    def get(self, block: int, default: int | None = None) -> int | None:  # type: ignore[override]
        return self._made().get(block, default)

    def __contains__(self, block: object) -> bool:
        return block in self._made()

    def __iter__(self) -> Iterator[int]:
        return iter(self._made())

    def __len__(self) -> int:
        return len(self._made())


def snapshot(keeper: StateKeeper, now_ms: float, default_tail_tokens: int) -> TickInput:
    keeper.commit(now_ms)
    cands, covers = keeper.chains.covered(now_ms, default_tail_tokens)
    t0 = time.perf_counter()
    blocks, where, rows = keeper.state.chain_rows(now_ms, cands.chains, covers)
    features_s = time.perf_counter() - t0
    masks = mask_column(keeper, rows)
    hbm = gpu_holders(keeper, blocks, rows) if masks is None else Holders(blocks, masks)
    holders = None if masks is None else masks[where]  # the decider's, per block of the chains
    return TickInput(
        now_ms, cands, blocks, where, rows, hbm, keeper.gpu_removals.copy(), features_s, holders,
        tuple(keeper.take_routed()),
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Location:
    gpu: int  # bitmask of nodes holding the block in GPU memory
    lower: int  # bitmask of nodes holding it in CPU / disk tiers


def locate(keeper: StateKeeper, blocks: list[int]) -> list[Location]:
    gpu, lower = keeper.state.residency.masks(blocks)
    return [Location(g, low) for g, low in zip(gpu, lower, strict=True)]


def chain_holders(keeper: StateKeeper, blocks: list[int]) -> int:
    """Bitmask of the nodes holding every one of ``blocks`` in GPU memory."""
    mask = -1
    for m in keeper.state.residency.masks(blocks)[0]:
        mask &= m
    return mask if blocks else 0
