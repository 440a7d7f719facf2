"""Where each block is resident: per node, the set of blocks in GPU memory and in lower tiers,
and per block one int naming its holders.

Stores are set semantics (storing a resident block again changes nothing); removing a block
the node does not hold is counted as ``removed_not_resident``. ``AllBlocksCleared`` empties
every tier of the node. A successful ``ReplicationDone`` makes the blocks resident in the
target's GPU memory (idempotent with a ``BlockStored`` for the same copy).

Two views of the same facts, kept equal on every update:

* ``gpu[node]`` / ``lower[node]``: the node's blocks (C-level set operations; a clear walks
  the node's sets);
* ``holders[h]``: bit ``n`` set when node ``n`` holds ``h`` in GPU memory, bit ``nodes + n``
  when it holds it in a lower tier; a block no node holds has no entry, so the dict is
  bounded by what is resident. An update costs one Python step per hash it names.

A decision tick reads the holders of all its candidates in one C-level dict pass
(:meth:`Residency.columns`, :meth:`Residency.masks`): with ``2 * nodes <= 63`` both masks
fit one int64 and the columns are a few numpy bit operations; beyond, they are C-level maps
over Python ints (exact for any number of nodes).
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import compress, repeat
from operator import and_, rshift

import numpy as np

from kvcast.features.counters import BadInputCounters
from kvcast.features.derive import MASK_NODES
from kvcast.features.online.packing import pack

LOW = (1 << MASK_NODES) - 1  # the nodes ``replica_mask`` keeps


class Residency:
    def __init__(self, nodes: int) -> None:
        self.nodes = nodes
        self.gpu: list[set[int]] = [set() for _ in range(nodes)]
        self.lower: list[set[int]] = [set() for _ in range(nodes)]
        self.holders: dict[int, int] = {}  # block -> GPU bits | lower-tier bits << nodes
        self._gpu_bits = (1 << nodes) - 1
        self._packed = 2 * nodes <= 63  # both masks fit one int64
        self._gpu_bit = [1 << n for n in range(nodes)]  # per node, its bits in ``holders``
        self._lower_bit = [1 << (nodes + n) for n in range(nodes)]

    def tier(self, medium: str) -> list[set[int]]:
        return self.gpu if medium == "GPU" else self.lower

    def store(self, medium: str, node: int, hashes: tuple[int, ...]) -> None:
        if medium == "GPU":
            self.gpu[node].update(hashes)
            bit = self._gpu_bit[node]
        else:
            self.lower[node].update(hashes)
            bit = self._lower_bit[node]
        holders = self.holders
        get = holders.get
        for h in hashes:
            holders[h] = get(h, 0) | bit

    def remove(
        self, medium: str, node: int, hashes: tuple[int, ...], bad: BadInputCounters
    ) -> None:
        gpu = medium == "GPU"
        held = (self.gpu if gpu else self.lower)[node]
        before = len(held)
        held.difference_update(hashes)
        removed = before - len(held)
        if removed:
            bit = (self._gpu_bit if gpu else self._lower_bit)[node]
            gone: Iterable[int] = hashes
            if removed != len(hashes):  # not all held (or some named twice): those that were
                gone = [h for h in set(hashes) if self.holders.get(h, 0) & bit]
            self._unset(gone, bit)
        if removed != len(hashes):  # some not held, or named twice
            missing = len(set(hashes)) - removed
            if missing:
                bad.counts["removed_not_resident"] += missing

    def clear(self, node: int) -> None:
        self._unset(self.gpu[node], self._gpu_bit[node])
        self._unset(self.lower[node], self._lower_bit[node])
        self.gpu[node].clear()
        self.lower[node].clear()

    def _unset(self, hashes: Iterable[int], bit: int) -> None:
        """Clear ``bit`` of ``hashes``, each of which has it set; drop entries left empty."""
        holders = self.holders
        for h in hashes:
            m = holders[h] ^ bit
            if m:
                holders[h] = m
            else:
                del holders[h]

    def masks(self, hashes: list[int]) -> tuple[list[int], list[int]]:
        """GPU and lower-tier node bitmasks of each block (C-level maps)."""
        both = list(map(self.holders.get, hashes, repeat(0)))
        gpu = list(map(and_, both, repeat(self._gpu_bits)))
        return gpu, list(map(rshift, both, repeat(self.nodes)))

    def columns(self, hashes: list[int], homes: np.ndarray) -> list[np.ndarray]:
        """replicas_gpu, replicas_lower, replica_mask and home_holds of each block; ``homes``
        is each block's home node, -1 for none (home_holds NaN). One dict pass over the
        hashes, then numpy bit operations (C-level maps over Python ints for many nodes)."""
        n = len(hashes)
        mine = homes >= 0
        holds = np.full(n, np.nan)
        if not self._packed:
            gpu, lower = self.masks(hashes)
            at = homes[mine].tolist()
            held = map(and_, map(rshift, compress(gpu, mine.tolist()), at), repeat(1))
            holds[mine] = np.fromiter(held, float, len(at))
            return [
                np.fromiter(map(int.bit_count, gpu), float, n),
                np.fromiter(map(int.bit_count, lower), float, n),
                np.fromiter(map(and_, gpu, repeat(LOW)), float, n),  # < 2**52: exact
                holds,
            ]
        both = pack(map(self.holders.get, hashes, repeat(0)), n, np.int64)
        gpu = both & self._gpu_bits
        holds[mine] = (gpu[mine] >> homes[mine]) & 1
        return [
            np.bitwise_count(gpu).astype(float),
            np.bitwise_count(both >> self.nodes).astype(float),
            gpu.astype(float),  # nodes <= 31 < MASK_NODES: every node kept, exact
            holds,
        ]

    def __len__(self) -> int:
        return sum(map(len, self.gpu)) + sum(map(len, self.lower))
