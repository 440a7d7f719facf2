"""Which blocks to evict to admit a new one: a pure plan over the table, applied by the store.

Speculative replicas go first (LRU), then cached blocks (LRU), then replicas held for a
routed request (the last resort: a request being served wins over a prediction, and the
request that holds one is being served); active blocks never. A new speculative replica may
only displace other speculative replicas, never a held one, and must fit the quota.
"""

from __future__ import annotations

from itertools import chain

from kvcast.serving.agent.block_table import BlockTable
from kvcast.serving.agent.blocks import BlockKey, BlockState, QuotaExceeded, StoreFull

SPECULATIVE, CACHED = BlockState.SPECULATIVE, BlockState.CACHED


def plan_evictions(
    table: BlockTable, nbytes: int, state: BlockState, capacity: int, quota: int, now: float
) -> list[BlockKey]:
    """The victims, in order, that make room for ``nbytes`` in ``state`` (holds read at
    ``now``).

    Raises :class:`QuotaExceeded` or :class:`StoreFull` when no allowed set of victims makes
    room; the table is never modified here.
    """
    speculative = state is SPECULATIVE
    if speculative and nbytes > quota:
        raise QuotaExceeded(f"{nbytes} B exceeds the speculative quota of {quota} B")
    used, spec = table.used_bytes, table.bytes[SPECULATIVE]
    free = ((k, e) for k, e in table.lru(SPECULATIVE) if not e.held(now))  # lazy: stops once
    held = ((k, e) for k, e in table.lru(SPECULATIVE) if e.held(now))  # there is room
    pool = free if speculative else chain(free, table.lru(CACHED), held)
    victims: list[BlockKey] = []
    for key, entry in pool:
        if used + nbytes <= capacity and (not speculative or spec + nbytes <= quota):
            break
        used -= entry.buffer.nbytes
        if entry.state is SPECULATIVE:
            spec -= entry.buffer.nbytes
        victims.append(key)
    if speculative and spec + nbytes > quota:  # the rest of the quota is held for requests
        raise QuotaExceeded(f"{nbytes} B exceeds the speculative quota of {quota} B left unheld")
    if used + nbytes > capacity:
        raise StoreFull(f"no room for {nbytes} B without evicting protected blocks")
    return victims
