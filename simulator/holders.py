"""The cluster-wide index of HBM residency, ``holders``: block -> bitmask of the nodes holding
it in HBM (bit ``k`` for node ``k``). Every node's :class:`~kvcast.simulator.block_pool.BlockPool`
keeps its own bit of the one dict; the simulator reads from it, in one pass over a request's
block chain, the longest prefix each node holds."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def hbm_prefixes(holders: Mapping[int, int], blocks: Sequence[int], nodes: int) -> list[int]:
    """Per node of ``nodes``, the longest prefix of ``blocks`` resident in its HBM."""
    out = [0] * nodes
    alive = (1 << nodes) - 1
    for i, b in enumerate(blocks):
        h = holders.get(b, 0) & alive
        gone = alive & ~h
        while gone:
            low = gone & -gone
            out[low.bit_length() - 1] = i
            gone ^= low
        alive = h
        if not alive:
            return out
    while alive:
        low = alive & -alive
        out[low.bit_length() - 1] = len(blocks)
        alive ^= low
    return out
