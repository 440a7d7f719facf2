"""Where each block is resident: per node, the set of blocks in GPU memory and in lower tiers.

Stores are set semantics (storing a resident block again changes nothing); removing a block
the node does not hold is counted as ``removed_not_resident``. ``AllBlocksCleared`` empties
every tier of the node. A successful ``ReplicationDone`` makes the blocks resident in the
target's GPU memory (idempotent with a ``BlockStored`` for the same copy). Every update is a
C-level set operation; masks are built per candidate at a decision tick, and the feature
columns (:meth:`Residency.columns`) from each node's C-level intersection with the candidates.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import chain

import numpy as np

from kvcast.features.counters import BadInputCounters
from kvcast.features.derive import MASK_NODES
from kvcast.features.online.packing import pack


class Residency:
    def __init__(self, nodes: int) -> None:
        self.gpu: list[set[int]] = [set() for _ in range(nodes)]
        self.lower: list[set[int]] = [set() for _ in range(nodes)]

    def tier(self, medium: str) -> list[set[int]]:
        return self.gpu if medium == "GPU" else self.lower

    def store(self, medium: str, node: int, hashes: tuple[int, ...]) -> None:
        (self.gpu if medium == "GPU" else self.lower)[node].update(hashes)

    def remove(
        self, medium: str, node: int, hashes: tuple[int, ...], bad: BadInputCounters
    ) -> None:
        held = (self.gpu if medium == "GPU" else self.lower)[node]
        before = len(held)
        held.difference_update(hashes)
        removed = before - len(held)
        if removed != len(hashes):  # some not held, or named twice
            missing = len(set(hashes)) - removed
            if missing:
                bad.counts["removed_not_resident"] += missing

    def clear(self, node: int) -> None:
        self.gpu[node].clear()
        self.lower[node].clear()

    def masks(self, hashes: list[int]) -> tuple[list[int], list[int]]:
        """GPU and lower-tier node bitmasks of each block."""
        return _masks(self.gpu, hashes), _masks(self.lower, hashes)

    def columns(self, hashes: list[int], homes: np.ndarray) -> list[np.ndarray]:
        """replicas_gpu, replicas_lower, replica_mask and home_holds of each block; ``homes``
        is each block's home node, -1 for none (home_holds NaN)."""
        n = len(hashes)
        find = _finder(hashes)
        nodes, rows = find(self.gpu)
        gpu = np.zeros((len(self.gpu), n), bool)  # node x block
        gpu[nodes, rows] = True
        lower = np.bincount(find(self.lower)[1], minlength=n).astype(float)
        low = gpu[:MASK_NODES]
        mask = np.ldexp(1.0, np.arange(len(low))) @ low  # sums of distinct powers of 2: exact
        mine = homes >= 0
        holds = np.full(n, np.nan)
        holds[mine] = gpu[homes[mine], np.flatnonzero(mine)]
        return [gpu.sum(axis=0, dtype=float), lower, mask, holds]

    def __len__(self) -> int:
        return sum(map(len, self.gpu)) + sum(map(len, self.lower))


def _finder(hashes: list[int]) -> Callable[[list[set[int]]], tuple[np.ndarray, np.ndarray]]:
    """``tier -> (node, index)`` of every held one of ``hashes``: C-level intersections (each
    walks the smaller set) mapped to indices by a dict; a membership test per hash and node
    where the hashes repeat."""
    n = len(hashes)
    cands = set(hashes)
    if len(cands) < n:

        def test(tier: list[set[int]]) -> tuple[np.ndarray, np.ndarray]:
            held = np.array([list(map(s.__contains__, hashes)) for s in tier], bool).reshape(-1, n)
            return np.nonzero(held)

        return test
    if len(_INTS) < n:
        _INTS.extend(range(len(_INTS), n))
    index = dict(zip(hashes, _INTS, strict=False))

    def find(tier: list[set[int]]) -> tuple[np.ndarray, np.ndarray]:
        both = [held & cands for held in tier]
        sizes = list(map(len, both))
        rows = pack(map(index.__getitem__, chain.from_iterable(both)), sum(sizes), np.int64)
        return np.repeat(np.arange(len(tier)), sizes), rows

    return find


_INTS: list[int] = []  # 0, 1, 2, ...: the dict values, made once


def _masks(tier: list[set[int]], hashes: list[int]) -> list[int]:
    out = [0] * len(hashes)
    for node, held in enumerate(tier):
        if held:
            bit = 1 << node
            out = [m | bit if h in held else m for m, h in zip(out, hashes, strict=True)]
    return out
