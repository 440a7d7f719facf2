"""What a decision tick reads from the feature state, taken on the consumer thread.

:func:`snapshot` runs as a :meth:`StateKeeper.ask` query: the candidate chains, their distinct
blocks, the feature rows of those blocks at ``now`` and who holds each in GPU memory. The
rest of the tick (scoring, deciding, acting) runs on the decision thread from this snapshot,
while the consumer goes back to the events.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from kvcast.predictor.cluster_view import ChainCandidates
from kvcast.serving.sidecar.consumer import StateKeeper


@dataclass(frozen=True)
class TickInput:
    now_ms: float
    cands: ChainCandidates
    blocks: list[int]  # the distinct candidate blocks, rows in this order
    where: np.ndarray  # per block of the concatenated chains, its index in ``blocks``
    rows: np.ndarray  # [len(blocks), features]
    hbm: dict[int, int]  # block -> bitmask of nodes holding it in GPU memory (held ones only)
    removals: np.ndarray  # cumulative blocks removed from each node's HBM
    features_s: float  # time taken by the rows


MASK_COLUMN = "replica_mask"  # bit n: node n holds the block in GPU memory (exact below 52)
MASK_NODES = 52


def gpu_holders(keeper: StateKeeper, blocks: list[int], rows: np.ndarray) -> dict[int, int]:
    """block -> bitmask of GPU holders, for the held blocks: read from the rows' own
    ``replica_mask`` column when every node fits in it, else from the residency sets."""
    spec = keeper.state.spec
    if keeper.state.cfg.nodes <= MASK_NODES and MASK_COLUMN in spec.names and len(blocks):
        masks = rows[:, spec.index(MASK_COLUMN)].astype(np.int64).tolist()
    else:
        masks = keeper.state.residency.masks(blocks)[0]
    return {b: m for b, m in zip(blocks, masks, strict=True) if m}


def snapshot(keeper: StateKeeper, now_ms: float, default_tail_tokens: int) -> TickInput:
    keeper.commit(now_ms)
    cands = keeper.chains.candidates(now_ms, default_tail_tokens)
    index: dict[int, int] = {}
    where = [index.setdefault(b, len(index)) for chain in cands.chains for b in chain]
    blocks = list(index)
    t0 = time.perf_counter()
    rows = keeper.state.rows(now_ms, blocks)
    features_s = time.perf_counter() - t0
    hbm = gpu_holders(keeper, blocks, rows)
    return TickInput(
        now_ms, cands, blocks, np.asarray(where, dtype=np.int64), rows, hbm,
        keeper.gpu_removals.copy(), features_s,
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
