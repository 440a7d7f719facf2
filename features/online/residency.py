"""Where each block is resident: per node, the set of blocks in GPU memory and in lower tiers.

Stores are set semantics (storing a resident block again changes nothing); removing a block
the node does not hold is counted as ``removed_not_resident``. ``AllBlocksCleared`` empties
every tier of the node. A successful ``ReplicationDone`` makes the blocks resident in the
target's GPU memory (idempotent with a ``BlockStored`` for the same copy). Every update is a
C-level set operation; masks are built per candidate at a decision tick.
"""

from __future__ import annotations

from kvcast.features.counters import BadInputCounters


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

    def __len__(self) -> int:
        return sum(map(len, self.gpu)) + sum(map(len, self.lower))


def _masks(tier: list[set[int]], hashes: list[int]) -> list[int]:
    out = [0] * len(hashes)
    for node, held in enumerate(tier):
        if held:
            bit = 1 << node
            out = [m | bit if h in held else m for m, h in zip(out, hashes, strict=True)]
    return out
