"""Where each block is resident: per node, the set of blocks in GPU memory and in lower tiers.

Stores are set semantics (storing a resident block again changes nothing); removing a block
the node does not hold is counted as ``removed_not_resident``. ``AllBlocksCleared`` empties
every tier of the node. A successful ``ReplicationDone`` makes the blocks resident in the
target's GPU memory (idempotent with a ``BlockStored`` for the same copy). Every update is a
C-level set operation; masks are built per candidate at a decision tick, and the feature
columns (:meth:`Residency.columns`) from each node's intersection with the candidates.
"""

from __future__ import annotations

import numpy as np

from kvcast.features.counters import BadInputCounters
from kvcast.features.derive import MASK_NODES


class Residency:
    def __init__(self, nodes: int) -> None:
        self.gpu: list[set[int]] = [set() for _ in range(nodes)]
        self.lower: list[set[int]] = [set() for _ in range(nodes)]

    def tier(self, medium: str) -> list[set[int]]:
        return self.gpu if medium == "GPU" else self.lower

    def store(self, medium: str, node: int, hashes: tuple[int, ...]) -> None:
        self.tier(medium)[node].update(hashes)

    def remove(
        self, medium: str, node: int, hashes: tuple[int, ...], bad: BadInputCounters
    ) -> None:
        held = self.tier(medium)[node]
        gone = set(hashes)
        missing = len(gone - held)
        if missing:
            bad.counts["removed_not_resident"] += missing
        held -= gone

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
        held_by = _Membership(hashes)
        gpu = np.zeros((len(self.gpu), n), bool)  # node x block
        for node, held in enumerate(self.gpu):
            held_by.mark(held, gpu[node])
        lower = np.zeros(n)
        for held in self.lower:
            held_by.count(held, lower)
        low = gpu[:MASK_NODES]
        mask = np.ldexp(1.0, np.arange(len(low))) @ low  # sums of distinct powers of 2: exact
        mine = homes >= 0
        holds = np.full(n, np.nan)
        holds[mine] = gpu[homes[mine], np.flatnonzero(mine)]
        return [gpu.sum(axis=0, dtype=float), lower, mask, holds]

    def __len__(self) -> int:
        return sum(map(len, self.gpu)) + sum(map(len, self.lower))


class _Membership:
    """Which of ``hashes`` a held set holds: a membership test per hash when the set is at
    least as large, else a C-level intersection (it walks the set) mapped back to rows."""

    def __init__(self, hashes: list[int]) -> None:
        self.hashes = hashes
        self._index: dict[int, int] | None = None
        self._cands: set[int] | None = None

    def _rows(self, held: set[int]) -> np.ndarray | None:
        """Rows held, or None to test each hash (large sets, or repeated hashes)."""
        n = len(self.hashes)
        if len(held) >= n:
            return None
        if self._index is None:
            self._index = dict(zip(self.hashes, range(n), strict=False))
            self._cands = set(self._index) if len(self._index) == n else None
        if self._cands is None:
            return None
        both = held & self._cands
        return np.fromiter(map(self._index.__getitem__, both), np.intp, len(both))

    def mark(self, held: set[int], out: np.ndarray) -> None:
        """Set ``out[i]`` where ``held`` holds hash ``i``."""
        if not held:
            return
        rows = self._rows(held)
        if rows is None:
            out[:] = np.fromiter(map(held.__contains__, self.hashes), bool, len(self.hashes))
        else:
            out[rows] = True

    def count(self, held: set[int], out: np.ndarray) -> None:
        """Add 1 to ``out[i]`` where ``held`` holds hash ``i``."""
        if not held:
            return
        rows = self._rows(held)
        if rows is None:
            out += np.fromiter(map(held.__contains__, self.hashes), bool, len(self.hashes))
        else:
            out[rows] += 1.0


def _masks(tier: list[set[int]], hashes: list[int]) -> list[int]:
    out = [0] * len(hashes)
    for node, held in enumerate(tier):
        if held:
            bit = 1 << node
            out = [m | bit if h in held else m for m, h in zip(out, hashes, strict=True)]
    return out
